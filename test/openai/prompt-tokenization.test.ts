// A prompt over the limits is refused after at most one tokenization: text completions with several long prompts
// encoded every one of them before any was measured (a 10 MB request took 45 s to be refused). Counted with a spy on
// the served tokenizer, not timed.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import { OpenAIHttpError, OpenAIService } from '../../src/openai/index.js';
import type { Tokenizer } from '../../src/tokenizer/index.js';
import { fixtureModelWithTokenizer } from '../engine/helpers.js';

const MODEL = 'tiny';
let engine: RolloutEngine;
let service: OpenAIService;
/** The texts the served tokenizer encoded, in order. */
const encoded: string[] = [];

before(() => {
  engine = RolloutEngine.load(fixtureModelWithTokenizer('qwen2-tied'), { slots: 2, maxLength: 64 });
  const tokenizer = engine.tokenizer as Tokenizer;
  const encode = tokenizer.encode.bind(tokenizer);
  tokenizer.encode = (text, options) => {
    encoded.push(text);
    return encode(text, options);
  };
  service = new OpenAIService({ modelName: MODEL, backend: engine, maxTokens: 4 });
});
after(async () => {
  await engine?.close();
});

async function refusal(call: Promise<unknown>): Promise<OpenAIHttpError> {
  try {
    await call;
  } catch (error) {
    assert.ok(error instanceof OpenAIHttpError, String(error));
    return error;
  }
  assert.fail('the request was accepted');
}

describe('a prompt over the context is refused after at most one tokenization', () => {
  const long = 'ab '.repeat(20_000); // 60,000 characters: far over the context of 64

  it('text completions: the first prompt over the limit ends the encoding', async () => {
    encoded.length = 0;
    const error = await refusal(service.completion({ model: MODEL, prompt: [long, long, long], max_tokens: 2 }));
    assert.equal(error.status, 400);
    assert.equal(error.param, 'prompt.0');
    assert.match(error.message, /the prompt has \d+ tokens; this server accepts at most 64/);
    assert.equal(encoded.length, 1, `encoded ${encoded.length} times`);
    // a short first prompt is encoded, then the long second one, and nothing after it
    encoded.length = 0;
    const second = await refusal(service.completion({ model: MODEL, prompt: ['ab', long, long], max_tokens: 2 }));
    assert.equal(second.param, 'prompt.1');
    assert.equal(encoded.length, 2);
  });

  it('chat: the rendered messages are encoded once', async () => {
    encoded.length = 0;
    const error = await refusal(
      service.chatCompletion({ model: MODEL, messages: [{ role: 'user', content: long }], max_tokens: 2 }),
    );
    assert.equal(error.param, 'messages');
    assert.equal(encoded.length, 1);
  });
});
