// Packed rows against padded ones: `node --import tsx bench/packing.bench.ts [--help]` (npm run bench:packing).
//
// GRPO train steps (src/rft/trainer/train-step.ts: kl_loss_fn none, rollout log-probs given, gradient checkpointing on
// as the trainer's default) on a random qwen2 (the quickstart's shape: hidden 128, 4 layers, 4 heads, 2 KV heads;
// float32), trainer.use_remove_padding false (padded: prompts left-padded, responses right-padded to the batch's
// longest, shared prompts once when that saves a fifth) and true (packed: no pads, src/model/packed-rows.ts), over
// the same rows, and (--budget N > 0) a third layout, packed with micro-batches by a token budget
// (trainer.use_dynamic_bsz, max_token_len_per_gpu N: micro-batches that keep a prompt's rows together), two workloads:
//   quickstart  --qs-prompts prompts of 12-16 tokens × 16 samples, responses of 3-5 tokens (the quickstart's addition
//               rows: 256 rows, one micro-batch of 256)
//   long-tail   --prompts prompts of 50-500 tokens (uniform) × --samples samples; responses lognormal: median --median
//               tokens, σ --sigma (ln-space), so p99 = median · e^(2.326 σ), capped at --cap, at least 1;
//               micro-batches of --micro rows
// Rewards and rollout log-probs are made up (the step's cost does not depend on them); a new draw per step, the same
// draws for both layouts. Each layout has its own copy of the model and optimizer; the steps alternate which layout
// goes first (ABBA, rotating with three). Figures: real tokens (each distinct prompt but its last token once, each
// row's response with its last prompt token but not its last token: what a pad-free forward runs) / tokens the
// policy's trunk computed, the median step time in wall seconds and in CPU seconds of the process (on a shared
// machine the wall time measures the neighbours too; with one thread the CPU time does not), and packed's speed-up by
// both; and (--only attention, or with the long tail) one layer's packed attention by exact methods on the first
// long-tail batch. Prints the CPU, the load, tables and one JSON line.
import os from 'node:os';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { attention } from '../src/model/attention.js';
import { CausalLM, initModel } from '../src/model/index.js';
import {
  BUCKET_CALL_AREA,
  BUCKET_WASTE,
  type BucketRule,
  type PackedLayout,
  packedAttention,
  packedPass,
} from '../src/model/packed-attention.js';
import { resolveAlgorithm } from '../src/rft/algorithm/index.js';
import type { Experience } from '../src/rft/experience.js';
import { TrainStep } from '../src/rft/trainer/train-step.js';
import * as torch from '../src/torch/index.js';
import { cpuFeatures, fmt, median, now, positiveFlag, r2, r3, secondsSince, table } from './harness.js';
import { QUICKSTART_MODEL } from '../src/cli/quickstart.js';

const HELP = `GRPO steps with rows packed without pads against padded rows, on the quickstart's rows and on a long tail.
  node --import tsx bench/packing.bench.ts [--steps N] [--warmup N] [--qs-prompts N] [--prompts N] [--samples N]
    [--median N] [--sigma X] [--cap N] [--micro N] [--budget N] [--threads N] [--only quickstart|long-tail|attention]`;

const { values: flags } = parseArgs({
  options: {
    steps: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '1' },
    'qs-prompts': { type: 'string', default: '16' },
    prompts: { type: 'string', default: '2' },
    samples: { type: 'string', default: '8' },
    median: { type: 'string', default: '100' },
    sigma: { type: 'string', default: '1' },
    cap: { type: 'string', default: '1024' },
    micro: { type: 'string', default: '4' },
    budget: { type: 'string', default: '0' },
    threads: { type: 'string', default: '2' },
    only: { type: 'string' },
    help: { type: 'boolean' },
  },
});

interface Workload {
  name: 'quickstart' | 'long-tail';
  prompts: number;
  samples: number;
  promptTokens: [number, number];
  /** A response length from two uniform draws. */
  responseLength: (uniform: () => number) => number;
  microBatchSize: number;
}

