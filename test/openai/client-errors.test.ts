// Client mistakes are 400s naming the field, checked before the engine sees the request: on the worker engine that
// `trinity serve` runs, an engine-side refusal used to come back as 500 "tensor worker 'generate' failed". Each class
// (bad seeds, empty stop strings, token ids outside the loaded model's vocabulary, empty prompts, wrong types,
// missing fields) over several inputs, streamed and not.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import { OpenAIService, type OpenAIServer, startOpenAIServer } from '../../src/openai/index.js';
import { type ServedModel, serveModel } from '../../src/serve/index.js';
import { fixtureModelWithTokenizer } from '../engine/helpers.js';

const MODEL = 'tiny';
const VOCAB = 128; // the fixture model's config.json vocab_size
let served: ServedModel;
const logged: string[] = [];

before(async () => {
  served = await serveModel({
    modelDir: fixtureModelWithTokenizer('qwen2-tied'),
    modelName: MODEL,
    port: 0,
    slots: 4,
    maxLength: 64,
    maxTokens: 8,
    numThreads: 1,
    log: (line) => logged.push(line),
  });
});
after(async () => {
  await served?.close();
});

async function post(url: string, path: string, body: unknown) {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return {
    status: res.status,
    body: (await res.json()) as { error?: { message: string; type: string; param: string | null }; choices?: unknown[] },
  };
}

