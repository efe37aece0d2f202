// Tensor-core benchmark, side by side with PyTorch in Python: `npm run bench:tensor`.
//
// Measures, for this library and for PyTorch (bench/tensor_bench.py, spawned as a child process and driven over
// stdin/stdout), on the same machine in the same run:
//   1. dispatch overhead of small ops (µs per call, including creating and freeing the result);
//   2. square matmul GFLOP/s at float32 and bfloat16, n = 512, 1024, 2048;
//   3. forward + backward of one Llama/Qwen-style decoder block in bfloat16 (ms/iter, tokens/s).
// The two sides never run at the same time: each measurement alternates ours and PyTorch's samples (ABBA order,
// so drift in machine load hits both), after warm-up, and reports the median. Both use the same intra-op thread
// count (the machine's core count). It prints a table and ends with one JSON line holding every figure.
//
// Environment: TRINITY_BENCH_PYTHON (the Python to use; default .cache/python-ref/bin/python),
// TRINITY_BENCH_THREADS (default: core count), TRINITY_BENCH_MAX_CALL_S (skip a matmul whose single call is
// estimated (8x the previous size) to take longer than this many seconds; default 10: bfloat16 matmul has no fast
// kernel on CPUs without AVX512-BF16/AMX, where one n = 2048 call takes 60-80 s), TRINITY_BENCH_BLOCK (block sizes, as
// "hidden,heads,kvHeads,intermediate,batch,seq").
import os from 'node:os';
import { join } from 'node:path';
import * as torch from '../src/torch/index.js';
import {
  alternate,
  clamp,
  findPython,
  fmt,
  type Json,
  median,
  now,
  PythonHalf,
  type Reply,
  r2,
  r3,
  repoRoot,
  secondsSince,
  table,
} from './harness.js';

const benchStart = performance.now();

/** What tensor_bench.py's replies carry besides timings. */
interface TensorReply extends Reply {
  loss?: number;
  torch?: string;
  threads?: number;
  python?: string;
}

// ---------------------------------------------------------------------------------------------------------------
// 1. small ops (each mirrors SMALL_OPS in tensor_bench.py)

const a8 = torch.randn([8]);
const b8 = torch.randn([8]);
const m4 = torch.randn([4, 4]);
const s16 = torch.randn([16]);

const SMALL_OPS = {
  add: () => a8.add(b8),
  mul_scalar: () => a8.mul(2.0),
  view: () => a8.view([2, 4]),
  sum: () => a8.sum(),
  matmul_4x4: () => m4.matmul(m4),
  softmax_16: () => s16.softmax(-1),
  zeros_8: () => torch.zeros([8]),
} satisfies Record<string, () => torch.Tensor>;
type SmallOp = keyof typeof SMALL_OPS;

/**
 * Seconds per call with the results freed by scopes of SCOPE_BATCH calls each: a training step's scope holds a few
 * hundred intermediate tensors, and freeing them at the scope's end is what such code pays.
 */
const SCOPE_BATCH = 256;
function smallScoped(fn: () => torch.Tensor, calls: number): number {
  const t0 = now();
  for (let done = 0; done < calls; done += SCOPE_BATCH) {
    torch.scope(() => {
      for (let i = 0; i < SCOPE_BATCH; i++) fn();
    });
  }
  return secondsSince(t0) / calls;
}

/** Seconds per call with each result disposed at once. */
function smallDisposed(fn: () => torch.Tensor, calls: number): number {
  const t0 = now();
  for (let i = 0; i < calls; i++) fn().dispose();
  return secondsSince(t0) / calls;
}

interface SmallResult {
  calls: number;
  ours: number;
  oursDispose: number;
  pytorch: number;
}