/** A reproducible GRPO batch of `w` (see the header). */
function batch(w: Workload, step: number, vocab: number): Experience[] {
  let state = 1 + step * 7919;
  const uniform = () => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return (state + 0.5) / 2 ** 31;
  };
  const token = () => 3 + Math.floor(uniform() * (vocab - 3));
  const [lo, hi] = w.promptTokens;
  return Array.from({ length: w.prompts }, (_, task) => {
    const prompt = Array.from({ length: lo + Math.floor(uniform() * (hi - lo + 1)) }, token);
    return Array.from({ length: w.samples }, (_, run): Experience => {
      const length = w.responseLength(uniform);
      return {
        eid: `s${step}-t${task}-r${run}`,
        tokens: [...prompt, ...Array.from({ length }, token)],
        promptLength: prompt.length,
        logprobs: Array.from({ length }, () => -1 - uniform()),
        reward: uniform() < 0.5 ? 1 : 0,
        info: { taskId: `t${task}`, runId: run },
      };
    });
  }).flat();
}

/**
 * Real tokens of a batch: what a forward without pads runs — each distinct prompt but its last token once, and each
 * row's last prompt token and response but its last token (a target only).
 */
function realTokens(rows: Experience[]): number {
  const prompts = new Map(rows.map((e) => [e.tokens.slice(0, e.promptLength).join(','), e.promptLength - 1]));
  return [...prompts.values()].reduce((a, n) => a + n, 0) + rows.reduce((a, e) => a + e.tokens.length - e.promptLength, 0);
}

/** How a layout runs the rows: padded, packed, or packed with micro-batches by a token budget. */
interface Layout {
  name: 'padded' | 'packed' | 'packed, token budget';
  removePadding: boolean;
  /** trainer.max_token_len_per_gpu with use_dynamic_bsz, or null: micro-batches of the workload's rows. */
  microBatchTokens: number | null;
}

interface LayoutRun {
  layout: Layout;
  step: TrainStep;
  /** Tokens the policy's trunk ran, per forward, since the last reset. */
  tokens: number[];
  seconds: number[];
  /** CPU seconds of the process (user + system, every thread) per step. */
  cpuSeconds: number[];
  dispose(): void;
}

function layoutRun(modelDir: string, w: Workload, layout: Layout): LayoutRun {
  const model = CausalLM.load(modelDir, { requiresGrad: true });
  const tokens: number[] = [];
  const beginPass = model.beginPass.bind(model);
  model.beginPass = (ids, options = {}) => {
    tokens.push(ids.numel);
    return beginPass(ids, options);
  };
  const step = new TrainStep({
    model,
    optimizer: new torch.AdamW([...model.parameters().values()], { lr: 1e-4 }),
    algorithm: resolveAlgorithm({ algorithm_type: 'grpo', kl_loss_fn: 'none' }),
    checkpoint: true,
    microBatchSize: w.microBatchSize,
    microBatchTokens: layout.microBatchTokens,
    removePadding: layout.removePadding,
  });
  return { layout, step, tokens, seconds: [], cpuSeconds: [], dispose: () => model.dispose() };
}

interface LayoutFigures {
  computedTokens: number;
  realShare: number;
  stepSeconds: number;
  cpuSeconds: number;
}

interface WorkloadFigures {
  rows: number;
  realTokens: number;
  padded: LayoutFigures;
  packed: LayoutFigures;
  /** Padded's step time over packed's, wall and CPU. */
  speedup: number;
  cpuSpeedup: number;
  /** With --budget: packed with micro-batches by the token budget, and its speed-ups over padded. */
  budget?: LayoutFigures & { maxTokenLenPerGpu: number; speedup: number; cpuSpeedup: number };
}

