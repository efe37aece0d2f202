// Three ways to run a mixture-of-experts layer's experts on the CPU: `node --import tsx bench/moe-experts.bench.ts`.
//
//   grouped     src/model/moe.ts's sparseMoe: (token, expert) pairs sorted by expert, each expert's rows gathered and
//               multiplied once, weighted and added back with index_put_ (the run lengths read back to the host);
//               its products through libtorch (BLAS: the training layout) or, as the inference layout runs them on
//               an AVX2 CPU, torch.packedLinear on packed copies (up to 64 rows; more go to BLAS)
//   per token   each token's k experts one row at a time (the loop the grouped form replaces)
//   all experts every expert over every token (E/k times the multiply-adds, no sort and no read-back), then each
//               token's k outputs picked and weighted
// over one random block (float32, the router included in each), for several token counts: 1 to 32 rows are decode
// steps of that many sequences, 256 a prefill. Prints a table of milliseconds per layer and one JSON line.
// Threads default to 1: libtorch's BLAS with 2+ threads on a CPU shared with other work is dominated by waiting.
import os from 'node:os';
import { parseArgs } from 'node:util';
import { attachPackedWeights } from '../src/model/inference-layout.js';
import { plainLinear } from '../src/model/linear.js';
import { type Expert, route, type SparseMoeBlock, sparseMoe } from '../src/model/moe.js';
import * as torch from '../src/torch/index.js';
import { fmt, median, positiveFlag, r2, table } from './harness.js';

const { values: flags } = parseArgs({
  options: {
    tokens: { type: 'string', default: '1,8,32,256' },
    hidden: { type: 'string', default: '1024' },
    width: { type: 'string', default: '384' },
    experts: { type: 'string', default: '32' },
    k: { type: 'string', default: '4' },
    samples: { type: 'string', default: '7' },
    threads: { type: 'string', default: '1' },
    help: { type: 'boolean', default: false },
  },
});
if (flags.help) {
  console.log(`MoE expert computation: grouped vs per token vs all experts, ms per layer (float32, CPU).
  --tokens LIST   tokens per forward (default 1,8,32,256)
  --hidden N      hidden size (default 1024)
  --width N       each expert's SwiGLU width, moe_intermediate_size (default 384)
  --experts N     experts (default 32)
  --k N           experts per token (default 4)
  --samples N     timed samples per way (default 7)
  --threads N     intra-op threads (default 1)`);
  process.exit(0);
}
const hidden = positiveFlag('hidden', flags.hidden);
const width = positiveFlag('width', flags.width);
const numExperts = positiveFlag('experts', flags.experts);
const topK = positiveFlag('k', flags.k);
const samples = positiveFlag('samples', flags.samples);
const tokenCounts = flags.tokens.split(',').map((t) => positiveFlag('tokens', t));
torch.setNumThreads(positiveFlag('threads', flags.threads));
const started = performance.now();

const generator = new torch.Generator(0);
const weight = (rows: number, cols: number) => torch.keep(torch.randn([rows, cols], { generator }).mul_(0.05));
const experts: Expert[] = Array.from({ length: numExperts }, () => ({
  gateProj: plainLinear(weight(width, hidden)),
  upProj: plainLinear(weight(width, hidden)),
  downProj: plainLinear(weight(hidden, width)),
}));
const block: SparseMoeBlock = {
  router: plainLinear(weight(numExperts, hidden)),
  experts,
  topK,
  normTopkProb: true,
  shared: null,
};
// the same weights with packed copies, as the inference layout keeps them (none where the CPU has no AVX2)
const packedBlock: SparseMoeBlock = {
  ...block,
  experts: experts.map((e) => ({
    gateProj: plainLinear(e.gateProj.weight),
    upProj: plainLinear(e.upProj.weight),
    downProj: plainLinear(e.downProj.weight),
  })),
};
const packed = attachPackedWeights(
  packedBlock.experts.flatMap((e) => [e.gateProj, e.upProj, e.downProj]),
  'float32',
  'cpu',
);
const swiGlu = (x: torch.Tensor, e: Expert) =>
  torch.linear(torch.linear(x, e.gateProj.weight).silu().mul(torch.linear(x, e.upProj.weight)), e.downProj.weight);

