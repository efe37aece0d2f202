// PPO clipped surrogate — Schulman et al., "Proximal Policy Optimization Algorithms" (arXiv 1707.06347); asymmetric
// bounds ("clip-higher") from DAPO (arXiv 2503.14476); dual clip from Ye et al., "Mastering Complex Control in MOBA
// Games with Deep Reinforcement Learning" (arXiv 1912.09729). Trinity-RFT `policy_loss_fn: ppo`. Per token:
//   r = exp(clamp(log π_θ − log π_old, −20, 20))
//   L1 = max(−A·r, −A·clip(r, 1 − ε_low, 1 + ε_high))
//   L  = min(L1, −A·c)   where A < 0   (dual clip, c = clip_ratio_c > 1),   L = L1 elsewhere
// Sequence masking (DeepSeek-V3.2, enable_sequence_masking): tokens with A < 0 in sequences whose mean
// log(π_old/π_θ) exceeds delta are dropped. loss = aggregate(L, mask, loss_agg_mode).
// Metrics: pg_clipfrac (share of tokens where the clipped term is active), pg_clipfrac_lower (dual clip active),
// ppo_kl = mean(log π_old − log π_θ), ratio_mean, pg_loss.
import * as torch from '../../../torch/index.js';
import type { Tensor } from '../../../torch/index.js';
import { aggregateLoss, type LossAggMode } from '../loss-agg.js';
import type { Metrics } from '../metrics.js';
import { floatMask, maskedMean } from '../utils.js';
import { POLICY_LOSS_FN } from './registry.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export interface PpoPolicyLossOptions {
  /** Symmetric clip ε, used for the bounds not given. */
  clipRange: number | null;
  clipRangeLow: number | null;
  clipRangeHigh: number | null;
  /** Dual-clip constant c (> 1): the loss of a negative-advantage token is at most −A·c. */
  clipRatioC: number;
  lossAggMode: LossAggMode;
  enableSequenceMasking: boolean;
  deltaSequenceMasking: number;
}

export const PPO_POLICY_LOSS_DEFAULTS: Readonly<PpoPolicyLossOptions> = {
  clipRange: 0.2,
  clipRangeLow: null,
  clipRangeHigh: null,
  clipRatioC: 3.0,
  lossAggMode: 'token-mean',
  enableSequenceMasking: false,
  deltaSequenceMasking: 0.1,
};

/** The clip bounds: explicit low/high, else clip_range; an error that names the module when neither is set. */
export function clipBounds(
  module: string,
  o: { clipRange: number | null; clipRangeLow: number | null; clipRangeHigh: number | null },
): [number, number] {
  const low = o.clipRangeLow ?? o.clipRange;
  const high = o.clipRangeHigh ?? o.clipRange;
  if (low === null || high === null) throw new Error(`policy_loss_fn '${module}': set clip_range or clip_range_low/high`);
  return [low, high];
}

export function computePpoPolicyLoss(input: PolicyLossInput, options: Partial<PpoPolicyLossOptions> = {}): PolicyLossResult {
  const o = { ...PPO_POLICY_LOSS_DEFAULTS, ...options };
  const [low, high] = clipBounds('ppo', o);
  if (!(o.clipRatioC > 1)) throw new Error(`policy_loss_fn 'ppo': clip_ratio_c must be > 1, got ${o.clipRatioC}`);
  const oldLogprob = need(input, 'oldLogprob', 'ppo');
  const advantages = need(input, 'advantages', 'ppo');
  const { logprob, actionMask: mask } = input;
  return torch.scope(() => {
    const logRatio = logprob.sub(oldLogprob).clamp(-20, 20);
    const ratio = logRatio.exp();
    const negA = advantages.neg();
    const pg1 = negA.mul(ratio);
    const pg2 = negA.mul(ratio.clamp(1 - low, 1 + high));
    const clipped1 = pg1.maximum(pg2);
    const pg3 = negA.mul(o.clipRatioC);
    const negative = advantages.lt(0);
    let losses = torch.where(negative, clipped1.minimum(pg3), clipped1);
    const metrics: Metrics = {};
    if (o.enableSequenceMasking) {
      const sequenceKl = torch.noGrad(() => maskedMean(logRatio.neg(), mask, -1));
      const drop = negative.logicalAnd(sequenceKl.gt(o.deltaSequenceMasking).unsqueeze(-1).expandAs(advantages));
      losses = losses.mul(floatMask(drop.logicalNot(), losses));
      metrics['seq_mask/masked_tokens'] = drop.sum().div(floatMask(mask, losses).sum().add(1e-10));
      metrics['seq_mask/mean_sequence_kl'] = sequenceKl.mean();
    }
    const loss = aggregateLoss(losses, mask, o.lossAggMode);
    torch.noGrad(() => {
      metrics.pg_clipfrac = maskedMean(pg2.gt(pg1).to({ dtype: ratio.dtype }), mask);
      metrics.pg_clipfrac_lower = maskedMean(clipped1.gt(pg3).logicalAnd(negative).to({ dtype: ratio.dtype }), mask);
      metrics.ppo_kl = maskedMean(logRatio.neg(), mask);
      metrics.ratio_mean = maskedMean(ratio, mask);
      metrics.pg_loss = loss.detach();
    });
    return { loss, metrics };
  });
}

/** Rows of a [B, ...] tensor where `rows` [B] (bool) is true. */
export function selectRows(t: Tensor, rows: Tensor): Tensor {
  return t.index([rows]);
}

export const ppoPolicyLoss: PolicyLossModule<PpoPolicyLossOptions> = {
  name: 'ppo',
  description: 'clipped surrogate with clip-higher and dual clip (PPO arXiv 1707.06347, DAPO, dual-clip PPO)',
  defaults: PPO_POLICY_LOSS_DEFAULTS,
  run: computePpoPolicyLoss,
  linearInAdvantages: true,
};

POLICY_LOSS_FN.register(ppoPolicyLoss);
