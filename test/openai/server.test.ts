// The OpenAI-compatible server against the official `openai` npm client (unchanged), and its guards: API key,
// body size, limits, malformed input, unknown models, weight reload inside its root only.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import {
  ConversationTracker,
  completionText,
  type GenerateRequest,
  type GenerateResult,
  RolloutEngine,
  StopStringMatcher,
} from '../../src/engine/index.js';
import { CausalLM } from '../../src/model/index.js';
import { OpenAIService, type OpenAIServer, startOpenAIServer } from '../../src/openai/index.js';
import type { Tokenizer } from '../../src/tokenizer/index.js';
import * as torch from '../../src/torch/index.js';
import { fixtureModelWithTokenizer, fixtureTokenizer } from '../engine/helpers.js';

let modelDir: string;
let engine: RolloutEngine;
let server: OpenAIServer;
let client: OpenAI;
const KEY = 'test-key-123';

before(() => {
  torch.setNumThreads(1);
});

before(async () => {
  modelDir = fixtureModelWithTokenizer('qwen2-tied');
  engine = RolloutEngine.load(modelDir, { slots: 8, maxLength: 64 });
  const service = new OpenAIService({ modelName: 'tiny', aliases: ['tiny-alias'], backend: engine, maxTokens: 32, maxN: 4 });
  server = await startOpenAIServer({ service, apiKey: KEY, maxBodyBytes: 4096 });
  client = new OpenAI({ baseURL: server.baseURL, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
});

after(async () => {
  await server?.close();
  await engine?.close();
});

async function post(path: string, body: unknown, headers: Record<string, string> = { authorization: `Bearer ${KEY}` }) {
  const res = await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as { error?: { message: string; param: string | null } } };
}

/**
 * The independent reference for log-probs: the model loaded again (training layout), one full forward over prompt +
 * completion (no KV cache, no sampling code), log_softmax(logits / temperature) at each completion position, every
 * token sorted by log-prob in JS.
 */
function referenceDistributions(
  prompt: readonly number[],
  completion: readonly number[],
  temperature: number,
): Array<Array<{ tokenId: number; logprob: number }>> {
  const model = CausalLM.load(modelDir);
  try {
    const rows = torch.noGrad(() =>
      torch.scope(() => {
        const ids = [...prompt, ...completion];
        const logits = model.forward(torch.tensor([ids.map(BigInt)])).select(0, 0); // [T, V]
        const scored = logits
          .narrow(0, prompt.length - 1, completion.length)
          .float()
          .div(temperature)
          .logSoftmax(-1);
        return scored.toArray() as number[][];
      }),
    );
    return rows.map((row) => row.map((logprob, tokenId) => ({ tokenId, logprob })).sort((a, b) => b.logprob - a.logprob));
  } finally {
    model.dispose();
  }
}

describe('OpenAI server with the openai client', () => {
  it('lists the model and answers chat completions with exact token ids and logprobs', async () => {
    const models = await client.models.list();
    assert.deepEqual(
      models.data.map((m) => m.id),
      ['tiny', 'tiny-alias'],
    );
    const reply = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 8,
      temperature: 0,
      logprobs: true,
      // @ts-expect-error extension field (vLLM's name)
      return_token_ids: true,
    });
    const choice = reply.choices[0];
    assert.ok(choice);
    assert.equal(reply.object, 'chat.completion');
    const ext = reply as unknown as { prompt_token_ids: number[]; choices: Array<{ token_ids: number[] }> };
    const tokenIds = ext.choices[0]?.token_ids as number[];
    // Same as the engine's own greedy answer for the same prompt ids.
    const direct = await engine.generate({ promptIds: ext.prompt_token_ids, maxTokens: 8, temperature: 0 });
    assert.deepEqual(tokenIds, direct.completions[0]?.tokenIds);
    assert.equal(choice.message.content, direct.completions[0]?.text);
    assert.equal(choice.logprobs?.content?.length, tokenIds.length);
    assert.equal(reply.usage?.completion_tokens, tokenIds.length);
    assert.equal(reply.usage?.prompt_tokens, ext.prompt_token_ids.length);
    assert.equal(choice.finish_reason, direct.completions[0]?.finishReason);
  });

  it('streams the same text as the non-streamed answer, with usage', async () => {
    const body = { model: 'tiny', messages: [{ role: 'user' as const, content: 'abc' }], max_tokens: 12, temperature: 0 };
    const whole = await client.chat.completions.create(body);
    const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let finish: string | null = null;
    let usageTokens = -1;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usageTokens = chunk.usage.completion_tokens;
    }
    assert.equal(text, whole.choices[0]?.message.content);
    assert.equal(finish, whole.choices[0]?.finish_reason);
    assert.equal(usageTokens, whole.usage?.completion_tokens);
    assert.ok(chunks >= 3, `streamed in ${chunks} chunks`);
  });

  it('n samples with a seed: the choices differ from each other and repeat with the seed', async () => {
    const body = {
      model: 'tiny-alias',
      messages: [{ role: 'user' as const, content: 'x' }],
      n: 3,
      seed: 7,
      max_tokens: 6,
      temperature: 1,
      ignore_eos: true,
      return_token_ids: true,
    };
    const ids = (reply: OpenAI.ChatCompletion) => (reply.choices as Array<{ token_ids?: number[] }>).map((c) => c.token_ids);
    const sampled = await client.chat.completions.create(body);
    assert.deepEqual(
      sampled.choices.map((c) => c.index),
      [0, 1, 2],
    );
    const [a, b, c] = ids(sampled);
    assert.equal(a?.length, 6);
    // three different samples, not one sample three times
    assert.ok(
      [a, b, c].every((x, i, all) => all.every((y, j) => i === j || JSON.stringify(x) !== JSON.stringify(y))),
      JSON.stringify([a, b, c]),
    );
    const again = await client.chat.completions.create(body);
    assert.deepEqual(ids(again), ids(sampled));
    const otherSeed = await client.chat.completions.create({ ...body, seed: 8 });
    assert.notDeepEqual(ids(otherSeed), ids(sampled));
  });

  it('text completions from ids, and stop strings that cut the text where they begin', async () => {
    const request = { model: 'tiny', prompt: [5, 6, 7], max_tokens: 10, temperature: 0, ignore_eos: true };
    const completion = await client.completions.create(request);
    const direct = await engine.generate({ promptIds: [5, 6, 7], maxTokens: 10, temperature: 0, ignoreEos: true });
    const full = direct.completions[0]?.text ?? '';
    assert.equal(completion.choices[0]?.text, full);
    assert.equal(completion.choices[0]?.finish_reason, 'length');
    // a stop string from the middle of the greedy text: the answer must end right before its first occurrence
    const stop = full.slice(4, 6);
    const cut = full.indexOf(stop);
    assert.ok(stop.length === 2 && cut >= 1, `greedy text ${JSON.stringify(full)}`);
    const expected = full.slice(0, cut);
    const stopped = await client.completions.create({ ...request, stop: [stop] });
    assert.equal(stopped.choices[0]?.text, expected);
    assert.equal(stopped.choices[0]?.finish_reason, 'stop');
    assert.ok((stopped.usage?.completion_tokens ?? 99) < 10, 'generation ended at the stop string');
    // streamed: the held-back text never leaks the stop string
    const stream = await client.completions.create({ ...request, stop: stop, stream: true });
    let text = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, expected);
    assert.equal(finish, 'stop');
  });

  it('completions logprobs k: the k most likely tokens of each position, checked against a full forward', async () => {
    const body = {
      model: 'tiny',
      prompt: [5, 6, 7],
      max_tokens: 6,
      temperature: 0.7,
      seed: 11,
      logprobs: 5,
      ignore_eos: true,
      return_token_ids: true,
      return_tokens_as_token_ids: true,
    };
    const reply = await client.completions.create(body as OpenAI.CompletionCreateParamsNonStreaming);
    const choice = reply.choices[0] as OpenAI.CompletionChoice & { token_ids: number[] };
    const logprobs = choice.logprobs as Required<OpenAI.CompletionChoice.Logprobs>;
    const reference = referenceDistributions([5, 6, 7], choice.token_ids, 0.7);
    let worst = 0;
    choice.token_ids.forEach((sampled, i) => {
      const ref = reference[i] as Array<{ tokenId: number; logprob: number }>;
      const top = Object.entries(logprobs.top_logprobs[i] as Record<string, number>).map(([token, logprob]) => ({
        tokenId: Number(token.replace('token_id:', '')),
        logprob,
      }));
      // the 5 most likely, most likely first, then the sampled token when it is not among them
      const expected = ref.slice(0, 5);
      if (!expected.some((t) => t.tokenId === sampled)) expected.push(ref.find((t) => t.tokenId === sampled) as never);
      assert.deepEqual(
        top.map((t) => t.tokenId),
        expected.map((t) => t.tokenId),
        `position ${i}`,
      );
      top.forEach((t, j) => {
        worst = Math.max(worst, Math.abs(t.logprob - (expected[j]?.logprob as number)));
      });
      worst = Math.max(
        worst,
        Math.abs((logprobs.token_logprobs[i] as number) - (ref.find((t) => t.tokenId === sampled)?.logprob as number)),
      );
    });
    assert.ok(worst < 1e-5, `largest difference from the reference: ${worst}`);

    // streamed: the same log-probs, token by token, with text offsets running on across chunks
    const streamBody = { ...body, stream: true };
    const stream = await client.completions.create(streamBody as OpenAI.CompletionCreateParamsStreaming);
    const streamed = {
      tokens: [] as string[],
      token_logprobs: [] as number[],
      top_logprobs: [] as object[],
      text_offset: [] as number[],
    };
    for await (const chunk of stream) {
      const part = chunk.choices[0]?.logprobs;
      if (!part) continue;
      streamed.tokens.push(...(part.tokens ?? []));
      streamed.token_logprobs.push(...(part.token_logprobs ?? []));
      streamed.top_logprobs.push(...(part.top_logprobs ?? []));
      streamed.text_offset.push(...(part.text_offset ?? []));
    }
    assert.deepEqual(streamed, logprobs);
  });

  it('chat top_logprobs: that many most likely tokens, most likely first, checked against a full forward', async () => {
    const reply = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 5,
      temperature: 0,
      logprobs: true,
      top_logprobs: 3,
      // @ts-expect-error extension field (vLLM's name)
      return_token_ids: true,
    });
    const ext = reply as unknown as { prompt_token_ids: number[]; choices: Array<{ token_ids: number[] }> };
    const ids = ext.choices[0]?.token_ids as number[];
    const content = reply.choices[0]?.logprobs?.content ?? [];
    assert.equal(content.length, ids.length);
    const tokenizer = engine.tokenizer as NonNullable<typeof engine.tokenizer>;
    const text = (id: number) => tokenizer.decode([id], { skipSpecialTokens: false });
    // greedy: the record is log_softmax(logits) (temperature 1)
    const reference = referenceDistributions(ext.prompt_token_ids, ids, 1);
    let worst = 0;
    content.forEach((position, i) => {
      const ref = (reference[i] as Array<{ tokenId: number; logprob: number }>).slice(0, 3);
      assert.equal(position.top_logprobs.length, 3);
      assert.deepEqual(
        position.top_logprobs.map((t) => t.token),
        ref.map((t) => text(t.tokenId)),
        `position ${i}`,
      );
      assert.deepEqual(
        position.top_logprobs.map((t) => t.bytes),
        ref.map((t) => [...Buffer.from(text(t.tokenId))]),
      );
      position.top_logprobs.forEach((t, j) => {
        worst = Math.max(worst, Math.abs(t.logprob - (ref[j]?.logprob as number)));
      });
      // greedy picks the most likely token
      assert.equal(position.token, position.top_logprobs[0]?.token);
      assert.equal(position.logprob, position.top_logprobs[0]?.logprob);
    });
    assert.ok(worst < 1e-5, `largest difference from the reference: ${worst}`);
    // without top_logprobs each position lists none
    const plain = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
      temperature: 0,
      logprobs: true,
    });
    assert.deepEqual(
      plain.choices[0]?.logprobs?.content?.map((c) => c.top_logprobs),
      [[], []],
    );
  });

  it('records conversations in a scope: a follow-up call continues the exact ids', async () => {
    const tracker = new ConversationTracker(engine.tokenizer as NonNullable<typeof engine.tokenizer>);
    const service = new OpenAIService({ modelName: 'tiny', backend: engine });
    const scoped = await startOpenAIServer({ service, scopes: new Map([['run1', { conversation: tracker }]]) });
    try {
      const c = new OpenAI({ baseURL: `${scoped.url}/s/run1/v1`, apiKey: 'none', maxRetries: 0 });
      const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'hello' }];
      const first = await c.chat.completions.create({ model: 'tiny', messages, max_tokens: 5, temperature: 0 });
      messages.push(first.choices[0]?.message as OpenAI.ChatCompletionMessageParam, { role: 'user', content: 'more' });
      await c.chat.completions.create({ model: 'tiny', messages, max_tokens: 5, temperature: 0 });
      const [leaf] = tracker.leaves();
      assert.equal(tracker.size, 2);
      assert.ok(leaf?.prompt.parent, 'the second call continued the first');
      const parent = leaf.prompt.parent;
      assert.deepEqual(leaf.prompt.promptIds.slice(0, parent.prompt.promptIds.length + parent.completionIds.length), [
        ...parent.prompt.promptIds,
        ...parent.completionIds,
      ]);
      const unknown = await fetch(`${scoped.url}/s/nope/v1/models`);
      assert.equal(unknown.status, 404);
    } finally {
      await scoped.close();
    }
  });
});

