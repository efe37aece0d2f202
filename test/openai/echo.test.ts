// /v1/completions with echo + logprobs (prompt log-probs as vLLM answers them), checked against an independent
// reference: the model loaded again in the training layout, one cache-free forward, log_softmax per position.
// Also the client side: OpenAIRemoteEngine.score (what a remote teacher uses) against a server over the worker engine.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { RolloutEngine, WorkerRolloutEngine } from '../../src/engine/index.js';
import { CausalLM } from '../../src/model/index.js';
import { OpenAIRemoteEngine, OpenAIService, type OpenAIServer, startOpenAIServer } from '../../src/openai/index.js';
import * as torch from '../../src/torch/index.js';
import { fixtureModelWithTokenizer } from '../engine/helpers.js';

let modelDir: string;
let engine: RolloutEngine;
let server: OpenAIServer;
let client: OpenAI;

before(async () => {
  torch.setNumThreads(1);
  modelDir = fixtureModelWithTokenizer('qwen2-tied');
  engine = RolloutEngine.load(modelDir, { slots: 4, maxLength: 64 });
  server = await startOpenAIServer({ service: new OpenAIService({ modelName: 'tiny', backend: engine, maxTokens: 16 }) });
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
});

after(async () => {
  await server?.close();
  await engine?.close();
});

/** log_softmax(logits[t-1])[ids[t]] for t ≥ 1 and each position's full distribution, by an independent forward. */
function reference(ids: readonly number[]): { logprobs: number[]; rows: number[][] } {
  const model = CausalLM.load(modelDir);
  try {
    const rows = torch.noGrad(() =>
      torch.scope(() => {
        const logits = model.forward(torch.tensor([ids.map(BigInt)])).select(0, 0); // [T, V]
        return logits
          .narrow(0, 0, ids.length - 1)
          .float()
          .logSoftmax(-1)
          .toArray() as number[][];
      }),
    );
    return { logprobs: rows.map((row, t) => row[ids[t + 1] as number] as number), rows };
  } finally {
    model.dispose();
  }
}

const close = (actual: number, expected: number, what: string) =>
  assert.ok(Math.abs(actual - expected) < 1e-4, `${what}: ${actual} vs reference ${expected}`);

describe('/v1/completions echo', () => {
  it('max_tokens 0: the prompt alone, its first log-prob null, the others log_softmax of the previous position', async () => {
    const prompt = [5, 17, 42, 9, 77, 3, 64];
    const reply = await client.completions.create({
      model: 'tiny',
      prompt,
      echo: true,
      max_tokens: 0,
      logprobs: 2,
      // @ts-expect-error vLLM's extension field
      return_tokens_as_token_ids: true,
    });
    const choice = reply.choices[0];
    assert.ok(choice?.logprobs);
    const lp = choice.logprobs as unknown as {
      tokens: string[];
      token_logprobs: (number | null)[];
      top_logprobs: (Record<string, number> | null)[];
      text_offset: number[];
    };
    assert.deepEqual(
      lp.tokens,
      prompt.map((id) => `token_id:${id}`),
    );
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    const ref = reference(prompt);
    for (let t = 1; t < prompt.length; t++) {
      close(lp.token_logprobs[t] as number, ref.logprobs[t - 1] as number, `token ${t}`);
      // the 2 most likely tokens of the position, plus the prompt token when it is not one of them
      const row = ref.rows[t - 1] as number[];
      const ranked = row.map((v, id) => ({ id, v })).sort((a, b) => b.v - a.v);
      const expected = new Map(ranked.slice(0, 2).map((e) => [`token_id:${e.id}`, e.v]));
      expected.set(`token_id:${prompt[t]}`, row[prompt[t] as number] as number);
      const got = lp.top_logprobs[t] as Record<string, number>;
      assert.deepEqual(Object.keys(got).sort(), [...expected.keys()].sort(), `top_logprobs ${t}`);
      for (const [key, v] of expected) close(got[key] as number, v, `top_logprobs ${t} ${key}`);
    }
    // "token_id:<id>" texts: each offset is where the previous token's text ended
    assert.deepEqual(
      lp.text_offset,
      prompt.map((_, i) => prompt.slice(0, i).reduce((sum, id) => sum + `token_id:${id}`.length, 0)),
    );
    assert.equal(reply.usage?.completion_tokens, 0);
    assert.equal(choice.finish_reason, 'length');
  });

  it('with a completion: text is prompt + completion; prompt log-probs then the completion log-probs, offsets running on', async () => {
    const text = 'hello wor';
    const reply = await client.completions.create({
      model: 'tiny',
      prompt: text,
      echo: true,
      max_tokens: 4,
      temperature: 0,
      logprobs: 0,
    });
    const choice = reply.choices[0];
    assert.ok(choice?.logprobs);
    const plain = await client.completions.create({ model: 'tiny', prompt: text, max_tokens: 4, temperature: 0, logprobs: 0 });
    const generated = plain.choices[0];
    assert.ok(generated?.logprobs);
    assert.equal(choice.text, text + generated.text);
    const ids = engine.tokenizer?.encode(text) as number[];
    const lp = choice.logprobs;
    assert.equal(lp.tokens?.length, ids.length + (generated.logprobs.tokens?.length ?? 0));
    assert.deepEqual(lp.token_logprobs?.slice(ids.length), generated.logprobs.token_logprobs);
    const ref = reference(ids);
    for (let t = 1; t < ids.length; t++)
      close(lp.token_logprobs?.[t] as number, ref.logprobs[t - 1] as number, `prompt token ${t}`);
    // the character tokenizer: one character per token, so offsets are 0, 1, 2, ... through prompt and completion
    assert.deepEqual(
      lp.text_offset,
      Array.from({ length: lp.tokens?.length ?? 0 }, (_, i) => i),
    );
  });

  it('refuses max_tokens 0 without echo, and echo with stream', async () => {
    for (const [body, param] of [
      [{ prompt: 'ab', max_tokens: 0 }, 'max_tokens'],
      [{ prompt: 'ab', echo: true, stream: true }, 'echo'],
    ] as const) {
      const res = await fetch(`${server.baseURL}/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tiny', ...body }),
      });
      assert.equal(res.status, 400);
      const error = ((await res.json()) as { error: { param: string; message: string } }).error;
      assert.equal(error.param, param, error.message);
    }
  });

  it('OpenAIRemoteEngine.score over a server on the worker engine equals the reference', async () => {
    const worker = await WorkerRolloutEngine.start(modelDir, { slots: 2, maxLength: 64, numThreads: 1 });
    const served = await startOpenAIServer({ service: new OpenAIService({ modelName: 'teacher', backend: worker }) });
    try {
      const remote = await OpenAIRemoteEngine.connect({ baseURL: served.baseURL, model: 'teacher', tokenizer: null });
      const ids = [8, 30, 31, 99, 12];
      const scored = await remote.score(ids, { topLogprobs: 1 });
      const ref = reference(ids);
      assert.equal(scored.logprobs[0], null);
      for (let t = 1; t < ids.length; t++) close(scored.logprobs[t] as number, ref.logprobs[t - 1] as number, `token ${t}`);
      const best = (ref.rows[0] as number[]).reduce((b, v, id, row) => (v > (row[b] as number) ? id : b), 0);
      assert.equal(scored.topLogprobs?.[1]?.[0]?.tokenId, best);
      await assert.rejects(remote.score(ids, { temperature: 0.5 }), /temperature 1/);
    } finally {
      await served.close();
      await worker.close();
    }
  });
});
