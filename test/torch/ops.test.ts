// Every op family of the tensor API against PyTorch reference values (test/fixtures/torch-ops.*, written by
// scripts/fixtures/torch_ops.py), plus statistical tests of the random functions.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as torch from '../../src/torch/index.js';
import type { DType, Tensor } from '../../src/torch/index.js';

// ---------------------------------------------------------------------------------------------------------------
// fixtures

type Arg = number | string | boolean | null | readonly (number | string | null)[];

interface Case {
  name: string;
  family: string;
  op: string;
  inputs: string[];
  args: Readonly<Record<string, Arg>>;
  outputs: string[];
  strides?: number[][];
  grad?: { inputs: number[]; upstream: string };
}

const fixtureDir = fileURLToPath(new URL('../fixtures/', import.meta.url));
const { cases } = JSON.parse(readFileSync(`${fixtureDir}torch-ops.json`, 'utf8')) as { cases: Case[] };
const fixtures = torch.loadSafetensors(`${fixtureDir}torch-ops.safetensors`);
after(() => {
  for (const t of fixtures.values()) t.dispose();
});

function fixture(key: string): Tensor {
  const t = fixtures.get(key);
  if (t === undefined) throw new Error(`fixture tensor '${key}' is missing`);
  return t;
}

/** Typed access to a case's plain arguments. */
class Args {
  constructor(
    private readonly args: Readonly<Record<string, Arg>>,
    private readonly where: string,
  ) {}
  has(key: string): boolean {
    return this.args[key] !== undefined && this.args[key] !== null;
  }
  private get(key: string): Arg {
    const v = this.args[key];
    if (v === undefined) throw new Error(`${this.where}: argument '${key}' is missing`);
    return v;
  }
  num(key: string, fallback?: number): number {
    if (!this.has(key) && fallback !== undefined) return fallback;
    return toNumber(this.get(key), `${this.where}.${key}`);
  }
  optNum(key: string): number | undefined {
    return this.has(key) ? this.num(key) : undefined;
  }
  str(key: string, fallback?: string): string {
    if (!this.has(key) && fallback !== undefined) return fallback;
    const v = this.get(key);
    if (typeof v !== 'string') throw new Error(`${this.where}.${key}: expected a string`);
    return v;
  }
  bool(key: string, fallback = false): boolean {
    if (!this.has(key)) return fallback;
    const v = this.get(key);
    if (typeof v !== 'boolean') throw new Error(`${this.where}.${key}: expected a boolean`);
    return v;
  }
  list(key: string): number[] {
    const v = this.get(key);
    if (!Array.isArray(v)) throw new Error(`${this.where}.${key}: expected a list`);
    return v.map((x: number | string | null, i: number) => toNumber(x, `${this.where}.${key}[${i}]`));
  }
  /** A number or a list of numbers (dims), or undefined when absent. */
  dims(key: string): number | number[] | undefined {
    if (!this.has(key)) return undefined;
    return Array.isArray(this.get(key)) ? this.list(key) : this.num(key);
  }
  dtype(key: string): DType | undefined {
    if (!this.has(key)) return undefined;
    const v = this.str(key);
    assert.ok(torch.isDType(v), `${this.where}.${key}: unknown dtype ${v}`);
    return v;
  }
  raw(key: string): Arg | undefined {
    return this.args[key];
  }
}

function toNumber(v: Arg | undefined, where: string): number {
  if (typeof v === 'number') return v;
  if (v === 'inf') return Number.POSITIVE_INFINITY;
  if (v === '-inf') return Number.NEGATIVE_INFINITY;
  if (v === 'nan') return Number.NaN;
  throw new Error(`${where}: expected a number, got ${JSON.stringify(v)}`);
}

// ---------------------------------------------------------------------------------------------------------------
// the op table: case op name -> the library call with the same meaning as the Python reference

type Result = Tensor | Tensor[];
type Op = (x: readonly Tensor[], a: Args) => Result;

function at(x: readonly Tensor[], i: number): Tensor {
  const t = x[i];
  if (t === undefined) throw new Error(`input ${i} is missing`);
  return t;
}

function onlyTensor(b: Tensor | number): Tensor {
  if (typeof b === 'number') throw new TypeError('this op takes a tensor operand');
  return b;
}

