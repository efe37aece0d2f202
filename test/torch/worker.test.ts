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

// How often the main loop gets a turn is a timing figure (bench/); what is checked is that it gets turns at all while
// a call is in the worker. The worker computes until this thread releases it, so the call is pending through every
// turn below by construction, not by outrunning it; a main thread blocked by the call would never reach the release.
test('the main event loop keeps turning while a worker computes', async () => {
  const flag = new Int32Array(new SharedArrayBuffer(4));
  let stopListening = () => {};
  const computing = new Promise((resolve) => {
    stopListening = worker.onEvent('computing', resolve);
  });
  let settled = false;
  // the guard only stops a hang (a blocked main thread); far beyond any machine's time for 20 loop turns, well under
  // the suite's 600 s test timeout
  const call = worker.call<number>('computeUntilReleased', [flag, 300_000]).finally(() => {
    settled = true;
  });
  await computing;
  stopListening();
  for (let turn = 1; turn <= 20; turn++) {
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(settled, false, `the call settled before the release (turn ${turn})`);
  }
  Atomics.store(flag, 0, 1);
  Atomics.notify(flag, 0);
  assert.ok((await call) >= 1, 'the worker computed until released');
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
