// The learning effect of trainer.bitwise_on_policy on the quickstart: `npm run bench:on-policy-learning`
//   node --import tsx bench/on-policy-learning.bench.ts [--seeds 0,1,2,3,4] [--threads 1] [--grpo-steps 150]
//
// For each seed, `trinity quickstart --seed S --threads T` twice (./quickstart-runs.ts): the mode off, from scratch;
// then the mode on in the GRPO stage (`--set stages.2.trainer.bitwise_on_policy=true`) from the off run's finished
// base and SFT stages (copied: SFT is not on-policy, so both GRPO stages start from the same SFT model and differ by
// the mode alone). --grpo-steps shortens the GRPO stage (a multiple of the config's eval_interval, 30, so that it
// ends on an evaluation). Each run's figures are printed as one JSON line when it ends. Per run: held-out greedy accuracy after SFT and after GRPO, the gain, pass@8, and the sampler/trainer
// gap the trainer logged over the GRPO steps (actor/rollout_corr/abs_logprob_diff: mean and max over steps; the
// mode makes it 0). Per mode over the seeds: the gain's mean and sample variance,
//   mean = Σ g_s / n,   variance = Σ (g_s − mean)² / (n − 1)
// and the paired difference on − off per seed (its mean and variance). Prints a Markdown table and one JSON line.
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { cpuInfo, positiveFlag, r3 } from './harness.js';
import { type QuickstartFigures, quickstartJobDir, runQuickstart } from './quickstart-runs.js';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '0,1,2,3,4' },
    threads: { type: 'string', default: '1' },
    'grpo-steps': { type: 'string' },
  },
});
const seeds = (values.seeds as string).split(',').map((s) => {
  const n = Number(s.trim());
  if (!Number.isInteger(n) || n < 0) throw new Error(`--seeds: '${s}' is not a whole number`);
  return n;
});
const threads = positiveFlag('threads', values.threads as string);
const EVAL_INTERVAL = 30; // examples/quickstart/config.yaml explorer.eval_interval
const grpoSteps = values['grpo-steps'] === undefined ? null : positiveFlag('grpo-steps', values['grpo-steps']);
if (grpoSteps !== null && grpoSteps % EVAL_INTERVAL !== 0)
  throw new Error(`--grpo-steps ${grpoSteps}: give a multiple of the quickstart's eval_interval (${EVAL_INTERVAL})`);

type Mode = 'off' | 'on';
interface Run extends QuickstartFigures {
  seed: number;
  mode: Mode;
  /** actor/rollout_corr/abs_logprob_diff over the GRPO steps: mean and max. */
  gapMean: number;
  gapMax: number;
}

