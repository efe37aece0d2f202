// GRPO benchmark, side by side with TRL: `node --import tsx bench/grpo.bench.ts [--help]`.
//
// The quickstart's GRPO stage (examples/quickstart/config.yaml: its model settings, algorithm, batch, group size,
// max tokens, learning rate and warm-up, rollout temperature, taskset files) run from several SFT checkpoints (one
// per quickstart seed), for the same number of steps, each through:
//   ours  `trinity run` on a one-stage copy of the config (mode both: rollouts on the engine's worker thread, training
//         on the trainer's), in a child process; figures from its metrics.jsonl. The quickstart's stage runs
//         strictly on-policy (sync_offset 0); the same stage also runs with another offset as a third column
//         (--compare-offset: by default 1, one step off-policy: the next step's rollouts are sampled while this step
//         trains; 0 when the config's stage has an offset).
//   TRL   GRPOTrainer (bench/grpo_trl.py, in a child process), with the same settings mapped to GRPOConfig
// Both sides use the seed of the checkpoint (ours: engine sampling; TRL: GRPOConfig.seed) and, by default, train on the
// same tasks in the same order (--task-order shared: one seeded shuffle of the train file per seed, read in order by
// both), so that what differs between them is the algorithm's implementation and the sampling's random draws. The
// runs go one after the other (each is a whole training run), each with the machine's cores.
//
// Every run saves its model every --eval-every steps; afterwards one Python process scores the starting model and
// every saved model with the same eval (grpo_trl.py --eval-only: transformers generate, greedy, the model's chat
// template, every eval problem). So the accuracies are at equal samples (step s = s × batch × group rollouts on every
// side) and on one clock per side that counts rollouts + training only:
//   ours  t(s) = time(s) − time(1) + rollout_s(1) + train_s(1)   (metrics.jsonl: each step's line is written when
//         its training ends; the first step's own rollout + train time stands for its start; no eval runs in-stage)
//   TRL   t(s) = Σ_{i ≤ s} step_s(i)                              (on_step_begin → on_step_end: generation + update;
//         the checkpoint saves fall between steps, outside it)
// Time to target: the first eval step whose accuracy ≥ start + --target-gain, on that clock; TRL / ours is the speed-up
// to the same accuracy. It prints a table per seed, a summary over seeds (mean and min–max), and ends with one JSON
// line of figures (with the CPU's vector features and the thread counts).
//
// Setup: the model of seed N is the quickstart's SFT checkpoint (runs/quickstart/addition/sft/final_model for seed 0,
// runs/quickstart/addition-seedN/sft/final_model otherwise); when it is missing the bench runs `trinity quickstart
// --seed N` first, which makes it. --models DIR,DIR,... gives the checkpoints instead.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import YAML from 'yaml';
import { evalSchedule, firstReaching, ourClock, perSampleVerdict, spread, summedClock } from './grpo-figures.js';
import { asDoc, at, type Doc, merge, readGrpoStage, sharedTaskOrder } from './grpo-stage.js';
import {
  AVX2_ONLY_ENV,
  cpuFeatures,
  findPython,
  fmt,
  median,
  now,
  pythonMklEnv,
  r2,
  r3,
  repoRoot,
  secondsSince,
  table,
} from './harness.js';

const benchStart = now();

