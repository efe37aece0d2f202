// Hand-computed cases (the arithmetic is written beside each assertion) and the registries' contracts.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  ADVANTAGE_COMPUTE_IN_TRAINER,
  ADVANTAGE_FN,
  aggregateLoss,
  chordMuSchedule,
  computeGrpoAdvantages,
  computePpoPolicyLoss,
  computeRecAdvantages,
  createEntropyLossFn,
  createKlFn,
  expertRows,
  expertRowsOf,
  POLICY_LOSS_FN,
  readMetrics,
} from '../../../src/rft/algorithm/index.js';
import * as torch from '../../../src/torch/index.js';

const f64 = (data: number[] | number[][]) => torch.tensor(data, { dtype: 'float64' });
const close = (actual: unknown, expected: number[] | number[][], tol = 1e-6) => {
  const a = (actual as number[] | number[][]).flat();
  const e = expected.flat();
  assert.equal(a.length, e.length);
  a.forEach((v, i) => {
    assert.ok(Math.abs(v - (e[i] as number)) < tol, `[${i}] ${v} vs ${e[i]}`);
  });
};

describe('hand-computed', () => {
  test('grpo: rewards [1, 0, 1] of one task → mean 2/3, std sqrt(1/3); a lone response keeps (r − 0)/(1 + ε)', () => {
    torch.scope(() => {
      const mask = f64([
        [1, 1],
        [1, 0],
        [1, 1],
        [1, 0],
      ]);
      const { advantages } = computeGrpoAdvantages(
        { actionMask: mask, rewards: f64([1, 0, 1, 3]), groupIds: ['q', 'q', 'q', 'lone'] },
        { epsilon: 0 },
      );
      const s = Math.sqrt(1 / 3); // sqrt(((1/3)² + (2/3)² + (1/3)²) / 2)
      const hi = 1 / 3 / s; // (1 − 2/3) / s = 0.57735
      const lo = -2 / 3 / s; // (0 − 2/3) / s = −1.1547
      close(advantages.toArray(), [
        [hi, hi],
        [lo, 0],
        [hi, hi],
        [3, 0],
      ]);
    });
  });

  test('grpo std_threshold drops zero-variance and single-response tasks', () => {
    torch.scope(() => {
      const { keep, advantages } = computeGrpoAdvantages(
        { actionMask: torch.ones([5, 1], { dtype: 'float64' }), rewards: f64([1, 1, 0, 1, 1]), groupIds: [0, 0, 1, 1, 2] },
        { stdThreshold: 0 },
      );
      assert.deepEqual(keep.toArray(), [false, false, true, true, false]);
      assert.equal(advantages.select(0, 0).item(), 0);
    });
  });

  test('ppo with A = 1 and A = −1: ratio e^0.5 clipped at 1.2; ratio e^2 dual-clipped at c = 3', () => {
    torch.scope(() => {
      // token 1: A = 1, r = e^0.5 = 1.6487 > 1.2 → loss max(−1.6487, −1.2) = −1.2 (clipped, no gradient)
      // token 2: A = −1, r = e^2 = 7.389 → max(7.389, 1.2) = 7.389, dual clip min(7.389, 3) = 3 (no gradient)
      // token 3: A = −1, r = 1 → max(1, 1) = 1, gradient d(r·1)/dlogp = r = 1
      const logprob = f64([[0.5, 2, 0]]).requiresGrad_(true);
      const result = computePpoPolicyLoss({
        logprob,
        oldLogprob: f64([[0, 0, 0]]),
        advantages: f64([[1, -1, -1]]),
        actionMask: f64([[1, 1, 1]]),
      });
      const { loss } = result;
      // the metrics are tensors, read by the trainer when its step ends
      assert.ok(result.metrics.pg_clipfrac instanceof torch.Tensor);
      const metrics = readMetrics(result.metrics);
      assert.ok(Math.abs(loss.item() - (-1.2 + 3 + 1) / 3) < 1e-6); // masked means carry +1e-8 in the denominator
      const [grad] = torch.grad(loss, [logprob]);
      close(grad!.toArray(), [[0, 0, 1 / 3]]);
      assert.ok(Math.abs(metrics.pg_clipfrac! - 1 / 3) < 1e-6); // only token 1: −A·clip(r) > −A·r
      assert.ok(Math.abs(metrics.pg_clipfrac_lower! - 1 / 3) < 1e-6); // token 2
    });
  });

  test('loss aggregation on rows of 1 and 3 tokens', () => {
    torch.scope(() => {
      const values = f64([
        [2, 9, 9],
        [1, 2, 3],
      ]);
      const mask = f64([
        [1, 0, 0],
        [1, 1, 1],
      ]);
      const agg = (mode: Parameters<typeof aggregateLoss>[2], n?: number) => aggregateLoss(values, mask, mode, n).item();
      assert.ok(Math.abs(agg('token-mean') - 8 / 4) < 1e-6); // (2 + 1 + 2 + 3) / 4
      assert.ok(Math.abs(agg('seq-mean-token-sum') - (2 + 6) / 2) < 1e-6);
      assert.ok(Math.abs(agg('seq-mean-token-mean') - (2 + 2) / 2) < 1e-6);
      assert.ok(Math.abs(agg('seq-mean-token-sum-norm') - 8 / 3) < 1e-6); // ÷ T = 3
      assert.ok(Math.abs(agg('seq-mean-token-sum-norm', 4) - 8 / 4) < 1e-6);
    });
  });

  test('chord μ: warm up 0 → 0.5 over 2 steps, cosine down to 0.1 over 4, then 0.1', () => {
    const o = { muWarmupSteps: 2, muDecaySteps: 4, muPeak: 0.5, muValley: 0.1 };
    const mus = [0, 1, 2, 4, 6, 9].map((s) => chordMuSchedule(s, o));
    close(mus, [0, 0.25, 0.5, 0.3, 0.1, 0.1]); // step 4: 0.1 + 0.4 · ½(1 + cos(π/2)) = 0.3
  });

  test('adaptive KL controller: KL at twice the target raises β by 20% · batch / horizon', () => {
    const kl = createKlFn('k2', { adaptive: true, kl_coef: 0.1, target_kl: 0.05, horizon: 10 });
    kl.updateKlCoef(0.1, 5); // error clip(0.1/0.05 − 1, ±0.2) = 0.2; β · (1 + 0.2 · 5/10)
    assert.ok(Math.abs(kl.klCoef - 0.11) < 1e-12);
    assert.throws(() => createKlFn('k2', { adaptive: true }), /target_kl and horizon/);
  });

  test('rec drop: balance keeps as many negatives as positives', () => {
    torch.scope(() => {
      const { keep, advantages } = computeRecAdvantages(
        { actionMask: torch.ones([6, 2], { dtype: 'float64' }), rewards: f64([1, 0, 0, 0, 0, 1]), groupIds: [0, 0, 0, 0, 0, 0] },
        { drop: 'balance' },
      );
      const kept = keep.toArray() as boolean[];
      assert.equal(kept.filter(Boolean).length, 4); // 2 positives, 4 negatives → drop 2
      assert.ok(kept[0] && kept[5]);
      // kept rewards [1, 0, 0, 1]: mean 0.5 → positives +0.5, kept negatives −0.5, dropped 0
      const adv = (advantages.select(1, 0).toArray() as number[]).map((v, i) => (kept[i] ? v : Number.NaN));
      assert.deepEqual(
        adv.filter((v) => !Number.isNaN(v)),
        [0.5, -0.5, -0.5, 0.5],
      );
    });
  });
});