async function benchSmall(py: PythonHalf): Promise<Record<SmallOp, SmallResult>> {
  const results = {} as Record<SmallOp, SmallResult>;
  const samplesPerRound = 3;
  const rounds = 4;
  for (const op of Object.keys(SMALL_OPS) as SmallOp[]) {
    const fn = SMALL_OPS[op];
    // warm-up (JIT, allocator caches) and calibration: one sample should take about 15 ms
    smallScoped(fn, 1024);
    smallDisposed(fn, 1024);
    const calls = SCOPE_BATCH * clamp(Math.round(0.015 / smallScoped(fn, 1024) / SCOPE_BATCH), 2, 80);
    await py.times({ kind: 'small', op, calls, samples: 1, warmup: 1 });
    const disposed: number[] = []; // sampled in the same rounds, right after the scoped samples
    const scoped = await alternate(
      rounds,
      () => {
        const out = Array.from({ length: samplesPerRound }, () => smallScoped(fn, calls));
        for (let i = 0; i < samplesPerRound; i++) disposed.push(smallDisposed(fn, calls));
        return out;
      },
      () => py.times({ kind: 'small', op, calls, samples: samplesPerRound }),
    );
    results[op] = { calls, ours: median(scoped.ours), oursDispose: median(disposed), pytorch: median(scoped.pytorch) };
  }
  return results;
}

// ---------------------------------------------------------------------------------------------------------------
// 2. matmul

type MatmulDtype = 'float32' | 'bfloat16';
const MATMUL_SIZES = [512, 1024, 2048] as const;
interface MatmulResult {
  n: number;
  dtype: MatmulDtype;
  ours: number | null; // GFLOP/s
  pytorch: number | null;
  samples: number;
  skipped?: string;
}

function oursMatmul(a: torch.Tensor, b: torch.Tensor, calls: number): number {
  const t0 = now();
  for (let i = 0; i < calls; i++) a.matmul(b).dispose();
  return secondsSince(t0) / calls;
}