const BINARY: Readonly<Record<string, (a: Tensor, b: Tensor | number, alpha?: number) => Tensor>> = {
  add: (a, b, alpha) => a.add(b, alpha),
  sub: (a, b, alpha) => a.sub(b, alpha),
  mul: (a, b) => a.mul(b),
  div: (a, b) => a.div(b),
  pow: (a, b) => a.pow(b),
  minimum: (a, b) => a.minimum(b),
  maximum: (a, b) => a.maximum(b),
  eq: (a, b) => a.eq(b),
  ne: (a, b) => a.ne(b),
  lt: (a, b) => a.lt(b),
  le: (a, b) => a.le(b),
  gt: (a, b) => a.gt(b),
  ge: (a, b) => a.ge(b),
  logicalAnd: (a, b) => a.logicalAnd(onlyTensor(b)),
  logicalOr: (a, b) => a.logicalOr(onlyTensor(b)),
  logicalXor: (a, b) => a.logicalXor(onlyTensor(b)),
};

const UNARY: Readonly<Record<string, (a: Tensor) => Tensor>> = {
  exp: (a) => a.exp(),
  log: (a) => a.log(),
  log1p: (a) => a.log1p(),
  expm1: (a) => a.expm1(),
  sqrt: (a) => a.sqrt(),
  rsqrt: (a) => a.rsqrt(),
  neg: (a) => a.neg(),
  abs: (a) => a.abs(),
  square: (a) => a.square(),
  reciprocal: (a) => a.reciprocal(),
  sign: (a) => a.sign(),
  sin: (a) => a.sin(),
  cos: (a) => a.cos(),
  floor: (a) => a.floor(),
  ceil: (a) => a.ceil(),
  round: (a) => a.round(),
  logicalNot: (a) => a.logicalNot(),
  isnan: (a) => a.isnan(),
  isinf: (a) => a.isinf(),
  isfinite: (a) => a.isfinite(),
  silu: (a) => a.silu(),
  relu: (a) => a.relu(),
  tanh: (a) => a.tanh(),
  sigmoid: (a) => a.sigmoid(),
  logsigmoid: (a) => a.logsigmoid(),
};

function lookup<F>(table: Readonly<Record<string, F>>, name: string): F {
  const fn = table[name];
  if (fn === undefined) throw new Error(`no function '${name}' in the test's table`);
  return fn;
}

const pair = (r: { values: Tensor; indices: Tensor }): Tensor[] => [r.values, r.indices];
const reduceOpts = (a: Args): torch.ReduceOptions => ({ keepdim: a.bool('keepdim'), dtype: a.dtype('dtype') });

/** In-place ops run on a clone of input 0 and must return that same tensor. */
function inplace(fn: (target: Tensor, x: readonly Tensor[], a: Args) => Tensor): Op {
  return (x, a) => {
    const target = at(x, 0).clone();
    const returned = fn(target, x, a);
    assert.equal(returned, target, 'an in-place op returns this');
    return target;
  };
}

