// Off-main-thread tensor work: the addon loads in worker threads, tensors cross by reference, grad mode and intra-op
// threads are per thread, and the main event loop keeps running while a worker computes.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as torch from '../../src/torch/index.js';

let worker: torch.TensorWorker;
before(async () => {
  worker = await torch.TensorWorker.start(new URL('./helpers/tensor-worker.ts', import.meta.url), { numThreads: 1 });
});
after(async () => {
  await worker.terminate();
});

test('tensors go to a worker and come back by reference, with the right values', async () => {
  const a = torch.tensor([
    [1, 2],
    [3, 4],
  ]);
  const b = torch.tensor([
    [5, 6],
    [7, 8],
  ]);
  const expected = a.matmul(b).toArray();
  const out = await worker.call<torch.Tensor>('matmul', [a, b]);
  assert.ok(out instanceof torch.Tensor);
  assert.deepEqual(out.toArray(), expected);
  for (const t of [a, b, out]) t.dispose();
});

test('the main event loop keeps running while a worker computes', async () => {
  let ticks = 0;
  const timer = setInterval(() => ticks++, 5);
  const started = Date.now();
  await worker.call('heavy', [400]);
  const elapsed = Date.now() - started;
  clearInterval(timer);
  // A blocked loop would tick at most once; a free one ticks about every 5 ms of the computation.
  assert.ok(ticks >= Math.min(10, elapsed / 20), `only ${ticks} timer ticks during ${elapsed} ms of worker compute`);
});

test('grad mode and intra-op threads are per thread', async () => {
  assert.equal(await worker.call('gradModeInsideNoGrad'), false);
  assert.equal(torch.isGradEnabled(), true, "the worker's noGrad does not leak into the main thread");
  const mainThreads = torch.getNumThreads();
  assert.equal(await worker.call('threads', [1]), 1);
  assert.equal(torch.getNumThreads(), mainThreads);
});

test('worker errors carry libtorch messages; a hanging call times out with a named error', async () => {
  await assert.rejects(worker.call('fail'), /tensor worker 'fail' failed: mat1 and mat2 shapes cannot be multiplied/);
  await assert.rejects(worker.call('hang', [], { timeoutMs: 200 }), /'hang' did not answer within 200 ms/);
  await assert.rejects(worker.call('nope'), /no handler named 'nope'/);
});
