// Importance-sampling policy loss — plain off-policy policy gradient without clipping (Trinity-RFT
// `policy_loss_fn: importance_sampling`, used by on-policy distillation, as Tinker's `importance_sampling` loss):
//   r = exp(clamp(log π_θ − log π_old, −20, 20)),   L = −A · r,   loss = aggregate(L, mask, loss_agg_mode)
import * as torch from '../../../torch/index.js';
import { aggregateLoss, type LossAggMode } from '../loss-agg.js';
import { maskedMean } from '../utils.js';
import { POLICY_LOSS_FN } from './registry.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export interface ImportanceSamplingPolicyLossOptions {
  lossAggMode: LossAggMode;
}

export const IMPORTANCE_SAMPLING_POLICY_LOSS_DEFAULTS: Readonly<ImportanceSamplingPolicyLossOptions> = {
  lossAggMode: 'token-mean',
};

export function computeImportanceSamplingPolicyLoss(
  input: PolicyLossInput,
  options: Partial<ImportanceSamplingPolicyLossOptions> = {},
): PolicyLossResult {
  const o = { ...IMPORTANCE_SAMPLING_POLICY_LOSS_DEFAULTS, ...options };
  const oldLogprob = need(input, 'oldLogprob', 'importance_sampling');
  const advantages = need(input, 'advantages', 'importance_sampling');
  const { logprob, actionMask: mask } = input;
  return torch.scope(() => {
    const logRatio = logprob.sub(oldLogprob).clamp(-20, 20);
    const ratio = logRatio.exp();
    const loss = aggregateLoss(advantages.neg().mul(ratio), mask, o.lossAggMode);
    const metrics = torch.noGrad(() => ({
      pg_loss: loss.detach(),
      'ratio/mean': maskedMean(ratio, mask),
      approx_kl: maskedMean(logRatio.neg(), mask),
    }));
    return { loss, metrics };
  });
}

export const importanceSamplingPolicyLoss: PolicyLossModule<ImportanceSamplingPolicyLossOptions> = {
  name: 'importance_sampling',
  description: 'unclipped importance-weighted policy gradient (on-policy distillation)',
  defaults: IMPORTANCE_SAMPLING_POLICY_LOSS_DEFAULTS,
  run: computeImportanceSamplingPolicyLoss,
  linearInAdvantages: true,
};

POLICY_LOSS_FN.register(importanceSamplingPolicyLoss);
