// Same batch, both GRPO implementations: our train step next to TRL's GRPOTrainer on one fixed batch of rollouts.
//
//   node --import tsx bench/grpo-same-batch.ts [--model DIR] [--config FILE] [--seed N] [--threads N] [--out DIR]
//
// When bench/grpo.bench.ts says ours learns less per sample than TRL, this is where to look first: is the update the
// same? bench/grpo_same_batch.py samples one batch (the config's GRPO stage: batch tasks × group completions at the
// rollout temperature) with TRL's own generation, scores it, and trains it twice with TRL's loss (the benchmark's
// GRPOConfig, constant LR); this script feeds the same rows (tokens, rewards, TRL's π_old as the rollout log-probs,
// the sampling temperature) to our TrainStep with the stage's algorithm section (the GRPO preset and its defaults:
// advantage_fn grpo, the PPO clipped loss, loss_agg_mode, clip_grad, AdamW with the same betas and weight decay) at
// the same constant LR, and compares:
//   advantages    ours (advantage_fn on the same rewards and groups) vs TRL's (r − mean_g) / (std_g + 1e-4)
//   update 1      π = π_old (ratio 1): loss, gradient norm before clipping
//   after it      log-probs of the batch's completion tokens after the update, ours vs TRL's (same update ⇒ equal
//                 up to float32 rounding and Adam's first step, ≈ lr · sign(g), on near-zero gradients)
//   update 2      the same rows again (ratio ≠ 1): loss, gradient norm, clipped token share (ours pg_clipfrac, TRL's
//                 clip_ratio/region_mean)
// Prints a table and one JSON line.
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { CausalLM, tokenLogProbs } from '../src/model/index.js';
import { ADVANTAGE_FN, resolveAlgorithm } from '../src/rft/algorithm/index.js';
import type { Experience } from '../src/rft/experience.js';
import { buildBatch } from '../src/rft/trainer/train-batch.js';
import { TrainStep } from '../src/rft/trainer/train-step.js';
import * as torch from '../src/torch/index.js';
import { asDoc, readGrpoStage } from './grpo-stage.js';
import { findPython, fmt, r3, repoRoot, table } from './harness.js';

const HELP = `Same batch, both GRPO implementations: our train step and TRL's GRPOTrainer on one batch of rollouts.
  node --import tsx bench/grpo-same-batch.ts [options]

  --model DIR     the policy (default runs/quickstart/addition/sft/final_model)
  --config FILE   config whose GRPO stage gives the algorithm and batch (default examples/quickstart/config.yaml)
  --seed N        which prompts, and TRL's sampling seed (default 0)
  --lr X          the constant LR of both updates (default: the stage's lr)
  --threads N     intra-op threads of both sides (default: the core count)
  --out DIR       working folder (default runs/bench-grpo-same-batch)`;

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    config: { type: 'string' },
    seed: { type: 'string', default: '0' },
    lr: { type: 'string' },
    threads: { type: 'string' },
    out: { type: 'string' },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const modelDir = resolve(values.model ?? join(repoRoot, 'runs', 'quickstart', 'addition', 'sft', 'final_model'));
const configFile = resolve(values.config ?? join(repoRoot, 'examples', 'quickstart', 'config.yaml'));
const outDir = resolve(values.out ?? join(repoRoot, 'runs', 'bench-grpo-same-batch'));
const threads = Number(values.threads ?? os.availableParallelism());
const settings = readGrpoStage(configFile);
const lr = Number(values.lr ?? settings.lr);
if (!(lr > 0)) throw new Error(`--lr must be a positive number, got '${values.lr}'`);
mkdirSync(outDir, { recursive: true });
const batchFile = join(outDir, 'batch.json');

// --- TRL: sample, score, two updates --------------------------------------------------------------------------------

