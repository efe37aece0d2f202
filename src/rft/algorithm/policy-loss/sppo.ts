// sPPO — Vaswani et al., "Functional mirror ascent for policy optimization" / "A general class of surrogate functions
// for stable and efficient reinforcement learning" (arXiv 2108.05828). Trinity-RFT `policy_loss_fn: sppo`:
//   r = sg(π_θ/π_old),  in-range = 1/(1+ε) ≤ r ≤ 1+ε
//   L = −A · (log π_θ − log π_old) · in-range,   loss = aggregate(L, mask, loss_agg_mode)
import * as torch from '../../../torch/index.js';
import { aggregateLoss, type LossAggMode } from '../loss-agg.js';
import { floatMask, maskedMean } from '../utils.js';
import { POLICY_LOSS_FN } from './registry.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export interface SppoPolicyLossOptions {
  epsilon: number;
  lossAggMode: LossAggMode;
}

export const SPPO_POLICY_LOSS_DEFAULTS: Readonly<SppoPolicyLossOptions> = { epsilon: 0.3, lossAggMode: 'token-mean' };

export function computeSppoPolicyLoss(input: PolicyLossInput, options: Partial<SppoPolicyLossOptions> = {}): PolicyLossResult {
  const o = { ...SPPO_POLICY_LOSS_DEFAULTS, ...options };
  const oldLogprob = need(input, 'oldLogprob', 'sppo');
  const advantages = need(input, 'advantages', 'sppo');
  const { logprob, actionMask: mask } = input;
  return torch.scope(() => {
    const logRatio = logprob.sub(oldLogprob);
    const ratio = logRatio.detach().exp();
    const inRange = floatMask(ratio.ge(1 / (1 + o.epsilon)).logicalAnd(ratio.le(1 + o.epsilon)), ratio);
    const loss = aggregateLoss(advantages.neg().mul(logRatio).mul(inRange), mask, o.lossAggMode);
    const metrics = torch.noGrad(() => ({
      pg_clipfrac: maskedMean(inRange.neg().add(1), mask),
      ratio_mean: maskedMean(ratio, mask),
      pg_loss: loss.detach(),
    }));
    return { loss, metrics };
  });
}

export const sppoPolicyLoss: PolicyLossModule<SppoPolicyLossOptions> = {
  name: 'sppo',
  description: 'advantage times log-ratio inside a ratio band (sPPO, arXiv 2108.05828)',
  defaults: SPPO_POLICY_LOSS_DEFAULTS,
  run: computeSppoPolicyLoss,
};

POLICY_LOSS_FN.register(sppoPolicyLoss);
