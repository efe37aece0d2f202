// Every algorithm module against an independent implementation of the published formulas in plain PyTorch (float64),
// with TRL's own SAPO gate and DPO loss: test/fixtures/algorithm/reference.{safetensors,json}, written by
// scripts/fixtures/algorithm_reference.py. Losses are compared with their gradients w.r.t. the log-probs.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  ADVANTAGE_FN,
  aggregateLoss,
  createEntropyLossFn,
  createKlFn,
  isLossAggMode,
  type KlEstimator,
  POLICY_LOSS_FN,
} from '../../../src/rft/algorithm/index.js';
import * as torch from '../../../src/torch/index.js';
import { type Metrics, readMetrics } from '../../../src/rft/algorithm/metrics.js';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'fixtures', 'algorithm');
const TOL = 1e-6;

interface Case {
  name: string;
  kind: 'advantage' | 'policy_loss' | 'agg' | 'kl_loss' | 'kl_penalty' | 'entropy';
  module: string;
  args: Record<string, unknown>;
  metrics?: Record<string, number>;
  step?: number;
  step_wise?: boolean;
  loss_agg_mode?: string;
  next_kl_coef?: number;
}
interface Fixture {
  shared: { tasks: number[]; step_wise_tasks: string[]; step_wise_runs: string[] };
  cases: Case[];
}

const fixture = JSON.parse(readFileSync(join(FIXTURES, 'reference.json'), 'utf8')) as Fixture;
const tensors = torch.loadSafetensors(join(FIXTURES, 'reference.safetensors'));
for (const t of tensors.values()) torch.keep(t);
const fx = (name: string): torch.Tensor => {
  const t = tensors.get(name);
  if (t === undefined) throw new Error(`fixture tensor '${name}' is missing`);
  return t;
};

function assertClose(actual: torch.Tensor, expected: torch.Tensor, what: string): void {
  assert.deepEqual(actual.shape, expected.shape, `${what}: shape`);
  const a = actual.to({ dtype: 'float64' }).toTypedArray() as Float64Array;
  const e = expected.to({ dtype: 'float64' }).toTypedArray() as Float64Array;
  for (let i = 0; i < e.length; i++) {
    const diff = Math.abs((a[i] as number) - (e[i] as number));
    assert.ok(diff <= TOL * Math.max(1, Math.abs(e[i] as number)), `${what}[${i}]: ${a[i]} vs ${e[i]} (diff ${diff})`);
  }
}

function assertMetrics(metrics: Metrics, expected: Record<string, number> | undefined, what: string): void {
  const actual = readMetrics(metrics);
  for (const [key, value] of Object.entries(expected ?? {})) {
    const got = actual[key];
    assert.ok(got !== undefined, `${what}: metric ${key} missing (have ${Object.keys(actual).join(', ')})`);
    assert.ok(Math.abs(got - value) <= TOL * Math.max(1, Math.abs(value)), `${what}: metric ${key} ${got} vs ${value}`);
  }
}

/** Runs fn in a scope and checks that it leaves no tensor behind. */
function leakFree(fn: () => void): void {
  const before = torch.liveTensorCount();
  torch.scope(fn);
  assert.equal(torch.liveTensorCount(), before, 'tensor handles leaked');
}

const byKind = (kind: Case['kind']) => fixture.cases.filter((c) => c.kind === kind);

describe('advantage functions vs reference', () => {
  for (const c of byKind('advantage')) {
    test(`${c.name}: advantage_fn ${c.module} ${JSON.stringify(c.args)}`, () => {
      leakFree(() => {
        const run = ADVANTAGE_FN.create(c.module, c.args);
        const result = run({
          actionMask: fx('mask'),
          rewards: c.step_wise ? fx('step_wise.rewards') : fx('rewards'),
          groupIds: c.step_wise ? fixture.shared.step_wise_tasks : fixture.shared.tasks,
          runIds: c.step_wise ? fixture.shared.step_wise_runs : undefined,
          tokenLevelRewards: fx('token_rewards'),
          values: fx('values'),
          rewardBaselines: fx('reward_baselines'),
          logprobs: fx('old_logprob'),
          teacherLogprobs: fx('teacher_logprob'),
        });
        assertClose(result.advantages, fx(`${c.name}.advantages`), 'advantages');
        assertClose(result.returns, fx(`${c.name}.returns`), 'returns');
        assert.deepEqual(result.keep.toArray(), fx(`${c.name}.keep`).bool().toArray(), 'keep');
      });
    });
  }
});