const HELP = `GRPO benchmark: the quickstart's GRPO stage through this framework and through TRL's GRPOTrainer, from
several SFT checkpoints; held-out greedy accuracy at equal samples and time to a target accuracy.
  node --import tsx bench/grpo.bench.ts [options]

  --seeds N,N,...    seeds (default 0,1,2): seed N starts from quickstart seed N's SFT checkpoint (made by
                     trinity quickstart --seed N when missing) and seeds both sides
  --models DIR,...   starting models instead (one per seed; seeds default to 0,1,2,... in this order)
  --config FILE      config whose GRPO stage is benchmarked (default examples/quickstart/config.yaml)
  --steps N          training steps on each side (default: the stage's total_steps)
  --eval-every K     steps between the saved models that are evaluated (default: the config's
                     explorer.eval_interval, else 30); the last step is always evaluated
  --target-gain P    accuracy target = start accuracy + P (default 0.10: +10 points), per seed
  --threads N        intra-op threads: TRL's side uses N, ours gets a budget of N (OMP_NUM_THREADS) and splits
                     it as trinity run does: half each to the explorer and the trainer when they overlap
                     (default: the core count)
  --isa native|avx2  avx2 runs both sides as on a CPU without AVX-512 (ATEN_CPU_CAPABILITY=avx2,
                     MKL_ENABLE_INSTRUCTIONS=AVX2, ONEDNN_MAX_CPU_ISA=AVX2; our packed kernel follows libtorch's
                     setting); default native
  --python-mkl default|ours
                     MKL's vendor check in the Python processes (TRL, the evals): default leaves MKL's own (its
                     AVX-512 code on Intel CPUs only, as PyTorch runs out of the box); ours answers it as our addon
                     does (torch.blasInfo(): AVX-512 code on any CPU with it; LD_PRELOAD of a shim built with cc)
  --task-order shared|own
                     shared (default): both sides train on the same tasks in the same order, one seeded shuffle of
                     the train file per seed (ours reads it sequentially, TRL with shuffle_dataset off); own: each
                     side shuffles with the seed itself (ours' task selector, TRL's sampler)
  --compare-offset N|none
                     also run ours with synchronizer.sync_offset N as a third column (default: 0, strictly
                     on-policy, when the config's stage has an offset; 1, one step off-policy, when it has none);
                     none: no third column
  --out DIR          working folder (default runs/bench-grpo; seed N's runs in DIR/seed-N)

Environment: TRINITY_BENCH_PYTHON (default .cache/python-ref/bin/python, which has trl).`;

