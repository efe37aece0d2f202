// Gradient accumulation through the policy-loss contract: two plug-in losses registered here (not built in, so the
// trainer cannot know them by name) declare how they aggregate — one over chosen/rejected pairs like DPO, one with an
// on-policy term and an expert term like MIX — and the gradient accumulated over micro-batches of 1 (DPO: rounded up
// to a pair), 2 and the whole batch must equal the whole batch's gradient (1e-6, float32). The rows have different
// response lengths and the micro-batches different mixes of expert and on-policy rows, so weighting a term by the
// wrong unit or by the other term's counts shows.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  aggregateLoss,
  aggregationUnit,
  type LossAggMode,
  maskedSum,
  POLICY_LOSS_FN,
  type PolicyLossModule,
  selectRows,
} from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import * as torch from '../../../src/torch/index.js';
import { assertSameGradient, stepGradient } from './gradients.js';
import { BAD, GOOD, tinyModelDir } from './toy.js';

torch.setNumThreads(1);

// Pairwise: mean over pairs of softplus(−h), h = Σ(log π − log π_ref)(chosen) − Σ(log π − log π_ref)(rejected).
const pairwise: PolicyLossModule<{ scale: number }> = {
  name: 'test_pairwise',
  description: 'test plug-in: a logistic loss over chosen/rejected row pairs',
  defaults: { scale: 1 },
  run(input, options = {}) {
    const scale = options.scale ?? 1;
    return torch.scope(() => {
      const ref = input.refLogprob as torch.Tensor;
      const ratio = maskedSum(input.logprob.sub(ref), input.actionMask, -1);
      const h = ratio
        .slice(0, 0, null, 2)
        .sub(ratio.slice(0, 1, null, 2))
        .mul(scale);
      const loss = h.neg().exp().add(1).log().mean();
      return { loss, metrics: { pairwise: loss.item() } };
    });
  },
  accumulation: () => ({ rowsPerGroup: 2, terms: [{ name: 'pairs', rows: 'all', unit: 'group' }] }),
  needsReference: true,
};

// Two terms: −A·log π over the on-policy rows (usual_agg_mode) + NLL over the expert rows (expert_agg_mode), each
// multiplied by its micro-batch weight from input.termWeights.
interface TwoTermOptions {
  usualAggMode: LossAggMode;
  expertAggMode: LossAggMode;
}
const twoTerm: PolicyLossModule<TwoTermOptions> = {
  name: 'test_two_term',
  description: 'test plug-in: policy gradient on rollouts plus NLL on expert rows',
  defaults: { usualAggMode: 'token-mean', expertAggMode: 'seq-mean-token-mean' },
  run(input, options = {}) {
    const o = { ...twoTerm.defaults, ...options };
    return torch.scope(() => {
      const expert = (input.expertMask as torch.Tensor).bool();
      const usual = expert.logicalNot();
      let loss = torch.zeros([]);
      if (usual.sum().item() > 0) {
        const pg = selectRows(input.advantages as torch.Tensor, usual)
          .neg()
          .mul(selectRows(input.logprob, usual));
        const term = aggregateLoss(pg, selectRows(input.actionMask, usual), o.usualAggMode);
        loss = loss.add(term.mul(input.termWeights?.usual ?? 1));
      }
      if (expert.sum().item() > 0) {
        const nll = selectRows(input.logprob, expert).neg();
        const term = aggregateLoss(nll, selectRows(input.actionMask, expert), o.expertAggMode);
        loss = loss.add(term.mul(input.termWeights?.expert ?? 1));
      }
      return { loss, metrics: {} };
    });
  },
  accumulation: (o) => ({
    rowsPerGroup: 1,
    terms: [
      { name: 'usual', rows: 'usual', unit: aggregationUnit(o.usualAggMode) },
      { name: 'expert', rows: 'expert', unit: aggregationUnit(o.expertAggMode) },
    ],
  }),
};

POLICY_LOSS_FN.register(pairwise).register(twoTerm);

let toy: { dir: string; remove: () => void };
before(() => {
  toy = tinyModelDir();
});
after(() => toy.remove());

/** The gradient one train step accumulates with `microBatchSize`. */
const gradient = (algorithmConfig: Record<string, unknown>, batch: Experience[], microBatchSize: number) =>
  stepGradient(toy.dir, algorithmConfig, batch, { microBatchSize });

