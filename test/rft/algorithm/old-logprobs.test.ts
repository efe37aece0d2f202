// Old log-probs and rollout correction in the trainer, end to end on a tiny model (test/rft/trainer/toy.ts: one
// response token per row, groups of GOOD (reward 1) and BAD (reward 0), so GRPO's advantages are ±1/√2 · (1 − 1e-6·…)).
// The rollout's log-probs are shifted from the trainer's by hand — Δ = log π_train − log π_rollout = +0.3 on GOOD
// rows and −0.2 on BAD rows — so every expected number below is written out:
//   mean |Δ| = 0.25,  kl = mean(−Δ) = −0.05
//   token TIS, C = 1.1: w_GOOD = min(e^0.3, 1.1) = 1.1, w_BAD = e^−0.2;  mean w = (1.1 + e^−0.2)/2;  clip fraction 1/2
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { CausalLM } from '../../../src/model/transformer.js';
import { computeClipvAdvantages, resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { TrainStep } from '../../../src/rft/trainer/train-step.js';
import * as torch from '../../../src/torch/index.js';
import { GOOD, loadPolicy, rollouts, tinyModelDir } from '../trainer/toy.js';

torch.setNumThreads(1);
let toy: { dir: string; remove: () => void };
before(() => {
  toy = tinyModelDir();
});
after(() => toy.remove());

const SHIFT_GOOD = 0.3;
const SHIFT_BAD = -0.2;
/** GRPO's advantage of a {1, 0} group: (1 − 0.5) / (std + ε), std = 1/√2. */
const A = 0.5 / (Math.SQRT1_2 + 1e-6);

/** Rollouts whose log-probs differ from the trainer's by Δ (see the header). */
function mismatched(model: CausalLM): Experience[] {
  return rollouts(model).map((e) => {
    const delta = e.tokens[e.tokens.length - 1] === GOOD ? SHIFT_GOOD : SHIFT_BAD;
    return { ...e, logprobs: (e.logprobs as number[]).map((l) => l - delta) };
  });
}

function run(config: Record<string, unknown>, microBatchSize?: number) {
  const model = loadPolicy(toy.dir);
  const algorithm = resolveAlgorithm({ algorithm_type: 'grpo', kl_loss_fn: 'none', ...config });
  const optimizer = new torch.AdamW([...model.parameters().values()], { lr: 1e-2, weightDecay: 0 });
  const step = new TrainStep({ model, optimizer, algorithm, ...(microBatchSize ? { microBatchSize } : {}) });
  try {
    return step.run(mismatched(model));
  } finally {
    model.dispose();
  }
}

const near = (actual: number | undefined, expected: number, what: string, tol = 1e-5) => {
  assert.ok(actual !== undefined, `${what}: missing`);
  assert.ok(Math.abs(actual - expected) <= tol, `${what}: ${actual} vs ${expected}`);
};

function assertMismatchMetrics(m: Record<string, number>, withWeights: boolean) {
  near(m['rollout_corr/abs_logprob_diff'], (SHIFT_GOOD - SHIFT_BAD) / 2, 'abs_logprob_diff');
  near(m['rollout_corr/kl'], -(SHIFT_GOOD + SHIFT_BAD) / 2, 'kl');
  if (!withWeights) {
    assert.equal(m['rollout_corr/is_weight_mean'], undefined, 'no weights without rollout_is');
    return;
  }
  near(m['rollout_corr/is_weight_mean'], (1.1 + Math.exp(SHIFT_BAD)) / 2, 'is_weight_mean');
  near(m['rollout_corr/is_clip_fraction'], 0.5, 'is_clip_fraction');
}

describe('old log-probs: bypass or recompute, and truncated importance sampling', () => {
  test('recompute: the old log-probs are the trainer’s own (ratio 1), the mismatch is measured before the update', () => {
    const m = run({ bypass_old_logprobs: false });
    near(m['policy/ratio_mean'], 1, 'ratio π_θ / π_old with recomputed π_old');
    near(m.ppo_kl, 0, 'ppo_kl');
    near(m['policy/pg_loss'], 0, 'pg_loss: Σ −A over a {+A, −A} batch');
    assertMismatchMetrics(m, false);
  });

  test('bypass (the default): the rollout’s log-probs are the old ones; the mismatch is measured all the same', () => {
    const m = run({});
    near(m.ppo_kl, -(SHIFT_GOOD + SHIFT_BAD) / 2, 'ppo_kl = mean(log π_rollout − log π_θ)');
    assertMismatchMetrics(m, false);
  });

  test('recompute + token TIS: each token’s loss is weighted by min(π_old / π_rollout, C)', () => {
    const m = run({ bypass_old_logprobs: false, rollout_correction: { rollout_is: 'token', rollout_is_threshold: 1.1 } });
    // ratio 1: per-token loss −A·w; the batch's token mean over GOOD (+A, w = 1.1) and BAD (−A, w = e^−0.2)
    near(m['policy/pg_loss'], (-A * 1.1 + A * Math.exp(SHIFT_BAD)) / 2, 'pg_loss');
    assertMismatchMetrics(m, true);
  });

  test('bypass + token TIS, in micro-batches: the weights come from the policy being trained, metrics add up', () => {
    // ratio r = π_θ / π_rollout = e^Δ: GOOD's clipped at 1.2 (A > 0), BAD's e^−0.2 inside the clip range
    const expected = (-A * 1.2 * 1.1 + A * Math.exp(SHIFT_BAD) * Math.exp(SHIFT_BAD)) / 2;
    const config = { rollout_correction: { rollout_is: 'token', rollout_is_threshold: 1.1 } };
    for (const micro of [undefined, 2]) {
      const m = run(config, micro);
      near(m['policy/pg_loss'], expected, `pg_loss (micro-batch ${micro ?? 'whole'})`);
      assertMismatchMetrics(m, true);
    }
  });

  test('sequence TIS: one weight per sequence (one token per row here: the token weights)', () => {
    const m = run({ bypass_old_logprobs: false, rollout_correction: { rollout_is: 'sequence', rollout_is_threshold: 1.1 } });
    near(m['policy/pg_loss'], (-A * 1.1 + A * Math.exp(SHIFT_BAD)) / 2, 'pg_loss');
    assertMismatchMetrics(m, true);
  });
});

describe('modules that read the current policy over the whole batch', () => {
  test('m2po: the whole-batch mask is the same whatever the micro-batches', () => {
    const config = { algorithm_type: 'm2po', policy_loss_fn_args: { m2_threshold: 0.01 } };
    const whole = run(config);
    const split = run(config, 2);
    assert.ok(whole['policy/m2_before'] !== undefined && whole['policy/masked_fraction'] !== undefined, 'mask metrics');
    assert.ok((whole['policy/masked_fraction'] as number) > 0, 'the threshold masks some tokens');
    near(split['policy/pg_loss'], whole['policy/pg_loss'] as number, 'pg_loss', 1e-6);
    near(split['policy/masked_fraction'], whole['policy/masked_fraction'] as number, 'masked_fraction', 1e-9);
  });

  test('clipb: the trainer supplies the current entropy and trains on the tokens the function keeps', () => {
    const m = run({ algorithm_type: 'grpo_verl', advantage_fn: 'clipb', advantage_fn_args: { mu: 0.1 } });
    assert.ok(m['advantage/frac_clipped'] !== undefined && m['advantage/ES'] !== undefined, 'clipb metrics');
    assert.ok(Number.isFinite(m.loss as number));
  });

  test('clipv: the trainer supplies the current entropy and necs and trains on the tokens the function keeps', () => {
    // What clipv must see with recomputed old log-probs, by hand from the policy's logits z at each response position:
    // log p = log softmax(z), H = −Σ p log p, N = Σ p² (H + log p), LP = log p[token]. On this toy the BAD rows'
    // xD / σ_D are about 3.53, 3.51, 0.94, 1.25 (rows 1, 3, 5, 7): μ 2.5 clips rows 1 and 3, the default max_frac
    // (K = 1 of 8 tokens) only row 1, the larger.
    const model = loadPolicy(toy.dir);
    const rows = rollouts(model);
    const expected = torch.scope(() =>
      torch.noGrad(() => {
        const lp: number[] = [];
        const h: number[] = [];
        const n: number[] = [];
        for (const e of rows) {
          const z = model
            .forward(torch.tensor([e.tokens.map(BigInt)]))
            .select(0, 0)
            .select(0, e.promptLength - 1);
          const logp = z.double().logSoftmax(-1);
          const p = logp.exp();
          const entropy = p.mul(logp).sum().neg().item();
          lp.push(logp.select(0, e.tokens[e.promptLength] as number).item());
          h.push(entropy);
          n.push(p.square().mul(logp.add(entropy)).sum().item());
        }
        const column = (values: number[]) => torch.tensor(values, { dtype: 'float64' }).reshape([rows.length, 1]);
        return computeClipvAdvantages(
          {
            actionMask: torch.ones([rows.length, 1]),
            rewards: torch.tensor(rows.map((e) => e.reward as number)),
            groupIds: rows.map((e) => e.info.taskId as string),
            logprobs: column(lp),
            entropy: column(h),
            necs: column(n),
          },
          { mu: 2.5, maxFrac: 1 },
        ).metrics;
      }),
    );
    model.dispose();
    for (const [args, clipped] of [[{ mu: 2.5, max_frac: 1 }, 2] as const, [{ mu: 2.5 }, 1] as const]) {
      const m = run({ algorithm_type: 'grpo_verl', advantage_fn: 'clipv', advantage_fn_args: args, bypass_old_logprobs: false });
      const what = JSON.stringify(args);
      near(m['advantage/stdD'], expected.stdD as number, `${what} stdD`, 1e-8);
      assert.equal(m.tokens, rows.length - clipped, `${what}: the update trains on the kept tokens only`);
      near(m['advantage/frac_clipped_neg'], clipped / 4, `${what} frac_clipped_neg`, 1e-9);
      near(m['advantage/frac_clipped_pos'], 0, `${what} frac_clipped_pos`, 0);
    }
    assert.equal(expected.frac_clipped_neg, 0.5, 'the hand computation clips rows 1 and 3');
  });
});
