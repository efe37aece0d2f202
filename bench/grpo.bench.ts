// GRPO benchmark, side by side with TRL: `node --import tsx bench/grpo.bench.ts [--help]`.
//
// The quickstart's GRPO stage (examples/quickstart/config.yaml: its model settings, algorithm, batch, group size,
// max tokens, learning rate and warm-up, rollout temperature, taskset files) run from the same SFT checkpoint, for the
// same number of steps, in one run:
//   ours  `trinity run` on a one-stage copy of the config (mode both: rollouts on the engine's worker thread, training
//         on the trainer's), in a child process; figures from its metrics.jsonl. The quickstart's stage runs one step
//         off-policy (sync_offset 1: the next step's rollouts are sampled while this step trains); when the config
//         has an offset, the same stage also runs strictly on-policy (sync_offset 0) as a third column.
//   TRL   GRPOTrainer (bench/grpo_trl.py, in a child process), with the same settings mapped to GRPOConfig
// The runs go one after the other (not interleaved: each is a whole training run), each with the machine's cores.
// Figures: seconds per training step (median over the steps after the first; rollout + train, as each side's loop
// runs them), generated tokens per second of generation, and held-out greedy accuracy after the last step — measured
// for both final models by the same Python eval (grpo_trl.py --eval-only: transformers generate, greedy, the model's
// chat template, every eval problem). It prints a table and ends with one JSON line of figures.
//
// Setup: the model is the quickstart's SFT checkpoint (runs/quickstart/addition/sft/final_model); when it is
// missing the bench runs `trinity quickstart` first, which makes it.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import YAML from 'yaml';
import { findPython, fmt, median, now, r2, r3, repoRoot, secondsSince, table } from './harness.js';

const benchStart = now();

const HELP = `GRPO benchmark: the quickstart's GRPO stage through this framework and through TRL's GRPOTrainer.
  node --import tsx bench/grpo.bench.ts [options]

  --model DIR      starting model (default runs/quickstart/addition/sft/final_model; made by trinity quickstart)
  --config FILE    config whose GRPO stage is benchmarked (default examples/quickstart/config.yaml)
  --steps N        training steps on each side (default: the stage's total_steps, 360 for the quickstart)
  --seed N         seed of both sides (default 0)
  --threads N      intra-op threads of TRL's side (default: the core count; ours uses its own defaults)
  --out DIR        working folder (default runs/bench-grpo)

Environment: TRINITY_BENCH_PYTHON (default .cache/python-ref/bin/python, which has trl).`;

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    config: { type: 'string' },
    steps: { type: 'string' },
    seed: { type: 'string', default: '0' },
    threads: { type: 'string' },
    out: { type: 'string' },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const seed = Number(values.seed);
const threads = Number(values.threads ?? os.availableParallelism());
const configFile = resolve(values.config ?? join(repoRoot, 'examples', 'quickstart', 'config.yaml'));
const modelDir = resolve(values.model ?? join(repoRoot, 'runs', 'quickstart', 'addition', 'sft', 'final_model'));
const outDir = resolve(values.out ?? join(repoRoot, 'runs', 'bench-grpo'));
const python = findPython();

type Doc = Record<string, unknown>;
const asDoc = (v: unknown): Doc => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Doc) : {});
const at = (doc: Doc, ...path: string[]): unknown => path.reduce<unknown>((d, k) => asDoc(d)[k], doc);

/** Deep merge of a stage's overrides onto the base config (objects merge, everything else replaces). */
function merge(base: Doc, over: Doc): Doc {
  const out: Doc = { ...base };
  for (const [k, v] of Object.entries(over)) {
    out[k] = v !== null && typeof v === 'object' && !Array.isArray(v) ? merge(asDoc(base[k]), v as Doc) : v;
  }
  return out;
}

