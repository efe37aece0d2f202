// What the engine refuses comes back as a 400 with the engine's message, which names the field. The service checks
// what it can before the engine sees a request (test/openai/client-errors); the engine's own checks are the backstop,
// and their refusal, GenerationError('invalid'), crosses the worker thread `trinity serve` runs the engine on as data
// (test/engine/invalid-requests). Before, it arrived as a plain Error and was answered 500 "tensor worker 'generate'
// failed" — as text that the tokenizer encoded to ids the model lacks did, which the service now checks itself.
// Token ids are bounded by the model's vocab_size, which the engine reports (vocabSize): a padded embedding has ids
// the tokenizer does not know, and they are valid.
import assert from 'node:assert/strict';
import { resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  type GenerateRequest,
  type GenerateResult,
  GenerationError,
  type GenerationFailure,
  WorkerRolloutEngine,
} from '../../src/engine/index.js';
import { OpenAIService, type OpenAIServer, startOpenAIServer } from '../../src/openai/index.js';
import { EngineModelHandle } from '../../src/rft/workflow/model-handle.js';
import { type ServedModel, serveModel } from '../../src/serve/index.js';
import { fixtureTokenizer } from '../engine/helpers.js';
import { BEYOND_MODEL_CHAR, PADDED_VOCAB, paddedVocabModel, widerTokenizerModel } from '../engine/vocab-models.js';

const MODEL = 'tiny';
const CHAT = '/v1/chat/completions';
const TEXT = '/v1/completions';
type ErrorBody = { error?: { message: string; type: string; param: string | null; code: string | null }; choices?: unknown[] };

async function post(url: string, path: string, body: unknown) {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, contentType: res.headers.get('content-type') ?? '', text: await res.text() };
}
const json = (answer: { text: string }) => JSON.parse(answer.text) as ErrorBody;

describe('an engine failure as the HTTP answer: invalid is 400 with the engine message', () => {
  // a backend whose generate() fails as the engine would, with the reason the test sets
  let failure: GenerationError = new GenerationError('invalid', 'x');
  const backend = {
    tokenizer: fixtureTokenizer(),
    generate: (_request: GenerateRequest): Promise<GenerateResult> => Promise.reject(failure),
  };
  let server: OpenAIServer;
  before(async () => {
    server = await startOpenAIServer({ service: new OpenAIService({ modelName: MODEL, backend, maxTokens: 4 }) });
  });
  after(async () => {
    await server?.close();
  });

  const message = 'generate: seed must be a non-negative integer below 2^64, got -1';
  const bodies = [
    ['chat', CHAT, { model: MODEL, messages: [{ role: 'user', content: 'hi' }] }],
    ['text', TEXT, { model: MODEL, prompt: 'ab', max_tokens: 2 }],
    ['text (stream)', TEXT, { model: MODEL, prompt: 'ab', max_tokens: 2, stream: true }],
    ['text, two prompts', TEXT, { model: MODEL, prompt: ['ab', 'cd'], max_tokens: 2 }],
  ] as const;
  for (const [label, path, body] of bodies) {
    it(label, async () => {
      failure = new GenerationError('invalid', message);
      const answer = await post(server.url, path, body);
      assert.equal(answer.status, 400, answer.text);
      assert.deepEqual(json(answer).error, { message, type: 'invalid_request_error', param: null, code: 'invalid_request' });
    });
  }

  it('a chat stream has started (its role chunk) when the engine refuses: the error is the stream last event', async () => {
    failure = new GenerationError('invalid', message);
    const answer = await post(server.url, CHAT, { ...bodies[0][2], stream: true });
    assert.equal(answer.status, 200);
    const events = answer.text.split('\n\n').filter((e) => e.startsWith('data: '));
    const last = JSON.parse((events.at(-1) as string).slice('data: '.length)) as ErrorBody;
    assert.deepEqual(last.error, { message, type: 'invalid_request_error', param: null, code: 'invalid_request' });
  });

  it('the other reasons keep their statuses: closed 503, timeout 504, failed 500', async () => {
    const statuses: Record<Exclude<GenerationFailure, 'invalid' | 'aborted'>, number> = {
      closed: 503,
      timeout: 504,
      failed: 500,
    };
    for (const [reason, status] of Object.entries(statuses)) {
      failure = new GenerationError(reason as GenerationFailure, `generate: ${reason}`);
      const answer = await post(server.url, TEXT, bodies[1][2]);
      assert.equal(answer.status, status, reason);
      assert.equal(json(answer).error?.code, reason);
    }
  });
});

