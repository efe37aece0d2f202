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

test('the caller event loop keeps ticking while the worker decodes', async () => {
  let ticks = 0;
  const timer = setInterval(() => ticks++, 2);
  const started = Date.now();
  await Promise.all(
    Array.from({ length: 4 }, (_, i) => engine.generate({ promptIds: [i + 4], maxTokens: 60, temperature: 0, ignoreEos: true })),
  );
  clearInterval(timer);
  const elapsed = Date.now() - started;
  assert.ok(ticks >= Math.min(10, elapsed / 10), `only ${ticks} ticks in ${elapsed} ms`);
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
