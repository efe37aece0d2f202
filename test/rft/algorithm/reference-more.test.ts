// The advantage functions jsd, gigpo, clipb, clipv (and its necs from logits), grpo_verl and grpo's rank_penalty, the
// m2po policy loss and the rollout correction against an independent float64 PyTorch implementation:
// test/fixtures/algorithm/more.{safetensors,json}, written by scripts/fixtures/algorithm_reference_more.py. Losses are
// compared with their gradients w.r.t. the log-probs; grpo's duplicate_experiences (random draws) is checked by its
// invariants.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  ADVANTAGE_FN,
  computeRolloutCorrection,
  m2poMask,
  POLICY_LOSS_FN,
  type RolloutIsLevel,
} from '../../../src/rft/algorithm/index.js';
import { logitStatistics } from '../../../src/model/training.js';
import * as torch from '../../../src/torch/index.js';
import { type Metrics, readMetrics } from '../../../src/rft/algorithm/metrics.js';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'fixtures', 'algorithm');
const TOL = 1e-6;

interface Case {
  name: string;
  kind: 'advantage' | 'policy_loss' | 'rollout_correction';
  module: string;
  args: Record<string, unknown>;
  metrics: Record<string, number>;
}
interface Fixture {
  shared: {
    tasks: string[];
    clipv: { temperature: number };
    gigpo: { tasks: string[]; runs: number[]; infos: Record<string, unknown>[] };
  };
  cases: Case[];
}

const fixture = JSON.parse(readFileSync(join(FIXTURES, 'more.json'), 'utf8')) as Fixture;
const tensors = torch.loadSafetensors(join(FIXTURES, 'more.safetensors'));
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

function assertMetrics(metrics: Metrics, expected: Record<string, number>, what: string): void {
  const actual = readMetrics(metrics);
  assert.ok(Object.keys(expected).length > 0 || what.startsWith('grpo'), `${what}: the fixture names metrics`);
  for (const [key, value] of Object.entries(expected)) {
    const got = actual[key];
    assert.ok(got !== undefined, `${what}: metric ${key} missing (have ${Object.keys(actual).join(', ')})`);
    assert.ok(Math.abs(got - value) <= TOL * Math.max(1, Math.abs(value)), `${what}: metric ${key} ${got} vs ${value}`);
  }
}

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
        const gigpo = c.module === 'gigpo';
        // clipv: its own policy (LP, H and N from one set of logits) and rewards with a tied group
        const clipv = c.module === 'clipv';
        const result = ADVANTAGE_FN.create(
          c.module,
          c.args,
        )({
          actionMask: fx('mask'),
          rewards: fx(clipv ? 'clipv_rewards' : 'rewards'),
          groupIds: gigpo ? fixture.shared.gigpo.tasks : fixture.shared.tasks,
          ...(gigpo ? { runIds: fixture.shared.gigpo.runs, infos: fixture.shared.gigpo.infos } : {}),
          logprobs: fx(clipv ? 'clipv_logprob' : 'old_logprob'),
          teacherLogprobs: fx('teacher_logprob'),
          entropy: fx(clipv ? 'clipv_entropy' : 'entropy'),
          ...(clipv ? { necs: fx('clipv_necs') } : {}),
        });
        assertClose(result.advantages, fx(`${c.name}.advantages`), 'advantages');
        assertClose(result.returns, fx(`${c.name}.returns`), 'returns');
        if (c.module === 'clipb' || clipv) {
          assert.ok(result.actionMask !== undefined, `${c.module} gives the tokens to train on`);
          assertClose(result.actionMask, fx(`${c.name}.action_mask`), 'actionMask');
        }
        assertMetrics(result.metrics, c.metrics, c.name);
      });
    });
  }
});

