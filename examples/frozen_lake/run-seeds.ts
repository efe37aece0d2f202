// The FrozenLake example on several seeds (README.md's table): for each seed a new model (trinity model init --seed N)
// and a fresh run of config.yaml (base bench, SFT, GRPO; the GRPO task order also seeded by N), then the greedy
// success rate on the held-out maps before training, after SFT and after GRPO, and the minutes each whole run took.
// Ends with one JSON line of the figures.
//   node --import tsx examples/frozen_lake/run-seeds.ts [--seeds 0,1,2] [--set key=value]...
// Runs go to runs/frozen_lake/seed<N> (model) and runs/frozen_lake/grid-seed<N> (job), both replaced.
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { availableParallelism, cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = fileURLToPath(new URL('../../', import.meta.url));
const { values } = parseArgs({
  options: { seeds: { type: 'string', default: '0,1,2' }, set: { type: 'string', multiple: true, default: [] } },
});
const seeds = values.seeds.split(',').map((s) => {
  const seed = Number(s);
  if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seeds: expected non-negative integers, got '${s}'`);
  return seed;
});

/** An eval metric of a stage at its first or last eval. */
function evalMetric(stageDir: string, key: string, which: 'first' | 'last'): number {
  const rows = readFileSync(join(stageDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, number>)
    .filter((row) => typeof row[key] === 'number');
  const row = which === 'first' ? rows[0] : rows.at(-1);
  if (!row) throw new Error(`${stageDir}/metrics.jsonl has no ${key}`);
  return row[key] as number;
}
const SAMPLED = 'eval/eval_sampled/mean@4'; // the policy as it acts: 4 attempts per map at temperature 1
const GREEDY = 'eval/eval/mean@1';

const trinity = join(root, 'bin', 'trinity.js');
interface SeedResult {
  seed: number;
  /** Success rate sampling at temperature 1 (mean of 4 attempts per map) after SFT and after GRPO. */
  sft: number;
  grpo: number;
  gain: number;
  /** Greedy success rate before training, after SFT and after GRPO. */
  greedy: { base: number; sft: number; grpo: number };
  minutes: number;
}
const results: SeedResult[] = [];
for (const seed of seeds) {
  const model = join(root, 'runs', 'frozen_lake', `seed${seed}`);
  const name = `grid-seed${seed}`;
  const job = join(root, 'runs', 'frozen_lake', name);
  rmSync(model, { recursive: true, force: true });
  rmSync(job, { recursive: true, force: true });
  const started = performance.now();
  const run = (args: string[]) => execFileSync(process.execPath, [trinity, ...args], { cwd: root, stdio: 'inherit' });
  run(['model', 'init', model, '--layers', '4', '--max-positions', '512', '--seed', String(seed)]);
  run([
    'run',
    '--config',
    join(root, 'examples', 'frozen_lake', 'config.yaml'),
    ...[
      `model.model_path=${model}`,
      `name=${name}`,
      `buffer.explorer_input.taskset.task_selector.seed=${seed}`,
      ...values.set,
    ].flatMap((o) => ['--set', o]),
  ]);
  const minutes = (performance.now() - started) / 60_000;
  const grpoDir = join(job, 'grpo');
  const [sft, grpo] = [evalMetric(grpoDir, SAMPLED, 'first'), evalMetric(grpoDir, SAMPLED, 'last')];
  const greedy = {
    base: evalMetric(join(job, 'base'), GREEDY, 'first'),
    sft: evalMetric(grpoDir, GREEDY, 'first'),
    grpo: evalMetric(grpoDir, GREEDY, 'last'),
  };
  results.push({ seed, sft, grpo, gain: grpo - sft, greedy, minutes });
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const points = (x: number) => `${x >= 0 ? '+' : ''}${(100 * x).toFixed(1)}`;
const cpu = cpus()[0]?.model.trim() ?? 'unknown CPU';
console.log(`\nFrozenLake 4x4, success rate on 100 held-out maps (${cpu}, ${availableParallelism()} usable cores)`);
console.log('| seed | after SFT | after GRPO | gain | greedy: base | after SFT | after GRPO | minutes |');
console.log('|---|---|---|---|---|---|---|---|');
for (const r of results)
  console.log(
    `| ${r.seed} | ${pct(r.sft)} | ${pct(r.grpo)} | ${points(r.gain)} | ${pct(r.greedy.base)} | ${pct(r.greedy.sft)} | ${pct(r.greedy.grpo)} | ${r.minutes.toFixed(1)} |`,
  );
console.log(JSON.stringify({ example: 'frozen_lake', cpu, cores: availableParallelism(), results }));
