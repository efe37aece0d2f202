// KL estimators between the policy and a reference policy, per token — Schulman, "Approximating KL Divergence"
// (http://joschu.net/blog/kl-approx.html). Trinity-RFT `kl_penalty_fn` / `kl_loss_fn` (`trinity/algorithm/kl_fn`).
// With log r = log π_ref − log π (a sample from π):
//   none          0
//   k1            log π − log π_ref                       (unbiased, high variance, can be negative)
//   k2            ½ (log π − log π_ref)²
//   k3            r − 1 − log r                           (unbiased, ≥ 0)
//   low_var_kl    clamp(r − 1 − log r, −10, 10) with log r clamped to [−20, 20]   (verl)
//   abs           |log π − log π_ref|
//   corrected_k3  clamp(π/π_old, 0, 2) · (r − 1 − log r)   (importance-corrected k3 for off-policy samples;
//                 plain k3 without π_old)
// Two uses:
//   as a reward penalty  rewards[b, t] = scores[b, t] − β · KL(π_old, π_ref)[b, t] · mask[b, t]
//   as a loss term       loss = β · aggregate(KL(π_θ, π_ref), mask, loss_agg_mode)
// 'none' contributes nothing to either and needs no reference policy (klFnNeedsReference): callers ask that, not the name.
// β fixed (kl_coef) or adaptive — Ziegler et al., "Fine-Tuning Language Models from Human Preferences"
// (arXiv 1909.08593): e = clip(KL / target_kl − 1, −0.2, 0.2),  β ← β · (1 + e · batch_size / horizon).
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { aggregateLoss, type LossAggMode } from './loss-agg.js';
import type { Metrics } from './metrics.js';
import { resolveArgs } from './registry.js';
import { floatMask, maskedMean } from './utils.js';

export const KL_ESTIMATORS = ['none', 'k1', 'k2', 'k3', 'low_var_kl', 'abs', 'corrected_k3'] as const;
export type KlEstimator = (typeof KL_ESTIMATORS)[number];

/** Per-token KL estimate of `logprob`'s policy from the reference's; differentiable in both. */
export function klDivergence(estimator: KlEstimator, logprob: Tensor, refLogprob: Tensor, oldLogprob?: Tensor): Tensor {
  return torch.scope(() => {
    switch (estimator) {
      case 'none':
        return torch.zerosLike(logprob);
      case 'k1':
        return logprob.sub(refLogprob);
      case 'k2':
        return logprob.sub(refLogprob).square().mul(0.5);
      case 'abs':
        return logprob.sub(refLogprob).abs();
      case 'k3': {
        const logr = refLogprob.sub(logprob);
        return logr.exp().sub(1).sub(logr);
      }
      case 'low_var_kl': {
        const logr = refLogprob.sub(logprob).clamp(-20, 20);
        return logr.exp().sub(logr).sub(1).clamp(-10, 10);
      }
      case 'corrected_k3': {
        const logr = refLogprob.sub(logprob);
        const k3 = logr.exp().sub(logr).sub(1);
        if (oldLogprob === undefined) return k3;
        return logprob.sub(oldLogprob).exp().clamp(0, 2).mul(k3);
      }
      default:
        throw new Error(`unknown KL estimator '${String(estimator)}'; expected one of ${KL_ESTIMATORS.join(', ')}`);
    }
  });
}

/** Whether kl_fn `name` contributes a term, and so reads reference log-probs: every estimator but 'none'. */
export function klFnNeedsReference(name: string): boolean {
  return name !== 'none';
}

export interface KlOptions {
  /** Adaptive coefficient (needs targetKl and horizon). */
  adaptive: boolean;
  /** β: the initial coefficient when adaptive. */
  klCoef: number;
  targetKl: number | null;
  horizon: number | null;
}

export const KL_DEFAULTS: Readonly<KlOptions> = { adaptive: false, klCoef: 0.001, targetKl: null, horizon: null };

/** A KL function with its coefficient (Trinity-RFT `KLFn`): state is only the coefficient of the adaptive controller. */
export class KlFn {
  readonly estimator: KlEstimator;
  readonly options: Readonly<KlOptions>;
  klCoef: number;