// chosen/rejected responses of different lengths (pairs hold 2..6 tokens)
const pairs = (): Experience[] =>
  [
    [[5, 11], [GOOD], [BAD, 7, 8]],
    [[5, 12], [GOOD, 9, 10, 3], [BAD]],
    [
      [6, 13],
      [GOOD, 4],
      [BAD, 2],
    ],
    [[6, 14, 15], [GOOD], [BAD, 7, 7, 7, 7]],
    [[7], [GOOD, 8, 9], [BAD, 1, 2, 3]],
  ].map(([prompt, chosen, rejected], i) => ({
    eid: `pair-${i}`,
    tokens: [...(prompt as number[])],
    promptLength: (prompt as number[]).length,
    chosen: chosen as number[],
    rejected: rejected as number[],
    info: {},
  }));

// on-policy rows (with advantages) and expert rows interleaved, responses of 1..5 tokens
const mixedRows = (): Experience[] =>
  [
    { prompt: [5, 11], response: [GOOD, 3], advantage: 1.0 },
    { prompt: [5, 11], response: [BAD], advantage: -1.0 },
    { prompt: [6, 13], response: [GOOD, 4, 5, 6, 7], expert: true },
    { prompt: [6, 14], response: [BAD, 9, 9], advantage: -0.5 },
    { prompt: [5, 12], response: [GOOD], expert: true },
    { prompt: [7, 8], response: [GOOD, 1, 2, 3], advantage: 0.7 },
    { prompt: [7, 9], response: [2, 3], expert: true },
  ].map((r, i) => ({
    eid: `row-${i}`,
    tokens: [...r.prompt, ...r.response],
    promptLength: r.prompt.length,
    ...(r.expert ? {} : { advantages: r.response.map(() => r.advantage as number), logprobs: r.response.map(() => -2) }),
    info: { isExpert: r.expert === true, taskId: `t${i}` },
  }));

describe('gradient accumulation follows the policy-loss contract', () => {
  test('a plug-in loss over row pairs (like DPO): micro-batches 1, 2 and the whole batch', () => {
    const config = { algorithm_type: 'dpo', policy_loss_fn: 'test_pairwise' };
    const batch = pairs();
    const whole = gradient(config, batch, batch.length * 2);
    for (const micro of [1, 2]) assertSameGradient(gradient(config, batch, micro), whole, `pairwise, micro ${micro}`, 1e-6);
  });

  for (const [usualAggMode, expertAggMode] of [
    ['token-mean', 'seq-mean-token-mean'],
    ['seq-mean-token-mean', 'token-mean'],
    ['seq-mean-token-sum-norm', 'seq-mean-token-sum'],
  ] as const) {
    test(`a plug-in loss with an on-policy and an expert term (like MIX): ${usualAggMode} + ${expertAggMode}`, () => {
      const config = {
        algorithm_type: 'mix',
        policy_loss_fn: 'test_two_term',
        policy_loss_fn_args: { usual_agg_mode: usualAggMode, expert_agg_mode: expertAggMode },
        kl_loss_fn: 'none',
      };
      const batch = mixedRows();
      const whole = gradient(config, batch, batch.length);
      for (const micro of [1, 2]) assertSameGradient(gradient(config, batch, micro), whole, `two-term, micro ${micro}`, 1e-6);
    });
  }

  test('a declared accumulation is checked', () => {
    POLICY_LOSS_FN.register({
      ...twoTerm,
      name: 'test_bad_unit',
      accumulation: () => ({ rowsPerGroup: 1, terms: [{ name: 'x', rows: 'all', unit: 'tokens' as 'token' }] }),
    });
    assert.throws(
      () => gradient({ algorithm_type: 'grpo', policy_loss_fn: 'test_bad_unit', kl_loss_fn: 'none' }, mixedRows(), 2),
      /policy_loss_fn 'test_bad_unit': accumulation\(\): term 'x' has unit 'tokens'; expected one of token, row, group, constant/,
    );
    assert.throws(
      () => gradient({ algorithm_type: 'dpo', policy_loss_fn: 'test_two_term' }, pairs(), 2),
      /dpo trains on chosen\/rejected pairs and needs a loss over row pairs/,
    );
  });
});
