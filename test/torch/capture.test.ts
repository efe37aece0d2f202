// torch.capture / CapturedStep.replay (src/torch/capture.ts, native/src/capture.{h,cpp}): a replay runs the recorded
// ATen calls over new inputs and must give, bit for bit, what running the step eagerly over those inputs gives —
// outputs and in-place writes to tensors from outside the step. Steps that cannot be replayed say why.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import * as torch from '../../src/torch/index.js';

/** The bytes of a tensor: equal bytes = bit-identical values. */
const bytes = (t: torch.Tensor): Buffer => Buffer.from(t.contiguous().toTypedArray().buffer);

/**
 * A step touching each kind of binding: ops with tensor, boxed-number, optional, list and string arguments, ops that
 * return pairs and lists, creation from shapes, an in-place write into a tensor from outside (a cache), grad mode
 * switched inside, and an attention with a mask built from an input.
 */
function makeStep(weight: torch.Tensor, bias: torch.Tensor, cache: torch.Tensor) {
  return (x: torch.Tensor, rows: torch.Tensor): torch.Tensor[] => {
    const h = torch.linear(x, weight, bias).add(0.5, 2).relu(); // [4, 16]
    cache.indexCopy_(0, rows, h.narrow(1, 0, 8)); // in place into the outside tensor
    const normed = torch.rmsNorm(h, [16], null, 1e-6);
    const [a, b] = normed.split(8, -1) as [torch.Tensor, torch.Tensor];
    const top = a.topk(3);
    const q = normed.view([1, 1, 4, 16]);
    const k = cache.narrow(0, 0, 6).repeat([1, 2]).view([1, 1, 6, 16]);
    const positions = torch.arange(6).view([1, 1, 1, 6]);
    const mask = positions.le(rows.view([1, 1, 4, 1]).add(1));
    const attended = torch.scaledDotProductAttention(q, k, k, { mask });
    const gated = torch.where(b.gt(0), b, torch.fullLike(b, -1));
    const scaled = torch.noGrad(() => gated.mul(torch.ones([4, 8]).mul(3)));
    const mixed = torch.einsum('ij,ij->i', a, scaled);
    return [attended.squeeze(), top.values, top.indices, mixed, gated.softmax(-1).logSoftmax(-1)];
  };
}

