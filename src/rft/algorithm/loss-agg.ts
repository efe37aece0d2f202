// Loss aggregation (`algorithm.loss_agg_mode`), Trinity-RFT `trinity/algorithm/utils.py` `aggregate_loss` (from verl).
// For per-token values L[b, t] and mask m[b, t]:
//   token-mean               Σ L·m / Σ m                         every token weighs the same (DAPO)
//   seq-mean-token-sum       1/B Σ_b Σ_t L·m                      sequence sums, averaged over sequences
//   seq-mean-token-mean      1/B Σ_b (Σ_t L·m / Σ_t m)            every sequence weighs the same (GRPO paper)
//   seq-mean-token-sum-norm  Σ L·m / N,  N = normalizer ?? T       a constant denominator (Dr. GRPO, arXiv 2503.20783)
// (+1e-8 in each denominator, as Trinity-RFT.) B counts every row, masked-out rows included.
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { floatMask, maskedMean, maskedSum } from './utils.js';

export const LOSS_AGG_MODES = ['token-mean', 'seq-mean-token-sum', 'seq-mean-token-mean', 'seq-mean-token-sum-norm'] as const;
export type LossAggMode = (typeof LOSS_AGG_MODES)[number];

export function isLossAggMode(value: string): value is LossAggMode {
  return (LOSS_AGG_MODES as readonly string[]).includes(value);
}

/**
 * What a term of a loss averages over:
 *   token     Σ / number of masked tokens              (token-mean)
 *   row       mean over rows                            (seq-mean-token-sum, seq-mean-token-mean)
 *   group     mean over groups of rowsPerGroup rows     (DPO: pairs)
 *   constant  Σ / a normaliser independent of the rows  (seq-mean-token-sum-norm: Σ / T)
 */
export type AggregationUnit = 'token' | 'row' | 'group' | 'constant';
export const AGGREGATION_UNITS: readonly AggregationUnit[] = ['token', 'row', 'group', 'constant'];

/** The unit that a loss_agg_mode averages over. */
export function aggregationUnit(mode: LossAggMode): AggregationUnit {
  switch (mode) {
    case 'token-mean':
      return 'token';
    case 'seq-mean-token-sum':
    case 'seq-mean-token-mean':
      return 'row';
    case 'seq-mean-token-sum-norm':
      return 'constant';
    default:
      throw new Error(`unknown loss_agg_mode '${String(mode)}'`);
  }
}

/**
 * Aggregates per-token `values` [B, T] under `mask` into a scalar loss. `normalizer` applies only to
 * seq-mean-token-sum-norm (default: T, the padded length, i.e. the max response length of the batch).
 */
export function aggregateLoss(
  values: Tensor,
  mask: Tensor,
  mode: LossAggMode = 'token-mean',
  normalizer?: number | null,
): Tensor {
  switch (mode) {
    case 'token-mean':
      return maskedMean(values, mask);
    case 'seq-mean-token-sum':
      return torch.scope(() => maskedSum(values, mask, -1).mean());
    case 'seq-mean-token-mean':
      return torch.scope(() => maskedMean(values, mask, -1).mean());
    case 'seq-mean-token-sum-norm':
      return torch.scope(() =>
        values
          .mul(floatMask(mask, values))
          .sum()
          .div((normalizer ?? mask.size(-1)) + 1e-8),
      );
    default:
      throw new Error(`unknown loss_agg_mode '${String(mode)}'; expected one of ${LOSS_AGG_MODES.join(', ')}`);
  }
}