describe('trinity serve (worker engine): text the tokenizer encodes past the model vocabulary is a 400 naming it', () => {
  // the fixture model has 128 token ids, its tokenizer 132: BEYOND_MODEL_CHAR is id 128 (this used to reach the
  // engine, and came back 500 "tensor worker 'generate' failed")
  let served: ServedModel;
  let modelDir: string;
  const logged: string[] = [];
  before(async () => {
    modelDir = widerTokenizerModel();
    served = await serveModel({
      modelDir,
      modelName: MODEL,
      port: 0,
      slots: 2,
      maxLength: 32,
      maxTokens: 4,
      numThreads: 1,
      log: (line) => logged.push(line),
    });
  });
  after(async () => {
    await served?.close();
  });

  const refused = 'encodes it to token id 128 (position 1), which this model does not have (vocabulary size 128)';
  const bodies = [
    ['text', TEXT, { model: MODEL, prompt: `a${BEYOND_MODEL_CHAR}`, max_tokens: 2 }, 'prompt'],
    ['text (stream)', TEXT, { model: MODEL, prompt: `a${BEYOND_MODEL_CHAR}`, max_tokens: 2, stream: true }, 'prompt'],
    [
      'the second of two text prompts',
      TEXT,
      { model: MODEL, prompt: ['ab', `a${BEYOND_MODEL_CHAR}`], max_tokens: 2 },
      'prompt.1',
    ],
    ['chat', CHAT, { model: MODEL, messages: [{ role: 'user', content: BEYOND_MODEL_CHAR }], max_tokens: 2 }, 'messages'],
    [
      'chat (stream)',
      CHAT,
      { model: MODEL, messages: [{ role: 'user', content: `a${BEYOND_MODEL_CHAR}` }], stream: true },
      'messages',
    ],
  ] as const;
  for (const [label, path, body, param] of bodies) {
    it(label, async () => {
      const answer = await post(served.server.url, path, body);
      assert.equal(answer.status, 400, answer.text);
      const error = json(answer).error;
      assert.equal(error?.type, 'invalid_request_error');
      assert.equal(error?.param, param);
      assert.equal(error?.code, 'invalid_token_id');
      if (path === TEXT) assert.equal(error?.message, `'${param}': the tokenizer ${refused}`);
      else assert.match(error?.message ?? '', /^'messages': the tokenizer encodes it to token id 128 \(position \d+\)/);
    });
  }

  it('serves normally afterwards; logged one warning at load naming both sizes, and no server error', async () => {
    const answer = await post(served.server.url, TEXT, { model: MODEL, prompt: 'ab', max_tokens: 2, temperature: 0 });
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(logged, [
      `warning: ${resolve(modelDir)}: the tokenizer has 132 token ids, the model 128 (config.json vocab_size): text ` +
        'that encodes to ids 128..131 is refused (400)',
    ]);
  });
});

describe("a padded vocabulary (vocab_size 160, tokenizer 128): the service's bound is the engine vocabSize", () => {
  let engine: WorkerRolloutEngine;
  let server: OpenAIServer;
  let handle: EngineModelHandle;
  before(async () => {
    engine = await WorkerRolloutEngine.start(paddedVocabModel(), { slots: 2, maxLength: 32, numThreads: 1 });
    // no vocabSize option: the default is the backend's
    server = await startOpenAIServer({ service: new OpenAIService({ modelName: MODEL, backend: engine, maxTokens: 4 }) });
    handle = new EngineModelHandle(engine);
  });
  after(async () => {
    await handle?.close();
    await server?.close();
    await engine?.close();
  });

  const text = { model: MODEL, max_tokens: 2, temperature: 0, return_token_ids: true };
  async function check(base: string) {
    // 140 lies between the tokenizer's 128 and the model's 160
    const between = await post(base, TEXT, { ...text, prompt: [5, 140], stop_token_ids: [159] });
    assert.equal(between.status, 200, between.text);
    const [choice] = (json(between).choices ?? []) as { prompt_token_ids: number[] }[];
    assert.deepEqual(choice?.prompt_token_ids, [5, 140]);
    const past = await post(base, TEXT, { ...text, prompt: [5, PADDED_VOCAB] });
    assert.equal(past.status, 400, past.text);
    assert.equal(json(past).error?.param, 'prompt.1');
    assert.match(json(past).error?.message ?? '', /'prompt.1': 160 is not a token id of this model \(vocabulary size 160\)/);
    const stop = await post(base, TEXT, { ...text, prompt: [5], stop_token_ids: [PADDED_VOCAB] });
    assert.equal(stop.status, 400, stop.text);
    assert.equal(json(stop).error?.param, 'stop_token_ids.0');
  }

  it('the OpenAI server accepts an id between the two and refuses one at vocab_size', async () => {
    assert.equal(engine.vocabSize, PADDED_VOCAB);
    await check(server.url);
  });

  it("so does the explorer's rollout endpoint (EngineModelHandle)", async () => {
    const baseURL = await handle.openaiBaseUrl(); // …/s/<scope>/v1
    await check(baseURL.slice(0, -'/v1'.length));
  });
});