describe('registries', () => {
  test('Trinity-RFT names select the modules', () => {
    for (const name of [
      'ppo',
      'grpo',
      'step_wise_grpo',
      'reinforceplusplus',
      'reinforce',
      'remax',
      'rloo',
      'opmd',
      'asymre',
      'rec',
    ]) {
      assert.ok(ADVANTAGE_FN.has(name), name);
    }
    for (const name of ['ppo', 'gspo', 'cispo', 'sapo', 'topr', 'opmd', 'sppo', 'rec', 'sft', 'dpo', 'mix', 'mix_chord']) {
      assert.ok(POLICY_LOSS_FN.has(name), name);
    }
    assert.equal(ADVANTAGE_COMPUTE_IN_TRAINER.grpo, false);
    assert.equal(ADVANTAGE_COMPUTE_IN_TRAINER.ppo, true);
  });

  test('unknown names and arguments are precise errors', () => {
    assert.throws(() => ADVANTAGE_FN.create('grpoo'), /unknown advantage_fn 'grpoo'; did you mean 'grpo'\?; registered: .*grpo/);
    assert.throws(
      () => POLICY_LOSS_FN.create('ppo', { clip_rang: 0.2 }),
      /policy_loss_fn 'ppo': unknown argument 'clip_rang'; did you mean 'clip_range'\?; expected one of clip_range,/,
    );
    assert.throws(() => POLICY_LOSS_FN.create('ppo', { clip_range: '0.2' }), /argument 'clip_range' must be a number/);
    assert.throws(() => createKlFn('k4'), /unknown kl_fn 'k4'/);
  });

  test('missing inputs name the module and the field', () => {
    torch.scope(() => {
      const run = POLICY_LOSS_FN.create('ppo');
      assert.throws(
        () => run({ logprob: torch.zeros([1, 2]), actionMask: torch.ones([1, 2]) }),
        /policy_loss_fn 'ppo' needs input.oldLogprob/,
      );
    });
  });
  test('expert rows split ahead: the mask read back gives the same lists; mix, mix_chord and entropy mix unchanged', () => {
    torch.scope(() => {
      const flags = [false, true, false, false, true];
      const mask = torch.tensor(flags, { dtype: 'bool' });
      const ahead = expertRows(flags);
      const read = expertRowsOf(mask);
      assert.deepEqual(
        [ahead.usual.toArray(), ahead.expert.toArray()],
        [
          [0, 2, 3],
          [1, 4],
        ],
      );
      assert.deepEqual(
        [read.usual.toArray(), read.expert.toArray()],
        [
          [0, 2, 3],
          [1, 4],
        ],
      );
      // no expert row, only expert rows: nothing to upload (arange, an empty list)
      assert.deepEqual([expertRows([false, false]).usual.toArray(), expertRows([false, false]).expert.shape], [[0, 1], [0]]);
      assert.deepEqual(expertRows([true]).expert.toArray(), [0]);
      const g = new torch.Generator(7);
      const rand = () => torch.randn([5, 4], { dtype: 'float64', generator: g });
      const input = {
        logprob: rand().mul(0.1).sub(1),
        oldLogprob: rand().mul(0.1).sub(1),
        advantages: rand(),
        actionMask: torch.tensor(
          [
            [1, 1, 0, 0],
            [1, 1, 1, 0],
            [1, 0, 0, 0],
            [1, 1, 1, 1],
            [1, 1, 0, 0],
          ],
          { dtype: 'float64' },
        ),
        expertMask: mask,
        step: 3,
        termWeights: { usual: 0.6, expert: 0.4 },
      };
      for (const name of ['mix', 'mix_chord']) {
        const run = POLICY_LOSS_FN.create(name, {});
        const plain = run(input);
        const split = run({ ...input, expertRows: ahead });
        assert.equal(split.loss.item(), plain.loss.item(), name);
        assert.deepEqual(readMetrics(split.metrics), readMetrics(plain.metrics), name);
        assert.throws(
          () => run({ ...input, expertRows: expertRows([false, true]) }),
          new RegExp(`policy_loss_fn '${name}': expertRows splits 1 usual \\+ 1 expert rows, the input has 5`),
        );
      }
      const entropy = createEntropyLossFn('mix', { entropy_coef: 0.01 });
      const e = { entropy: rand().abs(), actionMask: input.actionMask, expertMask: mask };
      assert.equal(entropy({ ...e, expertRows: ahead }).loss.item(), entropy(e).loss.item());
      assert.equal(
        entropy({ ...e, expertMask: undefined, expertRows: expertRows([true, true, true, true, true]) }).loss.item(),
        0,
      );
    });
  });
});
