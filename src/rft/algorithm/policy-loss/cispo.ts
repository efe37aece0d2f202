// CISPO — MiniMax, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention" (arXiv 2506.13585).
// Trinity-RFT `policy_loss_fn: cispo`. Clip the importance-sampling weight, not the update; every token keeps a
// gradient:
//   r = exp(log π_θ − log π_old),  w = sg(clip(r, 1 − ε_low, 1 + ε_high))
//   M = 0 if enable_mask_clip and ((r > 1 + ε'_high and A > 0) or (r < 1 − ε'_low and A < 0)), else 1
//   L = −A · w · M · log π_θ,  loss = aggregate(L, mask, loss_agg_mode)
// ε_low = 1 (no lower bound) and ε_high = 0.28 by default, as the paper.
import * as torch from '../../../torch/index.js';
import { aggregateLoss, type LossAggMode } from '../loss-agg.js';
import { floatMask, maskedMean } from '../utils.js';
import { POLICY_LOSS_FN } from './registry.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export interface CispoPolicyLossOptions {
  clipRangeLow: number;
  clipRangeHigh: number;
  enableMaskClip: boolean;
  maskClipRangeLow: number;
  maskClipRangeHigh: number;
  lossAggMode: LossAggMode;
}

export const CISPO_POLICY_LOSS_DEFAULTS: Readonly<CispoPolicyLossOptions> = {
  clipRangeLow: 1.0,
  clipRangeHigh: 0.28,
  enableMaskClip: false,
  maskClipRangeLow: 1.0,
  maskClipRangeHigh: 0.28,
  lossAggMode: 'token-mean',
};

export function computeCispoPolicyLoss(input: PolicyLossInput, options: Partial<CispoPolicyLossOptions> = {}): PolicyLossResult {
  const o = { ...CISPO_POLICY_LOSS_DEFAULTS, ...options };
  const oldLogprob = need(input, 'oldLogprob', 'cispo');
  const advantages = need(input, 'advantages', 'cispo');
  const { logprob, actionMask: mask } = input;
  return torch.scope(() => {
    const logRatio = logprob.sub(oldLogprob);
    const ratio = logRatio.detach().exp();
    const weight = ratio.clamp(1 - o.clipRangeLow, 1 + o.clipRangeHigh);
    let keep = torch.onesLike(ratio);
    if (o.enableMaskClip) {
      const over = ratio.gt(1 + o.maskClipRangeHigh).logicalAnd(advantages.gt(0));
      const under = ratio.lt(1 - o.maskClipRangeLow).logicalAnd(advantages.lt(0));
      keep = floatMask(over.logicalOr(under).logicalNot(), ratio);
    }
    const losses = advantages.neg().mul(weight).mul(keep).mul(logprob);
    const loss = aggregateLoss(losses, mask, o.lossAggMode);
    const metrics = torch.noGrad(() => ({
      ppo_kl: maskedMean(logRatio.neg(), mask),
      masked_frac: maskedMean(keep, mask),
      is_clipfrac: maskedMean(weight.ne(ratio).to({ dtype: ratio.dtype }), mask),
      ratio_mean: maskedMean(ratio, mask),
      pg_loss: loss.detach(),
    }));
    return { loss, metrics };
  });
}

export const cispoPolicyLoss: PolicyLossModule<CispoPolicyLossOptions> = {
  name: 'cispo',
  description: 'clipped, stop-gradient IS weight times log-prob (CISPO, MiniMax-M1 arXiv 2506.13585)',
  defaults: CISPO_POLICY_LOSS_DEFAULTS,
  run: computeCispoPolicyLoss,
  linearInAdvantages: true,
};

POLICY_LOSS_FN.register(cispoPolicyLoss);
