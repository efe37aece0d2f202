// The packed linear kernel (float32, bf16) next to libtorch's linear: `node --import tsx bench/packed-linear.bench.ts`.
//
// torch.packedLinear (native/src/kernels.cpp) is what the inference layout runs for 1 to 64 rows on AVX2 CPUs (with
// AVX-512 registers where present, and AVX512-BF16 dot products for bf16; the table then also shows the kernel held
// to each narrower path); the
// alternative is torch.linear = at::linear, the BLAS call PyTorch's F.linear makes, on the weight in the layout the
// inference layout keeps (column-major) and in the plain row-major one. Shapes: the projections and LM head of the
// 48.8M bench model and of Qwen2.5-0.5B. Each shape gets enough copies of its weight to exceed the L3 cache (decoding
// streams every weight from memory once per step), and the sides take turns sample by sample. Prints a table
// of GFLOP/s and the ratio, then one JSON line.
import os from 'node:os';
import { parseArgs } from 'node:util';
import * as torch from '../src/torch/index.js';
import { fmt, median, r2, table } from './harness.js';

const { values: flags } = parseArgs({
  options: {
    rows: { type: 'string', default: '1,8,32,64' },
    threads: { type: 'string', default: `1,${os.cpus().length}` },
    samples: { type: 'string', default: '5' },
    'min-mb': { type: 'string', default: '96' },
    dtype: { type: 'string', default: 'float32' },
    shapes: { type: 'string', default: 'all' },
    help: { type: 'boolean', default: false },
  },
});
if (flags.help) {
  console.log(`packedLinear vs linear (MKL), GFLOP/s.
  --rows LIST      rows per product (default 1,8,32,64)
  --threads LIST   intra-op thread counts (default 1,<cores>)
  --samples N      timed samples per side (default 5)
  --min-mb N       weight copies per shape until this many MB (default 96: beyond this machine's 32 MB L3)
  --dtype float32|bfloat16   weights and inputs (default float32; bfloat16: libtorch's side is oneDNN where the CPU
                   has AVX512 BW/VL/DQ, else its reference loop)
  --shapes all|small|0.5b    which models' shapes (default all)`);
  process.exit(0);
}
if (!torch.packedLinearSupported()) {
  console.log(JSON.stringify({ bench: 'packed-linear', skipped: 'this CPU has no AVX2/FMA' }));
  process.exit(0);
}
// the packed kernel also runs held to each narrower path this CPU has (AVX-512 FMAs where bf16 dot products are
// present; AVX2 where AVX-512 is): the paths of CPUs without them
const order = ['avx512bf16', 'avx512', 'avx2'];
const list = (text: string) => text.split(',').map((t) => Number(t.trim()));
const rowsList = list(flags.rows);
const threadsList = list(flags.threads);
const samples = Number(flags.samples);
const minBytes = Number(flags['min-mb']) * 2 ** 20;
const dtype = flags.dtype;
if (dtype !== 'float32' && dtype !== 'bfloat16') throw new Error(`--dtype must be float32 or bfloat16, got '${dtype}'`);
const isa = torch.packedLinearIsa(dtype);
// (the widest path comes first, so what follows it is always one setPackedLinearIsa can hold the kernel to)
const narrower = order.slice(order.indexOf(isa) + 1) as ('avx512' | 'avx2')[];
const shapeSet = flags.shapes;
if (shapeSet !== 'all' && shapeSet !== 'small' && shapeSet !== '0.5b')
  throw new Error(`--shapes must be all, small or 0.5b, got '${shapeSet}'`);

const ALL_SHAPES: { name: string; out: number; in: number }[] = [
  { name: '48.8M q|k|v', out: 1024, in: 512 },
  { name: '48.8M gate|up', out: 2816, in: 512 },
  { name: '48.8M down', out: 512, in: 1408 },
  { name: '48.8M lm head', out: 49152, in: 512 },
  { name: '0.5B q|k|v', out: 1152, in: 896 },
  { name: '0.5B gate|up', out: 9728, in: 896 },
  { name: '0.5B down', out: 896, in: 4864 },
  { name: '0.5B lm head', out: 151669, in: 896 },
];
const SHAPES = ALL_SHAPES.filter((s) => shapeSet === 'all' || s.name.startsWith(shapeSet === 'small' ? '48.8M' : '0.5B'));