const OPS: Readonly<Record<string, Op>> = {
  // matrix products and layers
  matmul: (x) => at(x, 0).matmul(at(x, 1)),
  mm: (x) => at(x, 0).mm(at(x, 1)),
  bmm: (x) => at(x, 0).bmm(at(x, 1)),
  linear: (x) => torch.linear(at(x, 0), at(x, 1), x[2] ?? null),
  embedding: (x) => torch.embedding(at(x, 0), at(x, 1)),
  outer: (x) => torch.outer(at(x, 0), at(x, 1)),
  einsum: (x, a) => torch.einsum(a.str('equation'), ...x),
  // elementwise
  binary: (x, a) => lookup(BINARY, a.str('fn'))(at(x, 0), at(x, 1), a.optNum('alpha')),
  binaryScalar: (x, a) => lookup(BINARY, a.str('fn'))(at(x, 0), a.num('scalar'), a.optNum('alpha')),
  unary: (x, a) => lookup(UNARY, a.str('fn'))(at(x, 0)),
  clamp: (x, a) => at(x, 0).clamp(a.optNum('min'), a.optNum('max')),
  lerp: (x, a) => at(x, 0).lerp(at(x, 1), a.num('weight')),
  where: (x) => torch.where(at(x, 0), at(x, 1), at(x, 2)),
  whereScalar: (x, a) => torch.where(at(x, 0), at(x, 1), a.num('b')),
  whereScalarA: (x, a) => torch.where(at(x, 0), a.num('a'), at(x, 1)),
  whereScalars: (x, a) => torch.where(at(x, 0), a.num('a'), a.num('b')),
  // reductions
  reduceBool: (x, a) => {
    const dim = a.optNum('dim');
    return a.str('fn') === 'all' ? at(x, 0).all(dim, a.bool('keepdim')) : at(x, 0).any(dim, a.bool('keepdim'));
  },
  sum: (x, a) => at(x, 0).sum(a.dims('dim'), reduceOpts(a)),
  mean: (x, a) => at(x, 0).mean(a.dims('dim'), reduceOpts(a)),
  maxDim: (x, a) => pair(at(x, 0).max(a.num('dim'), a.bool('keepdim'))),
  minDim: (x, a) => pair(at(x, 0).min(a.num('dim'), a.bool('keepdim'))),
  maxAll: (x) => at(x, 0).max(),
  minAll: (x) => at(x, 0).min(),
  argmax: (x, a) => at(x, 0).argmax(a.optNum('dim'), a.bool('keepdim')),
  argmin: (x, a) => at(x, 0).argmin(a.optNum('dim'), a.bool('keepdim')),
  amax: (x, a) => at(x, 0).amax(a.dims('dim'), a.bool('keepdim')),
  amin: (x, a) => at(x, 0).amin(a.dims('dim'), a.bool('keepdim')),
  logsumexp: (x, a) => at(x, 0).logsumexp(a.dims('dim') ?? [], a.bool('keepdim')),
  norm: (x, a) => at(x, 0).norm(a.num('p'), a.dims('dim'), { keepdim: a.bool('keepdim') }),
  var: (x, a) => at(x, 0).var(a.dims('dim'), { correction: a.optNum('correction'), keepdim: a.bool('keepdim') }),
  std: (x, a) => at(x, 0).std(a.dims('dim'), { correction: a.optNum('correction'), keepdim: a.bool('keepdim') }),
  cumsum: (x, a) => at(x, 0).cumsum(a.num('dim'), a.dtype('dtype')),
  cumprod: (x, a) => at(x, 0).cumprod(a.num('dim'), a.dtype('dtype')),
  // softmax and activations
  softmax: (x, a) => at(x, 0).softmax(a.num('dim'), a.dtype('dtype')),
  logSoftmax: (x, a) => at(x, 0).logSoftmax(a.num('dim'), a.dtype('dtype')),
  gelu: (x, a) => {
    const approximate = a.raw('approximate');
    if (approximate === undefined) return at(x, 0).gelu();
    assert.ok(approximate === 'none' || approximate === 'tanh');
    return at(x, 0).gelu(approximate);
  },
  softplus: (x, a) => at(x, 0).softplus(a.optNum('beta'), a.optNum('threshold')),
  dropout: (x, a) => at(x, 0).dropout(a.num('p'), a.bool('train', true)),
  // indexing
  gather: (x, a) => at(x, 0).gather(a.num('dim'), at(x, 1)),
  scatter: (x, a) => at(x, 0).scatter(a.num('dim'), at(x, 1), at(x, 2)),
  scatterScalar: (x, a) => at(x, 0).scatter(a.num('dim'), at(x, 1), a.num('value')),
  scatterAdd: (x, a) => at(x, 0).scatterAdd(a.num('dim'), at(x, 1), at(x, 2)),
  indexSelect: (x, a) => at(x, 0).indexSelect(a.num('dim'), at(x, 1)),
  maskedFill: (x, a) => {
    const value = a.raw('value');
    return at(x, 0).maskedFill(at(x, 1), typeof value === 'boolean' ? value : a.num('value'));
  },
  maskedFillTensor: (x) => at(x, 0).maskedFill(at(x, 1), at(x, 2)),
  maskedSelect: (x) => at(x, 0).maskedSelect(at(x, 1)),
  nonzero: (x) => at(x, 0).nonzero(),
  index: (x, a) => {
    const pattern = a.raw('pattern');
    assert.ok(Array.isArray(pattern));
    let next = 1;
    return at(x, 0).index(pattern.map((p) => (p === null ? null : at(x, next++))));
  },
  tril: (x, a) => at(x, 0).tril(a.optNum('diagonal')),
  triu: (x, a) => at(x, 0).triu(a.optNum('diagonal')),
  // joins and splits
  cat: (x, a) => torch.cat(x, a.num('dim')),
  stack: (x, a) => torch.stack(x, a.num('dim')),
  split: (x, a) => at(x, 0).split(a.dims('size') ?? [], a.num('dim')),
  chunk: (x, a) => at(x, 0).chunk(a.num('chunks'), a.num('dim')),
  unbind: (x, a) => at(x, 0).unbind(a.num('dim')),
  // shape and layout
  reshape: (x, a) => at(x, 0).reshape(a.list('shape')),
  reshapeT: (x, a) => at(x, 0).transpose(0, 2).reshape(a.list('shape')),
  view: (x, a) => at(x, 0).view(a.list('shape')),
  transpose: (x, a) => at(x, 0).transpose(a.num('dim0'), a.num('dim1')),
  t: (x) => at(x, 0).t(),
  permute: (x, a) => at(x, 0).permute(a.list('order')),
  contiguousT: (x) => {
    const tr = at(x, 0).transpose(0, 1);
    assert.equal(tr.isContiguous, false);
    const c = tr.contiguous();
    assert.equal(c.isContiguous, true);
    return c;
  },
  unsqueeze: (x, a) => at(x, 0).unsqueeze(a.num('dim')),
  squeeze: (x, a) => at(x, 0).squeeze(a.dims('dim')),
  expand: (x, a) => at(x, 0).expand(a.list('shape')),
  narrow: (x, a) => at(x, 0).narrow(a.num('dim'), a.num('start'), a.num('length')),
  slice: (x, a) => at(x, 0).slice(a.num('dim'), a.optNum('start'), a.optNum('end'), a.optNum('step')),
  select: (x, a) => at(x, 0).select(a.num('dim'), a.num('index')),
  flatten: (x, a) => at(x, 0).flatten(a.optNum('startDim'), a.optNum('endDim')),
  flip: (x, a) => at(x, 0).flip(a.dims('dims') ?? []),
  roll: (x, a) => at(x, 0).roll(a.dims('shifts') ?? [], a.dims('dims') ?? []),
  repeat: (x, a) => at(x, 0).repeat(a.list('repeats')),
  repeatInterleave: (x, a) => at(x, 0).repeatInterleave(a.num('repeats'), a.num('dim')),
  pad: (x, a) => at(x, 0).pad(a.list('padding'), a.optNum('value')),
  // normalisation, attention, loss
  rmsNorm: (x, a) => torch.rmsNorm(at(x, 0), a.list('shape'), x[1] ?? null, a.optNum('eps')),
  layerNorm: (x, a) => torch.layerNorm(at(x, 0), a.list('shape'), x[1] ?? null, x[2] ?? null, a.optNum('eps')),
  sdpa: (x, a) =>
    torch.scaledDotProductAttention(at(x, 0), at(x, 1), at(x, 2), { causal: a.bool('causal'), scale: a.optNum('scale') }),
  sdpaMask: (x, a) => torch.scaledDotProductAttention(at(x, 0), at(x, 1), at(x, 2), { mask: at(x, 3), causal: a.bool('causal') }),
  crossEntropy: (x, a) => {
    const reduction = a.str('reduction', 'mean');
    assert.ok(reduction === 'mean' || reduction === 'sum' || reduction === 'none');
    return torch.crossEntropy(at(x, 0), at(x, 1), {
      reduction,
      ignoreIndex: a.optNum('ignoreIndex'),
      labelSmoothing: a.optNum('labelSmoothing'),
    });
  },
  // sorting
  topk: (x, a) =>
    pair(at(x, 0).topk(a.num('k'), { dim: a.optNum('dim'), largest: a.bool('largest', true), sorted: a.bool('sorted', true) })),
  sort: (x, a) => pair(at(x, 0).sort({ dim: a.optNum('dim'), descending: a.bool('descending'), stable: a.bool('stable') })),
  argsort: (x, a) => at(x, 0).argsort({ dim: a.optNum('dim'), descending: a.bool('descending'), stable: a.bool('stable') }),
  // dtype conversion
  to: (x, a) => at(x, 0).to(a.str('dtype') as DType),
  toTo: (x, a) =>
    at(x, 0)
      .to(a.str('dtype') as DType)
      .to(a.str('back') as DType),
  // seeded random streams
  randn: (_x, a) => torch.randn(a.list('shape'), { generator: new torch.Generator(a.num('seed')) }),
  rand: (_x, a) => torch.rand(a.list('shape'), { generator: new torch.Generator(a.num('seed')) }),
  randint: (_x, a) =>
    torch.randint(a.num('low'), a.num('high'), a.list('shape'), { generator: new torch.Generator(a.num('seed')) }),
  multinomial: (x, a) =>
    torch.multinomial(at(x, 0), a.num('n'), {
      replacement: a.bool('replacement'),
      generator: new torch.Generator(a.num('seed')),
    }),
  // in place
  copy_: inplace((t, x) => t.copy_(at(x, 1))),
  indexCopy_: inplace((t, x, a) => t.indexCopy_(a.num('dim'), at(x, 1), at(x, 2))),
  add_: inplace((t, x, a) => t.add_(at(x, 1), a.optNum('alpha'))),
  addScalar_: inplace((t, _x, a) => t.add_(a.num('scalar'), a.optNum('alpha'))),
  sub_: inplace((t, x, a) => t.sub_(at(x, 1), a.optNum('alpha'))),
  mul_: inplace((t, x) => t.mul_(at(x, 1))),
  mulScalar_: inplace((t, _x, a) => t.mul_(a.num('scalar'))),
  div_: inplace((t, x) => t.div_(at(x, 1))),
  zero_: inplace((t) => t.zero_()),
  fill_: inplace((t, _x, a) => t.fill_(a.num('value'))),
  clamp_: inplace((t, _x, a) => t.clamp_(a.optNum('min'), a.optNum('max'))),
  maskedFill_: inplace((t, x, a) => t.maskedFill_(at(x, 1), a.num('value'))),
  indexPut_: inplace((t, x, a) => t.indexPut_([at(x, 1), at(x, 2)], at(x, 3), a.bool('accumulate'))),
  addcmul_: inplace((t, x, a) => t.addcmul_(at(x, 1), at(x, 2), a.optNum('value'))),
  lerp_: inplace((t, x, a) => t.lerp_(at(x, 1), a.num('weight'))),
};

