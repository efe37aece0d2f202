// Data-parallel step time on CPU: `node --import tsx bench/dp-step.bench.ts [--help]`.
//
// The quickstart's train steps (examples/quickstart/config.yaml, its model shape from `trinity quickstart`: qwen2,
// hidden 128, 4 layers, 4 heads, 2 KV heads; float32) on two layouts of the same 2 cores:
//   1 process × 2 intra-op threads      TrainerClient alone
//   2 ranks × 1 intra-op thread         two processes, TrainerClient with init.distributed (Gloo, overlapped gradient
//                                       buckets; --zero 1 adds ZeRO-1)
// on the same global batches:
//   GRPO  batch_size 16 × repeat_times 16 = 256 rows, prompts of 32 tokens, responses of 6 (max_prompt_tokens,
//         max_response_tokens), rewards and rollout log-probs made up (the step's cost does not depend on them);
//         micro-batches: the whole batch split over the ranks (1 process: 256 rows; 2 ranks: 128 each)
//   SFT   train_batch_size 64 rows of 32 + 6 tokens, split the same way
// Each layout runs in child processes; the order is ABBA (1 process, 2 ranks, 2 ranks, 1 process) and each run takes
// --warmup steps then --steps timed ones; the figure is the median step time over both runs of a layout. Prints the
// CPU, a table and one JSON line.
import { fork } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort } from '../src/cli/launch.js';
import { initModel } from '../src/model/init.js';
import type { Experience } from '../src/rft/experience.js';
import { TrainerClient, type TrainerInit } from '../src/rft/trainer/trainer.js';
import * as torch from '../src/torch/index.js';
import { cpuFeatures, fmt, median, now, r3, secondsSince, table } from './harness.js';
import { QUICKSTART_MODEL } from '../src/cli/quickstart.js';

const HELP = `Data-parallel step time: 1 process × 2 threads against 2 ranks × 1 thread, the quickstart's GRPO and SFT steps.
  node --import tsx bench/dp-step.bench.ts [--steps N] [--warmup N] [--zero 0|1]`;

const { values: flags } = parseArgs({
  options: {
    steps: { type: 'string', default: '4' },
    warmup: { type: 'string', default: '1' },
    zero: { type: 'string', default: '0' },
    child: { type: 'string' },
    help: { type: 'boolean' },
  },
});

const PROMPT = 32;
const RESPONSE = 6;

interface ChildPlan {
  modelDir: string;
  jobDir: string;
  kind: 'grpo' | 'sft';
  rank: number;
  worldSize: number;
  threads: number;
  port: number;
  steps: number;
  warmup: number;
  zero: 0 | 1;
}

/** A reproducible batch of the quickstart's shape (token ids below the model's vocabulary size). */
function batch(kind: 'grpo' | 'sft', step: number, vocab: number): Experience[] {
  let state = 1 + step * 7919;
  const next = () => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return state / 2 ** 31;
  };
  const token = () => 3 + Math.floor(next() * (vocab - 3));
  const rows = kind === 'grpo' ? 256 : 64;
  return Array.from({ length: rows }, (_, i) => {
    const tokens = Array.from({ length: PROMPT + RESPONSE }, token);
    return kind === 'grpo'
      ? {
          eid: `s${step}-${i}`,
          tokens,
          promptLength: PROMPT,
          logprobs: Array.from({ length: RESPONSE }, () => -1 - next()),
          reward: next() < 0.5 ? 1 : 0,
          info: { taskId: `t${Math.floor(i / 16)}`, runId: i % 16 },
        }
      : { eid: `s${step}-${i}`, tokens, promptLength: PROMPT, info: {} };
  });
}

function init(plan: ChildPlan): TrainerInit {
  return {
    jobDir: plan.jobDir,
    resume: false,
    modelPath: plan.modelDir,
    dtype: 'float32',
    algorithm: { algorithm_type: plan.kind, optimizer: { lr: plan.kind === 'grpo' ? 2e-4 : 3e-3 } },
    pluginBaseDir: plan.modelDir,
    lora: null,
    loraPath: null,
    criticModelPath: null,
    totalSteps: plan.steps + plan.warmup,
    microBatchSize: null,
    gradientCheckpointing: false,
    padTokenId: 0,
    seed: 0,
    numThreads: plan.threads,
    distributed:
      plan.worldSize > 1
        ? {
            rank: plan.rank,
            worldSize: plan.worldSize,
            masterAddr: '127.0.0.1',
            masterPort: plan.port,
            timeoutMs: 600_000,
            zeroStage: plan.zero,
          }
        : null,
  };
}

