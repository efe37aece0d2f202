// HTTP fuzz: a real `trinity serve` process on a tiny random model gets a few thousand random and mutated request
// bodies: valid chat / text completion requests with fields swapped for wrong types, huge, negative and NaN-ish
// values, deep nesting, odd unicode, extra and missing fields, plus truncated or broken JSON, wrong content types and
// whole bodies that are not objects. Every answer must be a valid response or an OpenAI-style JSON error with a 4xx
// status (never a 5xx), the process must survive, and a normal request must still work afterwards.
//
// Bounded by count, not time, and driven by a seeded PRNG: a failure names the case number and body, and
// FUZZ_SEED=<seed> FUZZ_CASES=<n> reruns the same sequence.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { fixtureModelWithTokenizer } from '../engine/helpers.js';
import { seededRandom } from '../../src/rft/buffer/random.js';

const trinity = fileURLToPath(new URL('../../bin/trinity.js', import.meta.url));
const SEED = Number(process.env.FUZZ_SEED ?? 20_261_201);
const CASES = Number(process.env.FUZZ_CASES ?? 3000);
const CONCURRENCY = 4;
const MODEL = 'fuzz-model';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

class Fuzzer {
  readonly #random: () => number;
  constructor(seed: number) {
    this.#random = seededRandom(seed);
  }
  float(): number {
    return this.#random();
  }
  int(below: number): number {
    return Math.floor(this.#random() * below);
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)] as T;
  }
  chance(p: number): boolean {
    return this.#random() < p;
  }

  /** A valid request of either endpoint, with a random selection of optional fields. */
  validRequest(): { path: string; body: { [key: string]: Json } } {
    const sampling: { [key: string]: Json } = {};
    const optional: Array<[string, () => Json]> = [
      ['temperature', () => this.pick([0, 0.7, 1, 2])],
      ['top_p', () => this.pick([0.5, 1])],
      ['top_k', () => this.pick([-1, 0, 5, 1000])],
      ['min_p', () => this.pick([0, 0.1])],
      ['n', () => this.pick([1, 2])],
      ['seed', () => this.pick([0, 7, 2 ** 40])],
      ['stop', () => this.pick(['a', ['x', 'yz'], []])],
      ['stop_token_ids', () => this.pick([[2], [5, 6], []])],
      ['stream', () => this.chance(0.5)],
      ['ignore_eos', () => this.chance(0.5)],
      ['return_token_ids', () => true],
      ['return_tokens_as_token_ids', () => true],
      ['skip_special_tokens', () => this.chance(0.5)],
      ['user', () => 'someone'],
    ];
    for (const [key, value] of optional) if (this.chance(0.3)) sampling[key] = value();
    if (sampling.stream === true && this.chance(0.5)) sampling.stream_options = { include_usage: true };
    if (this.chance(0.5)) {
      const body: { [key: string]: Json } = {
        model: MODEL,
        messages: [{ role: 'user', content: this.pick(['hi', 'What is 2+3?', 'é ü', '']) }],
        max_tokens: this.pick([1, 2, 4]),
        ...sampling,
      };
      if (this.chance(0.2)) (body.messages as Json[]).unshift({ role: 'system', content: 'Be brief.' });
      if (this.chance(0.2)) body.logprobs = true;
      if (this.chance(0.1)) {
        body.logprobs = true;
        body.top_logprobs = this.pick([0, 3]);
      }
      if (this.chance(0.15))
        body.tools = [{ type: 'function', function: { name: 'add', parameters: { type: 'object', properties: {} } } }];
      if (this.chance(0.1)) body.tool_choice = 'auto';
      return { path: '/v1/chat/completions', body };
    }
    const prompt: Json = this.pick<Json>(['ab', 'Q: 1+1=', ['ab', 'cd'], [5, 6, 7], [[5], [6, 7]]]);
    const body: { [key: string]: Json } = { model: MODEL, prompt, max_tokens: this.pick([1, 2, 4]), ...sampling };
    if (Array.isArray(prompt) && typeof prompt[0] !== 'number') delete body.stream; // one prompt streams
    if (this.chance(0.2)) body.logprobs = this.pick([0, 2, 5]);
    return { path: '/v1/completions', body };
  }

  /** A value of any type, often a nasty one. */
  weird(depth = 0): Json {
    switch (this.int(14)) {
      case 0:
        return this.pick([-1, -0.5, -1e308, 0, 1.5, 2 ** 53 + 2, 1e308, -(2 ** 63), 4294967297]);
      case 1:
        return this.pick(['NaN', 'Infinity', '-Infinity', '1e999', '-0', '0x10', '', ' ', 'null', 'true']);
      case 2:
        return this.pick(['\u0000', '\ud800', '\udfff\ud800', '🦀🦀', '\u202e', '\ufeff', 'a\u0301', '\\u0000', '<|im_end|>']);
      case 3:
        return 'x'.repeat(this.pick([100, 5000, 20000]));
      case 4:
        return this.chance(0.5);
      case 5:
        return null;
      case 6:
        return depth < 3 ? [this.weird(depth + 1), this.weird(depth + 1)] : [];
      case 7:
        return depth < 3 ? { [this.pick(['a', 'type', 'role', '__proto__'])]: this.weird(depth + 1) } : {};
      case 8: {
        // deep nesting
        let value: Json = this.chance(0.5) ? 1 : 'x';
        const levels = this.pick([10, 100, 1000]);
        for (let i = 0; i < levels; i++) value = this.chance(0.5) ? [value] : { a: value };
        return value;
      }
      case 9:
        return Array.from({ length: this.pick([0, 17, 300]) }, () => this.int(200_000) - 10);
      case 10:
        return Array.from({ length: this.pick([1, 3, 40]) }, () => this.pick<Json>(['', 'a', 1, null]));
      case 11:
        return this.int(1000) - 500;
      case 12:
        return this.pick(['tiny', MODEL, 'user', 'assistant', 'function', 'text', 'auto', 'required', 'none']);
      default:
        return this.float();
    }
  }

  /** A value of a field's own type but out of its range: what a careless client sends. */
  nearMiss(): Json {
    return this.pick<Json>([
      -1,
      0,
      1.5,
      -0.0001,
      127,
      128,
      200_000,
      1e9,
      2 ** 53,
      -(2 ** 31),
      '',
      [],
      [''],
      ['a', ''],
      [128],
      [-1],
      [1.5],
      [0, 1e6],
      [[]],
      [[128]],
      [[1], []],
      {},
      { include_usage: 1 },
      { type: 'json_object' },
      { '5': 1 },
      [{ role: 'user' }],
      [{ role: 'user', content: [{ type: 'image_url' }] }],
      [{ role: 'tool', content: null }],
      [{ type: 'function', function: { name: '' } }],
    ]);
  }

  /** Changes one place in a JSON value: a value replaced, a key removed or added, an array element added. */
  mutate(value: Json, depth = 0): Json {
    if (value === null || typeof value !== 'object' || depth > 4 || this.chance(0.25)) return this.weird();
    if (Array.isArray(value)) {
      const copy = [...value];
      if (copy.length === 0 || this.chance(0.2)) copy.push(this.weird());
      else if (this.chance(0.15)) copy.splice(this.int(copy.length), 1);
      else {
        const i = this.int(copy.length);
        copy[i] = this.mutate(copy[i] as Json, depth + 1);
      }
      return copy;
    }
    const copy = { ...value };
    const keys = Object.keys(copy);
    const roll = this.float();
    if (keys.length === 0 || roll < 0.15) {
      const key = this.pick([
        'extra',
        '__proto__',
        'constructor',
        'logit_bias',
        'echo',
        'best_of',
        'suffix',
        'frequency_penalty',
        'response_format',
        'tool_choice',
        'max_completion_tokens',
        'chat_template_kwargs',
        'n',
        'seed',
        'stop',
        'stop_token_ids',
        'top_logprobs',
        'logprobs',
        'stream',
        'prompt',
        'messages',
        'tools',
      ]);
      // a "__proto__" key made in a literal would set the prototype, not a key: define it
      Object.defineProperty(copy, key, { value: this.weird(), enumerable: true, writable: true, configurable: true });
    } else if (roll < 0.25) delete copy[this.pick(keys)];
    else {
      const key = this.pick(keys);
      copy[key] = this.mutate(copy[key] as Json, depth + 1);
    }
    return copy;
  }

  /** One request: method, path, headers and raw body bytes. */
  request(): { method: string; path: string; contentType: string | null; body: Buffer } {
    const { path, body } = this.validRequest();
    let value: Json = body;
    const mutations = this.pick([0, 1, 1, 1, 1, 2, 3]);
    for (let i = 0; i < mutations; i++) {
      if (this.chance(0.5)) {
        // a request field (present or not) set to a near miss
        const key = this.pick([...Object.keys(body), ...FIELDS]);
        value = { ...(value as { [key: string]: Json }), [key]: this.nearMiss() };
      } else value = this.mutate(value);
    }
    let text = JSON.stringify(value);
    const roll = this.float();
    let contentType: string | null = 'application/json';
    if (roll < 0.05)
      text = text.slice(0, this.int(text.length)); // truncated JSON
    else if (roll < 0.08) text = text.replace(/\d+/, this.pick(['1e400', 'NaN', '-Infinity', '01', '1_000', '0x1f']));
    else if (roll < 0.1) text = this.pick(['[]', '1', '"a"', 'null', 'true', '', '   ', '{', '{"model":']);
    else if (roll < 0.12) text = `\ufeff${text}`;
    else if (roll < 0.14) text = text.replace('{', '{"model": 1, ');
    else if (roll < 0.16)
      contentType = this.pick([null, 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data']);
    else if (roll < 0.17) contentType = 'application/json; charset=utf-8';
    let bytes = Buffer.from(text, 'utf8');
    if (this.chance(0.02))
      bytes = Buffer.concat([bytes.subarray(0, this.int(bytes.length + 1)), Buffer.from([0xff, 0xfe, 0xc3])]);
    const method = this.chance(0.02) ? 'GET' : 'POST';
    const route = this.chance(0.02) ? this.pick(['/v1/models', '/v1/embeddings', '/v1/chat/completions/', '/feedback']) : path;
    return { method, path: route, contentType, body: bytes };
  }
}

/** Fields of the two request schemas (src/openai/protocol.ts). */
const FIELDS = [
  'model',
  'messages',
  'prompt',
  'n',
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'max_tokens',
  'max_completion_tokens',
  'stop',
  'seed',
  'stream',
  'stream_options',
  'frequency_penalty',
  'presence_penalty',
  'logit_bias',
  'user',
  'ignore_eos',
  'stop_token_ids',
  'skip_special_tokens',
  'return_token_ids',
  'return_tokens_as_token_ids',
  'logprobs',
  'top_logprobs',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'response_format',
  'chat_template_kwargs',
  'echo',
  'suffix',
  'best_of',
];

let child: ChildProcess;
let baseUrl: string;
let output = '';
let exited: { code: number | null; signal: NodeJS.Signals | null } | null = null;

before(async () => {
  const modelDir = fixtureModelWithTokenizer('qwen2-tied');
  const env = { ...process.env };
  delete env.TRINITY_API_KEY;
  child = spawn(
    process.execPath,
    [
      trinity,
      'serve',
      '--model',
      modelDir,
      '--model-name',
      MODEL,
      '--port',
      '0',
      '--slots',
      '4',
      '--max-length',
      '64',
      '--max-tokens',
      '4',
      '--max-n',
      '2',
      '--max-body-bytes',
      '65536',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env },
  );
  child.on('exit', (code, signal) => {
    exited = { code, signal };
  });
  baseUrl = await new Promise<string>((resolve, reject) => {
    const take = (data: Buffer) => {
      output += data;
      const match = /serving '.*' at (http:\/\/\S+)\/v1;/.exec(output);
      if (match) resolve(match[1] as string);
    };
    child.stdout?.on('data', take);
    child.stderr?.on('data', take);
    child.once('exit', (code) => reject(new Error(`trinity serve exited (${code}) before serving:\n${output}`)));
  });
});

after(async () => {
  if (child && exited === null) {
    const done = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await done;
  }
});

interface Answer {
  status: number;
  contentType: string;
  text: string;
}

async function send(request: ReturnType<Fuzzer['request']>): Promise<Answer> {
  const res = await fetch(`${baseUrl}${request.path}`, {
    method: request.method,
    headers: request.contentType === null ? {} : { 'content-type': request.contentType },
    ...(request.method === 'POST' ? { body: request.body } : {}),
  });
  return { status: res.status, contentType: res.headers.get('content-type') ?? '', text: await res.text() };
}

/** What is wrong with an answer (null: nothing): a 5xx, or a body that is neither an OpenAI error nor a response. */
function problem(answer: Answer): string | null {
  if (answer.status >= 500) return `status ${answer.status}`;
  if (answer.contentType.startsWith('text/event-stream')) {
    if (answer.status !== 200) return `a stream with status ${answer.status}`;
    const events = answer.text
      .split('\n\n')
      .filter((e) => e.trim() !== '')
      .map((e) => e.replace(/^data: /, ''));
    if (events.at(-1) !== '[DONE]') return 'the stream does not end with [DONE]';
    for (const event of events.slice(0, -1)) {
      const chunk = JSON.parse(event) as { error?: unknown; object?: string; choices?: unknown };
      if (chunk.error !== undefined) return `an error event in the stream: ${event}`;
      if (!/^(chat\.completion\.chunk|text_completion)$/.test(chunk.object ?? '') || !Array.isArray(chunk.choices))
        return `a stream chunk that is not a completion chunk: ${event}`;
    }
    return null;
  }
  if (!answer.contentType.startsWith('application/json')) return `content-type '${answer.contentType}'`;
  let body: {
    error?: { message?: unknown; type?: unknown; param?: unknown; code?: unknown };
    object?: unknown;
    choices?: unknown;
    data?: unknown;
  };
  try {
    body = JSON.parse(answer.text);
  } catch {
    return 'a body that is not JSON';
  }
  if (answer.status === 200) {
    if (body.object === 'list' && Array.isArray(body.data)) return null; // GET /v1/models
    if ((body.object === 'chat.completion' || body.object === 'text_completion') && Array.isArray(body.choices)) return null;
    return 'a 200 that is not a completion';
  }
  if (answer.status < 400) return `status ${answer.status}`;
  const error = body.error;
  if (error === undefined || typeof error.message !== 'string' || error.message.length === 0) return 'no error.message';
  if (typeof error.type !== 'string') return 'no error.type';
  if (!('param' in error) || (error.param !== null && typeof error.param !== 'string')) return 'no error.param';
  if (!('code' in error)) return 'no error.code';
  return null;
}

test(`${CASES} random and mutated bodies get 4xx OpenAI errors or valid responses, never a 5xx`, {
  timeout: 600_000,
}, async (t) => {
  const fuzzer = new Fuzzer(SEED);
  const requests = Array.from({ length: CASES }, () => fuzzer.request());
  const statuses = new Map<number, number>();
  const failures: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < requests.length) {
      const index = next++;
      const request = requests[index] as (typeof requests)[number];
      const answer = await send(request);
      statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
      const wrong = problem(answer);
      if (wrong !== null && failures.length < 10) {
        const shown = request.body.toString('utf8').slice(0, 300);
        failures.push(
          `case ${index} (FUZZ_SEED=${SEED}): ${request.method} ${request.path} [${request.contentType}] ${shown}\n  → ${wrong}: ${answer.text.slice(0, 300)}`,
        );
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  t.diagnostic(`statuses: ${JSON.stringify(Object.fromEntries([...statuses].sort(([a], [b]) => a - b)))}`);
  assert.equal(failures.length, 0, failures.join('\n'));
  // the mix reached both sides: requests that generated, and each kind of refusal
  const count = (status: number) => statuses.get(status) ?? 0;
  assert.ok(count(200) >= CASES / 10, `only ${count(200)} of ${CASES} answered 200: ${JSON.stringify([...statuses])}`);
  for (const status of [400, 404, 415]) assert.ok(count(status) > 0, `no ${status} among ${JSON.stringify([...statuses])}`);
  assert.equal(exited, null, `trinity serve exited: ${JSON.stringify(exited)}\n${output}`);
  assert.doesNotMatch(output, /tensor worker|Error:|at .*\.ts:\d+/, 'the server logged a failure or a stack trace');

  // still serving: a normal request, answered as before
  const reply = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, temperature: 0 }),
  });
  assert.equal(reply.status, 200);
  const body = (await reply.json()) as { choices: Array<{ message: { role: string }; finish_reason: string }> };
  assert.equal(body.choices[0]?.message.role, 'assistant');
});
