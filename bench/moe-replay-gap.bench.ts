// Router replay's effect on the train/rollout mismatch of a mixture of experts: `node --import tsx
// bench/moe-replay-gap.bench.ts [--setups float32,bfloat16,bf16-engine] [--threads 1]`.
//
// Runs the short MoE quickstart (examples/quickstart/moe-short-run.ts: the quickstart's config over a tiny qwen3_moe,
// SFT then 24 GRPO steps) with algorithm.enable_router_replay on and off, in each setup (float32 and bfloat16: the
// engine and the trainer in that dtype; bf16-engine: the engine in bfloat16, the trainer in float32 through
// trainer.param_dtype, a deliberate mismatch), each from the same model and data, one after the other in this process. From each run's GRPO metrics: the trainer's and the engine's
// log-prob gap (rollout_corr/abs_logprob_diff = mean |log π_train − log π_rollout| over the response tokens of a
// step, its mean and max over the steps; rollout_corr/kl likewise), and the rollout reward of the first and last 6
// steps. Without replay the trainer routes every token itself, and a token whose top-k experts are nearly tied can go
// to another expert than the engine chose (other kernels and batch shapes round differently); with replay it goes
// through the engine's. Prints a table and ends with one JSON line of the figures.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { prepareShortMoeRun, shortMoeRunOverrides } from '../examples/quickstart/moe-short-run.js';
import { resolveAlgorithm } from '../src/rft/algorithm/presets.js';
import { loadConfig } from '../src/rft/run/config/index.js';
import { runConfig } from '../src/rft/run/index.js';
import * as torch from '../src/torch/index.js';
import { now, r3, repoRoot, secondsSince } from './harness.js';

const HELP = `Router replay on vs off: the train/rollout log-prob gap of a tiny MoE's GRPO (short quickstart).
  node --import tsx bench/moe-replay-gap.bench.ts [--setups float32,bfloat16,bf16-engine] [--threads N]
  --threads N   intra-op threads (default 1)`;

const { values } = parseArgs({
  options: {
    setups: { type: 'string', default: 'float32,bfloat16,bf16-engine' },
    threads: { type: 'string', default: '1' },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
/** Each setup: the engine's dtype and the trainer's. */
const SETUPS = {
  float32: { dtype: 'float32', trainerDtype: 'float32' },
  bfloat16: { dtype: 'bfloat16', trainerDtype: 'bfloat16' },
  'bf16-engine': { dtype: 'bfloat16', trainerDtype: 'float32' },
} as const;
const setups = values.setups.split(',').map((name) => {
  if (!Object.hasOwn(SETUPS, name)) throw new Error(`--setups: '${name}' is not one of ${Object.keys(SETUPS).join(', ')}`);
  return name as keyof typeof SETUPS;
});
const threads = Number(values.threads);
if (!Number.isInteger(threads) || threads < 1) throw new Error(`--threads must be a positive integer, got '${values.threads}'`);
torch.setNumThreads(threads);

interface RunFigures {
  setup: string;
  replay: boolean;
  gapMean: number;
  gapMax: number;
  klMean: number;
  rewardFirst: number;
  rewardLast: number;
  minutes: number;
}

/** The values of the metric whose name is or ends with `/key`, per line that has it. */
const series = (rows: Record<string, number>[], key: string) =>
  rows.flatMap((r) =>
    Object.entries(r)
      .filter(([name, value]) => (name === key || name.endsWith(`/${key}`)) && typeof value === 'number')
      .map(([, value]) => value),
  );
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

const root = mkdtempSync(join(os.tmpdir(), 'moe-replay-gap-'));
const results: RunFigures[] = [];
try {
  prepareShortMoeRun(root);
  for (const setup of setups)
    for (const replay of [true, false]) {
      const name = `${setup}-replay-${replay ? 'on' : 'off'}`;
      console.log(`=== ${name}`);
      const t0 = now();
      const overrides = shortMoeRunOverrides(root, { name, ...SETUPS[setup], replay });
      const config = loadConfig(join(repoRoot, 'examples', 'quickstart', 'config.yaml'), { resolveAlgorithm, overrides });
      await runConfig(config, { log: () => {} });
      const rows = readFileSync(join(root, 'runs', 'quickstart', name, 'grpo', 'metrics.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as Record<string, number>);
      const gap = series(rows, 'rollout_corr/abs_logprob_diff');
      const reward = series(rows, 'rollout/reward/mean');
      results.push({
        setup,
        replay,
        gapMean: mean(gap),
        gapMax: Math.max(...gap),
        klMean: mean(series(rows, 'rollout_corr/kl')),
        rewardFirst: mean(reward.slice(0, 6)),
        rewardLast: mean(reward.slice(-6)),
        minutes: secondsSince(t0) / 60,
      });
    }
} finally {
  rmSync(root, { recursive: true, force: true });
}

const e = (v: number) => v.toExponential(2);
console.log(
  `\nRouter replay on a tiny qwen3_moe (${os.cpus()[0]?.model ?? 'cpu'}, ${threads} thread(s), load avg ${os.loadavg()[0]?.toFixed(1)}):\n`,
);
console.log('| setup | replay | gap mean | gap max | rollout_corr/kl mean | reward first 6 → last 6 | minutes |');
console.log('| --- | --- | --- | --- | --- | --- | --- |');
for (const r of results)
  console.log(
    `| ${r.setup} | ${r.replay ? 'on' : 'off'} | ${e(r.gapMean)} | ${e(r.gapMax)} | ${e(r.klMean)} | ` +
      `${r.rewardFirst.toFixed(3)} → ${r.rewardLast.toFixed(3)} | ${r.minutes.toFixed(1)} |`,
  );
console.log(
  JSON.stringify({
    bench: 'moe-replay-gap',
    threads,
    runs: results.map((r) => ({
      ...r,
      rewardFirst: r3(r.rewardFirst),
      rewardLast: r3(r.rewardLast),
      minutes: r3(r.minutes),
    })),
  }),
);