function runWorkload(
  modelDir: string,
  vocab: number,
  w: Workload,
  steps: number,
  warmup: number,
  budget: number,
): WorkloadFigures {
  const layouts: Layout[] = [
    { name: 'padded', removePadding: false, microBatchTokens: null },
    { name: 'packed', removePadding: true, microBatchTokens: null },
    ...(budget > 0 ? [{ name: 'packed, token budget' as const, removePadding: true, microBatchTokens: budget }] : []),
  ];
  const runs = layouts.map((layout) => layoutRun(modelDir, w, layout));
  let real = 0;
  let rowCount = 0;
  try {
    for (let s = 0; s < warmup + steps; s++) {
      const rows = batch(w, s, vocab);
      // each layout first in turn (ABBA with two)
      const order = runs.map((_, i) => runs[(i + s) % runs.length] as LayoutRun);
      for (const run of order) {
        if (s === warmup) run.tokens.length = 0;
        const t0 = now();
        const cpu0 = process.cpuUsage();
        run.step.run(rows);
        const cpu = process.cpuUsage(cpu0);
        if (s >= warmup) {
          run.seconds.push(secondsSince(t0));
          run.cpuSeconds.push((cpu.user + cpu.system) / 1e6);
        }
      }
      if (s >= warmup) {
        real += realTokens(rows);
        rowCount += rows.length;
      }
    }
  } finally {
    for (const run of runs) run.dispose();
  }
  const figures = (run: LayoutRun): LayoutFigures => {
    const computed = run.tokens.reduce((a, n) => a + n, 0);
    return {
      computedTokens: Math.round(computed / steps),
      realShare: r3(real / computed),
      stepSeconds: r3(median(run.seconds)),
      cpuSeconds: r3(median(run.cpuSeconds)),
    };
  };
  const [padded, packed, budgeted] = runs.map(figures) as [LayoutFigures, LayoutFigures, LayoutFigures | undefined];
  const speedups = (f: LayoutFigures) => ({
    speedup: r2(padded.stepSeconds / f.stepSeconds),
    cpuSpeedup: r2(padded.cpuSeconds / f.cpuSeconds),
  });
  return {
    rows: rowCount / steps,
    realTokens: Math.round(real / steps),
    padded,
    packed,
    ...speedups(packed),
    ...(budgeted === undefined ? {} : { budget: { ...budgeted, maxTokenLenPerGpu: budget, ...speedups(budgeted) } }),
  };
}

interface AttentionFigures {
  tokens: number;
  method: string;
  calls: number;
  seconds: number;
  cpuSeconds: number;
  maxDiff: number;
}

/**
 * The CPU's varlen attention methods on one long-tail batch's packed layout (one layer's shapes: 4 heads, 2 KV heads of
 * 32; forward + backward), src/model/packed-attention.ts with bucket rules: per segment with every continuation masked
 * (one call per prompt and per row), buckets of such, the default (causal units: a prompt with its longest row,
 * continuations longer than their prompt), one call per unit, one call per kind; and one masked call over [T, T]
 * (block-diagonal causal). Max difference against per segment.
 */
function attentionMethods(rows: Experience[], reps: number): AttentionFigures[] {
  const groups = new Map<string, number>();
  const rowPrefix = rows.map((e) => {
    const key = e.tokens.slice(0, e.promptLength).join(',');
    if (!groups.has(key)) groups.set(key, groups.size);
    return groups.get(key) as number;
  });
  const prefixLengths: number[] = [];
  rows.forEach((e, b) => {
    if ((rowPrefix[b] as number) === prefixLengths.length) prefixLengths.push(e.promptLength - 1);
  });
  const layout = { prefixLengths, continuationLengths: rows.map((e) => e.tokens.length - e.promptLength), rowPrefix };
  const tokens = [...prefixLengths, ...layout.continuationLengths].reduce((a, n) => a + n, 0);
  // the block-diagonal causal mask of the packed order: segment ids and context spans on the host
  const segmentOf = new Int32Array(tokens);
  const contextOf = new Int32Array(tokens).fill(-1);
  let at = 0;
  prefixLengths.forEach((p, g) => {
    for (let j = 0; j < p; j++) segmentOf[at++] = g;
  });
  layout.continuationLengths.forEach((n, b) => {
    for (let j = 0; j < n; j++) {
      segmentOf[at] = prefixLengths.length + b;
      contextOf[at++] = rowPrefix[b] as number;
    }
  });
  const methods: [string, () => (q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) => torch.Tensor][] = [
    ['per segment, masked', () => packedAttentionWith(layout, tokens, { waste: 1, callArea: -1, causalUnits: false })],
    [
      'buckets, masked',
      () => packedAttentionWith(layout, tokens, { waste: BUCKET_WASTE, callArea: BUCKET_CALL_AREA, causalUnits: false }),
    ],
    ['buckets, causal units', () => packedAttentionWith(layout, tokens, { waste: BUCKET_WASTE, callArea: BUCKET_CALL_AREA })],
    ['per unit', () => packedAttentionWith(layout, tokens, { waste: 1, callArea: -1 })],
    ['one call per kind', () => packedAttentionWith(layout, tokens, { waste: 1e9, callArea: 1e18 })],
    [
      'one masked call',
      () => {
        const segment = torch.tensor(segmentOf, { dtype: 'int64' });
        const context = torch.tensor(contextOf, { dtype: 'int64' });
        const index = torch.arange(tokens);
        const same = segment
          .view([tokens, 1])
          .eq(segment.view([1, tokens]))
          .logicalAnd(index.view([1, tokens]).le(index.view([tokens, 1])));
        const mask = same.logicalOr(context.view([tokens, 1]).eq(segment.view([1, tokens]))).view([1, 1, tokens, tokens]);
        return (q, k, v) => attention(q, k, v, mask).transpose(1, 2).reshape([1, tokens, -1]);
      },
    ],
  ];
  torch.manualSeed(0);
  const [q, k, v] = [torch.randn([1, 4, tokens, 32]), torch.randn([1, 2, tokens, 32]), torch.randn([1, 2, tokens, 32])].map((t) =>
    torch.keep(t.requiresGrad_()),
  ) as [torch.Tensor, torch.Tensor, torch.Tensor];
  let reference: torch.Tensor | null = null;
  const out: AttentionFigures[] = [];
  try {
    for (const [method, make] of methods) {
      const seconds: number[] = [];
      const cpuSeconds: number[] = [];
      let maxDiff = 0;
      let calls = 1;
      for (let r = 0; r < reps + 1; r++) {
        torch.scope(() => {
          const t0 = now();
          const cpu0 = process.cpuUsage();
          const run = make();
          const result = run(q, k, v);
          result.square().sum().backward();
          if (r > 0) {
            seconds.push(secondsSince(t0));
            const cpu = process.cpuUsage(cpu0);
            cpuSeconds.push((cpu.user + cpu.system) / 1e6);
          }
          if (reference === null) reference = torch.keep(result.detach());
          maxDiff = result.detach().sub(reference).abs().max().item();
          calls = (run as { calls?: number }).calls ?? 1;
          for (const t of [q, k, v]) t.grad = null;
        });
      }
      out.push({ tokens, method, calls, seconds: median(seconds), cpuSeconds: median(cpuSeconds), maxDiff });
    }
  } finally {
    (reference as torch.Tensor | null)?.dispose();
    for (const t of [q, k, v]) t.dispose();
  }
  return out;
}