describe('OpenAI server guards', () => {
  it('needs the API key on every route but /health', async () => {
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    const noKey = await post('/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'a' }] }, {});
    assert.equal(noKey.status, 401);
    const wrong = await post('/v1/chat/completions', {}, { authorization: 'Bearer nope' });
    assert.equal(wrong.status, 401);
    assert.equal((await fetch(`${server.url}/v1/models`)).status, 401);
    const bad = new OpenAI({ baseURL: server.baseURL, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e: unknown) => e instanceof OpenAI.AuthenticationError);
  });

  it('answers malformed and oversized requests with OpenAI-style 4xx errors', async () => {
    const cases: Array<[unknown, number, RegExp]> = [
      ['{not json', 400, /not valid JSON/],
      ['[1,2]', 400, /JSON object/],
      [{ messages: [{ role: 'user', content: 'a' }] }, 400, /'model' is required/],
      [{ model: 'tiny' }, 400, /'messages' is required/],
      [{ model: 'tiny', messages: [] }, 400, /messages/],
      [{ model: 'tiny', messages: [{ role: 'wizard', content: 'a' }] }, 400, /messages\.0\.role/],
      [{ model: 'tiny', messages: [{ role: 'user', content: 'a' }], temperature: 9 }, 400, /temperature/],
      [{ model: 'tiny', messages: [{ role: 'user', content: 'a' }], max_tokens: 1000 }, 400, /limit of 32/],
      [{ model: 'tiny', messages: [{ role: 'user', content: 'a' }], n: 50 }, 400, /limit of 4/],
      [{ model: 'tiny', messages: [{ role: 'user', content: 'a' }], presence_penalty: 1 }, 400, /presence_penalty/],
      [{ model: 'tiny', messages: [{ role: 'user', content: 'a' }], tool_choice: 'required' }, 400, /tool_choice/],
      [{ model: 'tiny', messages: [{ role: 'user', content: 'a'.repeat(100) }] }, 400, /at most 64/],
      [{ model: '/etc/passwd', messages: [{ role: 'user', content: 'a' }] }, 404, /does not exist/],
      [{ model: 'tiny', messages: [{ role: 'user', content: 'a'.repeat(5000) }] }, 413, /exceeds the limit/],
    ];
    for (const [body, status, message] of cases) {
      const res = await post('/v1/chat/completions', body);
      assert.equal(res.status, status, JSON.stringify(body).slice(0, 80));
      assert.match(res.body.error?.message ?? '', message, JSON.stringify(body).slice(0, 80));
    }
    // the error names the field that asked for too much
    const named: Array<[string, unknown, string]> = [
      [
        '/v1/chat/completions',
        { model: 'tiny', messages: [{ role: 'user', content: 'a' }], max_completion_tokens: 33 },
        'max_completion_tokens',
      ],
      ['/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'a' }], max_tokens: 33 }, 'max_tokens'],
      ['/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'a' }], top_logprobs: 2 }, 'top_logprobs'],
      [
        '/v1/chat/completions',
        { model: 'tiny', messages: [{ role: 'user', content: 'a' }], logprobs: true, top_logprobs: 21 },
        'top_logprobs',
      ],
      ['/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'a'.repeat(100) }] }, 'messages'],
      ['/v1/completions', { model: 'tiny', prompt: 'a'.repeat(100) }, 'prompt'],
      ['/v1/completions', { model: 'tiny', prompt: ['a', 'b'.repeat(100)] }, 'prompt.1'],
      ['/v1/completions', { model: 'tiny', prompt: [1, 2], logprobs: 6 }, 'logprobs'],
    ];
    for (const [path, body, param] of named) {
      const res = await post(path, body);
      assert.equal(res.status, 400, JSON.stringify(body).slice(0, 80));
      assert.equal(res.body.error?.param, param, JSON.stringify(body).slice(0, 80));
    }
    const getChat = await fetch(`${server.url}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` } });
    assert.equal(getChat.status, 405);
    // The server is still up and answering.
    const ok = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'a' }], max_tokens: 2 });
    assert.equal(ok.choices.length, 1);
  });

  it('reloads weights only from folders inside its root', async () => {
    const dir = fixtureModelWithTokenizer('qwen2-tied');
    const loaded: string[] = [];
    const service = new OpenAIService({ modelName: 'tiny', backend: engine });
    const s = await startOpenAIServer({
      service,
      reloadWeights: {
        root: dir,
        load: async (path) => {
          loaded.push(path);
        },
      },
    });
    try {
      const json = { 'content-type': 'application/json' };
      const ok = await fetch(`${s.url}/update_weights_from_disk`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ model_path: dir }),
      });
      assert.equal(ok.status, 200);
      assert.deepEqual(loaded, [dir]);
      const outside = await fetch(`${s.url}/update_weights_from_disk`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ model_path: '/etc' }),
      });
      assert.equal(outside.status, 403);
      assert.equal(loaded.length, 1);
    } finally {
      await s.close();
    }
  });
});

