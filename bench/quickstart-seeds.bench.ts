// The quickstart across seeds and float roundings: `npm run bench:quickstart-seeds [-- --seeds 0,1,2,3,4 --threads 1,2]`.
//
// Runs `trinity quickstart --seed S --threads T` for every pair, each from scratch (its job folder is removed first;
// the model folder is made once per seed and reused: `trinity model init` is deterministic), one after the other with
// the machine to itself. Intra-op thread counts change the order of float reductions, so each thread count is another
// rounding of the same run. From each run's metrics: held-out greedy accuracy (mean@1) and pass@8 after SFT (the GRPO
// stage's evaluation at its step 0) and after GRPO (its last), the SFT steps the stop rule took, and the whole
// command's wall-clock minutes (setup excluded). What the quickstart promises is checked per run:
//   SFT lands in [15%, 85%]; GRPO adds >= 10 points; pass@8 does not fall; the run takes < 6 minutes.
// Prints the Markdown table the README shows and ends with one JSON line of the figures.
import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { cpuInfo, now, r3, repoRoot, secondsSince } from './harness.js';

const HELP = `The quickstart across seeds and thread counts (roundings).
  node --import tsx bench/quickstart-seeds.bench.ts [--seeds 0,1,2,3,4] [--threads 1,2]
Each run is \`trinity quickstart --seed S --threads T\` from scratch (runs/quickstart/addition[-seedS]-threadsT).`;

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '0,1,2,3,4' },
    threads: { type: 'string', default: '1,2' },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const list = (text: string, what: string) =>
  text.split(',').map((s) => {
    const n = Number(s.trim());
    if (!Number.isInteger(n) || n < 0) throw new Error(`--${what}: '${s}' is not a whole number`);
    return n;
  });
const seeds = list(values.seeds, 'seeds');
const threadCounts = list(values.threads, 'threads');

/** Limits the quickstart promises (README). */
const LIMITS = { sftLow: 0.15, sftHigh: 0.85, minGain: 0.1, maxMinutes: 6 };

interface RunFigures {
  seed: number;
  threads: number;
  sftSteps: number;
  afterSft: number;
  afterGrpo: number;
  gain: number;
  pass8AfterSft: number;
  pass8AfterGrpo: number;
  minutes: number;
  ok: boolean;
}

type Line = Record<string, number>;
const lines = (file: string): Line[] =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Line);

function runQuickstart(seed: number, threads: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [join(repoRoot, 'bin', 'trinity.js'), 'quickstart', '--seed', String(seed), '--threads', String(threads)],
      { cwd: repoRoot, stdio: ['ignore', 'inherit', 'inherit'] },
    );
    child.on('error', reject);
    child.on('exit', (code, signal) =>
      code === 0
        ? resolve()
        : reject(new Error(`trinity quickstart --seed ${seed} --threads ${threads}: ${signal ?? `exit ${code}`}`)),
    );
  });
}

function figuresOf(seed: number, threads: number, jobDir: string, minutes: number): RunFigures {
  const evals = lines(join(jobDir, 'grpo', 'metrics.jsonl')).filter((l) => l['eval/eval/mean@1'] !== undefined);
  const first = evals[0];
  const last = evals.at(-1);
  if (first?.step !== 0 || last === undefined) throw new Error(`${jobDir}/grpo/metrics.jsonl: no evaluation at step 0 and after`);
  const sftSteps = JSON.parse(readFileSync(join(jobDir, 'sft', 'done.json'), 'utf8')).steps as number;
  const f = {
    seed,
    threads,
    sftSteps,
    afterSft: first['eval/eval/mean@1'] as number,
    afterGrpo: last['eval/eval/mean@1'] as number,
    gain: (last['eval/eval/mean@1'] as number) - (first['eval/eval/mean@1'] as number),
    pass8AfterSft: first['eval/eval_sampled/pass@8'] as number,
    pass8AfterGrpo: last['eval/eval_sampled/pass@8'] as number,
    minutes,
  };
  const ok =
    f.afterSft >= LIMITS.sftLow &&
    f.afterSft <= LIMITS.sftHigh &&
    f.gain >= LIMITS.minGain &&
    f.pass8AfterGrpo >= f.pass8AfterSft &&
    f.minutes < LIMITS.maxMinutes;
  return { ...f, ok };
}

const cpuModel = os.cpus()[0]?.model ?? 'unknown CPU';
const { flags } = cpuInfo();
const features = ['avx2', 'avx512f', 'avx512_bf16', 'amx_bf16'].filter((f) => flags.has(f));

const results: RunFigures[] = [];
for (const seed of seeds)
  for (const threads of threadCounts) {
    const name = `addition${seed === 0 ? '' : `-seed${seed}`}-threads${threads}`;
    const jobDir = join(repoRoot, 'runs', 'quickstart', name);
    rmSync(jobDir, { recursive: true, force: true });
    console.log(`\n=== seed ${seed}, ${threads} thread(s): ${jobDir}`);
    const t0 = now();
    await runQuickstart(seed, threads);
    results.push(figuresOf(seed, threads, jobDir, secondsSince(t0) / 60));
  }

const pct = (v: number) => `${(v * 100).toFixed(1)}%`;
console.log(`\nThe quickstart on ${cpuModel} (${os.availableParallelism()} cores; ${features.join(', ')}):\n`);
console.log('| seed | threads | SFT steps | after SFT | after GRPO | gain | pass@8 after SFT → after GRPO | minutes |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of results)
  console.log(
    `| ${r.seed} | ${r.threads} | ${r.sftSteps} | ${pct(r.afterSft)} | ${pct(r.afterGrpo)} | ${r.gain >= 0 ? '+' : ''}${(r.gain * 100).toFixed(1)} | ` +
      `${pct(r.pass8AfterSft)} → ${pct(r.pass8AfterGrpo)} | ${r.minutes.toFixed(1)} |${r.ok ? '' : ' ✗'}`,
  );
const failed = results.filter((r) => !r.ok);
console.log(
  failed.length === 0
    ? `\nall ${results.length} runs: SFT in [15%, 85%], GRPO >= +10 points, pass@8 not falling, < 6 minutes`
    : `\n${failed.length} of ${results.length} runs miss a limit (✗): SFT in [15%, 85%], GRPO >= +10 points, pass@8 not falling, < 6 minutes`,
);
console.log(
  JSON.stringify({
    bench: 'quickstart-seeds',
    cpu: cpuModel,
    features,
    cores: os.availableParallelism(),
    runs: results.map((r) => ({
      ...r,
      afterSft: r3(r.afterSft),
      afterGrpo: r3(r.afterGrpo),
      gain: r3(r.gain),
      pass8AfterSft: r3(r.pass8AfterSft),
      pass8AfterGrpo: r3(r.pass8AfterGrpo),
      minutes: r3(r.minutes),
    })),
    allOk: failed.length === 0,
  }),
);