/** Runs a command, streaming its stderr through; resolves with its stdout. */
function run(command: string, args: string[], label: string): Promise<string> {
  return new Promise((done, fail) => {
    const child = spawn(command, args, { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
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

// --- setup: the SFT checkpoint and the GRPO stage's settings --------------------------------------------------------

if (!existsSync(join(modelDir, 'config.json'))) {
  if (values.model !== undefined) throw new Error(`--model ${modelDir}: no config.json there`);
  console.log(`no SFT checkpoint at ${modelDir}: running trinity quickstart to make it`);
  await run(process.execPath, [join(repoRoot, 'bin', 'trinity.js'), 'quickstart'], 'trinity quickstart');
}

const base = asDoc(YAML.parse(readFileSync(configFile, 'utf8')));
const stages = (base.stages as Doc[] | undefined) ?? [];
const grpoStage = stages.find((s) => s.mode === 'both' || s.mode === undefined) ?? {};
const { stages: _stages, ...baseWithoutStages } = base;
const stage = merge(baseWithoutStages, grpoStage);
delete stage.stage_name;
const configDir = dirname(configFile);
const stepsGiven = values.steps ?? at(stage, 'buffer', 'total_steps');
if (stepsGiven === undefined) throw new Error(`${configFile}: the GRPO stage has no buffer.total_steps; pass --steps N`);
const steps = Number(stepsGiven);
if (!Number.isInteger(steps) || steps < 2) throw new Error(`--steps must be an integer >= 2, got '${stepsGiven}'`);
const fromConfig = (p: unknown) => resolve(configDir, String(p));
const taskset = asDoc(at(stage, 'buffer', 'explorer_input', 'taskset'));
const evalTaskset = asDoc((at(stage, 'buffer', 'explorer_input', 'eval_tasksets') as Doc[] | undefined)?.[0]);
const optimizer = asDoc(at(stage, 'algorithm', 'optimizer'));
const settings = {
  trainFile: fromConfig(taskset.path),
  evalFile: fromConfig(evalTaskset.path),
  group: Number(at(stage, 'algorithm', 'repeat_times')),
  batch: Number(at(stage, 'buffer', 'batch_size')),
  maxTokens: Number(at(stage, 'model', 'max_response_tokens')),
  lr: Number(optimizer.lr),
  warmupSteps: Math.max(0, Number(optimizer.lr_warmup_steps ?? 0)),
  scheduler: optimizer.lr_scheduler_type === 'cosine' ? 'cosine' : 'constant_with_warmup',
  minLrRatio: Number(optimizer.min_lr_ratio ?? 0),
  temperature: Number(at(taskset, 'rollout_args', 'temperature') ?? 1),
  klCoef: Number(at(stage, 'algorithm', 'kl_loss_fn_args', 'kl_coef') ?? 0.001),
  klLoss: String(at(stage, 'algorithm', 'kl_loss_fn') ?? 'k2'),
};
for (const [k, v] of Object.entries(settings)) {
  if (typeof v === 'number' && !Number.isFinite(v)) throw new Error(`${configFile}: the GRPO stage has no usable ${k}`);
}
const beta = settings.klLoss === 'none' ? 0 : settings.klCoef;
console.log(
  `GRPO stage of ${configFile}\n  model ${modelDir}\n  ${steps} steps x ${settings.batch} tasks x ${settings.group} samples, ` +
    `max ${settings.maxTokens} tokens, T ${settings.temperature}, lr ${settings.lr} (warm-up ${settings.warmupSteps}), KL coef ${beta}`,
);
rmSync(outDir, { recursive: true, force: true });
mkdirSync(outDir, { recursive: true });

// --- ours ----------------------------------------------------------------------------------------------------------

/** The stage's synchronizer offset: 1 = the explorer samples step s + 1 while the trainer trains step s. */
const syncOffset = Number(at(stage, 'synchronizer', 'sync_offset') ?? 0);

/** One `trinity run` of the stage (with `overrides`) in a child process; figures from its metrics.jsonl. */
async function runOurs(name: string, overrides: Doc) {
  const config = merge(
    merge(stage, {
      project: basename(outDir), // the job folder is checkpoint_root_dir/project/name = outDir/name
      name,
      checkpoint_root_dir: dirname(outDir),
      model: { model_path: modelDir },
      mode: 'both',
      // a coefficient-0 KL term only measures the drift (the quickstart's KL curve); TRL with beta 0 loads no
      // reference, so the same loss here is run without the reference forward too
      ...(beta === 0 ? { algorithm: { kl_loss_fn: 'none' } } : {}),
      buffer: {
        total_steps: steps,
        explorer_input: { taskset: { ...taskset, path: settings.trainFile, task_selector: { selector_type: 'shuffle', seed } } },
      },
      explorer: { eval_interval: 1_000_000, eval_on_startup: false },
      trainer: { save_interval: 1_000_000 },
      monitor: { monitor_type: ['jsonl'] },
    }),
    overrides,
  );
  asDoc(at(config, 'buffer', 'explorer_input')).eval_tasksets = undefined;
  const configPath = join(outDir, `${name}.yaml`);
  writeFileSync(configPath, YAML.stringify(JSON.parse(JSON.stringify(config))));
  console.log(`\nours (${name}): trinity run --config ${configPath}`);
  const start = now();
  await run(process.execPath, [join(repoRoot, 'bin', 'trinity.js'), 'run', '--config', configPath], 'trinity run');
  const wall = secondsSince(start);
  const job = join(outDir, name);
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
      reward: m['rollout/reward/mean'] ?? Number.NaN,
    }));
  if (metrics.length !== steps) throw new Error(`ours (${name}): ${metrics.length} steps in metrics.jsonl, expected ${steps}`);
  return {
    stepS: metrics.slice(1).map((m, i) => m.time - (metrics[i]?.time ?? Number.NaN)),
    tokens: metrics.reduce((a, m) => a + m.responseLength * m.experiences, 0),
    generateS: metrics.reduce((a, m) => a + m.rolloutS, 0),
    rewardFirst: metrics[0]?.reward ?? Number.NaN,
    rewardLast: metrics.at(-1)?.reward ?? Number.NaN,
    wall,
    finalModel: join(job, 'final_model'),
  };
}
const ours = await runOurs('ours', {});
// the same stage strictly on-policy (rollouts and training take turns), when the config overlaps them
const onPolicy = syncOffset > 0 ? await runOurs('ours-on-policy', { synchronizer: { sync_offset: 0 } }) : null;

// --- TRL -----------------------------------------------------------------------------------------------------------

console.log(`TRL: ${python} bench/grpo_trl.py`);
const trlStart = now();
const trl = lastJsonLine(
  await run(
    python,
    [
      join(repoRoot, 'bench', 'grpo_trl.py'),
      ...['--model', modelDir, '--train', settings.trainFile, '--eval', settings.evalFile],
      ...['--group', String(settings.group), '--batch', String(settings.batch), '--max-tokens', String(settings.maxTokens)],
      ...['--lr', String(settings.lr), '--warmup-steps', String(settings.warmupSteps), '--steps', String(steps)],
      ...['--scheduler', settings.scheduler, '--min-lr-ratio', String(settings.minLrRatio)],
      ...['--temperature', String(settings.temperature), '--beta', String(beta), '--seed', String(seed)],
      ...['--threads', String(threads), '--out', join(outDir, 'trl')],
    ],
    'grpo_trl.py',
  ),
);
const trlWall = secondsSince(trlStart);
const trlStepS = (trl.step_s as number[]).slice(1);
const trlTokens = (trl.generated_tokens as number[]).reduce((a, b) => a + b, 0);
const trlGenerateS = (trl.generate_s as number[]).reduce((a, b) => a + b, 0);

// --- the same eval for both final models ---------------------------------------------------------------------------

const evalOf = async (dir: string) =>
  Number(
    lastJsonLine(
      await run(
        python,
        [
          join(repoRoot, 'bench', 'grpo_trl.py'),
          '--eval-only',
          dir,
          '--eval',
          settings.evalFile,
          '--max-tokens',
          String(settings.maxTokens),
        ],
        `eval of ${dir}`,
      ),
    ).accuracy,
  );
const startAccuracy = await evalOf(modelDir);
const trlAccuracy = Number(trl.accuracy);
const ourFigures = async (o: Awaited<ReturnType<typeof runOurs>>) => ({
  s_per_step: r3(median(o.stepS)),
  generated_tokens_per_s: r2(o.tokens / o.generateS),
  accuracy: r3(await evalOf(o.finalModel)),
  wall_s: r2(o.wall),
  reward_first: r3(o.rewardFirst),
  reward_last: r3(o.rewardLast),
});
const figures = {
  ours: { sync_offset: syncOffset, ...(await ourFigures(ours)) },
  ...(onPolicy ? { ours_on_policy: { sync_offset: 0, ...(await ourFigures(onPolicy)) } } : {}),
  trl: {
    s_per_step: r3(median(trlStepS)),
    generated_tokens_per_s: r2(trlTokens / trlGenerateS),
    accuracy: r3(trlAccuracy),
    wall_s: r2(trlWall),
    reward_first: r3((trl.rewards as number[])[0] ?? Number.NaN),
    reward_last: r3((trl.rewards as number[]).at(-1) ?? Number.NaN),
  },
};
const columns = [
  { name: syncOffset > 0 ? `ours (sync_offset ${syncOffset})` : 'ours', f: figures.ours },
  ...(figures.ours_on_policy ? [{ name: 'ours, on-policy', f: figures.ours_on_policy }] : []),
];
const perColumn = (cell: (f: typeof figures.trl) => string, ratio?: (f: typeof figures.trl) => string) => [
  ...columns.map((c) => cell(c.f)),
  cell(figures.trl),
  ...(ratio ? columns.map((c) => ratio(c.f)) : columns.map(() => '')),
];
table(
  `GRPO, ${steps} steps x ${settings.batch} tasks x ${settings.group} samples (start accuracy ${fmt(startAccuracy * 100, 1)}%)`,
  ['', ...columns.map((c) => c.name), 'TRL', ...columns.map((c) => `TRL / ${c.name}`)],
  [
    [
      's per training step',
      ...perColumn(
        (f) => fmt(f.s_per_step, 3),
        (f) => fmt(figures.trl.s_per_step / f.s_per_step),
      ),
    ],
    [
      'generated tokens/s',
      ...perColumn(
        (f) => fmt(f.generated_tokens_per_s, 0),
        (f) => fmt(figures.trl.generated_tokens_per_s / f.generated_tokens_per_s),
      ),
    ],
    ['held-out accuracy (greedy) %', ...perColumn((f) => fmt(f.accuracy * 100, 1))],
    ['rollout reward, first -> last step', ...perColumn((f) => `${fmt(f.reward_first)} -> ${fmt(f.reward_last)}`)],
    ['whole run s', ...perColumn((f) => fmt(f.wall_s, 1))],
  ],
);
console.log(
  JSON.stringify({
    bench: 'grpo',
    steps,
    batch: settings.batch,
    group: settings.group,
    max_tokens: settings.maxTokens,
    lr: settings.lr,
    start_accuracy: r3(startAccuracy),
    ...figures,
    speedup_per_step: r2(figures.trl.s_per_step / figures.ours.s_per_step),
    ...(figures.ours_on_policy
      ? { speedup_per_step_on_policy: r2(figures.trl.s_per_step / figures.ours_on_policy.s_per_step) }
      : {}),
    versions: trl.versions as Doc,
    bench_s: r2(secondsSince(benchStart)),
  }),
);