  constructor(estimator: KlEstimator, options: Partial<KlOptions> = {}) {
    if (!(KL_ESTIMATORS as readonly string[]).includes(estimator)) {
      throw new Error(`unknown kl_fn '${estimator}'; registered: ${KL_ESTIMATORS.join(', ')}`);
    }
    this.estimator = estimator;
    this.options = { ...KL_DEFAULTS, ...options };
    if (this.options.adaptive && (this.options.targetKl === null || this.options.horizon === null)) {
      throw new Error(`kl_fn '${estimator}': adaptive KL needs target_kl and horizon`);
    }
    this.klCoef = this.options.klCoef;
  }

  /** The function contributes a term (a loss or a reward penalty), from reference log-probs (klFnNeedsReference). */
  get needsReference(): boolean {
    return klFnNeedsReference(this.estimator);
  }

  calculateKl(logprob: Tensor, refLogprob: Tensor, oldLogprob?: Tensor): Tensor {
    return klDivergence(this.estimator, logprob, refLogprob, oldLogprob);
  }

  /** Adaptive controller step (no-op when not adaptive). */
  updateKlCoef(currentKl: number, batchSize: number): void {
    const { adaptive, targetKl, horizon } = this.options;
    if (!adaptive || targetKl === null || horizon === null) return;
    const error = Math.min(Math.max(currentKl / targetKl - 1, -0.2), 0.2);
    this.klCoef *= 1 + (error * batchSize) / horizon;
  }

  /**
   * token-level rewards = scores − β · KL(old, ref) · mask; then updates β from the batch KL
   * (mean over sequences of each sequence's masked-mean KL). Metrics: kl, kl_coef (the β applied).
   */
  applyPenaltyToReward(input: { tokenLevelScores: Tensor; oldLogprob: Tensor; refLogprob: Tensor; actionMask: Tensor }): {
    tokenLevelRewards: Tensor;
    metrics: Record<string, number>;
  } {
    if (this.estimator === 'none') return { tokenLevelRewards: input.tokenLevelScores.alias(), metrics: {} };
    const klCoef = this.klCoef;
    const result = torch.scope(() =>
      torch.noGrad(() => {
        const mask = floatMask(input.actionMask, input.tokenLevelScores);
        const kl = this.calculateKl(input.oldLogprob, input.refLogprob).mul(mask);
        const currentKl = maskedMean(kl, mask, -1).mean().item();
        return { tokenLevelRewards: input.tokenLevelScores.sub(kl.mul(klCoef)), currentKl };
      }),
    );
    this.updateKlCoef(result.currentKl, input.tokenLevelScores.size(0));
    return { tokenLevelRewards: result.tokenLevelRewards, metrics: { kl: result.currentKl, kl_coef: klCoef } };
  }

  /** β · aggregate(KL(π_θ, π_ref), mask). Metrics: kl_loss (before β), kl_coef. */
  calculateLoss(
    input: { logprob: Tensor; refLogprob: Tensor; actionMask: Tensor; oldLogprob?: Tensor },
    lossAggMode: LossAggMode = 'token-mean',
  ): { loss: Tensor; metrics: Metrics } {
    if (this.estimator === 'none') {
      return { loss: torch.zeros([], { dtype: input.logprob.dtype, device: input.logprob.device }), metrics: {} };
    }
    return torch.scope(() => {
      const kl = this.calculateKl(input.logprob, input.refLogprob, input.oldLogprob);
      const klLoss = aggregateLoss(kl, input.actionMask, lossAggMode);
      return { loss: klLoss.mul(this.klCoef), metrics: { kl_loss: klLoss.detach(), kl_coef: this.klCoef } };
    });
  }
}

/** `kl_penalty_fn` / `kl_loss_fn` by name with snake_case (YAML) or camelCase args. */
export function createKlFn(name: string, args: Readonly<Record<string, unknown>> = {}): KlFn {
  if (!(KL_ESTIMATORS as readonly string[]).includes(name)) {
    throw new Error(`unknown kl_fn '${name}'; registered: ${KL_ESTIMATORS.join(', ')}`);
  }
  return new KlFn(name as KlEstimator, resolveArgs(`kl_fn '${name}'`, KL_DEFAULTS, args));
}
