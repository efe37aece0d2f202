// SAPO — Gao et al., "Soft Adaptive Policy Optimization" (Qwen, arXiv 2511.20347). A smooth gate instead of a hard
// clip, with a sharper temperature for negative advantages:
//   r = exp(log π_θ − log π_old),  τ = τ_pos if A > 0 else τ_neg
//   f(r) = σ(τ·(r − 1)) · 4/τ,     L = −f(r) · A,     loss = aggregate(L, mask, loss_agg_mode)
// so ∇L = −A · 4σ(1−σ) · r · ∇log π_θ: the plain policy gradient at r = 1, fading smoothly off-policy.
// As the paper and TRL (`loss_type: sapo`). (Python Trinity-RFT's `sapo` instead weights −A·log π_θ by sg(f(r)),
// whose gradient is 2/τ times the policy gradient at r = 1.)
import * as torch from '../../../torch/index.js';
import { aggregateLoss, type LossAggMode } from '../loss-agg.js';
import { maskedMean } from '../utils.js';
import { POLICY_LOSS_FN } from './registry.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export interface SapoPolicyLossOptions {
  tauPos: number;
  tauNeg: number;
  lossAggMode: LossAggMode;
}

export const SAPO_POLICY_LOSS_DEFAULTS: Readonly<SapoPolicyLossOptions> = {
  tauPos: 1.0,
  tauNeg: 1.05,
  lossAggMode: 'token-mean',
};

export function computeSapoPolicyLoss(input: PolicyLossInput, options: Partial<SapoPolicyLossOptions> = {}): PolicyLossResult {
  const o = { ...SAPO_POLICY_LOSS_DEFAULTS, ...options };
  if (!(o.tauPos > 0 && o.tauNeg > 0)) throw new Error(`policy_loss_fn 'sapo': tau_pos and tau_neg must be > 0`);
  const oldLogprob = need(input, 'oldLogprob', 'sapo');
  const advantages = need(input, 'advantages', 'sapo');
  const { logprob, actionMask: mask } = input;
  return torch.scope(() => {
    const logRatio = logprob.sub(oldLogprob);
    const ratio = logRatio.exp();
    const tau = torch.where(advantages.gt(0), o.tauPos, o.tauNeg).to({ dtype: ratio.dtype });
    const gate = ratio.sub(1).mul(tau).sigmoid().mul(tau.reciprocal().mul(4));
    const loss = aggregateLoss(gate.mul(advantages).neg(), mask, o.lossAggMode);
    const metrics = torch.noGrad(() => ({
      ppo_kl: maskedMean(logRatio.neg(), mask),
      avg_soft_gate: maskedMean(gate, mask),
      ratio_mean: maskedMean(ratio, mask),
      pos_adv_frac: maskedMean(advantages.gt(0).to({ dtype: ratio.dtype }), mask),
      pg_loss: loss.detach(),
    }));
    return { loss, metrics };
  });
}

export const sapoPolicyLoss: PolicyLossModule<SapoPolicyLossOptions> = {
  name: 'sapo',
  description: 'soft sigmoid gate on the ratio, asymmetric temperatures (SAPO, arXiv 2511.20347)',
  defaults: SAPO_POLICY_LOSS_DEFAULTS,
  run: computeSapoPolicyLoss,
  linearInAdvantages: true,
};

POLICY_LOSS_FN.register(sapoPolicyLoss);