// ---------------------------------------------------------------------------------------------------------------
// comparison

function tolerance(dtype: DType): { rtol: number; atol: number } {
  switch (dtype) {
    case 'float64':
      return { rtol: 1e-10, atol: 1e-12 };
    case 'float32':
      return { rtol: 1e-5, atol: 1e-5 };
    case 'float16':
      return { rtol: 2e-3, atol: 1e-3 };
    case 'bfloat16':
      return { rtol: 1.6e-2, atol: 1e-2 };
    default:
      return { rtol: 0, atol: 0 };
  }
}

function assertMatches(actual: Tensor, expected: Tensor, label: string): void {
  assert.deepEqual([...actual.shape], [...expected.shape], `${label}: shape`);
  assert.equal(actual.dtype, expected.dtype, `${label}: dtype`);
  const a = Array.from(actual.toTypedArray() as ArrayLike<number | bigint>, Number);
  const e = Array.from(expected.toTypedArray() as ArrayLike<number | bigint>, Number);
  const { rtol, atol } = tolerance(expected.dtype);
  for (let i = 0; i < e.length; i++) {
    const av = a[i] as number;
    const ev = e[i] as number;
    if (Number.isNaN(ev) ? Number.isNaN(av) : av === ev || Math.abs(av - ev) <= atol + rtol * Math.abs(ev)) continue;
    assert.fail(`${label}: element ${i} is ${av}, expected ${ev} (rtol ${rtol}, atol ${atol}, ${expected.dtype})`);
  }
}