/**
 * A backend that answers every request with `reply` then eos, one onToken event per token, and ends at the request's
 * stop strings as the engine does (with the engine's own StopStringMatcher and completionText).
 */
function scriptedBackend(tokenizer: Tokenizer, reply: string) {
  const eos = tokenizer.eosTokenIds[0] as number;
  return {
    tokenizer,
    maxLength: 4096,
    async generate(request: GenerateRequest): Promise<GenerateResult> {
      const stops = request.stop === undefined ? [] : typeof request.stop === 'string' ? [request.stop] : [...request.stop];
      const matcher = stops.length > 0 ? new StopStringMatcher(stops, tokenizer) : null;
      const ids: number[] = [];
      let stopReason: number | string = eos;
      for (const tokenId of [...tokenizer.encode(reply), eos]) {
        ids.push(tokenId);
        request.onToken?.({ index: 0, tokenId, logprob: -0.5 - ids.length });
        if (tokenId === eos) break;
        const stop = matcher?.push(tokenId) ?? null;
        if (stop !== null) {
          stopReason = stop;
          break;
        }
      }
      const text = completionText(tokenizer, ids, {
        stopToken: typeof stopReason === 'number',
        stops: typeof stopReason === 'string' ? stops : null,
      });
      return {
        promptIds: [...(request.promptIds ?? [])],
        completions: [{ index: 0, tokenIds: ids, logprobs: ids.map((_, i) => -1.5 - i), text, finishReason: 'stop', stopReason }],
      };
    },
  };
}

