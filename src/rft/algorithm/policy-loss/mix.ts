// MIX — RL on rollouts plus SFT on expert data in one batch (Trinity-RFT `policy_loss_fn: mix`; the LUFFY/SRFT line of
// work, e.g. Yan et al., "Learning to Reason under Off-Policy Guidance", arXiv 2504.14945). Rows with expertMask set are
// expert demonstrations:
//   loss = (1 − μ) · w_usual · L_ppo(usual rows) + μ · w_expert · L_sft(expert rows)
// L_ppo is the `ppo` loss (clip_range, dual clip, token-mean); L_sft the NLL aggregated with sft_loss_agg_mode.
// w_usual / w_expert are the micro-batch weights input.termWeights.usual / .expert (1 when absent): each part is a mean
// over its own rows' unit (usual: tokens; expert: per sft_loss_agg_mode), so the trainer weighs them separately
// (./types.ts; Python Trinity-RFT: n_rows · gradient_accumulation / read_batch_size of each kind). A kind with no
// rows contributes 0.
import * as torch from '../../../torch/index.js';
import type { Tensor } from '../../../torch/index.js';
import { aggregationUnit, type LossAggMode } from '../loss-agg.js';
import { type Metrics, scaleMetric } from '../metrics.js';
import { checkExpertRows, expertRowsOf } from '../utils.js';
import { computePpoPolicyLoss } from './ppo.js';
import { POLICY_LOSS_FN } from './registry.js';
import { computeSftLoss } from './sft.js';
import { type LossAccumulation, need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export interface MixPolicyLossOptions {
  mu: number;
  clipRange: number | null;
  clipRangeLow: number | null;
  clipRangeHigh: number | null;
  /** Trinity-RFT use_token_level_loss_in_sft: false → seq-mean-token-mean. */
  sftLossAggMode: LossAggMode;
}

export const MIX_POLICY_LOSS_DEFAULTS: Readonly<MixPolicyLossOptions> = {
  mu: 0.1,
  clipRange: 0.2,
  clipRangeLow: null,
  clipRangeHigh: null,
  sftLossAggMode: 'seq-mean-token-mean',
};

/** The two terms of the mix losses: PPO (token-mean) on the usual rows, SFT (sft_loss_agg_mode) on the expert rows. */
export function mixAccumulation(sftLossAggMode: LossAggMode): LossAccumulation {
  return {
    rowsPerGroup: 1,
    terms: [
      { name: 'usual', rows: 'usual', unit: 'token' },
      { name: 'expert', rows: 'expert', unit: aggregationUnit(sftLossAggMode) },
    ],
  };
}

const selectIndex = (t: Tensor, rows: Tensor) => t.indexSelect(0, rows);

/** Splits the batch by expertMask and combines an RL loss on the usual rows with an SFT loss on the expert rows. */
export function mixLosses(
  module: string,
  input: PolicyLossInput,
  mu: number,
  rl: (usual: PolicyLossInput) => PolicyLossResult,
  sft: (expert: PolicyLossInput) => PolicyLossResult,
): PolicyLossResult {
  const expertMask = need(input, 'expertMask', module);
  if (expertMask.ndim !== 1 || expertMask.size(0) !== input.logprob.size(0)) {
    throw new Error(`policy_loss_fn '${module}': expertMask must have shape [${input.logprob.size(0)}]`);
  }
  const weights = { usual: input.termWeights?.usual ?? 1, expert: input.termWeights?.expert ?? 1 };
  if (input.expertRows !== undefined) checkExpertRows(input.expertRows, input.logprob.size(0), `policy_loss_fn '${module}'`);
  return torch.scope(() => {
    const split = input.expertRows ?? expertRowsOf(expertMask);
    const usualRows = split.usual;
    const expertRows = split.expert;
    const nExpert = expertRows.size(0);
    const nUsual = usualRows.size(0);
    const metrics: Metrics = {};
    const zero = () => torch.zeros([], { dtype: input.logprob.dtype, device: input.logprob.device });
    let rlLoss = zero();
    if (nUsual > 0) {
      const part = rl({
        logprob: selectIndex(input.logprob, usualRows),
        actionMask: selectIndex(input.actionMask, usualRows),
        oldLogprob: selectIndex(need(input, 'oldLogprob', module), usualRows),
        advantages: selectIndex(need(input, 'advantages', module), usualRows),
      });
      rlLoss = part.loss.mul(weights.usual);
      for (const [k, v] of Object.entries(part.metrics)) metrics[`usual/${k}`] = scaleMetric(v, weights.usual);
    }
    let sftLoss = zero();
    if (nExpert > 0) {
      const part = sft({
        logprob: selectIndex(input.logprob, expertRows),
        actionMask: selectIndex(input.actionMask, expertRows),
      });
      sftLoss = part.loss.mul(weights.expert);
      for (const [k, v] of Object.entries(part.metrics)) metrics[`expert/${k}`] = scaleMetric(v, weights.expert);
    }
    const loss = rlLoss.mul(1 - mu).add(sftLoss.mul(mu));
    metrics.loss = loss.detach();
    return { loss, metrics };
  });
}

export function computeMixPolicyLoss(input: PolicyLossInput, options: Partial<MixPolicyLossOptions> = {}): PolicyLossResult {
  const o = { ...MIX_POLICY_LOSS_DEFAULTS, ...options };
  return mixLosses(
    'mix',
    input,
    o.mu,
    (usual) =>
      computePpoPolicyLoss(usual, { clipRange: o.clipRange, clipRangeLow: o.clipRangeLow, clipRangeHigh: o.clipRangeHigh }),
    (expert) => computeSftLoss(expert, { lossAggMode: o.sftLossAggMode }),
  );
}

export const mixPolicyLoss: PolicyLossModule<MixPolicyLossOptions> = {
  name: 'mix',
  description: '(1-mu) PPO on rollouts + mu SFT on expert rows (MIX)',
  defaults: MIX_POLICY_LOSS_DEFAULTS,
  run: computeMixPolicyLoss,
  accumulation: (o) => mixAccumulation(o.sftLossAggMode),
};

POLICY_LOSS_FN.register(mixPolicyLoss);
