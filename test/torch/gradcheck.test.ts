// Finite-difference gradient checks in float64: for each op, the autograd gradient of sum(f(x) * u) (u a fixed
// random upstream gradient) must match central differences (f(x + eps e_j) - f(x - eps e_j)) / 2 eps.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as torch from '../../src/torch/index.js';
import type { Tensor } from '../../src/torch/index.js';

const EPS = 1e-6;
const RTOL = 1e-6;
const ATOL = 1e-6;

type Fn = (inputs: readonly Tensor[]) => Tensor;

function at(x: readonly Tensor[], i: number): Tensor {
  const t = x[i];
  if (t === undefined) throw new Error(`input ${i} is missing`);
  return t;
}

/**
 * Checks d(sum(fn(inputs) * u))/d(inputs[i]) for each i in `wrt` (all floating inputs by default) against central
 * differences. Inputs are float64; integer inputs (indices, targets) pass through unchanged.
 */
function gradcheck(fn: Fn, inputs: readonly Tensor[], wrt: readonly number[] = inputs.map((_, i) => i)): void {
  torch.scope(() => {
    const gen = new torch.Generator(99);
    const upstream = torch.noGrad(() => fn(inputs)).shape;
    const u = torch.randn(upstream, { dtype: 'float64', generator: gen });
    const objective = (xs: readonly Tensor[]): number => torch.scope(() => fn(xs).mul(u).sum().item());

    const leaves = inputs.map((t, i) => (wrt.includes(i) ? t.detach().clone().requiresGrad_() : t));
    fn(leaves).backward(u);

    for (const i of wrt) {
      const input = at(inputs, i);
      assert.equal(input.dtype, 'float64', `input ${i} is float64`);
      const grad = at(leaves, i).grad;
      assert.ok(grad !== null, `input ${i} has a gradient`);
      const analytic = grad.toTypedArray() as Float64Array;
      const base = input.toTypedArray() as Float64Array;
      torch.noGrad(() => {
        for (let j = 0; j < base.length; j++) {
          const shifted = (delta: number): number => {
            const data = Float64Array.from(base);
            data[j] = (data[j] as number) + delta;
            const xs = inputs.map((t, k) => (k === i ? torch.tensor(data, { shape: input.shape }) : t));
            return objective(xs);
          };
          const numeric = (shifted(EPS) - shifted(-EPS)) / (2 * EPS);
          const a = analytic[j] as number;
          assert.ok(
            Math.abs(a - numeric) <= ATOL + RTOL * Math.abs(numeric),
            `input ${i}, element ${j}: autograd ${a}, finite difference ${numeric}`,
          );
        }
      });
    }
  });
}

const gen = new torch.Generator(4321);
const randn = (shape: readonly number[], scale = 1): Tensor =>
  torch.randn(shape, { dtype: 'float64', generator: gen }).mul(scale);
const positive = (shape: readonly number[]): Tensor => torch.rand(shape, { dtype: 'float64', generator: gen }).add(0.5);

function check(name: string, make: () => { fn: Fn; inputs: Tensor[]; wrt?: number[] }): void {
  test(`gradcheck: ${name}`, () => {
    const live = torch.liveTensorCount();
    torch.scope(() => {
      const { fn, inputs, wrt } = make();
      gradcheck(fn, inputs, wrt);
    });
    assert.equal(torch.liveTensorCount(), live, 'tensors leaked');
  });
}

