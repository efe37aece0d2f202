// Fully sharded training's per-rank state and step time on CPU: `node --import tsx bench/fsdp.bench.ts [--help]`.
//
// A GRPO step (64 rows: prompts of 32 tokens, responses of 6, made-up rewards and rollout log-probs) on the
// quickstart's model shape (qwen2, hidden 128, 4 layers, 4 heads, 2 KV heads; float32, gradient checkpointing on in
// every layout), the same global batches in each layout:
//   1 process                 TrainerClient alone
//   ZeRO-1, N ranks           init.distributed with zeroStage 1 (AdamW state sharded; parameters and gradients whole)
//   FSDP, N ranks             init.distributed with strategy 'fsdp' (parameters, gradients and AdamW state sharded)
//   FSDP without prefetch     the same, each layer's gather issued only when the layer is reached (smallest N only)
// for N = 2 and 4 (Gloo, one intra-op thread per rank; the one process gets --threads). Per rank it reports the bytes
// of parameters, gradients (as many as the step holds at once) and AdamW state, and for FSDP the most bytes of gathered
// layers held at once (the gather buffers); the step time is rank 0's median over --steps after --warmup. Prints a
// table and one JSON line.
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
import { cpuFeatures, fmt, integerFlag, median, now, positiveFlag, secondsSince, table } from './harness.js';
import { QUICKSTART_MODEL } from '../src/cli/quickstart.js';

const HELP = `Fully sharded training: per-rank state bytes and step time against ZeRO-1 and one process (GRPO, quickstart shape).
  node --import tsx bench/fsdp.bench.ts [--steps N] [--warmup N] [--threads N] [--ranks 2,4]`;

const { values: flags } = parseArgs({
  options: {
    steps: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '1' },
    threads: { type: 'string', default: '2' },
    ranks: { type: 'string', default: '2,4' },
    child: { type: 'string' },
    help: { type: 'boolean' },
  },
});

const PROMPT = 32;
const RESPONSE = 6;
const ROWS = 64;

type Layout = 'one' | 'zero' | 'fsdp' | 'fsdp-no-prefetch';

interface ChildPlan {
  modelDir: string;
  jobDir: string;
  layout: Layout;
  rank: number;
  worldSize: number;
  threads: number;
  port: number;
  steps: number;
  warmup: number;
}

/** One rank's state, in bytes. */
interface RankBytes {
  parameters: number;
  gradients: number;
  optimizer: number;
  gathered: number;
}

/** A reproducible GRPO batch (token ids below the model's vocabulary size). */
function batch(step: number, vocab: number): Experience[] {
  let state = 1 + step * 7919;
  const next = () => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return state / 2 ** 31;
  };
  const token = () => 3 + Math.floor(next() * (vocab - 3));
  return Array.from({ length: ROWS }, (_, i) => ({
    eid: `s${step}-${i}`,
    tokens: Array.from({ length: PROMPT + RESPONSE }, token),
    promptLength: PROMPT,
    logprobs: Array.from({ length: RESPONSE }, () => -1 - next()),
    reward: next() < 0.5 ? 1 : 0,
    info: { taskId: `t${Math.floor(i / 8)}`, runId: i % 8 },
  }));
}

function init(plan: ChildPlan): TrainerInit {
  return {
    jobDir: plan.jobDir,
    resume: false,
    modelPath: plan.modelDir,
    dtype: 'float32',
    algorithm: { algorithm_type: 'grpo', optimizer: { lr: 2e-4 } },
    pluginBaseDir: plan.modelDir,
    lora: null,
    loraPath: null,
    criticModelPath: null,
    totalSteps: plan.steps + plan.warmup,
    microBatchSize: null,
    gradientCheckpointing: true,
    padTokenId: 0,
    seed: 0,
    numThreads: plan.threads,
    distributed:
      plan.layout === 'one'
        ? null
        : {
            rank: plan.rank,
            worldSize: plan.worldSize,
            masterAddr: '127.0.0.1',
            masterPort: plan.port,
            timeoutMs: 600_000,
            ...(plan.layout === 'zero'
              ? { zeroStage: 1 as const }
              : { strategy: 'fsdp' as const, prefetch: plan.layout === 'fsdp' }),
          },
  };
}

/** This rank's state bytes: the sharded trainer's own account, else its optimizer's elements (float32). */
async function rankBytes(trainer: TrainerClient): Promise<RankBytes> {
  const sharded = await trainer.shardedStateBytes();
  if (sharded !== null)
    return {
      parameters: sharded.parameters,
      gradients: sharded.peakGradients,
      optimizer: sharded.optimizer,
      gathered: sharded.peakGathered,
    };
  const { local, parameters } = await trainer.optimizerStateElements();
  return { parameters: 4 * parameters, gradients: 4 * parameters, optimizer: 4 * local, gathered: 0 };
}

async function childMain(plan: ChildPlan): Promise<void> {
  const { trainer } = await TrainerClient.start(init(plan));
  const seconds: number[] = [];
  const vocab = (JSON.parse(readFileSync(join(plan.modelDir, 'config.json'), 'utf8')) as { vocab_size: number }).vocab_size;
  let bytes: RankBytes;
  if (plan.rank === 0) {
    for (let s = 0; s < plan.warmup + plan.steps; s++) {
      const experiences = batch(s, vocab);
      const t0 = now();
      await trainer.step(experiences);
      if (s >= plan.warmup) seconds.push(secondsSince(t0));
    }
    bytes = await rankBytes(trainer);
  } else {
    await trainer.follow();
    bytes = await rankBytes(trainer);
  }
  await trainer.close();
  await new Promise<void>((resolve) => (process.send ? process.send({ seconds, bytes }, () => resolve()) : resolve()));
  process.disconnect?.();
}

