// Token-budget micro-batches against row-count ones: `node --import tsx bench/dynamic-bsz.bench.ts [--help]`
// (npm run bench:dynamic-bsz).
//
// GRPO train steps (src/rft/trainer/train-step.ts, kl_loss_fn none, gradient checkpointing on as trainer's default) on
// a random qwen2 (hidden 128, 4 layers, 4 heads, 2 KV heads; float32) over the same rows each way:
//   rows      --prompts prompts × --samples samples; prompts of 30-120 tokens (uniform), responses lognormal: median
//             --median tokens, σ --sigma (ln-space), capped at --cap (max_response_tokens), at least 1; rewards and
//             rollout log-probs made up (the step's cost does not depend on them); a new draw per step, the same
//             draws for both splits
//   rows      trainer.micro_batch_size --micro rows per micro-batch, at the batch's widths (use_dynamic_bsz false)
//   tokens    trainer.use_dynamic_bsz with max_token_len_per_gpu --budget: each micro-batch at its own widths
// Figures: positions computed per step (pads included; src/model/training.ts computedPositions: shared prompts once),
// the largest micro-batch's positions, useful tokens (each distinct prompt once, every response) / computed, median
// step time, and the process's peak RSS (each
// split runs in its own child process, ABBA: rows, tokens, tokens, rows; the figure is the larger of a split's two
// peaks). Prints the CPU, a table and one JSON line.
import { fork } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { CausalLM, computedPositions, initModel } from '../src/model/index.js';
import { resolveAlgorithm } from '../src/rft/algorithm/index.js';
import type { Experience } from '../src/rft/experience.js';
import { microBatches } from '../src/rft/trainer/micro-batches.js';
import { microBatchTokens, tokenBudgetMicroBatches } from '../src/rft/trainer/token-budget.js';
import { rowPromptGroups } from '../src/rft/trainer/train-batch.js';
import { TrainStep } from '../src/rft/trainer/train-step.js';
import * as torch from '../src/torch/index.js';
import { cpuFeatures, fmt, median, now, positiveFlag, r2, r3, secondsSince, table } from './harness.js';
import { QUICKSTART_MODEL } from '../src/cli/quickstart.js';

const HELP = `GRPO steps on long-tail response lengths: micro-batches by rows against micro-batches by a token budget.
  node --import tsx bench/dynamic-bsz.bench.ts [--steps N] [--warmup N] [--prompts N] [--samples N] [--median N]
    [--sigma X] [--cap N] [--micro N] [--budget N] [--threads N]`;

const { values: flags } = parseArgs({
  options: {
    steps: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '1' },
    prompts: { type: 'string', default: '4' },
    samples: { type: 'string', default: '8' },
    median: { type: 'string', default: '100' },
    sigma: { type: 'string', default: '1' },
    cap: { type: 'string', default: '768' },
    micro: { type: 'string', default: '4' },
    budget: { type: 'string', default: '4096' },
    threads: { type: 'string', default: '2' },
    child: { type: 'string' },
    help: { type: 'boolean' },
  },
});

interface Workload {
  prompts: number;
  samples: number;
  median: number;
  sigma: number;
  cap: number;
}

interface ChildPlan {
  modelDir: string;
  split: 'rows' | 'tokens';
  micro: number;
  budget: number;
  steps: number;
  warmup: number;
  threads: number;
  workload: Workload;
}