/** actor/rollout_corr/abs_logprob_diff of every GRPO step of the job. */
function gapOf(jobDir: string): { gapMean: number; gapMax: number } {
  const gaps = readFileSync(join(jobDir, 'grpo', 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => (JSON.parse(l) as Record<string, number>)['actor/rollout_corr/abs_logprob_diff'])
    .filter((g): g is number => g !== undefined);
  if (gaps.length === 0) throw new Error(`${jobDir}/grpo/metrics.jsonl: no actor/rollout_corr/abs_logprob_diff`);
  return { gapMean: gaps.reduce((a, g) => a + g, 0) / gaps.length, gapMax: Math.max(...gaps) };
}

const runs: Run[] = [];
for (const seed of seeds)
  for (const mode of ['off', 'on'] as const) {
    const name = `addition${seed === 0 ? '' : `-seed${seed}`}-threads${threads}-bitwise-${mode}`;
    const sets = [
      ...(mode === 'on' ? ['stages.2.trainer.bitwise_on_policy=true'] : []),
      ...(grpoSteps === null ? [] : [`stages.2.buffer.total_steps=${grpoSteps}`]),
    ];
    console.log(`\n=== seed ${seed}, bitwise_on_policy ${mode}: ${quickstartJobDir(name)}`);
    const offRun = quickstartJobDir(name.replace(/-on$/, '-off'));
    const reuse = mode === 'on' ? { from: offRun, stages: ['base', 'sft'] } : undefined;
    const figures = await runQuickstart(seed, threads, name, sets, reuse);
    runs.push({ seed, mode, ...figures, ...gapOf(quickstartJobDir(name)) });
    console.log(JSON.stringify({ bench: 'on-policy-learning-run', ...runs.at(-1) }));
  }

const mean = (xs: readonly number[]) => xs.reduce((a, x) => a + x, 0) / xs.length;
const variance = (xs: readonly number[]) =>
  xs.length < 2 ? Number.NaN : xs.reduce((a, x) => a + (x - mean(xs)) ** 2, 0) / (xs.length - 1);
const gains = (mode: Mode) => runs.filter((r) => r.mode === mode).map((r) => r.gain);
const paired = seeds.map((s) => {
  const of = (mode: Mode) => runs.find((r) => r.seed === s && r.mode === mode) as Run;
  return of('on').gain - of('off').gain;
});
const summary = {
  off: { meanGain: mean(gains('off')), gainVariance: variance(gains('off')) },
  on: { meanGain: mean(gains('on')), gainVariance: variance(gains('on')) },
  onMinusOff: { mean: mean(paired), variance: variance(paired) },
};

const pct = (v: number) => `${(v * 100).toFixed(1)}%`;
const points = (v: number) => `${v >= 0 ? '+' : ''}${(v * 100).toFixed(1)}`;
const cpuModel = os.cpus()[0]?.model ?? 'unknown CPU';
const features = ['avx2', 'avx512f', 'avx512_bf16', 'amx_bf16'].filter((f) => cpuInfo().flags.has(f));
console.log(
  `\nThe quickstart, trainer.bitwise_on_policy off vs on (GRPO stage), ${threads} thread(s), GRPO ${grpoSteps ?? 'as configured (150)'} steps; ` +
    `${cpuModel} (${os.availableParallelism()} cores; ${features.join(', ')}):\n`,
);
console.log(
  '| seed | mode | SFT steps | after SFT | after GRPO | gain | pass@8 after SFT → after GRPO | mean / max \\|Δ log-prob\\| | minutes |',
);
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of runs)
  console.log(
    `| ${r.seed} | ${r.mode} | ${r.sftSteps} | ${pct(r.afterSft)} | ${pct(r.afterGrpo)} | ${points(r.gain)} | ` +
      `${pct(r.pass8AfterSft)} → ${pct(r.pass8AfterGrpo)} | ${r.gapMean.toExponential(1)} / ${r.gapMax.toExponential(1)} | ${r.minutes.toFixed(1)} |`,
  );
const sd = (v: number) => (Number.isNaN(v) ? 'n/a' : (Math.sqrt(v) * 100).toFixed(1));
console.log(
  `\ngain over ${seeds.length} seeds (points, mean ± sample sd): off ${points(summary.off.meanGain)} ± ${sd(summary.off.gainVariance)}, ` +
    `on ${points(summary.on.meanGain)} ± ${sd(summary.on.gainVariance)}; on − off per seed ${points(summary.onMinusOff.mean)} ± ${sd(summary.onMinusOff.variance)}`,
);
const rounded = (o: Record<string, number>, round = r3) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, round(v)]));
const fourDigits = (v: number) => Number(v.toPrecision(4));
console.log(
  JSON.stringify({
    bench: 'on-policy-learning',
    cpu: cpuModel,
    features,
    cores: os.availableParallelism(),
    threads,
    grpoSteps,
    runs: runs.map(({ mode, gapMean, gapMax, ...figures }) => ({ mode, ...rounded(figures), gapMean, gapMax })),
    summary: {
      off: rounded(summary.off, fourDigits),
      on: rounded(summary.on, fourDigits),
      onMinusOff: rounded(summary.onMinusOff, fourDigits),
    },
  }),
);