describe('clipv: necs from logits, and the edges', () => {
  test('log-probs, entropy and necs N = Σ p² (H + log p) from logits / τ, as Trinity-RFT computes them', () => {
    leakFree(() => {
      const logits = fx('clipv_logits').div(fixture.shared.clipv.temperature);
      const targets = fx('clipv_targets');
      const out = logitStatistics(logits, targets, { entropy: false, necs: true });
      assertClose(out.logProbs, fx('clipv_logprob'), 'logProbs');
      assertClose(out.entropy as torch.Tensor, fx('clipv_entropy'), 'entropy (necs needs it)');
      assertClose(out.necs as torch.Tensor, fx('clipv_necs'), 'necs');
      // the trainer's float32 logits
      const f32 = logitStatistics(logits.float(), targets, { entropy: true, necs: true });
      const err = (f32.necs as torch.Tensor).double().sub(fx('clipv_necs')).abs().max().item();
      assert.ok(err < 1e-5, `float32 necs within 1e-5 (max error ${err})`);
      assert.equal(logitStatistics(logits, targets, { entropy: true }).necs, null, 'necs only on request');
    });
  });

  test('xD = 0 everywhere (σ_D = 0): nothing is clipped, whatever μ', () => {
    leakFree(() => {
      // N = S = p (H + LP) at every token
      const logprobs = fx('clipv_logprob');
      const entropy = fx('clipv_entropy');
      const necs = logprobs.exp().mul(entropy.add(logprobs));
      const input = {
        actionMask: fx('mask'),
        rewards: fx('clipv_rewards'),
        groupIds: fixture.shared.tasks,
        logprobs,
        entropy,
        necs,
      };
      const result = ADVANTAGE_FN.create('clipv', { mu: 0, max_frac: 1 })(input);
      assert.deepEqual(result.actionMask?.toArray(), fx('mask').toArray());
      assert.equal(result.metrics.frac_clipped, 0);
      assert.ok((result.metrics.stdD as number) < 1e-12);
    });
  });

  test('refuses missing necs and a max_frac outside [0, 1]', () => {
    const input = {
      actionMask: fx('mask'),
      rewards: fx('clipv_rewards'),
      groupIds: fixture.shared.tasks,
      logprobs: fx('clipv_logprob'),
      entropy: fx('clipv_entropy'),
    };
    assert.throws(() => ADVANTAGE_FN.create('clipv')(input), /advantage_fn 'clipv' needs input.necs/);
    assert.throws(
      () => ADVANTAGE_FN.create('clipv', { max_frac: 1.5 })({ ...input, necs: fx('clipv_necs') }),
      /advantage_fn 'clipv': max_frac must be in \[0, 1\], got 1.5/,
    );
  });
});

describe('m2po vs reference (loss, gradient, whole-batch mask)', () => {
  for (const c of byKind('policy_loss')) {
    test(`${c.name}: policy_loss_fn ${c.module} ${JSON.stringify(c.args)}`, () => {
      leakFree(() => {
        const run = POLICY_LOSS_FN.create(c.module, c.args);
        const input = { actionMask: fx('mask'), oldLogprob: fx('old_logprob'), advantages: fx('advantages') };
        const logprob = fx('logprob').clone().requiresGrad_(true);
        const { loss, metrics } = run({ ...input, logprob });
        const [grad] = torch.grad(loss, [logprob]);
        assertClose(loss, fx(`${c.name}.loss`), 'loss');
        assertClose(grad as torch.Tensor, fx(`${c.name}.grad`), 'grad');
        assertMetrics(metrics, c.metrics, c.name);
        // the mask the trainer computes once over the whole batch, then hands to each micro-batch
        const whole = m2poMask({ ...input, logprob: fx('logprob') }, { m2Threshold: c.args.m2_threshold as number });
        assert.deepEqual(whole.mask.toArray(), fx(`${c.name}.mask`).bool().toArray(), 'whole-batch mask');
        const half = (t: torch.Tensor, start: number) => t.narrow(0, start, 4);
        let total = 0;
        for (const start of [0, 4]) {
          const part = run({
            logprob: half(fx('logprob'), start),
            actionMask: half(input.actionMask, start),
            oldLogprob: half(input.oldLogprob, start),
            advantages: half(input.advantages, start),
            wholeBatchMask: half(whole.mask, start),
          });
          const tokens = half(input.actionMask, start).sum().item() / input.actionMask.sum().item();
          total += part.loss.item() * tokens;
        }
        assert.ok(Math.abs(total - loss.item()) < 1e-9, `micro-batches with the whole-batch mask: ${total} vs ${loss.item()}`);
      });
    });
  }
  test('m2po refuses a loss_agg_mode other than token-mean, and bad thresholds', () => {
    const input = { logprob: fx('logprob'), actionMask: fx('mask'), oldLogprob: fx('old_logprob'), advantages: fx('advantages') };
    assert.throws(() => POLICY_LOSS_FN.create('m2po', { loss_agg_mode: 'seq-mean-token-mean' })(input), /token-mean/);
    assert.throws(() => POLICY_LOSS_FN.create('m2po', { m2_threshold: -1 })(input), /m2_threshold must be finite and ≥ 0/);
  });
});

