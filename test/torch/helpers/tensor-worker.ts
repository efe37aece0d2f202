// A worker module for worker.test.ts: tensor work on a worker thread.
import * as torch from '../../../src/torch/index.js';

torch.serveTensorWorker({
  matmul(a: torch.Tensor, b: torch.Tensor) {
    const out = a.matmul(b);
    a.dispose();
    b.dispose();
    return out;
  },
  heavy(iterations: number) {
    // ~1 s of matrix products on this thread, while the main thread keeps its event loop.
    return torch.scope(() => {
      const m = torch.randn([256, 256]);
      let acc = 0;
      for (let i = 0; i < iterations; i++) acc += torch.scope(() => m.matmul(m).mean().item());
      return acc;
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
});