const { values } = parseArgs({
  options: {
    seeds: { type: 'string' },
    models: { type: 'string' },
    config: { type: 'string' },
    steps: { type: 'string' },
    'eval-every': { type: 'string' },
    'target-gain': { type: 'string', default: '0.1' },
    threads: { type: 'string' },
    isa: { type: 'string', default: 'native' },
    'python-mkl': { type: 'string', default: 'default' },
    'task-order': { type: 'string', default: 'shared' },
    'compare-offset': { type: 'string' },
    out: { type: 'string' },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}

const integerList = (flag: string, text: string): number[] =>
  text.split(',').map((part) => {
    const n = Number(part.trim());
    if (part.trim() === '' || !Number.isInteger(n) || n < 0) throw new Error(`${flag}: '${part}' is not a non-negative integer`);
    return n;
  });
const givenModels = values.models?.split(',').map((m) => resolve(m.trim()));
const seeds =
  values.seeds !== undefined ? integerList('--seeds', values.seeds) : givenModels ? givenModels.map((_, i) => i) : [0, 1, 2];
if (givenModels && givenModels.length !== seeds.length) {
  throw new Error(
    `--models gives ${givenModels.length} folders but --seeds gives ${seeds.length} seeds: give one seed per model`,
  );
}
const quickstartModel = (seed: number) =>
  join(repoRoot, 'runs', 'quickstart', seed === 0 ? 'addition' : `addition-seed${seed}`, 'sft', 'final_model');
const models = givenModels ?? seeds.map(quickstartModel);
const threads = Number(values.threads ?? os.availableParallelism());
if (!Number.isInteger(threads) || threads < 1) throw new Error(`--threads must be a positive integer, got '${values.threads}'`);
// ours splits this budget (trinity run reads OMP_NUM_THREADS as its core budget)
const cores = threads;
const isa = values.isa;
if (isa !== 'native' && isa !== 'avx2') throw new Error(`--isa must be native or avx2, got '${isa}'`);
// what every child process (trinity run, TRL, the evals) runs with
const childEnv: NodeJS.ProcessEnv = {
  ...process.env,
  ...(values.threads !== undefined ? { OMP_NUM_THREADS: String(threads) } : {}),
  ...(isa === 'avx2' ? AVX2_ONLY_ENV : {}),
};
const pythonMkl = values['python-mkl'];
if (pythonMkl !== 'default' && pythonMkl !== 'ours') throw new Error(`--python-mkl must be default or ours, got '${pythonMkl}'`);
// the Python processes' extra environment: ours' answer to MKL's vendor check, read from the addon (native/src/blas.cpp)
const pythonEnv = pythonMkl === 'ours' ? pythonMklEnv('ours', (await import('../src/torch/index.js')).blasInfo().answer) : {};
const taskOrderMode = values['task-order'];
if (taskOrderMode !== 'shared' && taskOrderMode !== 'own') {
  throw new Error(`--task-order must be shared or own, got '${taskOrderMode}'`);
}
const targetGain = Number(values['target-gain']);
if (!Number.isFinite(targetGain) || targetGain <= 0 || targetGain >= 1) {
  throw new Error(`--target-gain must be in (0, 1) (a share of the eval problems), got '${values['target-gain']}'`);
}
const configFile = resolve(values.config ?? join(repoRoot, 'examples', 'quickstart', 'config.yaml'));
const outDir = resolve(values.out ?? join(repoRoot, 'runs', 'bench-grpo'));
const python = findPython();

/** Runs a command, collecting its output; resolves with its stdout. */
function run(command: string, args: string[], label: string): Promise<string> {
  return new Promise((done, fail) => {
    const env = command === python ? { ...childEnv, ...pythonEnv } : childEnv;
    const child = spawn(command, args, { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'], env });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
    });
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    child.on('error', fail);
    child.on('exit', (code) =>
      code === 0
        ? done(stdout)
        : fail(new Error(`${label} exited with ${code}:\n${stderr.slice(-4000)}\n${stdout.slice(-2000)}`)),
    );
  });
}

const lastJsonLine = (text: string): Doc => {
  const line = text
    .trim()
    .split('\n')
    .reverse()
    .find((l) => l.startsWith('{'));
  if (line === undefined) throw new Error(`no JSON line in:\n${text.slice(-2000)}`);
  return JSON.parse(line) as Doc;
};

const cpu = cpuFeatures();
const cpuFlags = `${cpu.features.filter((f) => f !== 'sse4_2' && f !== 'fma').join(', ') || 'none of avx2/avx512f/amx'}${isa === 'avx2' ? '; run as AVX2-only (--isa avx2)' : ''}`;

// --- the GRPO stage's settings --------------------------------------------------------------------------------------

const settings = readGrpoStage(configFile);
const { stage, taskset, syncOffset, beta } = settings;
const stepsGiven = values.steps ?? settings.totalSteps;
if (stepsGiven === undefined) throw new Error(`${configFile}: the GRPO stage has no buffer.total_steps; pass --steps N`);
const steps = Number(stepsGiven);
if (!Number.isInteger(steps) || steps < 2) throw new Error(`--steps must be an integer >= 2, got '${stepsGiven}'`);
const evalEveryGiven = values['eval-every'] ?? settings.evalInterval ?? 30;
const evalEvery = Number(evalEveryGiven);
if (!Number.isInteger(evalEvery) || evalEvery < 1)
  throw new Error(`--eval-every must be an integer >= 1, got '${evalEveryGiven}'`);
const evalSteps = evalSchedule(steps, evalEvery);
// the third column: the same stage with another sync_offset (on-policy against one step off-policy)
const compareOffsetGiven = values['compare-offset'] ?? (syncOffset > 0 ? '0' : '1');
const compareOffset = compareOffsetGiven === 'none' ? null : Number(compareOffsetGiven);
if (compareOffset !== null && !(Number.isInteger(compareOffset) && compareOffset >= 0 && compareOffset !== syncOffset))
  throw new Error(
    `--compare-offset must be none or a non-negative integer other than the stage's sync_offset ${syncOffset}, got '${compareOffsetGiven}'`,
  );
const offsetLabel = (offset: number) => (offset > 0 ? `ours (sync_offset ${offset})` : 'ours, on-policy');
// how trinity run splits the cores in mode both (src/rft/run/config/stage-settings.ts): half each when the loops overlap
const ourThreads = (offset: number) =>
  offset > 0
    ? { explorer: Math.max(1, Math.floor(cores / 2)), trainer: Math.max(1, Math.ceil(cores / 2)) }
    : { explorer: cores, trainer: cores };
console.log(
  `GRPO stage of ${configFile}\n  ${steps} steps x ${settings.batch} tasks x ${settings.group} samples, ` +
    `max ${settings.maxTokens} tokens, T ${settings.temperature}, lr ${settings.lr} (warm-up ${settings.warmupSteps}), KL coef ${beta}\n` +
    `  seeds ${seeds.join(', ')}; eval at steps ${evalSteps.join(', ')}; target: start + ${fmt(targetGain * 100, 1)} points; task order: ${taskOrderMode}\n` +
    `  CPU ${cpu.model}, ${os.availableParallelism()} cores (${cpuFlags}); threads: TRL ${threads}, ours explorer/trainer ` +
    `${ourThreads(syncOffset).explorer}/${ourThreads(syncOffset).trainer}` +
    (compareOffset === null
      ? ''
      : `, sync_offset ${compareOffset} ${ourThreads(compareOffset).explorer}/${ourThreads(compareOffset).trainer}`) +
    `; MKL's vendor check in TRL's process: ${pythonMkl === 'ours' ? 'as ours answers it' : 'its own'}`,
);
rmSync(outDir, { recursive: true, force: true });
mkdirSync(outDir, { recursive: true });

// --- one side's run -------------------------------------------------------------------------------------------------

/** A training run: its clock at every evaluated step, the model saved there, and its speed figures. */
interface Run {
  /** Seconds of rollouts + training up to the end of step s (see the header), for every s in evalSteps (0 at 0). */
  clock: number[];
  /** The saved model of every evaluated step after 0. */
  checkpoints: string[];
  sPerStep: number;
  generatedTokensPerS: number;
  rewardFirst: number;
  rewardLast: number;
  wallS: number;
}

/** The train file both sides read, and whether in its order (see --task-order). */
interface TaskOrder {
  file: string;
  inOrder: boolean;
}

/**
 * --task-order shared: the train file's rows in one seeded order (a fresh permutation per pass until steps × batch
 * tasks), written to seedDir/tasks.jsonl and read in order by both sides; own: the train file, each side shuffling.
 */
function taskOrder(seedDir: string, seed: number): TaskOrder {
  if (taskOrderMode === 'own') return { file: settings.trainFile, inOrder: false };
  const rows = readFileSync(settings.trainFile, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '');
  const ordered = sharedTaskOrder(rows, seed, steps * settings.batch);
  const file = join(seedDir, 'tasks.jsonl');
  writeFileSync(file, `${ordered.join('\n')}\n`);
  return { file, inOrder: true };
}

/** One `trinity run` of the stage from `modelDir` (with `overrides`) in a child process; figures from its metrics.jsonl. */
async function runOurs(
  seedDir: string,
  name: string,
  modelDir: string,
  seed: number,
  tasks: TaskOrder,
  overrides: Doc,
): Promise<Run> {
  const config = merge(
    merge(stage, {
      project: basename(seedDir), // the job folder is checkpoint_root_dir/project/name = seedDir/name
      name,
      checkpoint_root_dir: dirname(seedDir),
      model: { model_path: modelDir },
      mode: 'both',
      // a coefficient-0 KL term only measures the drift (the quickstart's KL curve); TRL with beta 0 loads no
      // reference, so the same loss here is run without the reference forward too
      ...(beta === 0 ? { algorithm: { kl_loss_fn: 'none' } } : {}),
      buffer: {
        total_steps: steps,
        explorer_input: {
          taskset: {
            ...taskset,
            path: tasks.file,
            // the selector's seed is also the run's seed (engine sampling)
            task_selector: { selector_type: tasks.inOrder ? 'sequential' : 'shuffle', seed },
          },
        },
      },
      explorer: { eval_interval: 1_000_000, eval_on_startup: false },
      trainer: { save_interval: evalEvery, max_checkpoints_to_keep: 0 },
      monitor: { monitor_type: ['jsonl'] },
    }),
    overrides,
  );
  // no eval inside the stage (the saved models are scored afterwards, all by the same eval), so no stop rule on one
  asDoc(at(config, 'buffer', 'explorer_input')).eval_tasksets = undefined;
  asDoc(config.trainer).stop_when = undefined;
  const configPath = join(seedDir, `${name}.yaml`);
  writeFileSync(configPath, YAML.stringify(JSON.parse(JSON.stringify(config))));
  console.log(`  ours (${name}): trinity run --config ${configPath}`);
  const start = now();
  await run(process.execPath, [join(repoRoot, 'bin', 'trinity.js'), 'run', '--config', configPath], 'trinity run');
  const wallS = secondsSince(start);
  const job = join(seedDir, name);
  const metrics = readFileSync(join(job, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number | undefined>)
    .filter((m) => m['rollout/experiences'] !== undefined)
    .map((m) => ({
      time: m.time ?? Number.NaN,
      experiences: m['rollout/experiences'] ?? Number.NaN,
      responseLength: m['rollout/response_length/mean'] ?? Number.NaN,
      rolloutS: m['rollout/time_s'] ?? Number.NaN,
      trainS: m['time/train_s'] ?? Number.NaN,
      reward: m['rollout/reward/mean'] ?? Number.NaN,
    }));
  if (metrics.length !== steps) throw new Error(`ours (${name}): ${metrics.length} steps in metrics.jsonl, expected ${steps}`);
  return {
    clock: ourClock(metrics, evalSteps),
    checkpoints: evalSteps
      .slice(1)
      .map((s) => (s === steps ? join(job, 'final_model') : join(job, 'checkpoints', `global_step_${s}`, 'model'))),
    sPerStep: median(metrics.slice(1).map((m, i) => m.time - (metrics[i]?.time ?? Number.NaN))),
    generatedTokensPerS:
      metrics.reduce((a, m) => a + m.responseLength * m.experiences, 0) / metrics.reduce((a, m) => a + m.rolloutS, 0),
    rewardFirst: metrics[0]?.reward ?? Number.NaN,
    rewardLast: metrics.at(-1)?.reward ?? Number.NaN,
    wallS,
  };
}

/** TRL's GRPOTrainer on the same stage (bench/grpo_trl.py in a child process), saving every evalEvery steps. */
async function runTrl(seedDir: string, modelDir: string, seed: number, tasks: TaskOrder): Promise<Run & { versions: Doc }> {
  const out = join(seedDir, 'trl');
  console.log(`  TRL: ${python} bench/grpo_trl.py --out ${out}`);
  const start = now();
  const trl = lastJsonLine(
    await run(
      python,
      [
        join(repoRoot, 'bench', 'grpo_trl.py'),
        ...['--model', modelDir, '--train', tasks.file, '--eval', settings.evalFile, ...(tasks.inOrder ? ['--in-order'] : [])],
        ...['--group', String(settings.group), '--batch', String(settings.batch), '--max-tokens', String(settings.maxTokens)],
        ...['--lr', String(settings.lr), '--warmup-steps', String(settings.warmupSteps), '--steps', String(steps)],
        ...['--scheduler', settings.scheduler, '--min-lr-ratio', String(settings.minLrRatio)],
        ...['--temperature', String(settings.temperature), '--beta', String(beta), '--seed', String(seed)],
        ...['--threads', String(threads), '--save-every', String(evalEvery), '--out', out],
      ],
      'grpo_trl.py',
    ),
  );
  const wallS = secondsSince(start);
  const stepS = trl.step_s as number[];
  if (stepS.length !== steps) throw new Error(`TRL: ${stepS.length} step times, expected ${steps}`);
  const saved = trl.checkpoints as Record<string, string>;
  const rewards = trl.rewards as number[];
  return {
    clock: summedClock(stepS, evalSteps),
    checkpoints: evalSteps.slice(1).map((s) => {
      const dir = s === steps ? String(trl.final_model) : saved[String(s)];
      if (dir === undefined) throw new Error(`TRL: no checkpoint saved at step ${s}`);
      return resolve(repoRoot, dir);
    }),
    sPerStep: median(stepS.slice(1)),
    generatedTokensPerS:
      (trl.generated_tokens as number[]).reduce((a, b) => a + b, 0) / (trl.generate_s as number[]).reduce((a, b) => a + b, 0),
    rewardFirst: rewards[0] ?? Number.NaN,
    rewardLast: rewards.at(-1) ?? Number.NaN,
    wallS,
    versions: trl.versions as Doc,
  };
}

/** The same eval for every folder (one Python process): greedy held-out accuracy, in the folders' order. */
async function evaluate(dirs: string[], tokenizerDir: string): Promise<number[]> {
  const reply = lastJsonLine(
    await run(
      python,
      [
        join(repoRoot, 'bench', 'grpo_trl.py'),
        ...['--eval-only', ...dirs],
        ...['--tokenizer', tokenizerDir, '--eval', settings.evalFile, '--max-tokens', String(settings.maxTokens)],
        ...['--threads', String(cores)],
      ],
      'grpo_trl.py --eval-only',
    ),
  );
  const accuracies = reply.accuracies as number[];
  if (accuracies.length !== dirs.length) throw new Error(`eval: ${accuracies.length} accuracies for ${dirs.length} folders`);
  return accuracies;
}

// --- per seed -------------------------------------------------------------------------------------------------------

const sideNames = ['ours', ...(compareOffset === null ? [] : ['ours_compare']), 'trl'] as const;
type SideName = (typeof sideNames)[number];
const sideLabel: Record<string, string> = {
  ours: offsetLabel(syncOffset),
  ...(compareOffset === null ? {} : { ours_compare: offsetLabel(compareOffset) }),
  trl: 'TRL',
};

interface SideResult {
  accuracy: number[];
  clock: number[];
  /** Seconds (on the side's clock) to the first evaluated step at or above the target; null: not reached. */
  timeToTarget: number | null;
  stepToTarget: number | null;
  run: Run;
}
interface SeedResult {
  seed: number;
  model: string;
  startAccuracy: number;
  target: number;
  sides: Record<string, SideResult>;
}

let versions: Doc = {};
const results: SeedResult[] = [];
for (const [i, seed] of seeds.entries()) {
  const modelDir = models[i] as string;
  console.log(`\nseed ${seed}: ${modelDir}`);
  if (!existsSync(join(modelDir, 'config.json'))) {
    if (givenModels) throw new Error(`--models ${modelDir}: no config.json there`);
    console.log(`  no SFT checkpoint there: running trinity quickstart --seed ${seed} to make it`);
    await run(
      process.execPath,
      [join(repoRoot, 'bin', 'trinity.js'), 'quickstart', '--seed', String(seed)],
      'trinity quickstart',
    );
  }
  const seedDir = join(outDir, `seed-${seed}`);
  mkdirSync(seedDir, { recursive: true });
  const runs: Partial<Record<SideName, Run>> = {};
  const tasks = taskOrder(seedDir, seed);
  runs.ours = await runOurs(seedDir, 'ours', modelDir, seed, tasks, {});
  // the same stage with the other sync_offset (0: rollouts and training take turns; 1: they overlap)
  if (compareOffset !== null) {
    const other = { synchronizer: { sync_offset: compareOffset } };
    runs.ours_compare = await runOurs(seedDir, `ours-sync-offset-${compareOffset}`, modelDir, seed, tasks, other);
  }
  const trl = await runTrl(seedDir, modelDir, seed, tasks);
  runs.trl = trl;
  versions = trl.versions;
  const ordered = sideNames.map((name) => [name, runs[name] as Run] as const);
  console.log(`  eval: ${1 + ordered.length * (evalSteps.length - 1)} models`);
  const accuracies = await evaluate([modelDir, ...ordered.flatMap(([, r]) => r.checkpoints)], modelDir);
  const startAccuracy = accuracies[0] as number;
  const target = startAccuracy + targetGain;
  const sides: Record<string, SideResult> = {};
  for (const [k, [name, r]] of ordered.entries()) {
    const accuracy = [startAccuracy, ...accuracies.slice(1 + k * (evalSteps.length - 1), 1 + (k + 1) * (evalSteps.length - 1))];
    const reached = firstReaching(accuracy, r.clock, evalSteps, target);
    sides[name] = {
      accuracy,
      clock: r.clock,
      timeToTarget: reached?.seconds ?? null,
      stepToTarget: reached?.step ?? null,
      run: r,
    };
  }
  const result: SeedResult = { seed, model: modelDir, startAccuracy, target, sides };
  results.push(result);
  printSeed(result);
}

function printSeed(r: SeedResult): void {
  const names = Object.keys(r.sides);
  table(
    `seed ${r.seed}: held-out greedy accuracy % (seconds of rollouts + training) by step; start ${fmt(r.startAccuracy * 100, 1)}%, target ${fmt(r.target * 100, 1)}%`,
    ['step', 'samples', ...names.map((n) => sideLabel[n] ?? n)],
    evalSteps.map((s, j) => [
      String(s),
      String(s * settings.batch * settings.group),
      ...names.map((n) => {
        const side = r.sides[n] as SideResult;
        return `${fmt((side.accuracy[j] as number) * 100, 1)} (${fmt(side.clock[j] as number, 1)} s)`;
      }),
    ]),
  );
  const trl = r.sides.trl as SideResult;
  table(
    `seed ${r.seed}: speed`,
    ['', ...names.map((n) => sideLabel[n] ?? n)],
    [
      ['s per training step', ...names.map((n) => fmt((r.sides[n] as SideResult).run.sPerStep, 3))],
      ['generated tokens/s', ...names.map((n) => fmt((r.sides[n] as SideResult).run.generatedTokensPerS, 0))],
      [
        'rollout reward, first -> last step',
        ...names.map(
          (n) => `${fmt((r.sides[n] as SideResult).run.rewardFirst)} -> ${fmt((r.sides[n] as SideResult).run.rewardLast)}`,
        ),
      ],
      [
        `s to ${fmt(r.target * 100, 1)}% (step)`,
        ...names.map((n) => {
          const side = r.sides[n] as SideResult;
          return side.timeToTarget === null ? 'not reached' : `${fmt(side.timeToTarget, 1)} (${side.stepToTarget})`;
        }),
      ],
      [
        'TRL time / this time to target',
        ...names.map((n) => {
          if (n === 'trl') return '';
          const side = r.sides[n] as SideResult;
          const bound = trlBoundToTarget(trl, side);
          return bound === null ? fmt(speedupToTarget(trl, side)) : `> ${fmt(bound)}`;
        }),
      ],
      ['whole run s (with setup)', ...names.map((n) => fmt((r.sides[n] as SideResult).run.wallS, 1))],
    ],
  );
}

/** TRL's time to the target over `side`'s; null when either side did not reach it. */
function speedupToTarget(trl: SideResult, side: SideResult): number | null {
  if (trl.timeToTarget === null || side.timeToTarget === null || side.timeToTarget === 0) return null;
  return trl.timeToTarget / side.timeToTarget;
}

/** When only TRL missed the target: TRL's whole clock over `side`'s time to it, a lower bound of the ratio; else null. */
function trlBoundToTarget(trl: SideResult, side: SideResult): number | null {
  if (trl.timeToTarget !== null || side.timeToTarget === null || side.timeToTarget === 0) return null;
  return (trl.clock.at(-1) as number) / side.timeToTarget;
}

// --- over seeds -----------------------------------------------------------------------------------------------------

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const showSpread = (s: ReturnType<typeof spread>, scale = 1, digits = 1) =>
  s.mean === null
    ? 'none'
    : `${fmt(s.mean * scale, digits)} (${fmt((s.min as number) * scale, digits)}..${fmt((s.max as number) * scale, digits)})${s.n < results.length ? ` [${s.n} of ${results.length}]` : ''}`;

/** Mean accuracy over the evaluated steps after 0: the area under the accuracy-vs-samples curve, per step. */
const curveMean = (side: SideResult) => mean(side.accuracy.slice(1));
const names = sideNames as readonly string[];
const perSeed = (f: (r: SeedResult, side: SideResult, name: string) => number | null) =>
  Object.fromEntries(names.map((n) => [n, results.map((r) => f(r, r.sides[n] as SideResult, n))]));
const finals = perSeed((_, s) => s.accuracy.at(-1) as number);
const curves = perSeed((_, s) => curveMean(s));
const gains = perSeed((r, s) => (s.accuracy.at(-1) as number) - r.startAccuracy);
const timesToTarget = perSeed((_, s) => s.timeToTarget);
const speedups = perSeed((r, s) => speedupToTarget(r.sides.trl as SideResult, s));
const minusTrl = (values: Record<string, (number | null)[]>, n: string) =>
  (values[n] as number[]).map((v, i) => v - ((values.trl as number[])[i] as number));

table(
  `over seeds ${seeds.join(', ')}: mean (min..max); accuracies in %, ${results.length} x 500-problem evals (±~2 points standard error each)`,
  ['', ...names.map((n) => sideLabel[n] ?? n)],
  [
    ['start accuracy', ...names.map(() => showSpread(spread(results.map((r) => r.startAccuracy)), 100))],
    ['final accuracy', ...names.map((n) => showSpread(spread(finals[n] as number[]), 100))],
    ['gain over start, points', ...names.map((n) => showSpread(spread(gains[n] as number[]), 100))],
    ['mean accuracy over eval steps', ...names.map((n) => showSpread(spread(curves[n] as number[]), 100))],
    ['final - TRL final, points', ...names.map((n) => (n === 'trl' ? '' : showSpread(spread(minusTrl(finals, n)), 100)))],
    [
      'curve mean - TRL curve mean, points',
      ...names.map((n) => (n === 'trl' ? '' : showSpread(spread(minusTrl(curves, n)), 100))),
    ],
    ['s to target (rollouts + training)', ...names.map((n) => showSpread(spread(timesToTarget[n] as (number | null)[])))],
    [
      'TRL time / this time to target',
      ...names.map((n) => (n === 'trl' ? '' : showSpread(spread(speedups[n] as (number | null)[]), 1, 2))),
    ],
  ],
);
// the verdict the issue asks for: does ours learn at least as much per sample as TRL, seed by seed and on average; a
// difference counts only beyond two standard errors of its mean over seeds (one 500-problem eval alone has ~2.2)
const verdictText = {
  more: 'learns more per sample than TRL',
  level: "level with TRL per sample (within the seeds' noise)",
  less: 'LEARNS LESS PER SAMPLE than TRL (see bench/README.md: grpo-same-batch)',
};
const withError = (v: ReturnType<typeof perSampleVerdict>) =>
  `${fmt(v.mean * 100, 1)}${v.standardError === null ? '' : ` ± ${fmt(v.standardError * 100, 1)}`}`;
const verdicts = Object.fromEntries(
  names
    .filter((x) => x !== 'trl')
    .map((n) => [n, { final: perSampleVerdict(minusTrl(finals, n)), curve: perSampleVerdict(minusTrl(curves, n)) }]),
);
for (const [n, v] of Object.entries(verdicts)) {
  const f = minusTrl(finals, n);
  const d = minusTrl(curves, n);
  const perSeedText = results
    .map((r, i) => `seed ${r.seed} ${fmt((f[i] as number) * 100, 1)}/${fmt((d[i] as number) * 100, 1)}`)
    .join(', ');
  const worst = [v.final.verdict, v.curve.verdict].includes('less')
    ? 'less'
    : v.final.verdict === 'more' && v.curve.verdict === 'more'
      ? 'more'
      : 'level';
  console.log(
    `${sideLabel[n]} - TRL, points (final/curve mean): ${perSeedText}; mean ± standard error ${withError(v.final)} / ` +
      `${withError(v.curve)}: ${verdictText[worst]}`,
  );
}

const maybe = (f: (v: number) => number, v: number | null) => (v === null ? null : f(v));
const sideJson = (r: SeedResult, n: string) => {
  const s = r.sides[n] as SideResult;
  return {
    accuracy: s.accuracy.map(r3),
    seconds: s.clock.map(r2),
    time_to_target_s: maybe(r2, s.timeToTarget),
    step_to_target: s.stepToTarget,
    ...(n === 'trl'
      ? {}
      : {
          trl_time_over_this_to_target: maybe(r2, speedupToTarget(r.sides.trl as SideResult, s)),
          trl_time_over_this_lower_bound: maybe(r2, trlBoundToTarget(r.sides.trl as SideResult, s)),
        }),
    s_per_step: r3(s.run.sPerStep),
    generated_tokens_per_s: r2(s.run.generatedTokensPerS),
    reward_first: r3(s.run.rewardFirst),
    reward_last: r3(s.run.rewardLast),
    wall_s: r2(s.run.wallS),
  };
};
const spreadJson = (xs: (number | null)[]) => {
  const s = spread(xs);
  return {
    mean: maybe(r3, s.mean),
    min: maybe(r3, s.min),
    max: maybe(r3, s.max),
    n: s.n,
  };
};
console.log(
  JSON.stringify({
    bench: 'grpo',
    steps,
    batch: settings.batch,
    group: settings.group,
    max_tokens: settings.maxTokens,
    lr: settings.lr,
    sync_offset: syncOffset,
    eval_steps: evalSteps,
    target_gain: targetGain,
    task_order: taskOrderMode,
    cpu: { ...cpu, isa },
    python_mkl: pythonMkl,
    compare_sync_offset: compareOffset,
    threads: {
      trl: threads,
      ours: ourThreads(syncOffset),
      ...(compareOffset === null ? {} : { ours_compare: ourThreads(compareOffset) }),
    },
    seeds: results.map((r) => ({
      seed: r.seed,
      model: r.model,
      start_accuracy: r3(r.startAccuracy),
      target: r3(r.target),
      ...Object.fromEntries(names.map((n) => [n, sideJson(r, n)])),
    })),
    mean: Object.fromEntries(
      names.map((n) => [
        n,
        {
          final_accuracy: spreadJson(finals[n] as number[]),
          curve_mean_accuracy: spreadJson(curves[n] as number[]),
          gain: spreadJson(gains[n] as number[]),
          time_to_target_s: spreadJson(timesToTarget[n] as (number | null)[]),
          ...(n === 'trl'
            ? {}
            : {
                final_minus_trl: spreadJson(minusTrl(finals, n)),
                curve_mean_minus_trl: spreadJson(minusTrl(curves, n)),
                per_sample: Object.fromEntries(
                  Object.entries(verdicts[n] ?? {}).map(([k, v]) => [
                    k,
                    { mean: r3(v.mean), standard_error: maybe(r3, v.standardError), verdict: v.verdict },
                  ]),
                ),
                trl_time_over_this_to_target: spreadJson(speedups[n] as (number | null)[]),
                s_per_step_speedup: spreadJson(
                  results.map((r) => (r.sides.trl as SideResult).run.sPerStep / (r.sides[n] as SideResult).run.sPerStep),
                ),
              }),
        },
      ]),
    ),
    versions,
    bench_s: r2(secondsSince(benchStart)),
  }),
);