async function childMain(plan: ChildPlan): Promise<void> {
  const { trainer } = await TrainerClient.start(init(plan));
  const seconds: number[] = [];
  const vocab = (JSON.parse(readFileSync(join(plan.modelDir, 'config.json'), 'utf8')) as { vocab_size: number }).vocab_size;
  if (plan.rank === 0) {
    for (let s = 0; s < plan.warmup + plan.steps; s++) {
      const experiences = batch(plan.kind, s, vocab);
      const t0 = now();
      await trainer.step(experiences);
      if (s >= plan.warmup) seconds.push(secondsSince(t0));
    }
  } else await trainer.follow();
  await trainer.close();
  await new Promise<void>((resolve) => (process.send ? process.send({ seconds }, () => resolve()) : resolve()));
  process.disconnect?.();
}

/** One layout's run: its processes, rank 0's step times. */
async function layout(plan: Omit<ChildPlan, 'rank' | 'port'>): Promise<number[]> {
  const port = await freePort();
  const script = fileURLToPath(import.meta.url);
  const children = Array.from({ length: plan.worldSize }, (_, rank) =>
    fork(script, ['--child', JSON.stringify({ ...plan, rank, port })], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    }),
  );
  const results = await Promise.all(
    children.map(
      (child, rank) =>
        new Promise<number[]>((resolve, reject) => {
          let seconds: number[] | null = null;
          child.on('message', (m: { seconds: number[] }) => {
            seconds = m.seconds;
          });
          child.on('exit', (code) =>
            code === 0 && seconds !== null ? resolve(seconds) : reject(new Error(`rank ${rank} exited with ${code}`)),
          );
        }),
    ),
  );
  return results[0] as number[];
}

async function parentMain(): Promise<void> {
  const steps = Number(flags.steps);
  const warmup = Number(flags.warmup);
  const zero = Number(flags.zero);
  if (!Number.isInteger(steps) || steps < 1) throw new Error(`--steps must be a positive integer, got ${flags.steps}`);
  if (!Number.isInteger(warmup) || warmup < 0) throw new Error(`--warmup must be a non-negative integer, got ${flags.warmup}`);
  if (zero !== 0 && zero !== 1) throw new Error(`--zero must be 0 or 1, got ${flags.zero}`);
  const work = mkdtempSync(join(os.tmpdir(), 'trinity-dp-step-'));
  try {
    const modelDir = join(work, 'model');
    // the quickstart's model (QUICKSTART_MODEL, trinity quickstart)
    const { parameters } = initModel(modelDir, { ...QUICKSTART_MODEL, architecture: 'qwen2', seed: 0 });
    console.log(
      `libtorch ${torch.buildInfo().torchVersion}; ${os.cpus()[0]?.model ?? 'cpu'} (${os.cpus().length} cores; features ` +
        `${cpuFeatures().features.join(' ') || 'unknown'}), load avg ${os.loadavg()[0]?.toFixed(2)}; model ${(parameters / 1e6).toFixed(2)}M parameters`,
    );
    const figures: Record<string, { oneProcess: number; ranks: number }> = {};
    for (const kind of ['grpo', 'sft'] as const) {
      const base = { modelDir, kind, steps, warmup, zero: zero as 0 | 1 };
      const one = () => layout({ ...base, jobDir: join(work, `${kind}-1`), worldSize: 1, threads: 2 });
      const two = () => layout({ ...base, jobDir: join(work, `${kind}-2`), worldSize: 2, threads: 1 });
      const a1 = await one();
      const b1 = await two();
      const b2 = await two();
      const a2 = await one();
      figures[kind] = { oneProcess: median([...a1, ...a2]), ranks: median([...b1, ...b2]) };
    }
    table(
      `step time (median s, ${steps} steps × 2 runs per layout, ABBA${zero === 1 ? ', ranks with ZeRO-1' : ''})`,
      ['step', '1 process × 2 threads', '2 ranks × 1 thread', 'ratio (2 ranks / 1 process)'],
      Object.entries(figures).map(([kind, f]) => [kind, fmt(f.oneProcess, 3), fmt(f.ranks, 3), fmt(f.ranks / f.oneProcess, 2)]),
    );
    console.log(
      JSON.stringify({
        bench: 'dp-step',
        cpu: os.cpus()[0]?.model ?? 'unknown',
        cores: os.cpus().length,
        features: cpuFeatures().features,
        loadAvg: os.loadavg()[0],
        zeroStage: zero,
        steps,
        figures: Object.fromEntries(
          Object.entries(figures).map(([k, f]) => [k, { oneProcessSeconds: r3(f.oneProcess), twoRanksSeconds: r3(f.ranks) }]),
        ),
      }),
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

if (flags.help) console.log(HELP);
else if (flags.child !== undefined) await childMain(JSON.parse(flags.child) as ChildPlan);
else await parentMain();
