// GSPO — Zheng et al., "Group Sequence Policy Optimization" (arXiv 2507.18071), GSPO-token form.
// Trinity-RFT `policy_loss_fn: gspo`. The sequence ratio is the geometric mean of the token ratios:
//   s_b = exp( Σ_t m·(log π_θ − log π_old) / Σ_t m )
//   per token: s_{b,t} = sg(s_b) · π_θ(y_t) / sg(π_θ(y_t))      (value s_b; gradient flows through each token)
//   L = max(−A·s_{b,t}, −A·clip(s_{b,t}, 1 − ε_low, 1 + ε_high)),  loss = aggregate(L, mask, seq-mean-token-mean)
// The clip range is tiny (3e-4 / 4e-4 by default) because sequence ratios stay near 1.
import * as torch from '../../../torch/index.js';
import { aggregateLoss, type LossAggMode } from '../loss-agg.js';
import { maskedMean } from '../utils.js';
import { clipBounds } from './ppo.js';
import { POLICY_LOSS_FN } from './registry.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export interface GspoPolicyLossOptions {
  clipRange: number | null;
  /** null: clip_range, else 3e-4. */
  clipRangeLow: number | null;
  /** null: clip_range, else 4e-4. */
  clipRangeHigh: number | null;
  lossAggMode: LossAggMode;
}

export const GSPO_POLICY_LOSS_DEFAULTS: Readonly<GspoPolicyLossOptions> = {
  clipRange: null,
  clipRangeLow: null,
  clipRangeHigh: null,
  lossAggMode: 'seq-mean-token-mean',
};

export function computeGspoPolicyLoss(input: PolicyLossInput, options: Partial<GspoPolicyLossOptions> = {}): PolicyLossResult {
  const o = { ...GSPO_POLICY_LOSS_DEFAULTS, ...options };
  const [low, high] = clipBounds('gspo', {
    clipRange: o.clipRange,
    clipRangeLow: o.clipRangeLow ?? (o.clipRange === null ? 3e-4 : null),
    clipRangeHigh: o.clipRangeHigh ?? (o.clipRange === null ? 4e-4 : null),
  });
  const oldLogprob = need(input, 'oldLogprob', 'gspo');
  const advantages = need(input, 'advantages', 'gspo');
  const { logprob, actionMask: mask } = input;
  return torch.scope(() => {
    const logRatio = logprob.sub(oldLogprob);
    const sequenceLogRatio = maskedMean(logRatio, mask, -1);
    const ratio = logprob.sub(logprob.detach()).add(sequenceLogRatio.detach().unsqueeze(-1)).exp();
    const negA = advantages.neg();
    const pg1 = negA.mul(ratio);
    const pg2 = negA.mul(ratio.clamp(1 - low, 1 + high));
    const loss = aggregateLoss(pg1.maximum(pg2), mask, o.lossAggMode);
    const metrics = torch.noGrad(() => ({
      pg_clipfrac: maskedMean(pg2.gt(pg1).to({ dtype: ratio.dtype }), mask),
      ppo_kl: maskedMean(logRatio.neg(), mask),
      ppo_kl_seq: sequenceLogRatio.neg().mean(),
      ratio_mean: sequenceLogRatio.exp().mean(),
      pg_loss: loss.detach(),
    }));
    return { loss, metrics };
  });
}

export const gspoPolicyLoss: PolicyLossModule<GspoPolicyLossOptions> = {
  name: 'gspo',
  description: 'clipped sequence-level ratio, geometric mean of token ratios (GSPO, arXiv 2507.18071)',
  defaults: GSPO_POLICY_LOSS_DEFAULTS,
  run: computeGspoPolicyLoss,
  linearInAdvantages: true,
};

POLICY_LOSS_FN.register(gspoPolicyLoss);
