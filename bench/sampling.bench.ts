// The sampler's top-p step next to the way transformers samples top-p: `npm run bench:sampling`.
//
// Ours: sampleTokens (src/engine/sampling.ts) on a SamplerBatch prepared ahead, as the engine runs it: top-p over the
// largest 1,024 logits first, more only while a row's nucleus reaches past them (on the CPU; a GPU sorts at once).
// The alternative: transformers' TopPLogitsWarper (sort ascending, cumulative softmax, drop the tail at 1 - p, scatter
// back) followed by softmax and torch.multinomial, run here op for op on the same libtorch (the kernels PyTorch
// calls; a Python side would only add its per-op overhead to calls of 1-300 ms). Logits [B, 151,936] (Qwen's
// vocabulary) drawn as randn x spread: spread 0.01 is a flat row (an untrained or very hot model: the nucleus is
// ~90% of the vocabulary), 3 a peaked one (~6,700 tokens), 6 a sharper one. Same logits for both sides, taking turns
// sample by sample. --top-p 1: plain sampling (transformers then adds no warper). Prints a table of ms per call and the
// ratio, then one JSON line.
import os from 'node:os';
import { parseArgs } from 'node:util';
import { prepareSampling, resolveSamplingParams, type SamplerRow, sampleTokens } from '../src/engine/index.js';
import * as torch from '../src/torch/index.js';
import { cpuFeatures, fmt, median, r2, table } from './harness.js';

const { values: flags } = parseArgs({
  options: {
    batches: { type: 'string', default: '1,32' },
    spreads: { type: 'string', default: '0.01,3,6' },
    'top-p': { type: 'string', default: '0.9' },
    vocab: { type: 'string', default: '151936' },
    threads: { type: 'string', default: String(os.cpus().length) },
    samples: { type: 'string', default: '5' },
    help: { type: 'boolean', default: false },
  },
});
if (flags.help) {
  console.log(`top-p sampling, ours vs transformers' algorithm, ms per call.
  --batches LIST   rows per call (default 1,32)
  --spreads LIST   logits = randn x spread (default 0.01,3,6)
  --top-p P        (default 0.9)
  --vocab N        (default 151936)
  --threads N      intra-op threads (default: cores)
  --samples N      timed calls per side (default 5)`);
  process.exit(0);
}
const list = (s: string) => s.split(',').map(Number);
const topP = Number(flags['top-p']);
const vocab = Number(flags.vocab);
const samples = Number(flags.samples);
torch.setNumThreads(Number(flags.threads));

/** transformers' TopPLogitsWarper then softmax + multinomial (generation/logits_process.py, utils.py _sample). */
function transformersTopP(logits: torch.Tensor, generator: torch.Generator): torch.Tensor {
  // top_p 1: transformers adds no warper
  if (topP >= 1) return torch.multinomial(logits.softmax(-1), 1, { generator }).squeeze(1);
  const { values: sorted, indices } = logits.sort({ dim: -1, descending: false });
  const cumulative = sorted.softmax(-1).cumsum(-1);
  const removeSorted = cumulative.le(1 - topP);
  removeSorted.narrow(-1, vocab - 1, 1).fill_(false); // min_tokens_to_keep = 1
  const remove = removeSorted.scatter(1, indices, removeSorted);
  const probs = logits.maskedFill(remove, Number.NEGATIVE_INFINITY).softmax(-1);
  return torch.multinomial(probs, 1, { generator }).squeeze(1);
}

const time = (f: () => void): number => {
  const t0 = performance.now();
  torch.scope(f);
  return performance.now() - t0;
};

const results: { batch: number; spread: number; ours_ms: number; transformers_ms: number; ratio: number; nucleus: number }[] = [];
for (const batch of list(flags.batches)) {
  for (const spread of list(flags.spreads)) {
    const logits = torch.keep(torch.randn([batch, vocab], { generator: new torch.Generator(1) }).mul(spread));
    const rows = (): SamplerRow[] =>
      Array.from({ length: batch }, (_, i) => ({ params: resolveSamplingParams({ topP }), generator: new torch.Generator(i) }));
    const generator = new torch.Generator(0);
    const ours = () => {
      sampleTokens(logits, prepareSampling(rows(), 'cpu')).tokens.toTypedArray();
    };
    const theirs = () => {
      transformersTopP(logits, generator).toTypedArray();
    };
    ours();
    theirs(); // warm-up
    const t = { ours: [] as number[], theirs: [] as number[] };
    for (let i = 0; i < samples; i++) {
      t.ours.push(time(ours));
      t.theirs.push(time(theirs));
    }
    // the nucleus size of row 0 (same definition on both sides), for the table
    const nucleus = torch.scope(() => {
      const sorted = logits.narrow(0, 0, 1).sort({ dim: -1, descending: true }).values.softmax(-1);
      return sorted.cumsum(-1).sub(sorted).lt(topP).sum().item() as number;
    });
    const oursMs = median(t.ours);
    const theirsMs = median(t.theirs);
    results.push({ batch, spread, ours_ms: r2(oursMs), transformers_ms: r2(theirsMs), ratio: r2(theirsMs / oursMs), nucleus });
    logits.dispose();
  }
}

const cpu = cpuFeatures();
table(
  `top-p ${topP} sampling over ${vocab} logits, ${torch.getNumThreads()} threads, ${cpu.model} (${cpu.features.join(' ')})`,
  ['batch', 'spread', 'nucleus (row 0)', 'ours ms', 'transformers ms', 'ratio'],
  results.map((r) => [
    String(r.batch),
    String(r.spread),
    String(r.nucleus),
    fmt(r.ours_ms, 1),
    fmt(r.transformers_ms, 1),
    fmt(r.ratio, 2),
  ]),
);
console.log('ratio = transformers ms / ours ms (above 1 = ours faster)');
console.log(
  JSON.stringify({
    bench: 'sampling',
    cpu: cpu.model,
    features: cpu.features,
    threads: torch.getNumThreads(),
    top_p: topP,
    vocab,
    results,
  }),
);