describe('capture and replay', () => {
  it('replays bit-identically to eager: outputs and in-place writes to outside tensors', () => {
    torch.manualSeed(1);
    const weight = torch.randn([16, 12]);
    const bias = torch.randn([16]);
    const cache = torch.zeros([8, 8]);
    const step = makeStep(weight, bias, cache);
    const x1 = torch.randn([4, 12]);
    const rows1 = torch.tensor(new BigInt64Array([0n, 2n, 3n, 5n]));
    const captured = torch.capture([x1, rows1], () => step(x1, rows1));
    assert.equal(captured.reason, null);
    assert.ok(captured.step !== null && captured.step.ops > 20, `recorded ${captured.ops} ops`);
    // the capture ran eagerly: its outputs are the step's
    const cacheAfterCapture = bytes(cache);
    cache.zero_();
    assert.deepEqual(step(x1, rows1).map(bytes), captured.outputs.map(bytes));
    assert.deepEqual(bytes(cache), cacheAfterCapture);

    for (const seed of [2, 3, 4]) {
      torch.manualSeed(seed);
      const x = torch.randn([4, 12]);
      const rows = torch.rand([8]).argsort().narrow(0, 0, 4).contiguous();
      const start = torch.randn([8, 8]);
      cache.copy_(start);
      const replayed = captured.step.replay([x, rows]);
      const cacheReplayed = bytes(cache);
      cache.copy_(start);
      const eager = step(x, rows);
      assert.deepEqual(replayed.map(bytes), eager.map(bytes), `seed ${seed}: outputs`);
      assert.deepEqual(bytes(cache), cacheReplayed, `seed ${seed}: the cache written in place`);
      assert.ok(!bytes(cache).equals(bytes(start)), 'the step wrote the cache');
    }
  });

  it('drops each intermediate after its last reader: a replay holds two of them at once, not all', () => {
    // 5 results of 132 MiB, each read once by the next: the eager step never needs more than two at once, and
    // neither may the replay. Blocks of 128 MiB and more are mappings of their own, unmapped when freed (see
    // native/src/core.cpp), so the process's peak resident memory (VmHWM, reset through clear_refs) shows it: ~264 MiB
    // more for two, ~660 if the replay kept all five to its end.
    const MiB = 2 ** 20;
    const hwm = () => Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]) * 1024;
    const chain = (input: torch.Tensor): torch.Tensor[] => {
      let h = input;
      for (let i = 0; i < 5; i++) h = h.add(1);
      return [h.narrow(0, 0, 4).clone()];
    };
    torch.scope(() => {
      const x = torch.full([(132 * MiB) / 4], 0.5);
      // (the capture's eager run holds every result until it ends)
      const step = torch.scope(() => torch.capture([x], () => chain(x)).step);
      assert.ok(step !== null);
      const x2 = torch.fullLike(x, 2);
      writeFileSync('/proc/self/clear_refs', '5'); // VmHWM := the current resident size
      const before = hwm();
      const [out] = step.replay([x2]);
      const growth = hwm() - before;
      assert.deepEqual([...(out as torch.Tensor).toTypedArray()], [7, 7, 7, 7]);
      assert.ok(growth < 450 * MiB, `the replay's peak grew the process by ${(growth / MiB).toFixed(0)} MiB`);
      step.dispose();
    });
  });

  it('counts a replay as one native call, and the eager step as many', () => {
    const w = torch.randn([8, 8]);
    const x = torch.randn([2, 8]);
    const fn = () => [x.matmul(w).relu().add(1).softmax(-1).mul(2)];
    const { step } = torch.capture([x], fn);
    assert.ok(step !== null);
    const c0 = torch.nativeCallCount();
    fn();
    const eagerCalls = torch.nativeCallCount() - c0 - 1; // less the second nativeCallCount() itself
    const next = torch.randn([2, 8]);
    const c1 = torch.nativeCallCount();
    step.replay([next]);
    const replayCalls = torch.nativeCallCount() - c1 - 1;
    assert.equal(eagerCalls, 5);
    assert.equal(replayCalls, 1);
  });

  it('replays in the grad mode of the capture and restores the caller’s', () => {
    const w = torch.randn([4, 4], { requiresGrad: true });
    const x = torch.randn([1, 4]);
    const { step } = torch.noGrad(() => torch.capture([x], () => [x.matmul(w)]));
    assert.ok(step !== null);
    assert.equal(torch.isGradEnabled(), true);
    const [y] = step.replay([torch.randn([1, 4])]);
    assert.equal(y?.requiresGrad, false, 'captured under noGrad: no graph at replay');
    assert.equal(torch.isGradEnabled(), true);
  });

  it('captured with gradients on, a replay builds the graph: its backward gives the eager gradients bit for bit', () => {
    // a training forward (bench/train-capture.bench.ts): weights held by reference, the loss replayed over new ids
    const embed = torch.randn([12, 8], { requiresGrad: true });
    const w1 = torch.randn([16, 8], { requiresGrad: true });
    const w2 = torch.randn([12, 16], { requiresGrad: true });
    const params = [embed, w1, w2];
    const loss = (ids: torch.Tensor): torch.Tensor[] => {
      const h = torch.linear(torch.embedding(embed, ids), w1).silu();
      const logp = torch.linear(h, w2).logSoftmax(-1);
      return [logp.gather(-1, ids.unsqueeze(-1)).mean().neg()];
    };
    const grads = (run: () => torch.Tensor[]): { loss: Buffer; grads: Buffer[] } => {
      for (const p of params) p.grad = null;
      const [l] = run() as [torch.Tensor];
      l.backward();
      return { loss: bytes(l), grads: params.map((p) => bytes(p.grad as torch.Tensor)) };
    };
    const first = torch.randint(0, 12, [3, 5]);
    const { step } = torch.capture([first], () => loss(first));
    assert.ok(step !== null);
    const next = torch.randint(0, 12, [3, 5]);
    const replayed = grads(() => step.replay([next]));
    const eager = grads(() => loss(next));
    assert.deepEqual(replayed.loss, eager.loss);
    for (const [i, g] of replayed.grads.entries()) assert.deepEqual(g, eager.grads[i], `gradient of parameter ${i}`);
    const ofFirst = grads(() => loss(first));
    assert.ok(
      replayed.grads.some((g, i) => !g.equals(ofFirst.grads[i] as Buffer)),
      'the first ids give other gradients: the replay read the new ones',
    );
  });

  it('returns no step, with the binding to blame, when the step reads values or makes tensors from data', () => {
    const x = torch.tensor([1, 2, 3]);
    const read = torch.capture([x], () => [x.mul(x.sum().item() as number)]);
    assert.equal(read.step, null);
    assert.match(read.reason ?? '', /^item ran inside the captured step/);
    assert.deepEqual(read.outputs[0]?.toArray(), [6, 12, 18], 'the step still ran eagerly');
    const made = torch.capture([x], () => [x.add(torch.tensor([1, 1, 1]))]);
    assert.equal(made.step, null);
    assert.match(made.reason ?? '', /^fromBytes ran inside the captured step/);
    const back = torch.capture([x], () => {
      x.toArray();
      return [x.neg()];
    });
    assert.match(back.reason ?? '', /^toBytes ran/);
  });

  it('checks what a replay binds against what was captured', () => {
    const x = torch.randn([2, 3]);
    const { step } = torch.capture([x], () => [x.exp()]);
    assert.ok(step !== null);
    assert.throws(
      () => step.replay([torch.randn([3, 3])]),
      /replay: input 0 has shape \[3, 3\] strides \[3, 1\] Float on cpu, the step was captured with shape \[2, 3\] strides \[3, 1\] Float on cpu/,
    );
    assert.throws(
      () => step.replay([torch.randn([3, 2]).transpose(0, 1)]),
      /replay: input 0 has shape \[2, 3\] strides \[1, 2\]/,
    );
    assert.throws(() => step.replay([torch.randn([2, 3], { dtype: 'float64' })]), /Double on cpu, the step was captured with/);
    assert.throws(() => step.replay([]), /replay: 0 inputs, the step was captured with 1/);
    step.dispose();
    assert.throws(() => step.replay([x]), /replay: the captured step was disposed/);
  });

  it('records a CUDA graph only on CUDA: a CPU input is an error; a refused graph says why and replays op by op', () => {
    const x = torch.randn([3]);
    assert.throws(
      () => torch.capture([x], () => [x.mul(2)], { cudaGraph: true }),
      /^RangeError: capture: cudaGraph needs every input on a CUDA device; input 0 is on cpu$/,
    );
    const plain = torch.capture([x], () => [x.mul(2)]);
    assert.deepEqual(plain.step?.graph, { state: 'off', reason: null });
    // no inputs to check here: the addon refuses (a CPU-only build has no CUDA graphs; a CUDA build: the output is
    // on the CPU). Without noGrad a CUDA build refuses for autograd first (checked on a CUDA torch 2.14.1 build).
    const refused = torch.noGrad(() => torch.capture([], () => [torch.ones([2]).mul(3)], { cudaGraph: true }));
    assert.ok(refused.step !== null);
    assert.equal(refused.step.graph.state, 'off');
    assert.match(
      refused.step.graph.reason ?? '',
      /^(this addon was built without CUDA graphs .*|output 0 is on cpu; a CUDA graph needs every input and output on one CUDA device)$/,
    );
    assert.deepEqual(refused.step.replay([])[0]?.toArray(), [3, 3]);
    refused.step.dispose();
    assert.throws(() => refused.step?.graph, /graph: the captured step was disposed/);
  });

  it('a step captured with gradients enabled is refused a CUDA graph, saying why (a CUDA build)', () => {
    const withGrad = torch.capture([], () => [torch.ones([2]).mul(3)], { cudaGraph: true });
    assert.ok(withGrad.step !== null);
    assert.match(
      withGrad.step.graph.reason ?? '',
      /^(this addon was built without CUDA graphs .*|the step was captured with gradients enabled \(a CUDA graph replays no autograd\))$/,
    );
    withGrad.step.dispose();
  });

  it('does not nest, closes on a throw, and refuses one tensor given twice as input', () => {
    const x = torch.randn([2]);
    assert.throws(
      () => torch.capture([x], () => [torch.capture([x], () => [x]).outputs[0] as torch.Tensor]),
      /captures do not nest/,
    );
    assert.throws(
      () =>
        torch.capture([x], () => {
          throw new Error('step failed');
        }),
      /step failed/,
    );
    const after = torch.capture([x], () => [x.add(1)]); // nothing left open
    assert.ok(after.step !== null);
    assert.throws(() => torch.capture([x, x], () => [x]), /input 1 is the same tensor as an earlier input/);
  });
});
