// Which of a train step's ops give other bits at another intra-op thread count (trainer.bitwise_on_policy's
// repeatability: src/rft/trainer/trainer-threads.ts).
//
//   node --import tsx bench/thread-count-bits.bench.ts [--threads 1,2,4]
//
// Each op runs on the same random float32 inputs at every thread count (torch.setNumThreads); the table counts the
// output elements whose bits differ from the first count's:
//   forward product    Y = X W^T              [T, in] x [in, out]: sums over in
//   input gradient     dX = dY W              sums over out
//   weight gradient    dW = dY^T X            sums over the T tokens
//   token sum          dY.sum(0)              a bias's gradient
//   attention backward softmax(q k^T / 4, causal) v → dq, dk, dv through autograd (the model's short-attention
//                      products, src/model/attention.ts: the gradient the batch-invariant forward takes), 2 query heads
//                      over 1 kv head, head dim 16, S queries; and the masked softmax's backward alone (dscores) on
//                      random scores: dq and dk go through it, dv does not
// Not timings: a count of unequal bits per op and shape. Prints a table and one JSON line.
import { parseArgs } from 'node:util';
import * as torch from '../src/torch/index.js';

const { values: flags } = parseArgs({ options: { threads: { type: 'string', default: '1,2,4' } } });
const counts = (flags.threads as string).split(',').map(Number);
if (counts.length < 2 || counts.some((n) => !Number.isInteger(n) || n < 1))
  throw new Error(`--threads: give two or more thread counts like 1,2,4; got '${flags.threads}'`);

const generator = new torch.Generator(9);
const random = (shape: number[]) => torch.keep(torch.empty(shape, { dtype: 'float32' }).uniform_(-1, 1, generator));
const bits = (t: torch.Tensor): Float32Array => t.contiguous().toTypedArray() as Float32Array;
const unequal = (a: Float32Array, b: Float32Array) => a.reduce((n, x, i) => n + (Object.is(x, b[i]) ? 0 : 1), 0);

/** Per op output, the elements that differ from the first thread count's, at each further count. */
function compare(ops: () => Record<string, Float32Array>): Record<string, number[]> {
  const results = counts.map((n) => {
    torch.setNumThreads(n);
    return torch.scope(ops);
  });
  const first = results[0] as Record<string, Float32Array>;
  return Object.fromEntries(
    Object.entries(first).map(([name, out]) => [name, results.slice(1).map((r) => unequal(out, r[name] as Float32Array))]),
  );
}

const rows: { case: string; op: string; elements: number; unequal: number[] }[] = [];
const record = (label: string, sizes: Record<string, number>, found: Record<string, number[]>) => {
  for (const [op, n] of Object.entries(found)) rows.push({ case: label, op, elements: sizes[op] as number, unequal: n });
};

for (const [tokens, width] of [
  [64, 32],
  [256, 32],
  [1024, 32],
  [4096, 64],
  [4096, 256],
] as const) {
  const x = random([tokens, width]);
  const w = random([width, width]);
  const dy = random([tokens, width]);
  const found = compare(() =>
    torch.noGrad(() => ({
      'forward product': bits(torch.linear(x, w)),
      'input gradient': bits(dy.matmul(w)),
      'weight gradient': bits(dy.t().matmul(x)),
      'token sum': bits(dy.sum([0])),
    })),
  );
  const sizes = {
    'forward product': tokens * width,
    'input gradient': tokens * width,
    'weight gradient': width * width,
    'token sum': width,
  };
  record(`T=${tokens} width ${width}`, sizes, found);
}

for (const queries of [12, 20, 40, 64]) {
  const q = random([1, 1, 2 * queries, 16]);
  const k = random([1, 1, queries, 16]);
  const v = random([1, 1, queries, 16]);
  const dOut = random([1, 1, 2 * queries, 16]);
  const scoresIn = random([1, 1, 2, queries, queries]);
  const dWeights = random([1, 1, 2, queries, queries]);
  const causal = torch.keep(torch.ones([queries, queries], { dtype: 'bool' }).tril(0).view([1, 1, 1, queries, queries]));
  const found = compare(() => {
    const [qq, kk, vv] = [q, k, v].map((t) => t.detach().clone().requiresGrad_()) as [torch.Tensor, torch.Tensor, torch.Tensor];
    const scores = qq.matmul(kk.transpose(-1, -2)).mul(0.25).view([1, 1, 2, queries, queries]);
    const weights = scores.maskedFill(causal.logicalNot(), Number.NEGATIVE_INFINITY).softmax(-1);
    weights
      .view([1, 1, 2 * queries, queries])
      .matmul(vv)
      .mul(dOut)
      .sum()
      .backward();
    const scores2 = scoresIn.detach().clone().requiresGrad_();
    scores2.maskedFill(causal.logicalNot(), Number.NEGATIVE_INFINITY).softmax(-1).mul(dWeights).sum().backward();
    return {
      dq: bits(qq.grad as torch.Tensor),
      dk: bits(kk.grad as torch.Tensor),
      dv: bits(vv.grad as torch.Tensor),
      dscores: bits(scores2.grad as torch.Tensor),
    };
  });
  record(
    `attention S=${queries}`,
    { dq: 2 * queries * 16, dk: queries * 16, dv: queries * 16, dscores: 2 * queries * queries },
    found,
  );
}

const header = `${'case'.padEnd(22)}${'op'.padEnd(18)}${'elements'.padStart(9)}  ${counts
  .slice(1)
  .map((n) => `unequal ${counts[0]}v${n}`.padStart(13))
  .join('')}`;
console.log(header);
for (const r of rows)
  console.log(
    `${r.case.padEnd(22)}${r.op.padEnd(18)}${String(r.elements).padStart(9)}  ${r.unequal.map((n) => String(n).padStart(13)).join('')}`,
  );
console.log(JSON.stringify({ bench: 'thread-count-bits', threads: counts, rows }));
