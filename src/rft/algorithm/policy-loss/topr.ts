// TOPR — Le Roux et al., "Tapered Off-Policy REINFORCE: Stable and efficient reinforcement learning for LLMs"
// (arXiv 2503.14286). Trinity-RFT `policy_loss_fn: topr`. Positive examples get plain SFT-like updates, negative ones a
// truncated importance weight:
//   α = clip(π_θ/π_old, 0, 1) if A ≤ advantage_threshold, else 1
//   L = −sg(α) · A · log π_θ,   loss = aggregate(L, mask, loss_agg_mode)
// (A is the reward in the paper; Trinity-RFT pairs topr with the `reinforce` advantage.)
import * as torch from '../../../torch/index.js';
import { aggregateLoss, type LossAggMode } from '../loss-agg.js';
import { maskedMean } from '../utils.js';
import { POLICY_LOSS_FN } from './registry.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export interface ToprPolicyLossOptions {
  advantageThreshold: number;
  lossAggMode: LossAggMode;
}

export const TOPR_POLICY_LOSS_DEFAULTS: Readonly<ToprPolicyLossOptions> = { advantageThreshold: 0.0, lossAggMode: 'token-mean' };

export function computeToprPolicyLoss(input: PolicyLossInput, options: Partial<ToprPolicyLossOptions> = {}): PolicyLossResult {
  const o = { ...TOPR_POLICY_LOSS_DEFAULTS, ...options };
  const oldLogprob = need(input, 'oldLogprob', 'topr');
  const advantages = need(input, 'advantages', 'topr');
  const { logprob, actionMask: mask } = input;
  return torch.scope(() => {
    const ratio = logprob.detach().sub(oldLogprob).exp();
    const alpha = torch.where(advantages.le(o.advantageThreshold), ratio.clamp(0, 1), 1).to({ dtype: ratio.dtype });
    const loss = aggregateLoss(alpha.mul(advantages).mul(logprob).neg(), mask, o.lossAggMode);
    const metrics = torch.noGrad(() => ({
      avg_alpha: maskedMean(alpha, mask),
      ratio_mean: maskedMean(ratio, mask),
      pg_loss: loss.detach(),
    }));
    return { loss, metrics };
  });
}

export const toprPolicyLoss: PolicyLossModule<ToprPolicyLossOptions> = {
  name: 'topr',
  description: 'REINFORCE with a [0,1]-truncated IS weight on negatives (TOPR, arXiv 2503.14286)',
  defaults: TOPR_POLICY_LOSS_DEFAULTS,
  run: computeToprPolicyLoss,
};

POLICY_LOSS_FN.register(toprPolicyLoss);