/** A reproducible GRPO batch of the long-tail workload (see the header). */
function batch(w: Workload, step: number, vocab: number): Experience[] {
  let state = 1 + step * 7919;
  const uniform = () => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return (state + 0.5) / 2 ** 31;
  };
  const gaussian = () => Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform()); // Box–Muller
  const token = () => 3 + Math.floor(uniform() * (vocab - 3));
  return Array.from({ length: w.prompts }, (_, task) => {
    const prompt = Array.from({ length: 30 + Math.floor(uniform() * 91) }, token);
    return Array.from({ length: w.samples }, (_, run): Experience => {
      const length = Math.max(1, Math.min(w.cap, Math.round(w.median * Math.exp(w.sigma * gaussian()))));
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

/** Positions computed per step by each split, and the largest micro-batch's (pads included; shared prompts once). */
function positions(rows: Experience[], micro: number, budget: number) {
  const groups = rowPromptGroups(rows);
  const P = Math.max(...rows.map((e) => e.promptLength));
  const R = Math.max(...rows.map((e) => e.tokens.length - e.promptLength));
  const byRows = microBatches(rows.length, micro).map(
    ({ start, n }) => computedPositions(n, P + R, P, new Set(groups.slice(start, start + n)).size).positions,
  );
  const byTokens = tokenBudgetMicroBatches(rows, groups, 1, budget).plan.map(({ start, n }) =>
    microBatchTokens(rows, groups, start, n),
  );
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  return {
    // useful tokens: each distinct prompt once (the layouts share it) and every response
    real:
      sum([...new Map(rows.map((e, b) => [groups[b], e.promptLength])).values()]) +
      sum(rows.map((e) => e.tokens.length - e.promptLength)),
    rows: { total: sum(byRows), largest: Math.max(...byRows), microBatches: byRows.length },
    tokens: { total: sum(byTokens), largest: Math.max(...byTokens), microBatches: byTokens.length },
  };
}

async function childMain(plan: ChildPlan): Promise<void> {
  torch.setNumThreads(plan.threads);
  const vocab = (JSON.parse(readFileSync(join(plan.modelDir, 'config.json'), 'utf8')) as { vocab_size: number }).vocab_size;
  const model = CausalLM.load(plan.modelDir, { requiresGrad: true });
  const step = new TrainStep({
    model,
    optimizer: new torch.AdamW([...model.parameters().values()], { lr: 1e-4 }),
    algorithm: resolveAlgorithm({ algorithm_type: 'grpo', kl_loss_fn: 'none' }),
    checkpoint: true,
    ...(plan.split === 'rows' ? { microBatchSize: plan.micro } : { microBatchTokens: plan.budget }),
  });
  const seconds: number[] = [];
  for (let s = 0; s < plan.warmup + plan.steps; s++) {
    const rows = batch(plan.workload, s, vocab);
    const t0 = now();
    step.run(rows);
    if (s >= plan.warmup) seconds.push(secondsSince(t0));
  }
  const peakRssMiB = process.resourceUsage().maxRSS / 1024;
  await new Promise<void>((resolve) => (process.send ? process.send({ seconds, peakRssMiB }, () => resolve()) : resolve()));
  process.disconnect?.();
}

/** One split's run in a child process: its step times and peak RSS. */
function runSplit(plan: ChildPlan): Promise<{ seconds: number[]; peakRssMiB: number }> {
  const child = fork(fileURLToPath(import.meta.url), ['--child', JSON.stringify(plan)], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    let result: { seconds: number[]; peakRssMiB: number } | null = null;
    child.on('message', (m: { seconds: number[]; peakRssMiB: number }) => {
      result = m;
    });
    child.on('exit', (code) =>
      code === 0 && result !== null ? resolve(result) : reject(new Error(`${plan.split} exited with ${code}`)),
    );
  });
}

async function parentMain(): Promise<void> {
  const steps = positiveFlag('steps', flags.steps);
  const warmup = Number(flags.warmup);
  if (!Number.isInteger(warmup) || warmup < 0) throw new Error(`--warmup must be a non-negative integer, got ${flags.warmup}`);
  const sigma = Number(flags.sigma);
  if (!(sigma >= 0 && sigma <= 3)) throw new Error(`--sigma must be a number in [0, 3], got ${flags.sigma}`);
  const workload: Workload = {
    prompts: positiveFlag('prompts', flags.prompts),
    samples: positiveFlag('samples', flags.samples),
    median: positiveFlag('median', flags.median),
    sigma,
    cap: positiveFlag('cap', flags.cap),
  };
  const micro = positiveFlag('micro', flags.micro);
  const budget = positiveFlag('budget', flags.budget);
  const threads = positiveFlag('threads', flags.threads);
  const work = mkdtempSync(join(os.tmpdir(), 'trinity-dynamic-bsz-'));
  try {
    const modelDir = join(work, 'model');
    const { parameters } = initModel(modelDir, {
      ...QUICKSTART_MODEL,
      architecture: 'qwen2',
      maxPositionEmbeddings: 1024,
      seed: 0,
    });
    const cpu = cpuFeatures();
    console.log(
      `libtorch ${torch.buildInfo().torchVersion}; ${cpu.model} (${os.cpus().length} cores; features ${cpu.features.join(' ') || 'unknown'}), ` +
        `load avg ${os.loadavg()[0]?.toFixed(2)}; model ${(parameters / 1e6).toFixed(2)}M parameters, ${threads} threads`,
    );
    const vocab = (JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8')) as { vocab_size: number }).vocab_size;
    const counted = Array.from({ length: warmup + steps }, (_, s) => positions(batch(workload, s, vocab), micro, budget)).slice(
      warmup,
    );
    const mean = (pick: (c: (typeof counted)[number]) => number) => counted.reduce((a, c) => a + pick(c), 0) / counted.length;
    const base = { modelDir, micro, budget, steps, warmup, threads, workload };
    const a1 = await runSplit({ ...base, split: 'rows' });
    const b1 = await runSplit({ ...base, split: 'tokens' });
    const b2 = await runSplit({ ...base, split: 'tokens' });
    const a2 = await runSplit({ ...base, split: 'rows' });
    const figure = (split: 'rows' | 'tokens', x: typeof a1, y: typeof a1) => ({
      computedPositions: mean((c) => c[split].total),
      largestMicroBatchPositions: Math.max(...counted.map((c) => c[split].largest)),
      microBatches: mean((c) => c[split].microBatches),
      realOverComputed: mean((c) => c.real) / mean((c) => c[split].total),
      stepSeconds: median([...x.seconds, ...y.seconds]),
      peakRssMiB: Math.max(x.peakRssMiB, y.peakRssMiB),
    });
    const rows = figure('rows', a1, a2);
    const tokens = figure('tokens', b1, b2);
    table(
      `GRPO step, ${workload.prompts}×${workload.samples} rows, responses lognormal(median ${workload.median}, σ ${sigma}) ≤ ${workload.cap} (mean of ${steps} steps; time: median of ${steps} × 2 runs, ABBA)`,
      ['split', 'micro-batches', 'computed positions', 'largest micro-batch', 'useful / computed', 'step s', 'peak RSS MiB'],
      [
        [`rows (micro_batch_size ${micro})`, rows],
        [`tokens (max_token_len_per_gpu ${budget})`, tokens],
      ].map(([name, f]) => {
        const g = f as typeof rows;
        return [
          name as string,
          fmt(g.microBatches, 1),
          fmt(g.computedPositions, 0),
          String(g.largestMicroBatchPositions),
          fmt(g.realOverComputed, 3),
          fmt(g.stepSeconds, 3),
          fmt(g.peakRssMiB, 0),
        ];
      }),
    );
    console.log(
      JSON.stringify({
        bench: 'dynamic-bsz',
        cpu: cpu.model,
        cores: os.cpus().length,
        features: cpu.features,
        loadAvg: os.loadavg()[0],
        threads,
        parametersM: r2(parameters / 1e6),
        workload,
        microBatchSize: micro,
        maxTokenLenPerGpu: budget,
        steps,
        rows: {
          ...rows,
          realOverComputed: r3(rows.realOverComputed),
          stepSeconds: r3(rows.stepSeconds),
          peakRssMiB: r2(rows.peakRssMiB),
        },
        tokens: {
          ...tokens,
          realOverComputed: r3(tokens.realOverComputed),
          stepSeconds: r3(tokens.stepSeconds),
          peakRssMiB: r2(tokens.peakRssMiB),
        },
        ratios: {
          computedPositions: r3(tokens.computedPositions / rows.computedPositions),
          largestMicroBatch: r3(tokens.largestMicroBatchPositions / rows.largestMicroBatchPositions),
          stepTime: r3(tokens.stepSeconds / rows.stepSeconds),
          peakRss: r3(tokens.peakRssMiB / rows.peakRssMiB),
        },
      }),
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

if (flags.help) console.log(HELP);
else if (flags.child !== undefined) await childMain(JSON.parse(flags.child) as ChildPlan);
else await parentMain();
