// A worker module for worker.test.ts and native-safety.test.ts: tensor work on a worker thread.
import { threadId } from 'node:worker_threads';
import * as torch from '../../../src/torch/index.js';

// Blocks this thread until the main thread stores a non-zero value in flag[0] (Atomics.notify): messages queue up
// behind it unread, and terminate() still ends the thread.
function waitFor(flag: Int32Array): void {
  Atomics.wait(flag, 0, 0);
}

torch.serveTensorWorker({
  matmul(a: torch.Tensor, b: torch.Tensor) {
    const out = a.matmul(b);
    a.dispose();
    b.dispose();
    return out;
  },
  // Multiplies matrices until the main thread stores a non-zero value in flag[0]; tells it (event 'computing') once
  // the first product is done and answers with how many it computed. The answer cannot come before the release, so
  // whatever the main thread did in between, it did while this thread computed. guardMs only turns a release that
  // never comes (a main thread blocked by the call) into an error instead of a hang.
  computeUntilReleased(flag: Int32Array, guardMs: number) {
    const started = Date.now();
    return torch.scope(() => {
      const m = torch.randn([128, 128]);
      let products = 0;
      for (;;) {
        torch.scope(() => m.matmul(m).mean().item());
        if (++products === 1) torch.postWorkerEvent('computing', null);
        if (Atomics.load(flag, 0) !== 0) return products;
        if (Date.now() - started > guardMs) {
          throw new Error(`computeUntilReleased: no release within ${guardMs} ms (${products} products computed)`);
        }
      }
    });
  },
  gradModeInsideNoGrad() {
    return torch.noGrad(() => torch.isGradEnabled());
  },
  threads(n: number) {
    torch.setNumThreads(n);
    return torch.getNumThreads();
  },
  fail() {
    torch.ones([2, 3]).matmul(torch.ones([2, 3]));
  },
  hang() {
    return new Promise(() => {});
  },
  ping() {
    return 'pong';
  },
  // Tells the main thread it is blocked, then blocks until released.
  block(flag: Int32Array) {
    torch.postWorkerEvent('blocked', null);
    waitFor(flag);
  },
  // Takes x, tells the main thread, blocks until released, then answers with a new tensor.
  holdThenReturn(flag: Int32Array, x: torch.Tensor) {
    x.dispose();
    torch.postWorkerEvent('holding', null);
    waitFor(flag);
    return torch.ones([3]);
  },
  // A result that cannot be cloned: a tensor next to a function.
  uncloneable() {
    return { t: torch.ones([2]), f: () => 1 };
  },
  // Exports a tensor tagged as this worker's (as encoding a result does) and exits before sending it.
  exportThenExit() {
    const t = torch.ones([4]);
    torch.exportTensor(t, threadId);
    t.dispose();
    process.exit(0);
  },
});