/** Median seconds of each of `sides` (one call: a pass over the copies); the sides take turns, the first rotating. */
function timeEach(sides: (() => void)[]): number[] {
  const times = sides.map(() => [] as number[]);
  for (const f of sides) torch.scope(f); // warm-up
  for (let s = 0; s < samples; s++) {
    for (let i = 0; i < sides.length; i++) {
      const side = (s + i) % sides.length;
      const t0 = performance.now();
      torch.scope(sides[side] as () => void);
      times[side]?.push((performance.now() - t0) / 1e3);
    }
  }
  return times.map(median);
}

const rows: string[][] = [];
const results: Record<string, Record<string, number>> = {};
const started = performance.now();
for (const shape of SHAPES) {
  const bytes = shape.out * shape.in * (dtype === 'float32' ? 4 : 2);
  const copies = Math.max(1, Math.ceil(minBytes / bytes));
  const gen = new torch.Generator(1);
  const weights = Array.from({ length: copies }, () =>
    torch.keep(torch.randn([shape.out, shape.in], { generator: gen }).to(dtype)),
  );
  const columnMajor = weights.map((w) => torch.keep(w.t().contiguous().t()));
  const packed = weights.map((w) => torch.keep(torch.packLinear(w)));
  for (const threads of threadsList) {
    torch.setNumThreads(threads);
    for (const m of rowsList) {
      const x = torch.keep(torch.randn([m, shape.in], { generator: gen }).to(dtype));
      const packedRun = () => {
        for (const p of packed) torch.packedLinear(x, p, null, shape.out);
      };
      const [tPacked, tLinear, tRowMajor, ...tNarrower] = timeEach([
        packedRun,
        () => {
          for (const w of columnMajor) torch.linear(x, w);
        },
        () => {
          for (const w of weights) torch.linear(x, w);
        },
        ...narrower.map((held) => () => {
          torch.setPackedLinearIsa(held);
          try {
            packedRun();
          } finally {
            torch.setPackedLinearIsa('auto');
          }
        }),
      ]) as [number, number, number, ...number[]];
      const flop = 2 * m * shape.in * shape.out * copies;
      const gf = (t: number) => flop / t / 1e9;
      const best = Math.min(tLinear, tRowMajor);
      rows.push([
        `${shape.name} (${shape.out} x ${shape.in})`,
        String(threads),
        String(m),
        fmt(gf(tPacked), 1),
        fmt(gf(tLinear), 1),
        fmt(gf(tRowMajor), 1),
        `${fmt(best / tPacked)}x`,
        ...tNarrower.flatMap((t) => [fmt(gf(t), 1), `${fmt(t / tPacked)}x`]),
      ]);
      results[`${shape.name} t${threads} m${m}`] = {
        packed_gflops: r2(gf(tPacked)),
        linear_column_major_gflops: r2(gf(tLinear)),
        linear_row_major_gflops: r2(gf(tRowMajor)),
        speedup_vs_best_linear: r2(best / tPacked),
        ...Object.fromEntries(
          narrower.flatMap((held, i) => [
            [`packed_${held}_gflops`, r2(gf(tNarrower[i] as number))],
            [`${isa}_vs_${held}`, r2((tNarrower[i] as number) / tPacked)],
          ]),
        ),
      };
      x.dispose();
    }
  }
  for (const t of [...weights, ...columnMajor, ...packed]) t.dispose();
}
table(
  `packedLinear vs linear (libtorch: MKL; bf16: oneDNN where present), ${dtype}, GFLOP/s; ratio = best linear time / packed time (above 1 = packed faster)`,
  [
    'shape (out x in)',
    'threads',
    'rows',
    `packed (${isa})`,
    'linear col-major',
    'linear row-major',
    'ratio',
    ...narrower.flatMap((held) => [`packed (${held})`, `${isa} / ${held}`]),
  ],
  rows,
);
const speedups = Object.values(results).map((r) => r.speedup_vs_best_linear as number);
console.log(
  JSON.stringify({
    bench: 'packed-linear',
    cpu: os.cpus()[0]?.model ?? 'unknown',
    isa,
    dtype,
    libtorch_fast_bf16: torch.cpuHasBf16Matmul(),
    threads: threadsList,
    rows: rowsList,
    min_speedup: Math.min(...speedups),
    median_speedup: r2(median(speedups)),
    results,
    wall_s: r2((performance.now() - started) / 1e3),
  }),
);