/** One layout's run: rank 0's step times and every rank's bytes. */
async function run(plan: Omit<ChildPlan, 'rank' | 'port'>): Promise<{ seconds: number[]; bytes: RankBytes[] }> {
  const port = await freePort();
  const script = fileURLToPath(import.meta.url);
  const results = await Promise.all(
    Array.from({ length: plan.worldSize }, (_, rank) => {
      const child = fork(script, ['--child', JSON.stringify({ ...plan, rank, port })], {
        execArgv: ['--import', 'tsx'],
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      return new Promise<{ seconds: number[]; bytes: RankBytes }>((resolve, reject) => {
        let message: { seconds: number[]; bytes: RankBytes } | null = null;
        child.on('message', (m: { seconds: number[]; bytes: RankBytes }) => {
          message = m;
        });
        child.on('exit', (code) =>
          code === 0 && message !== null ? resolve(message) : reject(new Error(`rank ${rank} exited with ${code}`)),
        );
      });
    }),
  );
  return { seconds: results[0]?.seconds ?? [], bytes: results.map((r) => r.bytes) };
}

const MIB = 2 ** 20;
const mib = (bytes: number) => fmt(bytes / MIB, 3);

async function parentMain(): Promise<void> {
  const steps = positiveFlag('steps', flags.steps as string);
  const warmup = integerFlag('warmup', flags.warmup as string, 0);
  const threads = positiveFlag('threads', flags.threads as string);
  // (one rank is one process, the baseline every row is compared with)
  const rankCounts = (flags.ranks as string).split(',').map((n) => integerFlag('ranks', n, 2));
  const work = mkdtempSync(join(os.tmpdir(), 'trinity-fsdp-bench-'));
  try {
    const modelDir = join(work, 'model');
    const { parameters } = initModel(modelDir, { ...QUICKSTART_MODEL, architecture: 'qwen2', seed: 0 });
    console.log(
      `libtorch ${torch.buildInfo().torchVersion}; ${os.cpus()[0]?.model ?? 'cpu'} (${os.cpus().length} cores; features ` +
        `${cpuFeatures().features.join(' ') || 'unknown'}), load avg ${os.loadavg()[0]?.toFixed(2)}; model ${(parameters / 1e6).toFixed(2)}M parameters`,
    );
    const base = { modelDir, steps, warmup };
    const rows: { layout: string; ranks: number; seconds: number; bytes: RankBytes }[] = [];
    const one = await run({ ...base, jobDir: join(work, 'one'), layout: 'one', worldSize: 1, threads });
    rows.push({ layout: 'one process', ranks: 1, seconds: median(one.seconds), bytes: one.bytes[0] as RankBytes });
    for (const n of rankCounts) {
      // prefetch off on the smallest group only: what the overlap of the next layer's gather saves
      const layouts = n === rankCounts[0] ? (['zero', 'fsdp', 'fsdp-no-prefetch'] as const) : (['zero', 'fsdp'] as const);
      for (const layout of layouts) {
        const r = await run({ ...base, jobDir: join(work, `${layout}-${n}`), layout, worldSize: n, threads: 1 });
        // the largest rank's figures (ranks differ by their padding and by the shard boundaries)
        const largest = (key: keyof RankBytes) => Math.max(...r.bytes.map((b) => b[key]));
        rows.push({
          layout: { zero: 'ZeRO-1', fsdp: 'FSDP', 'fsdp-no-prefetch': 'FSDP, no prefetch' }[layout],
          ranks: n,
          seconds: median(r.seconds),
          bytes: {
            parameters: largest('parameters'),
            gradients: largest('gradients'),
            optimizer: largest('optimizer'),
            gathered: largest('gathered'),
          },
        });
      }
    }
    const whole = rows[0]?.bytes as RankBytes;
    const wholeState = whole.parameters + whole.gradients + whole.optimizer;
    table(
      `per-rank state (MiB; the largest rank) and step time (median s, ${steps} steps after ${warmup} warm-up)`,
      ['layout', 'ranks', 'parameters', 'gradients', 'AdamW state', 'gather buffers', 'total / one process', 'step s'],
      rows.map((r) => [
        r.layout,
        String(r.ranks),
        mib(r.bytes.parameters),
        mib(r.bytes.gradients),
        mib(r.bytes.optimizer),
        mib(r.bytes.gathered),
        fmt((r.bytes.parameters + r.bytes.gradients + r.bytes.optimizer + r.bytes.gathered) / wholeState, 3),
        fmt(r.seconds, 3),
      ]),
    );
    console.log(
      JSON.stringify({
        bench: 'fsdp',
        cpu: os.cpus()[0]?.model ?? 'unknown',
        cores: os.cpus().length,
        parameters,
        steps,
        rows: rows.map((r) => ({ layout: r.layout, ranks: r.ranks, stepSeconds: r.seconds, ...r.bytes })),
      }),
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

if (flags.help) console.log(HELP);
else if (flags.child !== undefined) await childMain(JSON.parse(flags.child) as ChildPlan);
else await parentMain();
