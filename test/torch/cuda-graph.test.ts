// CUDA graphs of captured steps (src/torch/capture.ts, native/src/cuda_graph.cpp): a step captured with cudaGraph is
// recorded as a CUDA graph at its first replay; graph replays give, bit for bit, what the eager step gives (outputs
// and in-place writes to tensors from outside the step) and return copies; a step that cannot run inside a graph
// replays op by op and says why. These need a CUDA device and an addon built against a CUDA libtorch: skipped
// elsewhere (test/torch/capture.test.ts checks the CPU side of the option). Steps are captured under noGrad, as the
// engine captures its decode steps: a graph replays no autograd, so a capture with gradients enabled gets none.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as torch from '../../src/torch/index.js';

const gpus = torch.cuda.deviceCount();
const skip = gpus === 0 ? 'no CUDA device visible' : false;
const device = 'cuda:0';

/** The bytes of a tensor: equal bytes = bit-identical values. */
const bytes = (t: torch.Tensor): Buffer => Buffer.from(t.contiguous().to({ device: 'cpu' }).toTypedArray().buffer);
const onGpu = (t: torch.Tensor): torch.Tensor => t.to({ device });
const rowsOf = (seed: number): torch.Tensor => {
  torch.manualSeed(seed);
  return onGpu(torch.rand([16]).argsort().narrow(0, 0, 4).contiguous());
};

/** A decode-like step: a product, an in-place write into an outside cache, attention over the cache, a log-softmax. */
function makeStep(weight: torch.Tensor, bias: torch.Tensor, cache: torch.Tensor) {
  return (x: torch.Tensor, rows: torch.Tensor): torch.Tensor[] => {
    const h = torch.linear(x, weight, bias).relu(); // [4, 64]
    cache.indexCopy_(0, rows, h);
    const keys = cache.narrow(0, 0, 8); // [8, 64]
    const scores = h.matmul(keys.transpose(0, 1)).mul(0.125).softmax(-1); // [4, 8]
    return [scores.matmul(keys), h.logSoftmax(-1)];
  };
}

describe('CUDA graphs of captured steps', { skip }, () => {
  it('replay bit-identically to the eager step, in-place writes included, and return copies', () =>
    torch.noGrad(() => {
      torch.manualSeed(1);
      const weight = onGpu(torch.randn([64, 32]));
      const bias = onGpu(torch.randn([64]));
      const cache = onGpu(torch.zeros([16, 64]));
      const step = makeStep(weight, bias, cache);
      const x0 = onGpu(torch.randn([4, 32]));
      const rows0 = rowsOf(0);
      const captured = torch.capture([x0, rows0], () => step(x0, rows0), { cudaGraph: true });
      assert.ok(captured.step !== null, `not replayable: ${captured.reason}`);
      assert.deepEqual(captured.step.graph, { state: 'pending', reason: null });
      for (const seed of [2, 3, 4, 5]) {
        torch.manualSeed(seed);
        const x = onGpu(torch.randn([4, 32]));
        const rows = rowsOf(seed + 100);
        const start = onGpu(torch.randn([16, 64]));
        cache.copy_(start);
        const replayed = captured.step.replay([x, rows]); // the first one records the graph
        const cacheReplayed = bytes(cache);
        cache.copy_(start);
        const eager = step(x, rows);
        assert.deepEqual(replayed.map(bytes), eager.map(bytes), `outputs, seed ${seed}`);
        assert.deepEqual(cacheReplayed, bytes(cache), `cache, seed ${seed}`);
      }
      assert.deepEqual(captured.step.graph, { state: 'ready', reason: null });
      // a replay returns copies: the next launch does not overwrite what the last one returned
      const first = captured.step.replay([onGpu(torch.randn([4, 32])), rowsOf(7)]);
      const firstBytes = first.map(bytes);
      captured.step.replay([onGpu(torch.randn([4, 32])), rowsOf(8)]);
      assert.deepEqual(first.map(bytes), firstBytes);
      captured.step.dispose();
    }));

  it('records graphs again after every earlier graph was released (the thread keeps its graphs’ shared pool)', () =>
    torch.noGrad(() => {
      const x0 = onGpu(torch.randn([5]));
      for (let round = 0; round < 3; round++) {
        const captured = torch.capture([x0], () => [x0.mul(round + 2).exp()], { cudaGraph: true });
        assert.ok(captured.step !== null);
        for (const seed of [1, 2]) {
          torch.manualSeed(seed);
          const x = onGpu(torch.randn([5]));
          assert.deepEqual(captured.step.replay([x]).map(bytes), [bytes(x.mul(round + 2).exp())]);
        }
        assert.deepEqual(captured.step.graph, { state: 'ready', reason: null }, `round ${round}`);
        captured.step.dispose(); // the only graph: released before the next round records one
      }
    }));

  it('an op that waits for the host fails the recording: the step replays op by op and says why', () =>
    torch.noGrad(() => {
      const x0 = onGpu(torch.randn([6]));
      const step = (x: torch.Tensor) => [x.gt(0).nonzero().float().sum().add(x.sum())]; // nonzero reads its count back
      const captured = torch.capture([x0], () => step(x0), { cudaGraph: true });
      assert.ok(captured.step !== null);
      for (const seed of [1, 2]) {
        torch.manualSeed(seed);
        const x = onGpu(torch.randn([6]));
        assert.deepEqual(captured.step.replay([x]).map(bytes), step(x).map(bytes));
      }
      const graph = captured.step.graph;
      assert.equal(graph.state, 'failed');
      assert.ok(graph.reason !== null && graph.reason.length > 0);
    }));

  it('a step captured with gradients enabled, or with an output on the CPU, gets no graph', () => {
    const w = onGpu(torch.randn([3])).requiresGrad_();
    const x0 = onGpu(torch.randn([3]));
    const withGrad = torch.capture([x0], () => [x0.mul(w)], { cudaGraph: true });
    assert.equal(withGrad.step?.graph.state, 'off');
    assert.match(withGrad.step?.graph.reason ?? '', /captured with gradients enabled/);
    const toCpu = torch.noGrad(() => torch.capture([x0], () => [x0.mul(2).to({ device: 'cpu' })], { cudaGraph: true }));
    assert.equal(toCpu.step?.graph.state, 'off');
    assert.match(toCpu.step?.graph.reason ?? '', /^output 0 is on cpu/);
  });
});