check('matmul (batched, broadcast)', () => ({ fn: (x) => at(x, 0).matmul(at(x, 1)), inputs: [randn([2, 3, 4]), randn([4, 2])] }));
check('linear with bias', () => ({
  fn: (x) => torch.linear(at(x, 0), at(x, 1), at(x, 2)),
  inputs: [randn([2, 3]), randn([4, 3]), randn([4])],
}));
check('softmax', () => ({ fn: (x) => at(x, 0).softmax(-1), inputs: [randn([3, 5], 2)] }));
check('logSoftmax', () => ({ fn: (x) => at(x, 0).logSoftmax(0), inputs: [randn([3, 5], 2)] }));
check('logsumexp', () => ({ fn: (x) => at(x, 0).logsumexp(1, true), inputs: [randn([3, 5], 2)] }));
check('rmsNorm with weight', () => ({
  fn: (x) => torch.rmsNorm(at(x, 0), [5], at(x, 1), 1e-6),
  inputs: [randn([2, 5]), randn([5])],
}));
check('layerNorm with weight and bias', () => ({
  fn: (x) => torch.layerNorm(at(x, 0), [5], at(x, 1), at(x, 2)),
  inputs: [randn([2, 5]), randn([5]), randn([5])],
}));
check('scaledDotProductAttention causal', () => ({
  fn: (x) => torch.scaledDotProductAttention(at(x, 0), at(x, 1), at(x, 2), { causal: true }),
  inputs: [randn([1, 2, 3, 2]), randn([1, 2, 3, 2]), randn([1, 2, 3, 2])],
}));
check('scaledDotProductAttention grouped-query', () => ({
  fn: (x) => torch.scaledDotProductAttention(at(x, 0), at(x, 1), at(x, 2), { causal: true }),
  inputs: [randn([1, 4, 3, 2]), randn([1, 2, 3, 2]), randn([1, 2, 3, 2])],
}));
check('crossEntropy with ignoreIndex and label smoothing', () => ({
  fn: (x) => torch.crossEntropy(at(x, 0), at(x, 1), { ignoreIndex: -1, labelSmoothing: 0.1 }),
  inputs: [randn([4, 3], 2), torch.tensor([2n, -1n, 0n, 1n])],
  wrt: [0],
}));
check('gather', () => ({
  fn: (x) => at(x, 0).gather(1, at(x, 1)),
  inputs: [
    randn([3, 4]),
    torch.tensor([
      [0n, 0n],
      [3n, 1n],
      [2n, 2n],
    ]),
  ],
  wrt: [0],
}));
check('embedding (repeated rows accumulate)', () => ({
  fn: (x) => torch.embedding(at(x, 0), at(x, 1)),
  inputs: [randn([5, 2]), torch.tensor([[1n, 4n, 1n]])],
  wrt: [0],
}));
check('silu', () => ({ fn: (x) => at(x, 0).silu(), inputs: [randn([8], 3)] }));
check('gelu', () => ({ fn: (x) => at(x, 0).gelu(), inputs: [randn([8], 3)] }));
check('gelu tanh', () => ({ fn: (x) => at(x, 0).gelu('tanh'), inputs: [randn([8], 3)] }));
check('sigmoid, tanh, softplus', () => ({
  fn: (x) => at(x, 0).sigmoid().add(at(x, 0).tanh()).add(at(x, 0).softplus(2, 20)),
  inputs: [randn([6], 2)],
}));
check('pow, div, sqrt', () => ({
  fn: (x) =>
    at(x, 0)
      .pow(at(x, 1))
      .div(at(x, 0).sqrt().add(at(x, 1).square())),
  inputs: [positive([3, 2]), randn([3, 2])],
}));
check('var, norm, mean', () => ({
  fn: (x) => at(x, 0).var(1).add(at(x, 0).norm(2, 1)).add(at(x, 0).mean(1)),
  inputs: [randn([3, 4])],
}));
check('max over a dim, topk values, cumsum', () => ({
  fn: (x) => at(x, 0).max(1).values.add(at(x, 0).topk(2).values.sum(1)).add(at(x, 0).cumsum(1).select(1, 2)),
  inputs: [randn([3, 4])],
}));
check('where, maskedFill, clamp (away from kinks)', () => ({
  fn: (x) => {
    const mask = torch.tensor([
      [true, false, true],
      [false, false, true],
    ]);
    return torch.where(mask, at(x, 0), at(x, 1)).maskedFill(mask.logicalNot(), 0.5).add(at(x, 1).clamp(-10, 10));
  },
  inputs: [randn([2, 3]), randn([3])],
}));
check('views: transpose, reshape, slice with step, expand, cat', () => ({
  fn: (x) => {
    const a = at(x, 0).transpose(0, 1).reshape([2, 6]).slice(1, 1, null, 2);
    return torch.cat([a, at(x, 1).expand([2, 3])], 1).square();
  },
  inputs: [randn([4, 3]), randn([1, 3])],
}));
check('advanced index, indexSelect, scatterAdd (repeated indices accumulate)', () => ({
  fn: (x) => {
    const rows = torch.tensor([2n, 0n, 2n]);
    const picked = at(x, 0)
      .index([rows])
      .add(
        at(x, 0)
          .indexSelect(1, torch.tensor([1n, 1n, 0n]))
          .sum(0)
          .unsqueeze(0),
      );
    return picked.scatterAdd(1, torch.tensor([[0n, 0n, 2n]]).expand([3, 3]), at(x, 1));
  },
  inputs: [randn([3, 3]), randn([3, 3])],
}));
check('pad, split, stack, repeatInterleave, lerp', () => ({
  fn: (x) => {
    const [a, b] = at(x, 0).pad([1, 2], 0.5).split([2, 4], 1) as [Tensor, Tensor];
    const c = torch.stack([a.repeatInterleave(2, 1), b.narrow(1, 0, 4)], 0);
    return c.lerp(at(x, 1).expand([2, 2, 4]), 0.3);
  },
  inputs: [randn([2, 3]), randn([2, 4])],
}));
check('scaledDotProductAttention with an additive mask and a scale', () => ({
  fn: (x) => torch.scaledDotProductAttention(at(x, 0), at(x, 1), at(x, 2), { mask: at(x, 3), scale: 0.7 }),
  inputs: [randn([1, 2, 3, 2]), randn([1, 2, 4, 2]), randn([1, 2, 4, 2]), randn([1, 1, 3, 4])],
}));
