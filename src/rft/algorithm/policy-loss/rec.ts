// REC policy loss — Yao et al., "Group-relative REINFORCE is secretly an off-policy algorithm: demystifying some myths
// about GRPO and its friends" (arXiv 2509.24203). Trinity-RFT `policy_loss_fn: rec`. REINFORCE with clipping by
// masking (no ratio in the gradient unless a weight asks for it). With r = sg(π_θ/π_old):
//   in-range (clip_mode)  none:          1
//                         two-side:      1−ε_low ≤ r ≤ 1+ε_high
//                         one-side:      (r ≤ 1+ε_high ∧ A ≥ 0) ∨ (r ≥ 1−ε_low ∧ A ≤ 0)
//                         gspo-one-side: as one-side on the sequence ratio s = exp(mean_t log r); loss seq-mean-token-mean
//                         ring:          two-side ∨ (A ≥ 0 ∧ r ≤ 1−ε'_low) ∨ (A ≤ 0 ∧ r ≥ 1+ε'_high)
//   weight  none: A;  importance_sampling: A·r;  truncated_importance_sampling: A·clip(r, 1−ε'_low, 1+ε'_high);
//           gspo_importance_sampling: A·s;  advantage: A·exp(A/temp)
//   L = −A_w · log π_θ · in-range  (+ c·(log π_θ − log π_old)² for regularizer k2,  − c·log π_θ for forward-kl)
//   loss = aggregate(L, mask, loss_agg_mode)
import * as torch from '../../../torch/index.js';
import type { Tensor } from '../../../torch/index.js';
import { aggregateLoss, type LossAggMode } from '../loss-agg.js';
import { floatMask, maskedMean } from '../utils.js';
import { POLICY_LOSS_FN } from './registry.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export type RecClipMode = 'none' | 'one-side' | 'gspo-one-side' | 'two-side' | 'ring';
export type RecWeight =
  | 'none'
  | 'importance_sampling'
  | 'truncated_importance_sampling'
  | 'gspo_importance_sampling'
  | 'advantage';
export type RecRegularizer = 'none' | 'k2' | 'forward-kl';

export interface RecPolicyLossOptions {
  epsilonLow: number;
  epsilonHigh: number;
  epsilonLowPrime: number;
  epsilonHighPrime: number;
  clipMode: RecClipMode;
  weight: RecWeight;
  regularizer: RecRegularizer;
  regularizerCoef: number;
  temp: number;
  lossAggMode: LossAggMode;
}

export const REC_POLICY_LOSS_DEFAULTS: Readonly<RecPolicyLossOptions> = {
  epsilonLow: 0.2,
  epsilonHigh: 0.2,
  epsilonLowPrime: 0.6,
  epsilonHighPrime: 2,
  clipMode: 'none',
  weight: 'none',
  regularizer: 'none',
  regularizerCoef: 0.0,
  temp: 1.0,
  lossAggMode: 'token-mean',
};

const CLIP_MODES: readonly RecClipMode[] = ['none', 'one-side', 'gspo-one-side', 'two-side', 'ring'];
const WEIGHTS: readonly RecWeight[] = [
  'none',
  'importance_sampling',
  'truncated_importance_sampling',
  'gspo_importance_sampling',
  'advantage',
];
const REGULARIZERS: readonly RecRegularizer[] = ['none', 'k2', 'forward-kl'];

export function computeRecPolicyLoss(input: PolicyLossInput, options: Partial<RecPolicyLossOptions> = {}): PolicyLossResult {
  const o = { ...REC_POLICY_LOSS_DEFAULTS, ...options };
  if (!CLIP_MODES.includes(o.clipMode))
    throw new Error(`policy_loss_fn 'rec': clip_mode must be one of ${CLIP_MODES.join(', ')}`);
  if (!WEIGHTS.includes(o.weight)) throw new Error(`policy_loss_fn 'rec': weight must be one of ${WEIGHTS.join(', ')}`);
  if (!REGULARIZERS.includes(o.regularizer)) {
    throw new Error(`policy_loss_fn 'rec': regularizer must be one of ${REGULARIZERS.join(', ')}`);
  }
  const oldLogprob = need(input, 'oldLogprob', 'rec');
  const advantages = need(input, 'advantages', 'rec');
  const { logprob, actionMask: mask } = input;
  return torch.scope(() => {
    const ratio = logprob.detach().sub(oldLogprob).exp();
    const sequenceRatio = () => maskedMean(logprob.detach().sub(oldLogprob), mask, -1).exp().unsqueeze(-1);
    const nonNeg = advantages.ge(0);
    const nonPos = advantages.le(0);
    const oneSide = (r: Tensor) =>
      r
        .le(1 + o.epsilonHigh)
        .logicalAnd(nonNeg)
        .logicalOr(r.ge(1 - o.epsilonLow).logicalAnd(nonPos));
    const twoSide = ratio.ge(1 - o.epsilonLow).logicalAnd(ratio.le(1 + o.epsilonHigh));
    let inRange: Tensor;
    if (o.clipMode === 'two-side') inRange = twoSide;
    else if (o.clipMode === 'one-side') inRange = oneSide(ratio);
    else if (o.clipMode === 'gspo-one-side') inRange = oneSide(sequenceRatio());
    else if (o.clipMode === 'ring') {
      inRange = twoSide
        .logicalOr(nonNeg.logicalAnd(ratio.le(1 - o.epsilonLowPrime)))
        .logicalOr(nonPos.logicalAnd(ratio.ge(1 + o.epsilonHighPrime)));
    } else inRange = torch.onesLike(ratio).bool();
    let weighted = advantages;
    if (o.weight === 'importance_sampling') weighted = advantages.mul(ratio);
    else if (o.weight === 'truncated_importance_sampling')
      weighted = advantages.mul(ratio.clamp(1 - o.epsilonLowPrime, 1 + o.epsilonHighPrime));
    else if (o.weight === 'gspo_importance_sampling') weighted = advantages.mul(sequenceRatio());
    else if (o.weight === 'advantage') weighted = advantages.mul(advantages.div(o.temp).exp());
    let losses = weighted.neg().mul(logprob).mul(floatMask(inRange, ratio));
    if (o.regularizer === 'forward-kl') losses = losses.sub(logprob.mul(o.regularizerCoef));
    else if (o.regularizer === 'k2') losses = losses.add(logprob.sub(oldLogprob).square().mul(o.regularizerCoef));
    const mode = o.clipMode === 'gspo-one-side' ? 'seq-mean-token-mean' : o.lossAggMode;
    const loss = aggregateLoss(losses, mask, mode);
    const metrics = torch.noGrad(() => ({
      pg_clipfrac: maskedMean(floatMask(inRange.logicalNot(), ratio), mask),
      ratio_mean: maskedMean(ratio, mask),
      pg_loss: loss.detach(),
    }));
    return { loss, metrics };
  });
}

export const recPolicyLoss: PolicyLossModule<RecPolicyLossOptions> = {
  name: 'rec',
  description: 'REINFORCE with masking-style clipping, optional IS/advantage weights and regularisers (REC, arXiv 2509.24203)',
  defaults: REC_POLICY_LOSS_DEFAULTS,
  run: computeRecPolicyLoss,
};

POLICY_LOSS_FN.register(recPolicyLoss);