/** packedAttention over `layout` with a bucket rule; `calls`: its buckets. */
function packedAttentionWith(layout: PackedLayout, tokens: number, rule: BucketRule) {
  const pass = packedPass(layout, tokens, 'cpu', rule);
  return Object.assign((q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) => packedAttention(q, k, v, pass), {
    calls: pass.buckets.length,
  });
}

/** Lognormal response lengths: median · e^(σ z), z standard normal (Box–Muller), rounded, in [1, cap]. */
const lognormal = (medianTokens: number, sigma: number, cap: number) => (uniform: () => number) => {
  const z = Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
  return Math.max(1, Math.min(cap, Math.round(medianTokens * Math.exp(sigma * z))));
};

async function main(): Promise<void> {
  if (flags.help) {
    console.log(HELP);
    return;
  }
  const steps = positiveFlag('steps', flags.steps);
  const warmup = Number(flags.warmup);
  if (!Number.isInteger(warmup) || warmup < 0) throw new Error(`--warmup must be a non-negative integer, got ${flags.warmup}`);
  const sigma = Number(flags.sigma);
  if (!(sigma >= 0 && sigma <= 3)) throw new Error(`--sigma must be a number in [0, 3], got ${flags.sigma}`);
  const medianTokens = positiveFlag('median', flags.median);
  const cap = positiveFlag('cap', flags.cap);
  const threads = positiveFlag('threads', flags.threads);
  if (flags.only !== undefined && !['quickstart', 'long-tail', 'attention'].includes(flags.only))
    throw new Error(`--only must be quickstart, long-tail or attention, got ${flags.only}`);
  torch.setNumThreads(threads);
  const workloads: Workload[] = [
    {
      name: 'quickstart',
      prompts: positiveFlag('qs-prompts', flags['qs-prompts']),
      samples: 16,
      promptTokens: [12, 16],
      responseLength: (uniform: () => number) => 3 + Math.floor(uniform() * 3),
      microBatchSize: 256,
    },
    {
      name: 'long-tail',
      prompts: positiveFlag('prompts', flags.prompts),
      samples: positiveFlag('samples', flags.samples),
      promptTokens: [50, 500],
      responseLength: lognormal(medianTokens, sigma, cap),
      microBatchSize: positiveFlag('micro', flags.micro),
    },
  ].filter(
    (w) => flags.only === undefined || w.name === flags.only || (flags.only === 'attention' && w.name === 'long-tail'),
  ) as Workload[];
  const work = mkdtempSync(join(os.tmpdir(), 'trinity-packing-'));
  try {
    const modelDir = join(work, 'model');
    const { parameters } = initModel(modelDir, {
      ...QUICKSTART_MODEL,
      architecture: 'qwen2',
      maxPositionEmbeddings: 2048,
      seed: 0,
    });
    const vocab = (JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8')) as { vocab_size: number }).vocab_size;
    const cpu = cpuFeatures();
    const loadStart = os.loadavg()[0]?.toFixed(2);
    console.log(
      `libtorch ${torch.buildInfo().torchVersion}; ${cpu.model} (${os.cpus().length} cores; features ${cpu.features.join(' ') || 'unknown'}), ` +
        `load avg ${loadStart}; model ${(parameters / 1e6).toFixed(2)}M parameters, ${threads} threads`,
    );
    const p99 = Math.min(cap, Math.round(medianTokens * Math.exp(2.326 * sigma)));
    const longTail = workloads.find((w) => w.name === 'long-tail');
    const attentionFigures = longTail ? attentionMethods(batch(longTail, 0, vocab), steps) : [];
    if (attentionFigures.length > 0)
      table(
        `Packed attention on the CPU, one layer forward + backward (long-tail batch 0: ${attentionFigures[0]?.tokens} tokens)`,
        ['method', 'calls', 'ms', 'CPU ms', 'max |diff|'],
        attentionFigures.map((f) => [
          f.method,
          String(f.calls),
          fmt(f.seconds * 1000, 1),
          fmt(f.cpuSeconds * 1000, 1),
          f.maxDiff.toExponential(1),
        ]),
      );
    const budget = Number(flags.budget);
    if (!Number.isInteger(budget) || budget < 0) throw new Error(`--budget must be a non-negative integer, got ${flags.budget}`);
    const results: Record<string, WorkloadFigures> = {};
    for (const w of flags.only === 'attention' ? [] : workloads)
      results[w.name] = runWorkload(modelDir, vocab, w, steps, warmup, w.name === 'long-tail' ? budget : 0);
    const loadAfter = os.loadavg()[0]?.toFixed(2);
    const rowsOf = (name: string, f: WorkloadFigures) =>
      [
        ['padded', f.padded, null],
        ['packed', f.packed, [f.speedup, f.cpuSpeedup]],
        ...(f.budget
          ? [[`packed, budget ${f.budget.maxTokenLenPerGpu}`, f.budget, [f.budget.speedup, f.budget.cpuSpeedup]]]
          : []),
      ].map(([layout, g, speedups]) => {
        const figures = g as LayoutFigures;
        const up = speedups as [number, number] | null;
        return [
          name,
          layout as string,
          String(f.rows),
          String(f.realTokens),
          String(figures.computedTokens),
          fmt(figures.realShare, 3),
          fmt(figures.stepSeconds, 3),
          fmt(figures.cpuSeconds, 3),
          up === null ? '' : `${fmt(up[0])}x`,
          up === null ? '' : `${fmt(up[1])}x`,
        ];
      });
    table(
      `GRPO step, padded vs packed rows (median of ${steps} steps after ${warmup} warm-up; load avg ${loadAfter} at the end)`,
      [
        'workload',
        'layout',
        'rows',
        'real tokens',
        'computed',
        'real/computed',
        's/step',
        'CPU s/step',
        'speed-up',
        'CPU speed-up',
      ],
      Object.entries(results).flatMap(([name, f]) => rowsOf(name, f)),
    );
    console.log(
      JSON.stringify({
        bench: 'packing',
        libtorch: torch.buildInfo().torchVersion,
        cpu: cpu.model,
        cpuFeatures: cpu.features,
        threads,
        parameters,
        steps,
        loadAverage: { start: Number(loadStart), end: Number(loadAfter) },
        longTail: { promptTokens: [50, 500], responses: { distribution: 'lognormal', median: medianTokens, sigma, p99, cap } },
        ...results,
        attention: Object.fromEntries(
          attentionFigures.map((f) => [f.method, { calls: f.calls, ms: r2(f.seconds * 1000), cpuMs: r2(f.cpuSeconds * 1000) }]),
        ),
      }),
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