describe('rollout correction vs reference', () => {
  for (const c of byKind('rollout_correction')) {
    test(`${c.name}: ${JSON.stringify(c.args)}`, () => {
      leakFree(() => {
        const result = computeRolloutCorrection(
          { trainLogprob: fx('old_logprob'), rolloutLogprob: fx('rollout_logprob'), actionMask: fx('mask') },
          { rolloutIs: c.args.rollout_is as RolloutIsLevel | null, rolloutIsThreshold: c.args.rollout_is_threshold as number },
        );
        if (c.args.rollout_is === null) assert.equal(result.weights, null);
        else assertClose(result.weights as torch.Tensor, fx(`${c.name}.weights`), 'weights');
        assertMetrics(result.metrics, c.metrics, c.name);
      });
    });
  }
});

describe('grpo duplicate_experiences', () => {
  test('refills the dropped groups with whole copies of kept groups, drawn from the generator', () => {
    leakFree(() => {
      // tasks a (3 rows, spread), b (2 rows, equal rewards: dropped), c (one row: dropped), d (2 rows, spread)
      const rewards = torch.tensor([1, 0, 0.5, 0.4, 0.4, 0.7, 0.2, 0.6], { dtype: 'float64' });
      const input = { actionMask: fx('mask'), rewards, groupIds: fixture.shared.tasks };
      const draw = (seed: number) =>
        ADVANTAGE_FN.create('grpo', { std_threshold: 0, duplicate_experiences: true })({
          ...input,
          generator: new torch.Generator(seed),
        });
      const result = draw(7);
      assert.deepEqual(result.keep.toArray(), [true, true, true, false, false, false, true, true]);
      const duplicates = [...((result.duplicates as torch.Tensor).toTypedArray() as BigInt64Array)].map(Number);
      // two groups dropped → two kept groups appended: each copy is a whole group, a = [0, 1, 2] or d = [6, 7]
      const copies: number[][] = [];
      for (let i = 0; i < duplicates.length; ) {
        const group = duplicates[i] === 0 ? [0, 1, 2] : [6, 7];
        assert.deepEqual(duplicates.slice(i, i + group.length), group, `copy at ${i}`);
        copies.push(group);
        i += group.length;
      }
      assert.equal(copies.length, 2, 'as many copies as dropped groups');
      assert.equal(result.metrics.duplicated_count, duplicates.length);
      assert.deepEqual(
        [...((draw(7).duplicates as torch.Tensor).toTypedArray() as BigInt64Array)].map(Number),
        duplicates,
        'the same seed draws the same groups',
      );
      assert.throws(
        () => ADVANTAGE_FN.create('grpo', { duplicate_experiences: true })(input),
        /duplicate_experiences refills the groups std_threshold drops; set std_threshold/,
      );
      const none = ADVANTAGE_FN.create('grpo', { std_threshold: 10, duplicate_experiences: true })(input);
      assert.equal(none.duplicates, undefined, 'every group dropped: nothing to copy');
    });
  });
});

describe('jsd: the advantage is the policy gradient of the generalised JSD', () => {
  // For P positions over a vocabulary of V tokens: E_{y~S}[A(y)·∇_logits log S(y)] = Σ_y S(y)·A(y)·(onehot(y) − S)
  // must equal −∂JSD/∂(student logits), which the fixture script takes by autograd of the full-vocabulary JSD.
  for (const beta of [0.5, 0.2, 0.0, 1.0]) {
    test(`lambda_coef ${beta}`, () => {
      leakFree(() => {
        const student = fx('jsd_grad.student_logprob');
        const [positions, vocab] = student.shape as [number, number];
        const result = ADVANTAGE_FN.create('jsd', { lambda_coef: beta })({
          actionMask: torch.ones([positions, vocab], { dtype: 'bool' }),
          rewards: torch.zeros([positions], { dtype: 'float64' }),
          groupIds: Array.from({ length: positions }, (_, i) => `p${i}`),
          logprobs: student,
          teacherLogprobs: fx('jsd_grad.teacher_logprob'),
        });
        const a = result.advantages.toTypedArray() as Float64Array;
        const p = student.exp().toTypedArray() as Float64Array;
        const descent = new Float64Array(positions * vocab);
        for (let row = 0; row < positions; row++) {
          for (let y = 0; y < vocab; y++) {
            const weight = (p[row * vocab + y] as number) * (a[row * vocab + y] as number);
            for (let k = 0; k < vocab; k++) {
              descent[row * vocab + k] =
                (descent[row * vocab + k] as number) + weight * ((k === y ? 1 : 0) - (p[row * vocab + k] as number));
            }
          }
        }
        assertClose(
          torch.tensor(Array.from(descent), { dtype: 'float64' }).reshape([positions, vocab]),
          fx(`jsd_grad_${beta.toFixed(1)}.descent`),
          'E_S[A ∇log S]',
        );
      });
    });
  }
});