async function benchMatmul(py: PythonHalf, dtype: MatmulDtype): Promise<MatmulResult[]> {
  const maxCallS = Number(process.env.TRINITY_BENCH_MAX_CALL_S ?? 10);
  const budgetS = dtype === 'float32' ? 4 : 12; // per size, both sides together
  const out: MatmulResult[] = [];
  let estimate = 0; // seconds per call, from the previous size
  for (const n of MATMUL_SIZES) {
    const flop = 2 * n ** 3;
    if (estimate > maxCallS) {
      out.push({ n, dtype, ours: null, pytorch: null, samples: 0, skipped: `est. >= ${estimate.toFixed(0)} s/call` });
      estimate *= 8;
      continue;
    }
    const [a, b] = torch.scope(() => [torch.randn([n, n]).to(dtype), torch.randn([n, n]).to(dtype)] as const);
    let perCall: number;
    if (estimate === 0 || estimate < 2) {
      // warm up both sides; our warm-up call also calibrates
      oursMatmul(a, b, 1);
      perCall = oursMatmul(a, b, 1);
      await py.times({ kind: 'matmul', dtype, n, calls: 1, samples: 1, warmup: 1 });
    } else {
      perCall = estimate; // the kernels are warm from the previous size; one call is already long
    }
    const calls = Math.max(1, Math.round(0.1 / perCall));
    const rounds = clamp(Math.floor(budgetS / (2 * perCall * calls)), 1, 7);
    const t = await alternate(
      rounds,
      () => [oursMatmul(a, b, calls)],
      () => py.times({ kind: 'matmul', dtype, n, calls, samples: 1 }),
    );
    a.dispose();
    b.dispose();
    const ours = median(t.ours);
    out.push({ n, dtype, ours: flop / ours / 1e9, pytorch: flop / median(t.pytorch) / 1e9, samples: rounds });
    estimate = ours * 8;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// 3. one decoder block, forward + backward (mirrors Block in tensor_bench.py)

interface BlockConfig {
  [key: string]: Json;
  hidden: number;
  heads: number;
  kvHeads: number;
  intermediate: number;
  batch: number;
  seq: number;
  eps: number;
  ropeTheta: number;
  dtype: MatmulDtype;
}

function blockConfig(): BlockConfig {
  // Qwen2-style proportions (GQA 3:1, head_dim 64, SwiGLU), sized so one bf16 iteration takes ~0.3-1 s on 2 cores
  // without a bf16 matmul unit; TRINITY_BENCH_BLOCK="896,14,2,4864,2,256" gives Qwen2-0.5B's real layer.
  const [hidden, heads, kvHeads, intermediate, batch, seq] = (process.env.TRINITY_BENCH_BLOCK ?? '384,6,2,1024,1,64')
    .split(',')
    .map(Number) as [number, number, number, number, number, number];
  return { hidden, heads, kvHeads, intermediate, batch, seq, eps: 1e-6, ropeTheta: 1e6, dtype: 'bfloat16' };
}

/** sin(0.37 i + seed) * scale as a [rows, cols] float32 tensor: the same values as filler() in tensor_bench.py. */
function filler(seed: number, rows: number, cols: number, scale = 1 / Math.sqrt(cols)): torch.Tensor {
  return torch.scope(() =>
    torch
      .arange(0, rows * cols, 1, { dtype: 'float32' })
      .mul(0.37)
      .add(seed)
      .sin()
      .mul(scale)
      .view([rows, cols]),
  );
}

class Block {
  readonly c: BlockConfig;
  readonly headDim: number;
  readonly params: torch.Tensor[];
  readonly wq: torch.Tensor;
  readonly wk: torch.Tensor;
  readonly wv: torch.Tensor;
  readonly wo: torch.Tensor;
  readonly wg: torch.Tensor;
  readonly wu: torch.Tensor;
  readonly wd: torch.Tensor;
  readonly ln1: torch.Tensor;
  readonly ln2: torch.Tensor;
  readonly x: torch.Tensor;
  readonly cos: torch.Tensor;
  readonly sin: torch.Tensor;

  constructor(c: BlockConfig) {
    this.c = c;
    const { hidden, heads, kvHeads, intermediate, dtype } = c;
    const hd = hidden / heads;
    this.headDim = hd;
    const weight = (seed: number, rows: number, cols: number): torch.Tensor =>
      torch.keep(torch.scope(() => filler(seed, rows, cols).to(dtype).requiresGrad_()));
    this.wq = weight(1, hidden, hidden);
    this.wk = weight(2, kvHeads * hd, hidden);
    this.wv = weight(3, kvHeads * hd, hidden);
    this.wo = weight(4, hidden, hidden);
    this.wg = weight(5, intermediate, hidden);
    this.wu = weight(6, intermediate, hidden);
    this.wd = weight(7, hidden, intermediate);
    this.ln1 = torch.keep(torch.ones([hidden], { dtype, requiresGrad: true }));
    this.ln2 = torch.keep(torch.ones([hidden], { dtype, requiresGrad: true }));
    this.params = [this.wq, this.wk, this.wv, this.wo, this.wg, this.wu, this.wd, this.ln1, this.ln2];
    this.x = torch.keep(
      torch.scope(() =>
        filler(8, c.batch * c.seq, hidden, 1)
          .view([c.batch, c.seq, hidden])
          .to(dtype),
      ),
    );
    // rotary tables [seq, head_dim], as in Hugging Face Llama/Qwen2
    const cos = new Float32Array(c.seq * hd);
    const sin = new Float32Array(c.seq * hd);
    for (let p = 0; p < c.seq; p++) {
      for (let i = 0; i < hd / 2; i++) {
        const angle = p * Math.fround(1 / Math.fround(c.ropeTheta ** Math.fround((2 * i) / hd)));
        for (const j of [i, i + hd / 2]) {
          cos[p * hd + j] = Math.cos(angle);
          sin[p * hd + j] = Math.sin(angle);
        }
      }
    }
    this.cos = torch.keep(torch.tensor(cos, { shape: [c.seq, hd], dtype }));
    this.sin = torch.keep(torch.tensor(sin, { shape: [c.seq, hd], dtype }));
  }

  rope(t: torch.Tensor): torch.Tensor {
    const half = this.headDim / 2;
    const rotated = torch.cat([t.slice(-1, half).neg(), t.slice(-1, 0, half)], -1);
    return t.mul(this.cos).add(rotated.mul(this.sin));
  }

  /** One forward + backward; returns the loss. Every intermediate tensor is freed by the scope. */
  step(): number {
    const { batch: b, seq: s, hidden, heads, kvHeads: kv, eps } = this.c;
    const hd = this.headDim;
    return torch.scope(() => {
      for (const p of this.params) p.grad = null;
      let x = this.x;
      let h = torch.rmsNorm(x, [hidden], this.ln1, eps);
      const q = torch.linear(h, this.wq).view([b, s, heads, hd]).transpose(1, 2);
      const k = torch.linear(h, this.wk).view([b, s, kv, hd]).transpose(1, 2);
      const v = torch.linear(h, this.wv).view([b, s, kv, hd]).transpose(1, 2);
      const a = torch.scaledDotProductAttention(this.rope(q), this.rope(k), v, { causal: true });
      x = x.add(torch.linear(a.transpose(1, 2).reshape([b, s, hidden]), this.wo));
      h = torch.rmsNorm(x, [hidden], this.ln2, eps);
      x = x.add(torch.linear(torch.linear(h, this.wg).silu().mul(torch.linear(h, this.wu)), this.wd));
      const loss = x.float().square().mean();
      loss.backward();
      return loss.item();
    });
  }

  dispose(): void {
    for (const t of [...this.params, this.x, this.cos, this.sin]) t.dispose();
  }
}

interface BlockResult {
  config: BlockConfig;
  tokens: number;
  ours: number; // seconds per iteration
  pytorch: number;
  lossOurs: number;
  lossPytorch: number;
  samples: number;
}

async function benchBlock(py: PythonHalf): Promise<BlockResult> {
  const config = blockConfig();
  const block = new Block(config);
  const timeStep = (): number => {
    const t0 = now();
    block.step();
    return secondsSince(t0);
  };
  const lossOurs = block.step(); // warm-up
  const perIter = timeStep();
  const first = await py.request<TensorReply>({ kind: 'block', config, calls: 1, samples: 1, warmup: 1 });
  const rounds = clamp(Math.floor(16 / (2 * perIter)), 3, 7);
  const t = await alternate(
    rounds,
    () => [timeStep()],
    () => py.times({ kind: 'block', config, calls: 1, samples: 1 }),
  );
  block.dispose();
  return {
    config,
    tokens: config.batch * config.seq,
    ours: median(t.ours),
    pytorch: median(t.pytorch),
    lossOurs,
    lossPytorch: first.loss ?? Number.NaN,
    samples: rounds,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// report

async function main(): Promise<void> {
  const threads = Number(process.env.TRINITY_BENCH_THREADS ?? os.availableParallelism());
  torch.setNumThreads(threads);
  const py = new PythonHalf(findPython(), join(repoRoot, 'bench', 'tensor_bench.py'));
  try {
    const hello = await py.request<TensorReply>({ kind: 'hello', threads });
    const info = torch.buildInfo();
    console.log(
      `tensor bench: ours libtorch ${info.torchVersion} (node ${process.version}) vs PyTorch ${hello.torch} (python ${hello.python}); ` +
        `${threads} intra-op threads each (ours ${torch.getNumThreads()}, PyTorch ${hello.threads}); ${os.cpus()[0]?.model ?? 'cpu'}, ` +
        `load avg ${os.loadavg()[0]?.toFixed(2)}`,
    );
    console.log(
      'ratio = ours time / PyTorch time (1.00 = parity, below 1 = ours faster); targets: small ops <= 1.00, compute-bound <= 1.05',
    );

    const small = await benchSmall(py);
    const fp32 = await benchMatmul(py, 'float32');
    const bf16 = await benchMatmul(py, 'bfloat16');
    const block = await benchBlock(py);

    // ---- table ----
    const smallRatio = (r: SmallResult): number => r.ours / r.pytorch;
    table(
      `small-op dispatch overhead (µs per call, result created and freed; scope = one scope per ${SCOPE_BATCH} calls; median)`,
      ['op', 'ours (scope)', 'ours (dispose)', 'PyTorch', 'ratio', 'target'],
      (Object.entries(small) as [SmallOp, SmallResult][]).map(([op, r]) => [
        op,
        fmt(r.ours * 1e6),
        fmt(r.oursDispose * 1e6),
        fmt(r.pytorch * 1e6),
        fmt(smallRatio(r)),
        smallRatio(r) <= 1 ? 'met' : 'MISSED',
      ]),
    );
    const mmRatio = (r: MatmulResult): number | null => (r.ours === null || r.pytorch === null ? null : r.pytorch / r.ours);
    table(
      `matmul n x n (GFLOP/s, median; ${threads} threads)`,
      ['dtype  n', 'ours', 'PyTorch', 'ratio', 'target', 'samples'],
      [...fp32, ...bf16].map((r) => {
        const ratio = mmRatio(r);
        return [
          `${r.dtype} ${r.n}`,
          fmt(r.ours),
          fmt(r.pytorch),
          fmt(ratio),
          ratio === null ? (r.skipped ?? 'skipped') : ratio <= 1.05 ? 'met' : 'MISSED',
          String(r.samples),
        ];
      }),
    );
    const c = block.config;
    const blockRatio = block.ours / block.pytorch;
    table(
      `decoder block fwd+bwd, bf16 (hidden ${c.hidden}, ${c.heads} heads / ${c.kvHeads} kv, mlp ${c.intermediate}, batch ${c.batch} x seq ${c.seq}; median of ${block.samples})`,
      ['', 'ms/iter', 'tokens/s', 'loss'],
      [
        ['ours', fmt(block.ours * 1e3, 1), fmt(block.tokens / block.ours, 0), block.lossOurs.toPrecision(6)],
        ['PyTorch', fmt(block.pytorch * 1e3, 1), fmt(block.tokens / block.pytorch, 0), block.lossPytorch.toPrecision(6)],
        ['ratio', fmt(blockRatio), blockRatio <= 1.05 ? 'met' : 'MISSED', ''],
      ],
    );
    const wallS = (performance.now() - benchStart) / 1e3;
    console.log(`\nwall time ${wallS.toFixed(1)} s`);

    // ---- the JSON line ----
    const smallJson: Record<string, Json> = {};
    const smallRatios: Record<string, Json> = {};
    for (const [op, r] of Object.entries(small) as [SmallOp, SmallResult][]) {
      smallJson[op] = {
        ours: r3(r.ours * 1e6),
        ours_dispose: r3(r.oursDispose * 1e6),
        pytorch: r3(r.pytorch * 1e6),
        calls: r.calls,
      };
      smallRatios[op] = r3(smallRatio(r));
    }
    const matmulJson: Record<string, Record<string, Json>> = { float32: {}, bfloat16: {} };
    const matmulRatios: Record<string, Json> = {};
    for (const r of [...fp32, ...bf16]) {
      const entry: { [key: string]: Json } = {
        ours: r.ours === null ? null : r2(r.ours),
        pytorch: r.pytorch === null ? null : r2(r.pytorch),
        samples: r.samples,
      };
      if (r.skipped) entry.skipped = r.skipped;
      (matmulJson[r.dtype] as Record<string, Json>)[String(r.n)] = entry;
      const ratio = mmRatio(r);
      matmulRatios[`${r.dtype}_${r.n}`] = ratio === null ? null : r3(ratio);
    }
    const result: Json = {
      bench: 'tensor',
      machine: {
        cpu: os.cpus()[0]?.model ?? '',
        cores: os.availableParallelism(),
        threads,
        load_avg_1m: r2(os.loadavg()[0] ?? 0),
      },
      versions: { libtorch: info.torchVersion, pytorch: hello.torch ?? '', node: process.version, python: hello.python ?? '' },
      ratio_definition: 'ours time / pytorch time',
      small_op_scope_batch: SCOPE_BATCH,
      small_op_us: smallJson,
      matmul_gflops: matmulJson,
      block_fwd_bwd: {
        config: c,
        tokens_per_iter: block.tokens,
        samples: block.samples,
        ours: { ms_per_iter: r2(block.ours * 1e3), tokens_per_s: Math.round(block.tokens / block.ours), loss: block.lossOurs },
        pytorch: {
          ms_per_iter: r2(block.pytorch * 1e3),
          tokens_per_s: Math.round(block.tokens / block.pytorch),
          loss: block.lossPytorch,
        },
      },
      ratios: { small_op: smallRatios, matmul: matmulRatios, block_fwd_bwd: r3(blockRatio) },
      wall_s: r2(wallS),
    };
    console.log(JSON.stringify(result));
  } finally {
    await py.close();
  }
}

await main();
