// Rollout correction — the mismatch between the policy that sampled the tokens (the rollout engine, π_rollout) and the
// trainer's policy with the same weights (π_train: another kernel, dtype or batch shape gives other log-probs), as
// verl's and Trinity-RFT's `algorithm.rollout_correction` (Liu, Li et al., "When Speed Kills Stability: Demystifying RL
// Collapse from the Training-Inference Mismatch", 2025; truncated importance sampling from Yao et al., "Your Efficient
// RL Framework Secretly Brings You Off-Policy RL Training", 2025). Over the masked tokens, Δ = log π_train − log π_rollout
// clamped to ±20:
//   rollout_is: token      w_t = min(exp(Δ_t), C)                  C = rollout_is_threshold
//   rollout_is: sequence   w_t = min(exp(Σ_t' Δ_t'), C)            (one weight per sequence, on each of its tokens)
//   rollout_is: null       no weights; the metrics only
// The trainer multiplies each token's policy loss by w (see ../trainer/objective.ts: π_train is the recomputed old
// policy, or with bypass_old_logprobs the policy being trained, detached). Metrics, token means:
//   rollout_corr/abs_logprob_diff = mean |Δ|,   rollout_corr/kl = mean(−Δ)  (k1 estimate of KL(π_rollout ‖ π_train)),
//   rollout_corr/is_weight_mean = mean w,       rollout_corr/is_clip_fraction = share of tokens whose weight hit C.
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import type { Metrics } from './metrics.js';
import { floatMask, maskedMean, maskedSum } from './utils.js';

export type RolloutIsLevel = 'token' | 'sequence';
export const ROLLOUT_IS_LEVELS: readonly RolloutIsLevel[] = ['token', 'sequence'];

export interface RolloutCorrectionOptions {
  /** Level of the truncated importance weights; null: metrics only. */
  rolloutIs: RolloutIsLevel | null;
  /** C: the weights' upper bound. */
  rolloutIsThreshold: number;
}

export const ROLLOUT_CORRECTION_DEFAULTS: Readonly<RolloutCorrectionOptions> = { rolloutIs: null, rolloutIsThreshold: 2.0 };

export interface RolloutCorrectionInput {
  /** [B, T] log π_train (no gradient is taken through it). */
  trainLogprob: Tensor;
  /** [B, T] log π_rollout: the rollout's own log-probs. */
  rolloutLogprob: Tensor;
  /** [B, T] the tokens that have both (rows without rollout log-probs: 0). */
  actionMask: Tensor;
}

export interface RolloutCorrectionResult {
  /** [B, T] w (0 outside the mask), or null when rollout_is is null. */
  weights: Tensor | null;
  metrics: Metrics;
}

export function computeRolloutCorrection(
  input: RolloutCorrectionInput,
  options: Partial<RolloutCorrectionOptions> = {},
): RolloutCorrectionResult {
  const { rolloutIs, rolloutIsThreshold: c } = { ...ROLLOUT_CORRECTION_DEFAULTS, ...options };
  if (rolloutIs !== null && !ROLLOUT_IS_LEVELS.includes(rolloutIs))
    throw new Error(`rollout_correction.rollout_is must be token, sequence or null, got '${String(rolloutIs)}'`);
  if (!(Number.isFinite(c) && c > 0)) throw new Error(`rollout_correction.rollout_is_threshold must be > 0, got ${c}`);
  return torch.scope(() =>
    torch.noGrad(() => {
      const mask = floatMask(input.actionMask, input.trainLogprob);
      const delta = input.trainLogprob.detach().sub(input.rolloutLogprob).mul(mask).clamp(-20, 20);
      const metrics: Metrics = {
        'rollout_corr/abs_logprob_diff': maskedMean(delta.abs(), mask),
        'rollout_corr/kl': maskedMean(delta.neg(), mask),
      };
      if (rolloutIs === null) return { weights: null, metrics };
      const logRatio = rolloutIs === 'token' ? delta : maskedSum(delta, mask, -1).clamp(-20, 20).unsqueeze(-1).expandAs(delta);
      const ratio = logRatio.exp();
      const weights = ratio.clamp(0, c).mul(mask);
      metrics['rollout_corr/is_weight_mean'] = maskedMean(weights, mask);
      metrics['rollout_corr/is_clip_fraction'] = maskedMean(ratio.gt(c).to({ dtype: mask.dtype }), mask);
      return { weights, metrics };
    }),
  );
}
