// The SFT-then-GRPO examples on several seeds (examples/frozen_lake and examples/sokoban: their README tables), one
// piece for both: for each seed a new model (trinity model init --seed N) and a fresh run of the example's
// config.yaml (base bench, SFT, GRPO; the GRPO task order also seeded by N), then the held-out success rate after SFT
// and after GRPO, greedy (eval mean@1) and as the policy acts (eval_sampled: temperature 1, mean@k), with the
// minutes and the CPU seconds each whole run took. Ends with one JSON line of the figures.
//   node --import tsx examples/<example>/run-seeds.ts [--seeds 0,1,2] [--set key=value]...
// Runs go to runs/<example>/seed<N> (model) and runs/<example>/<job>-seed<N> (job), both replaced.
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { availableParallelism, cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

export interface SeedsExample {
  /** The example's folder under examples/ (and under runs/). */
  example: string;
  /** The job name's prefix (the config's `name`). */
  job: string;
  /** `trinity model init` options after the folder (the seed is added). */
  modelInit: string[];
  /** What the table measures, e.g. 'FrozenLake 4x4, success rate on 100 held-out maps'. */
  title: string;
  /** The sampled eval's metric, e.g. 'eval/eval_sampled/mean@4'. */
  sampledMetric: string;
}

const GREEDY_METRIC = 'eval/eval/mean@1';
const root = fileURLToPath(new URL('../', import.meta.url));

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

/**
 * CPU seconds (user + system) of this process's waited-for children so far: /proc/self/stat's cutime and cstime, in
 * clock ticks (Linux; null elsewhere).
 */
function childrenCpuSeconds(): number | null {
  let stat: string;
  try {
    stat = readFileSync('/proc/self/stat', 'utf8');
  } catch {
    return null;
  }
  // fields after the command's ")": state is field 3, cutime 16, cstime 17 (1-based, proc(5))
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[13]) + Number(fields[14]);
  const ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
  return ticks / ticksPerSecond;
}

interface SeedResult {
  seed: number;
  /** Success rate as the policy acts (sampling at temperature 1) after SFT and after GRPO. */
  sampled: { sft: number; grpo: number; gain: number };
  /** Greedy success rate before training, after SFT and after GRPO. */
  greedy: { base: number; sft: number; grpo: number; gain: number };
  minutes: number;
  /** CPU seconds of the run's processes (model init included), null where unmeasured. */
  cpuSeconds: number | null;
}

/** Runs the example on the seeds of the command line, prints the table and one JSON line. */
export function runSeeds(spec: SeedsExample, argv: string[] = process.argv.slice(2)): SeedResult[] {
  const { values } = parseArgs({
    args: argv,
    options: { seeds: { type: 'string', default: '0,1,2' }, set: { type: 'string', multiple: true, default: [] } },
  });
  const seeds = values.seeds.split(',').map((s) => {
    const seed = Number(s);
    if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seeds: expected non-negative integers, got '${s}'`);
    return seed;
  });
  const trinity = join(root, 'bin', 'trinity.js');
  const run = (args: string[]) => execFileSync(process.execPath, [trinity, ...args], { cwd: root, stdio: 'inherit' });
  const results: SeedResult[] = [];
  for (const seed of seeds) {
    const model = join(root, 'runs', spec.example, `seed${seed}`);
    const name = `${spec.job}-seed${seed}`;
    const job = join(root, 'runs', spec.example, name);
    rmSync(model, { recursive: true, force: true });
    rmSync(job, { recursive: true, force: true });
    const started = performance.now();
    const cpuBefore = childrenCpuSeconds();
    run(['model', 'init', model, ...spec.modelInit, '--seed', String(seed)]);
    const overrides = [
      `model.model_path=${model}`,
      `name=${name}`,
      `buffer.explorer_input.taskset.task_selector.seed=${seed}`,
      ...values.set,
    ];
    run(['run', '--config', join(root, 'examples', spec.example, 'config.yaml'), ...overrides.flatMap((o) => ['--set', o])]);
    const cpuAfter = childrenCpuSeconds();
    const grpoDir = join(job, 'grpo');
    const sampled = {
      sft: evalMetric(grpoDir, spec.sampledMetric, 'first'),
      grpo: evalMetric(grpoDir, spec.sampledMetric, 'last'),
    };
    const greedy = {
      base: evalMetric(join(job, 'base'), GREEDY_METRIC, 'first'),
      sft: evalMetric(grpoDir, GREEDY_METRIC, 'first'),
      grpo: evalMetric(grpoDir, GREEDY_METRIC, 'last'),
    };
    results.push({
      seed,
      sampled: { ...sampled, gain: sampled.grpo - sampled.sft },
      greedy: { ...greedy, gain: greedy.grpo - greedy.sft },
      minutes: (performance.now() - started) / 60_000,
      cpuSeconds: cpuBefore === null || cpuAfter === null ? null : cpuAfter - cpuBefore,
    });
  }
  printTable(spec, results);
  return results;
}

function printTable(spec: SeedsExample, results: SeedResult[]): void {
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const points = (x: number) => `${x >= 0 ? '+' : ''}${(100 * x).toFixed(1)}`;
  const cpu = cpus()[0]?.model.trim() ?? 'unknown CPU';
  console.log(`\n${spec.title} (${cpu}, ${availableParallelism()} usable cores)`);
  console.log(
    '| seed | sampled: after SFT | after GRPO | gain | greedy: base | after SFT | after GRPO | gain | minutes | CPU seconds |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|---|');
  for (const r of results) {
    const { sampled: s, greedy: g } = r;
    console.log(
      `| ${r.seed} | ${pct(s.sft)} | ${pct(s.grpo)} | ${points(s.gain)} | ${pct(g.base)} | ${pct(g.sft)} | ${pct(g.grpo)} | ${points(g.gain)} | ${r.minutes.toFixed(1)} | ${r.cpuSeconds?.toFixed(0) ?? '?'} |`,
    );
  }
  console.log(JSON.stringify({ example: spec.example, cpu, cores: availableParallelism(), results }));
}