function runCase(c: Case): void {
  const op = OPS[c.op];
  if (op === undefined) throw new Error(`case ${c.name}: no op '${c.op}' in the test's table`);
  const args = new Args(c.args, c.name);
  let inputs = c.inputs.map(fixture);
  let outputs: Tensor[];
  if (c.grad !== undefined) {
    const gradInputs = c.grad.inputs;
    inputs = inputs.map((t, i) => (gradInputs.includes(i) ? t.detach().clone().requiresGrad_() : t));
    const out = op(inputs, args);
    assert.ok(!Array.isArray(out), 'a grad case has one output');
    out.backward(fixture(c.grad.upstream));
    outputs = [
      out.detach(),
      ...gradInputs.map((i) => {
        const g = at(inputs, i).grad;
        assert.ok(g !== null, `input ${i} has a gradient`);
        return g;
      }),
    ];
  } else {
    const out = op(inputs, args);
    outputs = Array.isArray(out) ? out : [out];
  }
  assert.equal(outputs.length, c.outputs.length, `${c.name}: number of outputs`);
  c.outputs.forEach((key, i) => {
    const actual = at(outputs, i);
    const label = c.grad !== undefined && i > 0 ? `${c.name} grad of input ${c.grad.inputs[i - 1]}` : `${c.name} output ${i}`;
    assertMatches(actual, fixture(key), label);
    const strides = c.strides?.[i];
    if (strides !== undefined) assert.deepEqual(actual.strides, strides, `${label}: strides`);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// one test per op family, one subtest per case

const families = new Map<string, Case[]>();
for (const c of cases) {
  const list = families.get(c.family) ?? [];
  list.push(c);
  families.set(c.family, list);
}

test('fixtures cover every op family', () => {
  assert.ok(cases.length > 300, `${cases.length} cases`);
  for (const family of ['matmul', 'elementwise', 'promotion', 'compare', 'reduce', 'softmax', 'index', 'join', 'shape']) {
    assert.ok(families.has(family), family);
  }
  for (const family of ['activation', 'norm', 'attention', 'sort', 'loss', 'dtype', 'inplace', 'random', 'grad']) {
    assert.ok(families.has(family), family);
  }
});

for (const [family, list] of families) {
  test(`ops: ${family}`, async (t) => {
    for (const c of list) {
      await t.test(c.name, () => {
        const live = torch.liveTensorCount();
        torch.scope(() => runCase(c));
        assert.equal(torch.liveTensorCount(), live, `${c.name}: tensors leaked`);
      });
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// random functions: statistics, and reproducible streams

function values(t: Tensor): number[] {
  return Array.from(t.toTypedArray() as ArrayLike<number | bigint>, Number);
}

test('random: multinomial frequencies follow the probabilities', () => {
  torch.scope(() => {
    const probs = [0.1, 0.2, 0.3, 0.4];
    const n = 20000;
    const draws = torch.multinomial(torch.tensor(probs), n, { replacement: true, generator: new torch.Generator(7) });
    assert.deepEqual([...draws.shape], [n]);
    assert.equal(draws.dtype, 'int64');
    const counts = [0, 0, 0, 0];
    for (const v of values(draws)) counts[v] = (counts[v] ?? 0) + 1;
    probs.forEach((p, i) => {
      const freq = (counts[i] ?? 0) / n;
      assert.ok(Math.abs(freq - p) < 0.015, `category ${i}: frequency ${freq}, expected ${p}`);
    });
    // unnormalised weights, batched rows, zero weights never drawn
    const rows = torch.tensor([
      [0, 3, 1],
      [5, 0, 0],
    ]);
    const batched = torch.multinomial(rows, 4000, { replacement: true, generator: new torch.Generator(8) });
    assert.deepEqual([...batched.shape], [2, 4000]);
    const [r0, r1] = batched.unbind(0).map(values) as [number[], number[]];
    assert.ok(!r0.includes(0), 'row 0 never draws a zero-weight category');
    assert.ok(
      r1.every((v) => v === 0),
      'row 1 draws only category 0',
    );
    const freq1 = r0.filter((v) => v === 1).length / r0.length;
    assert.ok(Math.abs(freq1 - 0.75) < 0.03, `row 0: frequency of 1 is ${freq1}`);
  });
});

test('random: multinomial without replacement draws distinct categories', () => {
  torch.scope(() => {
    const gen = new torch.Generator(11);
    const probs = torch.tensor([0.05, 0.5, 0.05, 0.2, 0.2]);
    let firstIsOne = 0;
    for (let i = 0; i < 200; i++) {
      const draw = values(torch.multinomial(probs, 5, { generator: gen }));
      assert.deepEqual(
        [...draw].sort((p, q) => p - q),
        [0, 1, 2, 3, 4],
      );
      if (draw[0] === 1) firstIsOne++;
    }
    assert.ok(Math.abs(firstIsOne / 200 - 0.5) < 0.12, `first draw is category 1 in ${firstIsOne}/200`);
  });
});

test('random: randn, rand and randint moments and ranges', () => {
  torch.scope(() => {
    const gen = new torch.Generator(123);
    const n = torch.randn([20000], { generator: gen });
    assert.ok(Math.abs(n.mean().item()) < 0.03, `randn mean ${n.mean().item()}`);
    assert.ok(Math.abs(n.std().item() - 1) < 0.03, `randn std ${n.std().item()}`);
    const u = torch.rand([20000], { generator: gen });
    assert.ok(u.min().item() >= 0 && u.max().item() < 1);
    assert.ok(Math.abs(u.mean().item() - 0.5) < 0.01, `rand mean ${u.mean().item()}`);
    assert.ok(Math.abs(u.var().item() - 1 / 12) < 0.005, `rand var ${u.var().item()}`);
    const r = torch.randint(-2, 3, [5000], { generator: gen });
    assert.equal(r.dtype, 'int64');
    assert.deepEqual(
      [...new Set(values(r))].sort((p, q) => p - q),
      [-2, -1, 0, 1, 2],
    );
    const b = torch.randn([4000], { dtype: 'bfloat16', generator: gen });
    assert.equal(b.dtype, 'bfloat16');
    assert.ok(Math.abs(b.float().mean().item()) < 0.06);
    const normal = torch.empty([20000]).normal_(3, 0.5, gen);
    assert.ok(Math.abs(normal.mean().item() - 3) < 0.02 && Math.abs(normal.std().item() - 0.5) < 0.02);
    const uniform = torch.empty([20000]).uniform_(-2, 4, gen);
    assert.ok(uniform.min().item() >= -2 && uniform.max().item() < 4);
    assert.ok(Math.abs(uniform.mean().item() - 1) < 0.05);
  });
});

test('random: the same seed gives the same stream, different seeds differ', () => {
  torch.scope(() => {
    const a = new torch.Generator(2024);
    const b = new torch.Generator(2024);
    const c = new torch.Generator(2025);
    const a1 = values(torch.randn([16], { generator: a }));
    const b1 = values(torch.randn([16], { generator: b }));
    const c1 = values(torch.randn([16], { generator: c }));
    assert.deepEqual(a1, b1);
    assert.notDeepEqual(a1, c1);
    const a2 = values(torch.randn([16], { generator: a }));
    assert.notDeepEqual(a1, a2, 'the stream advances');
    assert.deepEqual(a2, values(torch.randn([16], { generator: b })));
    const pa = torch.tensor([1, 2, 3, 4]);
    assert.deepEqual(
      values(torch.multinomial(pa, 50, { replacement: true, generator: new torch.Generator(5) })),
      values(torch.multinomial(pa, 50, { replacement: true, generator: new torch.Generator(5) })),
    );
    torch.manualSeed(77);
    const d1 = values(torch.rand([8]));
    torch.manualSeed(77);
    assert.deepEqual(values(torch.rand([8])), d1);
    // uniformPerGenerator: one rand([1], float64) from each generator (null: the default one), in one call
    assert.equal(a.device, 'cpu');
    const gens = [new torch.Generator(9), null, new torch.Generator(10)];
    torch.manualSeed(78);
    const draws = values(torch.uniformPerGenerator(gens));
    torch.manualSeed(78);
    const one = (g: torch.Generator | null) => values(torch.rand([1], { dtype: 'float64', ...(g ? { generator: g } : {}) }))[0];
    assert.deepEqual(draws, [one(new torch.Generator(9)), one(null), one(new torch.Generator(10))]);
  });
});

test('random: dropout in training zeroes about p and rescales the rest', () => {
  torch.scope(() => {
    torch.manualSeed(3);
    const x = torch.ones([20000]);
    const y = x.dropout(0.3, true);
    const v = values(y);
    const zeros = v.filter((e) => e === 0).length / v.length;
    assert.ok(Math.abs(zeros - 0.3) < 0.015, `zero fraction ${zeros}`);
    const scaled = 1 / 0.7;
    assert.ok(v.every((e) => e === 0 || Math.abs(e - scaled) < 1e-6));
  });
});
