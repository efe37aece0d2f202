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
import os from 'node:os';
import { parseArgs } from 'node:util';
import { cpuInfo, r3 } from './harness.js';
import { type QuickstartFigures, quickstartJobDir, runQuickstart } from './quickstart-runs.js';

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

interface RunFigures extends QuickstartFigures {
  seed: number;
  threads: number;
  ok: boolean;
}

function figuresOf(seed: number, threads: number, f: QuickstartFigures): RunFigures {
  const ok =
    f.afterSft >= LIMITS.sftLow &&
    f.afterSft <= LIMITS.sftHigh &&
    f.gain >= LIMITS.minGain &&
    f.pass8AfterGrpo >= f.pass8AfterSft &&
    f.minutes < LIMITS.maxMinutes;
  return { seed, threads, ...f, ok };
}

const cpuModel = os.cpus()[0]?.model ?? 'unknown CPU';
const { flags } = cpuInfo();
const features = ['avx2', 'avx512f', 'avx512_bf16', 'amx_bf16'].filter((f) => flags.has(f));

const results: RunFigures[] = [];
for (const seed of seeds)
  for (const threads of threadCounts) {
    const name = `addition${seed === 0 ? '' : `-seed${seed}`}-threads${threads}`;
    console.log(`\n=== seed ${seed}, ${threads} thread(s): ${quickstartJobDir(name)}`);
    results.push(figuresOf(seed, threads, await runQuickstart(seed, threads, name)));
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
