// Decode-step attention on the CPU: `npm run bench:decode-attention` (node --import tsx
// bench/decode-attention.bench.ts [--help]).
//
// One query per row over a masked cache with grouped heads, as a decode step calls it (q a transposed view, k and v
// views into a larger cache): torch.decodeAttention (native/src/kernels.cpp, what the models run since session 19)
// against libtorch's fused kernel (scaledDotProductAttention, what they ran before) in the same run, at the
// quickstart's shape (4 query heads over 2 kv heads of 32) and Qwen2.5-0.5B's (14 over 2 of 64), several batch sizes,
// 1 and 2 intra-op threads. Calls alternate side by side in rounds; medians of µs per call. Ends with one JSON line.
import { parseArgs } from 'node:util';
import * as torch from '../src/torch/index.js';
import { cpuFeatures, fmt, median, positiveFlag, r2, table } from './harness.js';

const HELP = `Decode-step attention: torch.decodeAttention against libtorch's fused kernel, µs per call.
  node --import tsx bench/decode-attention.bench.ts [--threads 1,2] [--rounds 15] [--calls 20]`;
const { values: flags } = parseArgs({
  options: {
    help: { type: 'boolean' },
    threads: { type: 'string', default: '1,2' },
    rounds: { type: 'string', default: '15' },
    calls: { type: 'string', default: '20' },
  },
});
if (flags.help) {
  console.log(HELP);
  process.exit(0);
}
const rounds = positiveFlag('rounds', flags.rounds as string);
const calls = positiveFlag('calls', flags.calls as string);
const threadCounts = (flags.threads as string).split(',').map((t) => positiveFlag('threads', t));
if (!torch.packedLinearSupported()) throw new Error('this CPU lacks AVX2/FMA: decodeAttention does not run here');

/** [name, batch, heads, kv heads, keys, head dim] */
const SHAPES: [string, number, number, number, number, number][] = [
  ['quickstart', 1, 4, 2, 32, 32],
  ['quickstart', 8, 4, 2, 32, 32],
  ['quickstart', 32, 4, 2, 64, 32],
  ['quickstart', 256, 4, 2, 32, 32],
  ['0.5b', 1, 14, 2, 64, 64],
  ['0.5b', 8, 14, 2, 64, 64],
  ['0.5b', 32, 14, 2, 64, 64],
];

interface Figure {
  model: string;
  batch: number;
  keys: number;
  threads: number;
  kernelUs: number;
  fusedUs: number;
  speedup: number;
}
const figures: Figure[] = [];
const cpu = cpuFeatures();
console.log(`decode-attention bench: ${cpu.model} (${cpu.features.join(', ')}); libtorch ${torch.buildInfo().torchVersion}`);
torch.noGrad(() => {
  for (const threads of threadCounts) {
    torch.setNumThreads(threads);
    for (const [model, batch, heads, kvHeads, keys, headDim] of SHAPES) {
      torch.scope(() => {
        const q = torch.randn([batch, 1, heads, headDim]).transpose(1, 2);
        const k = torch.randn([batch, kvHeads, keys + 32, headDim]).narrow(2, 0, keys);
        const v = torch.randn([batch, kvHeads, keys + 32, headDim]).narrow(2, 0, keys);
        // a left-padded cache: row b skips its first b % 5 keys
        const skip = torch.tensor(
          Array.from({ length: batch }, (_, b) => b % 5),
          { dtype: 'int64', shape: [batch, 1, 1, 1] },
        );
        const mask = torch.arange(keys).view([1, 1, 1, keys]).ge(skip);
        const scale = 1 / Math.sqrt(headDim);
        const sides = {
          kernel: () => torch.decodeAttention(q, k, v, mask, scale),
          fused: () => torch.scaledDotProductAttention(q, k, v, { mask }),
        };
        const time = (f: () => torch.Tensor): number => {
          const t0 = performance.now();
          torch.scope(() => {
            for (let i = 0; i < calls; i++) f();
          });
          return ((performance.now() - t0) * 1000) / calls;
        };
        const samples = { kernel: [] as number[], fused: [] as number[] };
        time(sides.kernel);
        time(sides.fused);
        for (let r = 0; r < rounds; r++) {
          const order = r % 2 === 0 ? (['kernel', 'fused'] as const) : (['fused', 'kernel'] as const);
          for (const side of order) samples[side].push(time(sides[side]));
        }
        const kernelUs = median(samples.kernel);
        const fusedUs = median(samples.fused);
        figures.push({
          model,
          batch,
          keys,
          threads,
          kernelUs: r2(kernelUs),
          fusedUs: r2(fusedUs),
          speedup: r2(fusedUs / kernelUs),
        });
      });
    }
  }
});
table(
  `decode-step attention, µs per call (median of ${rounds} rounds x ${calls} calls)`,
  ['model', 'batch', 'keys', 'threads', 'decodeAttention', 'fused (libtorch)', 'speedup'],
  figures.map((f) => [
    f.model,
    String(f.batch),
    String(f.keys),
    String(f.threads),
    fmt(f.kernelUs, 1),
    fmt(f.fusedUs, 1),
    `${fmt(f.speedup)}x`,
  ]),
);
console.log(
  JSON.stringify({
    bench: 'decode-attention',
    cpu: cpu.model,
    cpuFeatures: cpu.features,
    libtorch: torch.buildInfo().torchVersion,
    figures,
  }),
);