const chat = { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
const text = { model: MODEL, prompt: 'ab', max_tokens: 2 };
type Case = [
  label: string,
  path: '/v1/chat/completions' | '/v1/completions',
  body: Record<string, unknown>,
  param: string,
  message: RegExp,
];
const CHAT = '/v1/chat/completions';
const TEXT = '/v1/completions';

const cases: Case[] = [
  // seeds: the engine draws from non-negative 64-bit seeds
  ['seed -1', TEXT, { ...text, seed: -1 }, 'seed', /'seed': must be a non-negative integer/],
  ['seed -2^31', CHAT, { ...chat, seed: -(2 ** 31) }, 'seed', /'seed': must be a non-negative integer/],
  ['seed 1.5', TEXT, { ...text, seed: 1.5 }, 'seed', /'seed': expected an integer, received number 1.5/],
  ['seed 2^60', CHAT, { ...chat, seed: 2 ** 60 }, 'seed', /'seed': Too big/],
  // empty stop strings would end every sample at once
  ['stop ""', TEXT, { ...text, stop: '' }, 'stop', /'stop': a stop string must not be empty/],
  ['stop [""]', CHAT, { ...chat, stop: [''] }, 'stop.0', /'stop.0': a stop string must not be empty/],
  ['stop ["a", ""]', TEXT, { ...text, stop: ['a', ''] }, 'stop.1', /'stop.1': a stop string must not be empty/],
  ['17 stop strings', CHAT, { ...chat, stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }, 'stop', /at most 16/],
  // token ids: below the loaded model's vocabulary, non-negative integers
  [
    'prompt [128]',
    TEXT,
    { ...text, prompt: [VOCAB] },
    'prompt.0',
    /'prompt.0': 128 is not a token id of this model \(vocabulary size 128\)/,
  ],
  ['prompt [5, 1000]', TEXT, { ...text, prompt: [5, 1000] }, 'prompt.1', /'prompt.1': 1000 is not a token id/],
  ['prompt [[5], [6, 128]]', TEXT, { ...text, prompt: [[5], [6, VOCAB]] }, 'prompt.1.1', /'prompt.1.1': 128 is not a token id/],
  ['prompt [-1]', TEXT, { ...text, prompt: [-1] }, 'prompt.0', /'prompt.0': a token id must be >= 0/],
  ['prompt [1.5]', TEXT, { ...text, prompt: [5, 1.5] }, 'prompt.1', /'prompt.1': expected an integer, received number 1.5/],
  [
    'stop_token_ids [128]',
    CHAT,
    { ...chat, stop_token_ids: [VOCAB] },
    'stop_token_ids.0',
    /'stop_token_ids.0': 128 is not a token id/,
  ],
  ['stop_token_ids [2, 1e6]', TEXT, { ...text, stop_token_ids: [2, 1e6] }, 'stop_token_ids.1', /1000000 is not a token id/],
  ['stop_token_ids [-1]', CHAT, { ...chat, stop_token_ids: [-1] }, 'stop_token_ids.0', /a token id must be >= 0/],
  ['stop_token_ids "2"', CHAT, { ...chat, stop_token_ids: '2' }, 'stop_token_ids', /expected array, received string/],
  // empty prompts: nothing to continue from
  ['prompt ""', TEXT, { ...text, prompt: '' }, 'prompt', /'prompt': the prompt is empty/],
  ['prompt [""]', TEXT, { ...text, prompt: [''] }, 'prompt', /'prompt': the prompt is empty/],
  ['prompt ["ab", ""]', TEXT, { ...text, prompt: ['ab', ''] }, 'prompt.1', /'prompt.1': the prompt is empty/],
  ['prompt []', TEXT, { ...text, prompt: [] }, 'prompt', /'prompt': must be a string, an array of strings/],
  ['prompt [[]]', TEXT, { ...text, prompt: [[]] }, 'prompt.0', /'prompt.0': Too small/],
  ['messages []', CHAT, { ...chat, messages: [] }, 'messages', /'messages': must hold at least one message/],
  // wrong types: expected vs received, not "is required"
  ['max_tokens "2"', TEXT, { ...text, max_tokens: '2' }, 'max_tokens', /'max_tokens': expected number, received string/],
  ['temperature true', CHAT, { ...chat, temperature: true }, 'temperature', /expected number, received boolean/],
  ['n 1.5', CHAT, { ...chat, n: 1.5 }, 'n', /'n': expected an integer, received number 1.5/],
  ['messages "hi"', CHAT, { ...chat, messages: 'hi' }, 'messages', /'messages': expected array, received string/],
  ['messages [null]', CHAT, { ...chat, messages: [null] }, 'messages.0', /'messages.0': expected object, received null/],
  [
    'content 5',
    CHAT,
    { ...chat, messages: [{ role: 'user', content: 5 }] },
    'messages.0.content',
    /must be a string, an array of .* received number/,
  ],
  [
    'content part type',
    CHAT,
    { ...chat, messages: [{ role: 'user', content: [{ type: 'input_audio' }] }] },
    'messages.0.content.0.type',
    /messages.0.content.0.type/,
  ],
  [
    'image part without its url',
    CHAT,
    { ...chat, messages: [{ role: 'user', content: [{ type: 'image_url' }] }] },
    'messages.0.content.0.image_url',
    /messages.0.content.0.image_url/,
  ],
  [
    'role "robot"',
    CHAT,
    { ...chat, messages: [{ role: 'robot', content: 'x' }] },
    'messages.0.role',
    /'messages.0.role': Invalid option/,
  ],
  ['stop 5', TEXT, { ...text, stop: 5 }, 'stop', /'stop': must be a string or an array of strings; received number/],
  ['stop ["a", 3]', CHAT, { ...chat, stop: ['a', 3] }, 'stop.1', /'stop.1': expected string, received number/],
  ['prompt {}', TEXT, { ...text, prompt: {} }, 'prompt', /'prompt': must be .*; received object/],
  ['logprobs true (completions)', TEXT, { ...text, logprobs: true }, 'logprobs', /'logprobs': expected number, received boolean/],
  ['model 5', CHAT, { ...chat, model: 5 }, 'model', /'model': expected string, received number 5/],
  ['stream "yes"', TEXT, { ...text, stream: 'yes' }, 'stream', /'stream': expected boolean, received string/],
  ['tools {}', CHAT, { ...chat, tools: {} }, 'tools', /'tools': expected array, received object/],
  // missing fields
  ['no model', CHAT, { messages: chat.messages }, 'model', /^'model' is required$/],
  ['no messages', CHAT, { model: MODEL }, 'messages', /^'messages' is required$/],
  ['no prompt', TEXT, { model: MODEL }, 'prompt', /^'prompt' is required$/],
  ['no message role', CHAT, { ...chat, messages: [{ content: 'x' }] }, 'messages.0.role', /^'messages.0.role' is required$/],
];

describe('client mistakes are 400s naming the field (worker engine, as trinity serve)', () => {
  for (const [label, path, body, param, message] of cases) {
    for (const stream of [false, true]) {
      if (
        stream &&
        ('stream' in body ||
          (path === TEXT && Array.isArray(body.prompt) && typeof body.prompt[0] === 'string' && body.prompt.length > 1))
      )
        continue;
      it(`${label}${stream ? ' (stream)' : ''}`, async () => {
        const answer = await post(served.server.url, path, stream ? { ...body, stream: true } : body);
        assert.equal(answer.status, 400, JSON.stringify(answer.body));
        assert.equal(answer.body.error?.type, 'invalid_request_error');
        assert.equal(answer.body.error?.param, param);
        assert.match(answer.body.error?.message ?? '', message);
      });
    }
  }

  it('total work per request is capped: many prompts × n is a 400 naming the prompt, not 32,000 completions', async () => {
    // 1,000 one-token prompts × n 2 = 2,000 completions, over the default cap of 64 per request
    const many = await post(served.server.url, TEXT, { ...text, prompt: Array.from({ length: 1000 }, () => [3]), n: 2 });
    assert.equal(many.status, 400);
    assert.equal(many.body.error?.param, 'prompt');
    assert.match(many.body.error?.message ?? '', /1000 prompts × n 2 = 2000 completions; this server allows at most 64/);
    const some = await post(served.server.url, TEXT, { ...text, prompt: Array.from({ length: 8 }, () => [3]), n: 2 });
    assert.equal(some.status, 200);
    assert.equal(some.body.choices?.length, 16);
  });

  it('served the same model normally afterwards, and logged no server error', async () => {
    const answer = await post(served.server.url, CHAT, { ...chat, temperature: 0 });
    assert.equal(answer.status, 200);
    assert.equal(answer.body.choices?.length, 1);
    assert.deepEqual(logged, []);
  });
});

describe('the vocabulary bound is the one the service is given', () => {
  let engine: RolloutEngine;
  let server: OpenAIServer;
  before(async () => {
    engine = RolloutEngine.load(fixtureModelWithTokenizer('qwen2-tied'), { slots: 2, maxLength: 64 });
    // vocabSize below the model's 128: ids 16..127 are refused, and so is top_logprobs 20 (> 16 candidates)
    const service = new OpenAIService({ modelName: MODEL, backend: engine, maxTokens: 4, vocabSize: 16 });
    server = await startOpenAIServer({ service });
  });
  after(async () => {
    await server?.close();
    await engine?.close();
  });

  it('refuses ids and top log-probs beyond it', async () => {
    const id = await post(server.url, TEXT, { ...text, prompt: [3, 16] });
    assert.equal(id.status, 400);
    assert.equal(id.body.error?.param, 'prompt.1');
    assert.match(id.body.error?.message ?? '', /16 is not a token id of this model \(vocabulary size 16\)/);
    const top = await post(server.url, CHAT, { ...chat, logprobs: true, top_logprobs: 20 });
    assert.equal(top.status, 400);
    assert.equal(top.body.error?.param, 'top_logprobs');
    assert.match(top.body.error?.message ?? '', /'top_logprobs' 20 exceeds the model's vocabulary of 16 tokens/);
    assert.equal((await post(server.url, TEXT, { ...text, prompt: [3, 15] })).status, 200);
  });
});
