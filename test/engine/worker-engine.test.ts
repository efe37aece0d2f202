// WorkerRolloutEngine: the same results as an in-process engine, with the decode loop off the caller's thread;
// cancellation, closing and weight sync across the thread boundary.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { GenerationError, RolloutEngine, WorkerRolloutEngine } from '../../src/engine/index.js';
import { CausalLM } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { fixtureModelWithTokenizer } from './helpers.js';

const dir = fixtureModelWithTokenizer('qwen2-tied');
let engine: WorkerRolloutEngine;
before(async () => {
  engine = await WorkerRolloutEngine.start(dir, { slots: 4, numThreads: 1 });
});
after(async () => {
  await engine.close();
});

async function inProcess<T>(fn: (e: RolloutEngine) => Promise<T>, weights?: Map<string, torch.Tensor>): Promise<T> {
  const local = RolloutEngine.load(dir, { slots: 4 });
  if (weights) {
    torch.noGrad(() => {
      for (const [n, p] of local.model.parameters()) p.copy_(weights.get(n) as torch.Tensor);
    });
  }
  try {
    return await fn(local);
  } finally {
    await local.close();
  }
}

test('generate and chat give the same tokens, log-probs and text as the in-process engine', async () => {
  const request = { promptIds: [5, 9, 14, 20], maxTokens: 12, temperature: 0.8, seed: 3, n: 2 };
  const remote = await engine.generate(request);
  const local = await inProcess((e) => e.generate(request));
  assert.deepEqual(remote, local);
  const messages = [{ role: 'user' as const, content: 'hello' }];
  const remoteChat = await engine.chat(messages, { maxTokens: 8, temperature: 0 });
  const localChat = await inProcess((e) => e.chat(messages, { maxTokens: 8, temperature: 0 }));
  assert.deepEqual(remoteChat, localChat);
});

// How often the caller's loop gets a turn is a timing figure (bench/); what is checked here are the events that make
// it free: every sampling step runs in the worker, and the caller handles each streamed token while generate() waits.
test('the decode loop runs in the worker; the caller handles every streamed token while generate() is pending', async () => {
  const before = await engine.stats();
  let settled = false;
  const streamed: number[] = [];
  const lateTokens: number[] = [];
  const result = await engine
    .generate({
      promptIds: [4],
      maxTokens: 60,
      temperature: 0,
      ignoreEos: true,
      onToken: (event) => {
        streamed.push(event.tokenId);
        if (settled) lateTokens.push(event.tokenId);
      },
    })
    .finally(() => {
      settled = true;
    });
  const after = await engine.stats();
  const tokens = result.completions[0]?.tokenIds ?? [];
  assert.equal(tokens.length, 60);
  assert.deepEqual(streamed, tokens, 'each token reached the caller as an event');
  assert.deepEqual(lateTokens, [], 'no token arrived after generate() resolved');
  // 60 tokens, one request alone in the engine: 1 prefill step (first token) + 59 decode steps, all counted there
  assert.equal(Number(after.steps) - Number(before.steps), 60);
  assert.equal(after.requests, 0);
});

test('an AbortSignal cancels the request inside the worker; generation failures keep their reason', async () => {
  const controller = new AbortController();
  const pending = engine.generate({ promptIds: [7], maxTokens: 60, ignoreEos: true, temperature: 0, signal: controller.signal });
  controller.abort(); // posted right behind the request: the worker cancels it between decode steps
  await assert.rejects(pending, (e: GenerationError) => e instanceof GenerationError && e.reason === 'aborted');
  await assert.rejects(engine.generate({ promptIds: [7], maxTokens: 5000 }), (e: Error) =>
    /exceeds the engine's maxLength/.test(e.message),
  );
});

test('syncWeights copies new weights into the worker model: outputs follow them', async () => {
  const trained = CausalLM.load(dir);
  torch.noGrad(() => {
    for (const p of trained.parameters().values()) p.mul_(1.5).add_(0.01);
  });
  const weights = trained.parameters();
  const copied = await engine.syncWeights(weights);
  assert.equal(copied, weights.size);
  const request = { promptIds: [11, 12, 13], maxTokens: 10, temperature: 0 };
  const remote = await engine.generate(request);
  const local = await inProcess((e) => e.generate(request), weights);
  assert.deepEqual(remote.completions[0]?.tokenIds, local.completions[0]?.tokenIds);
  trained.dispose();
  await assert.rejects(engine.syncWeights(new Map([['nope', torch.zeros([1])]])), /no parameter 'nope'/);
});

test('close() rejects later requests', async () => {
  const other = await WorkerRolloutEngine.start(dir, { slots: 1 });
  await other.close();
  await assert.rejects(other.generate({ promptIds: [1], maxTokens: 1 }), (e: GenerationError) => e.reason === 'closed');
});