describe('tool calls', () => {
  it('streams the text before a tool call and the call itself at the end, as the non-streamed reply has them', async () => {
    const tokenizer = fixtureTokenizer();
    const reply = 'Let me add.\n<tool_call>\n{"name": "calc", "arguments": {"expr": "2+3"}}\n</tool_call>';
    const service = new OpenAIService({ modelName: 'scripted', backend: scriptedBackend(tokenizer, reply) });
    const s = await startOpenAIServer({ service });
    try {
      const c = new OpenAI({ baseURL: s.baseURL, apiKey: 'x', maxRetries: 0 });
      const tools: OpenAI.ChatCompletionTool[] = [{ type: 'function', function: { name: 'calc', parameters: {} } }];
      const body = { model: 'scripted', messages: [{ role: 'user' as const, content: '2+3?' }], tools };
      const whole = await c.chat.completions.create(body);
      assert.equal(whole.choices[0]?.finish_reason, 'tool_calls');
      assert.equal(whole.choices[0]?.message.content, 'Let me add.');
      const call = whole.choices[0]?.message.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall;
      assert.deepEqual([call.function.name, JSON.parse(call.function.arguments)], ['calc', { expr: '2+3' }]);

      const stream = await c.chat.completions.create({ ...body, stream: true });
      let content = '';
      const calls: string[] = [];
      let finish: string | null = null;
      for await (const chunk of stream) {
        const delta = chunk.choices[0]?.delta;
        content += delta?.content ?? '';
        for (const t of delta?.tool_calls ?? []) calls.push(`${t.function?.name}:${t.function?.arguments}`);
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      assert.equal(content, 'Let me add.', 'no part of the <tool_call> block leaks into the streamed text');
      assert.deepEqual(calls, ['calc:{"expr":"2+3"}']);
      assert.equal(finish, 'tool_calls');
    } finally {
      await s.close();
    }
  });

  it('parallel_tool_calls false: generation ends after the first complete call; true and the default keep every call', async () => {
    const tokenizer = fixtureTokenizer();
    const firstCall = 'Both.\n<tool_call>\n{"name": "calc", "arguments": {"expr": "2+3"}}\n</tool_call>';
    const reply = `${firstCall}\n<tool_call>\n{"name": "calc", "arguments": {"expr": "4*5"}}\n</tool_call>`;
    const tracker = new ConversationTracker(tokenizer);
    const service = new OpenAIService({ modelName: 'scripted', backend: scriptedBackend(tokenizer, reply) });
    const s = await startOpenAIServer({ service, scopes: new Map([['run', { conversation: tracker }]]) });
    try {
      const c = new OpenAI({ baseURL: s.baseURL, apiKey: 'x', maxRetries: 0 });
      const tools: OpenAI.ChatCompletionTool[] = [{ type: 'function', function: { name: 'calc', parameters: {} } }];
      const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: '2+3? 4*5?' }];
      const ask = (extra: Partial<OpenAI.ChatCompletionCreateParamsNonStreaming>, client = c) =>
        client.chat.completions.create({ model: 'scripted', messages, tools, ...extra, return_token_ids: true } as never);
      const exprs = (r: OpenAI.ChatCompletion) =>
        (r.choices[0]?.message.tool_calls ?? []).map(
          (t) => JSON.parse((t as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments).expr,
        );
      for (const parallel of [undefined, true]) {
        const all = (await ask(parallel === undefined ? {} : { parallel_tool_calls: parallel })) as OpenAI.ChatCompletion;
        assert.deepEqual(exprs(all), ['2+3', '4*5'], `parallel_tool_calls ${parallel}`);
      }
      const one = (await ask({ parallel_tool_calls: false })) as OpenAI.ChatCompletion;
      assert.deepEqual(exprs(one), ['2+3']);
      assert.equal(one.choices[0]?.message.content, 'Both.');
      assert.equal(one.choices[0]?.finish_reason, 'tool_calls');
      // the tokens end with the first call: nothing generated after it is trained on or lost from the message
      const ids = (one.choices[0] as unknown as { token_ids: number[] }).token_ids;
      assert.equal(tokenizer.decode(ids), firstCall);

      let content = '';
      const calls: string[] = [];
      const stream = await c.chat.completions.create({
        model: 'scripted',
        messages,
        tools,
        parallel_tool_calls: false,
        stream: true,
      });
      for await (const chunk of stream) {
        content += chunk.choices[0]?.delta?.content ?? '';
        for (const t of chunk.choices[0]?.delta?.tool_calls ?? []) calls.push(`${t.function?.name}:${t.function?.arguments}`);
      }
      assert.equal(content, 'Both.');
      assert.deepEqual(calls, ['calc:{"expr":"2+3"}']);

      // tool_choice 'none' parses no calls, so nothing stops early
      const none = (await ask({ parallel_tool_calls: false, tool_choice: 'none' })) as OpenAI.ChatCompletion;
      assert.equal(none.choices[0]?.message.content, reply);

      // a recorded turn that ended at the first call is continued with its exact ids
      const scoped = new OpenAI({ baseURL: `${s.url}/s/run/v1`, apiKey: 'x', maxRetries: 0 });
      const first = (await ask({ parallel_tool_calls: false }, scoped)) as OpenAI.ChatCompletion;
      const call = first.choices[0]?.message.tool_calls?.[0] as OpenAI.ChatCompletionMessageFunctionToolCall;
      messages.push(first.choices[0]?.message as OpenAI.ChatCompletionMessageParam, {
        role: 'tool',
        tool_call_id: call.id,
        content: '5',
      });
      await ask({ parallel_tool_calls: false }, scoped);
      const [leaf] = tracker.leaves();
      assert.equal(tracker.size, 2);
      assert.ok(leaf?.prompt.parent, 'the second call continued the first');
      assert.deepEqual(
        leaf.prompt.promptIds.slice(0, leaf.prompt.parent.prompt.promptIds.length + leaf.prompt.parent.completionIds.length),
        [...leaf.prompt.parent.prompt.promptIds, ...leaf.prompt.parent.completionIds],
      );
    } finally {
      await s.close();
    }
  });
});