await new Promise<void>((done, fail) => {
  const args = [
    join(repoRoot, 'bench', 'grpo_same_batch.py'),
    ...['--model', modelDir, '--train', settings.trainFile, '--group', String(settings.group)],
    ...['--batch', String(settings.batch), '--max-tokens', String(settings.maxTokens)],
    ...['--temperature', String(settings.temperature), '--lr', String(lr), '--seed', String(values.seed)],
    ...['--threads', String(threads), '--out', batchFile],
  ];
  const child = spawn(findPython(), args, { cwd: repoRoot, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (c: string) => {
    stderr += c;
  });
  child.on('error', fail);
  child.on('exit', (code) =>
    code === 0 ? done() : fail(new Error(`grpo_same_batch.py exited with ${code}:\n${stderr.slice(-4000)}`)),
  );
});

interface Row {
  prompt_ids: number[];
  completion_ids: number[];
  reward: number;
  advantage: number;
  old_logps: number[];
  logps_after: number[][];
}
interface Update {
  loss: number;
  grad_norm: number;
  clip_fraction: number;
  clip_fraction_low: number;
  clip_fraction_high: number;
}
const trl = JSON.parse(readFileSync(batchFile, 'utf8')) as { group: number; temperature: number; rows: Row[]; trl: Update[] };
const group = trl.group;

// --- ours: the same rows through our train step ----------------------------------------------------------------------

torch.setNumThreads(threads);
const experiences: Experience[] = trl.rows.map((r, i) => ({
  eid: `task${Math.floor(i / group)}-run${i % group}`,
  tokens: [...r.prompt_ids, ...r.completion_ids],
  promptLength: r.prompt_ids.length,
  logprobs: r.old_logps,
  temperature: trl.temperature,
  reward: r.reward,
  info: { taskId: `task${Math.floor(i / group)}`, runId: i % group },
}));
// the stage's algorithm section as trinity run resolves it, less the KL term (beta 0 on TRL's side; the quickstart's
// kl_coef is 0 and the bench runs ours with kl_loss_fn none for the same reason)
const algorithm = resolveAlgorithm({ ...asDoc(settings.stage.algorithm), kl_loss_fn: 'none' });
if (algorithm.advantageFn === null) throw new Error(`${configFile}: the GRPO stage's algorithm has no advantage function`);
const advantageFn = algorithm.advantageFn;

/** Our advantage function on the same rewards and groups: one value per row (the same on every token). */
const ourAdvantages = torch.scope(() => {
  const n = experiences.length;
  const result = ADVANTAGE_FN.create(
    advantageFn.name,
    advantageFn.args,
  )({
    actionMask: torch.ones([n, 1]),
    rewards: torch.tensor(experiences.map((e) => e.reward as number)),
    groupIds: experiences.map((e) => e.info.taskId as string),
  });
  return [...(result.advantages.squeeze(-1).toTypedArray() as Float32Array)];
});

const model = CausalLM.load(modelDir, { requiresGrad: true });
const o = algorithm.optimizer;
const optimizer = new torch.AdamW(torch.weightDecayGroups(model.parameters(), o.weightDecay), {
  lr,
  betas: [o.betas[0] ?? 0.9, o.betas[1] ?? 0.999],
});
const step = new TrainStep({ model, optimizer, algorithm });

/** The batch's completion-token log-probs under the current weights, at the sampling temperature, one array per row. */
function completionLogprobs(): number[][] {
  return torch.scope(() =>
    torch.noGrad(() => {
      const batch = buildBatch(experiences);
      const P = batch.promptWidth;
      const R = batch.responseWidth;
      const all = tokenLogProbs(model, batch.inputIds, { attentionMask: batch.attentionMask, temperature: trl.temperature })
        .logProbs.narrow(1, P - 1, R)
        .toArray() as number[][];
      return all.map((row, i) => row.slice(0, (trl.rows[i] as Row).completion_ids.length));
    }),
  );
}
const ours = [0, 1].map(() => {
  const metrics = step.run(experiences);
  return { metrics, after: completionLogprobs() };
});

// --- compare ---------------------------------------------------------------------------------------------------------

/** Max and mean |a − b| over every element of two equally shaped nested arrays. */
function gap(a: number[][], b: number[][]): { max: number; mean: number } {
  let max = 0;
  let sum = 0;
  let n = 0;
  for (const [i, row] of a.entries()) {
    for (const [j, x] of row.entries()) {
      const d = Math.abs(x - ((b[i] as number[])[j] as number));
      max = Math.max(max, d);
      sum += d;
      n++;
    }
  }
  return { max, mean: sum / n };
}
const advantageGap = gap([ourAdvantages], [trl.rows.map((r) => r.advantage)]);
const oldLogps = trl.rows.map((r) => r.old_logps);
const moved = [0, 1].map((k) =>
  gap(
    trl.rows.map((r) => r.logps_after[k] as number[]),
    oldLogps,
  ),
);
const afterGap = [0, 1].map((k) =>
  gap(
    (ours[k] as (typeof ours)[number]).after,
    trl.rows.map((r) => r.logps_after[k] as number[]),
  ),
);
const m = (k: number, key: string) => (ours[k] as (typeof ours)[number]).metrics[key] ?? Number.NaN;
const t = (k: number) => trl.trl[k] as Update;
const tokens = trl.rows.reduce((a, r) => a + r.completion_ids.length, 0);
const rewardMean = trl.rows.reduce((a, r) => a + r.reward, 0) / trl.rows.length;
table(
  `one batch: ${trl.rows.length} rows (${settings.batch} tasks x ${group}), ${tokens} completion tokens, reward mean ${fmt(rewardMean, 3)}, T ${trl.temperature}, lr ${lr}`,
  ['', 'ours', 'TRL', 'max |ours - TRL|', 'mean |ours - TRL|'],
  [
    ['advantages', '', '', fmt(advantageGap.max, 6), fmt(advantageGap.mean, 6)],
    ['update 1: loss', fmt(m(0, 'loss'), 6), fmt(t(0).loss, 6), '', ''],
    ['update 1: grad norm', fmt(m(0, 'grad_norm'), 5), fmt(t(0).grad_norm, 5), '', ''],
    ['update 1: clipped share', fmt(m(0, 'pg_clipfrac'), 4), fmt(t(0).clip_fraction, 4), '', ''],
    [
      'log-probs after update 1 (TRL moved them by)',
      '',
      `${fmt(moved[0]?.max ?? Number.NaN, 5)} max`,
      fmt(afterGap[0]?.max ?? Number.NaN, 5),
      fmt(afterGap[0]?.mean ?? Number.NaN, 6),
    ],
    ['update 2: loss', fmt(m(1, 'loss'), 6), fmt(t(1).loss, 6), '', ''],
    ['update 2: grad norm', fmt(m(1, 'grad_norm'), 5), fmt(t(1).grad_norm, 5), '', ''],
    ['update 2: clipped share', fmt(m(1, 'pg_clipfrac'), 4), fmt(t(1).clip_fraction, 4), '', ''],
    [
      'log-probs after update 2 (TRL moved them by)',
      '',
      `${fmt(moved[1]?.max ?? Number.NaN, 5)} max`,
      fmt(afterGap[1]?.max ?? Number.NaN, 5),
      fmt(afterGap[1]?.mean ?? Number.NaN, 6),
    ],
  ],
);
console.log(
  JSON.stringify({
    bench: 'grpo-same-batch',
    rows: trl.rows.length,
    tokens,
    reward_mean: r3(rewardMean),
    lr,
    algorithm: {
      advantage_fn: advantageFn.name,
      policy_loss_fn: algorithm.policyLossFn.name,
      loss_agg_mode: algorithm.lossAggMode,
    },
    advantages_max_abs_diff: advantageGap.max,
    updates: [0, 1].map((k) => ({
      ours: { loss: m(k, 'loss'), grad_norm: m(k, 'grad_norm'), clip_fraction: m(k, 'pg_clipfrac') },
      trl: t(k),
      logps_after_max_abs_diff: afterGap[k]?.max,
      logps_after_mean_abs_diff: afterGap[k]?.mean,
      trl_logps_moved_max: moved[k]?.max,
      trl_logps_moved_mean: moved[k]?.mean,
    })),
  }),
);