function perToken(h: torch.Tensor): torch.Tensor {
  const flat = h.reshape([-1, hidden]);
  const { experts: chosen, weights } = route(block, flat);
  const ids = chosen.toArray() as number[][];
  const rows = ids.map((row, n) => {
    const x = flat.narrow(0, n, 1);
    return row.reduce<torch.Tensor | null>((sum, e, j) => {
      const y = swiGlu(x, experts[e] as Expert).mul(weights.narrow(0, n, 1).narrow(1, j, 1));
      return sum === null ? y : sum.add(y);
    }, null) as torch.Tensor;
  });
  return torch.cat(rows, 0).reshape(h.shape);
}

function allExperts(h: torch.Tensor): torch.Tensor {
  const flat = h.reshape([-1, hidden]);
  const { experts: chosen, weights } = route(block, flat);
  const outputs = torch.stack(
    experts.map((e) => swiGlu(flat, e)),
    1,
  ); // [N, E, hidden]
  const picked = outputs.gather(1, chosen.unsqueeze(-1).expand([flat.size(0), topK, hidden])); // [N, k, hidden]
  return picked.mul(weights.unsqueeze(-1)).sum(1).reshape(h.shape);
}

const ways: [string, (h: torch.Tensor) => torch.Tensor][] = [
  ['grouped', (h) => sparseMoe(block, h)],
  ...(packed.length > 0
    ? [['grouped packed', (h) => sparseMoe(packedBlock, h)] as [string, (h: torch.Tensor) => torch.Tensor]]
    : []),
  ['per token', perToken],
  ['all experts', allExperts],
];
const results: Record<string, Record<string, number>> = {};
const rows: string[][] = [];
torch.noGrad(() => {
  for (const tokens of tokenCounts) {
    const h = torch.keep(torch.randn([1, tokens, hidden], { generator }));
    const reference = torch.scope(() => torch.keep(sparseMoe(block, h)));
    const times = new Map<string, number[]>(ways.map(([name]) => [name, []]));
    for (const [name, fn] of ways) {
      const diff = torch.scope(() => fn(h).sub(reference).abs().max().item());
      if (!(diff < 1e-4)) throw new Error(`${name} differs from grouped by ${diff} at ${tokens} tokens`);
    }
    // the ways take turns sample by sample
    for (let s = 0; s < samples; s++) {
      for (const [name, fn] of ways) {
        const t0 = performance.now();
        torch.scope(() => fn(h));
        times.get(name)?.push(performance.now() - t0);
      }
    }
    const ms = Object.fromEntries(ways.map(([name]) => [name, median(times.get(name) as number[])]));
    results[tokens] = Object.fromEntries(Object.entries(ms).map(([k, v]) => [k, r2(v)]));
    const best = Object.entries(ms).reduce((a, b) => (b[1] < a[1] ? b : a))[0];
    rows.push([String(tokens), ...ways.map(([name]) => fmt(ms[name] as number)), best]);
    reference.dispose();
    h.dispose();
  }
});
table(
  `MoE experts, ms per layer (hidden ${hidden}, ${numExperts} experts of width ${width}, top-${topK}, float32, ${torch.getNumThreads()} threads)`,
  ['tokens', ...ways.map(([name]) => name), 'fastest'],
  rows,
);
console.log(
  JSON.stringify({
    bench: 'moe-experts',
    cpu: os.cpus()[0]?.model ?? 'unknown',
    threads: torch.getNumThreads(),
    shape: { hidden, width, experts: numExperts, k: topK },
    ms: results,
    wall_s: r2((performance.now() - started) / 1e3),
  }),
);
