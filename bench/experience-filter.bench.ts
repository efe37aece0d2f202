// GRPO on the quickstart with and without data_processor.experience_pipeline's reward_std_filter (groups whose 16
// answers all score the same are dropped before the trainer), held-out greedy accuracy at equal wall-clock time.
//
//   node --import tsx bench/experience-filter.bench.ts [--seeds 0,1,2] [--threshold 0]
//
// Per seed: `trinity quickstart --seed N` (base bench, SFT, GRPO: the unfiltered run), then the GRPO stage again from
// the same SFT model (the base and SFT stages' done.json are copied, so they are skipped) with the filter. Both GRPO
// stages evaluate every eval_interval steps; their metrics.jsonl lines carry wall-clock times. At a budget T (the
// shorter run's length, and half of it) each variant's accuracy is its last evaluation finished within T of its
// stage's start (the step-0 evaluation). Prints a table and one final JSON line. CPU-heavy: about 4 minutes per
// quickstart run on a 2-core machine, so ~25 minutes for three seeds.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { repoRoot } from './harness.js';

const { values } = parseArgs({
  options: { seeds: { type: 'string', default: '0,1,2' }, threshold: { type: 'string', default: '0' } },
});
const seeds = (values.seeds ?? '0,1,2').split(',').map(Number);
const threshold = Number(values.threshold);
const trinity = join(repoRoot, 'bin', 'trinity.js');
const runs = join(repoRoot, 'runs', 'quickstart');

function run(args: string[]): void {
  const result = spawnSync(process.execPath, [trinity, ...args], { cwd: repoRoot, stdio: 'inherit' });
  if (result.status !== 0) throw new Error(`trinity ${args.join(' ')} exited with ${result.status}`);
}

interface EvalPoint {
  seconds: number;
  step: number;
  accuracy: number;
}

/** The GRPO stage's evaluations: seconds since its step-0 evaluation, and the greedy eval taskset's accuracy. */
function evalPoints(jobDir: string): { points: EvalPoint[]; key: string } {
  const lines = readFileSync(join(jobDir, 'grpo', 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
  const key = Object.keys(lines.find((l) => Object.keys(l).some((k) => k.startsWith('eval/eval/'))) ?? {}).find(
    (k) => k.startsWith('eval/eval/') && /mean@1|accuracy/.test(k),
  );
  if (key === undefined) throw new Error(`${jobDir}/grpo/metrics.jsonl has no eval/eval/* accuracy`);
  const evals = lines.filter((l) => typeof l[key] === 'number');
  const start = evals[0]?.time as number;
  return {
    key,
    points: evals.map((l) => ({ seconds: (l.time as number) - start, step: l.step as number, accuracy: l[key] as number })),
  };
}

const atBudget = (points: EvalPoint[], budget: number) => points.filter((p) => p.seconds <= budget + 1e-9).at(-1) as EvalPoint;

const rows: { seed: number; budget: number; plain: EvalPoint; filtered: EvalPoint }[] = [];
for (const seed of seeds) {
  const name = seed === 0 ? 'addition' : `addition-seed${seed}`;
  const model = join(runs, seed === 0 ? 'model' : `model-seed${seed}`);
  const plainDir = join(runs, name);
  if (!existsSync(join(plainDir, 'grpo', 'done.json'))) run(['quickstart', '--seed', String(seed)]);
  const filteredName = `${name}-reward-std-filter`;
  const filteredDir = join(runs, filteredName);
  for (const stage of ['base', 'sft']) {
    mkdirSync(join(filteredDir, stage), { recursive: true });
    copyFileSync(join(plainDir, stage, 'done.json'), join(filteredDir, stage, 'done.json'));
  }
  if (!existsSync(join(filteredDir, 'grpo', 'done.json')))
    run([
      'run',
      '--config',
      join(repoRoot, 'examples', 'quickstart', 'config.yaml'),
      '--set',
      `model.model_path=${model}`,
      '--set',
      `name=${filteredName}`,
      '--set',
      `buffer.explorer_input.taskset.task_selector.seed=${seed}`,
      '--set',
      `data_processor.experience_pipeline={operators: [{name: reward_std_filter, args: {threshold: ${threshold}}}], save_input: false}`,
    ]);
  const plain = evalPoints(plainDir).points;
  const filtered = evalPoints(filteredDir).points;
  const total = Math.min(plain.at(-1)?.seconds ?? 0, filtered.at(-1)?.seconds ?? 0);
  for (const budget of [total / 2, total])
    rows.push({ seed, budget, plain: atBudget(plain, budget), filtered: atBudget(filtered, budget) });
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
console.log('\n| seed | wall-clock budget | GRPO (step) | GRPO + reward_std_filter (step) | difference |');
console.log('| --- | --- | --- | --- | --- |');
for (const r of rows)
  console.log(
    `| ${r.seed} | ${r.budget.toFixed(0)} s | ${pct(r.plain.accuracy)} (${r.plain.step}) | ${pct(r.filtered.accuracy)} (${r.filtered.step}) | ` +
      `${((r.filtered.accuracy - r.plain.accuracy) * 100).toFixed(1)} points |`,
  );
console.log(JSON.stringify({ bench: 'experience-filter', threshold, rows }));