function lossAndGrad(compute: (logprob: torch.Tensor) => { loss: torch.Tensor; metrics: Metrics }, c: Case) {
  const logprob = fx('logprob').clone().requiresGrad_(true);
  const { loss, metrics } = compute(logprob);
  const [grad] = torch.grad(loss, [logprob]);
  assertClose(loss, fx(`${c.name}.loss`), 'loss');
  assertClose(grad!, fx(`${c.name}.grad`), 'grad');
  assertMetrics(metrics, c.metrics, c.name);
}

describe('policy losses vs reference (loss and gradient)', () => {
  for (const c of byKind('policy_loss')) {
    test(`${c.name}: policy_loss_fn ${c.module} ${JSON.stringify(c.args)}`, () => {
      leakFree(() => {
        // the mix losses' micro-batch weights (the fixture's usual_weight / expert_weight arguments) are an input:
        // termWeights, which the trainer sets from the loss's declared accumulation
        const { usual_weight: usual, expert_weight: expert, ...args } = c.args;
        const termWeights =
          usual === undefined && expert === undefined
            ? {}
            : { termWeights: { usual: Number(usual ?? 1), expert: Number(expert ?? 1) } };
        const run = POLICY_LOSS_FN.create(c.module, args);
        lossAndGrad(
          (logprob) =>
            run({
              ...termWeights,
              logprob,
              actionMask: fx('mask'),
              oldLogprob: fx('old_logprob'),
              advantages: fx('advantages'),
              refLogprob: fx('ref_logprob'),
              expertMask: fx('expert_mask').bool(),
              step: c.step,
            }),
          c,
        );
      });
    });
  }
});

describe('loss aggregation vs reference', () => {
  for (const c of byKind('agg')) {
    test(`${c.name}`, () => {
      assert.ok(isLossAggMode(c.module));
      leakFree(() => {
        const normalizer = c.args.normalizer as number | null;
        lossAndGrad((logprob) => {
          const loss = aggregateLoss(
            logprob.mul(fx('advantages')),
            fx('mask'),
            isLossAggMode(c.module) ? c.module : 'token-mean',
            normalizer,
          );
          return { loss, metrics: {} };
        }, c);
      });
    });
  }
});

describe('KL and entropy vs reference', () => {
  for (const c of byKind('kl_loss')) {
    test(`${c.name}: KL loss and gradient`, () => {
      leakFree(() => {
        const kl = createKlFn(c.module, c.args);
        const mode = c.loss_agg_mode ?? 'token-mean';
        lossAndGrad(
          (logprob) =>
            kl.calculateLoss(
              { logprob, refLogprob: fx('ref_logprob'), actionMask: fx('mask'), oldLogprob: fx('old_logprob') },
              isLossAggMode(mode) ? mode : 'token-mean',
            ),
          c,
        );
      });
    });
  }
  for (const c of byKind('kl_penalty')) {
    test(`${c.name}: KL penalty on token rewards and the adaptive coefficient`, () => {
      leakFree(() => {
        const kl = createKlFn(c.module as KlEstimator, c.args);
        const { tokenLevelRewards, metrics } = kl.applyPenaltyToReward({
          tokenLevelScores: fx('token_rewards'),
          oldLogprob: fx('old_logprob'),
          refLogprob: fx('ref_logprob'),
          actionMask: fx('mask'),
        });
        assertClose(tokenLevelRewards, fx(`${c.name}.rewards`), 'rewards');
        assertMetrics(metrics, c.metrics, c.name);
        assert.ok(Math.abs(kl.klCoef - (c.next_kl_coef as number)) < 1e-12, `kl_coef ${kl.klCoef} vs ${c.next_kl_coef}`);
      });
    });
  }
  for (const c of byKind('entropy')) {
    test(`${c.name}: entropy bonus and gradient`, () => {
      leakFree(() => {
        const run = createEntropyLossFn(c.module, c.args);
        const entropy = fx('entropy').clone().requiresGrad_(true);
        const { loss } = run({ entropy, actionMask: fx('mask'), expertMask: fx('expert_mask').bool() });
        const [grad] = torch.grad(loss, [entropy]);
        assertClose(loss, fx(`${c.name}.loss`), 'loss');
        assertClose(grad!, fx(`${c.name}.grad`), 'grad');
      });
    });
  }
});
