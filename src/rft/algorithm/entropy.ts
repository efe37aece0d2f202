// Entropy regularisation (`algorithm.entropy_loss_fn`, Trinity-RFT `trinity/algorithm/entropy_loss_fn`) — the entropy
// bonus of A3C (Mnih et al., arXiv 1602.01783). H[b, t] is the policy's entropy at each response token.
//   default  term = −c · aggregate(H, mask, loss_agg_mode)         (added to the loss: maximises entropy for c > 0)
//   mix      the same over the non-expert rows only (expert SFT rows carry no entropy bonus)
//   none     term = 0
// Metrics: entropy (the aggregated H), entropy_coef.
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { aggregateLoss, type LossAggMode } from './loss-agg.js';
import type { Metrics } from './metrics.js';
import { resolveArgs } from './registry.js';
import { checkExpertRows, type ExpertRows, expertRowsOf } from './utils.js';

export const ENTROPY_LOSS_FNS = ['default', 'mix', 'none'] as const;
export type EntropyLossName = (typeof ENTROPY_LOSS_FNS)[number];

/** Whether entropy_loss_fn `name` reads the policy's entropy (so the forward computes it): every function but 'none'. */
export function entropyLossNeedsEntropy(name: string): boolean {
  return name !== 'none';
}

export interface EntropyLossOptions {
  entropyCoef: number;
  lossAggMode: LossAggMode;
}

export const ENTROPY_LOSS_DEFAULTS: Readonly<EntropyLossOptions> = { entropyCoef: 0.0, lossAggMode: 'token-mean' };

export interface EntropyLossInput {
  /** [B, T] per-token entropy of the policy (differentiable). */
  entropy: Tensor;
  actionMask: Tensor;
  /** [B] bool, for `mix`. */
  expertMask?: Tensor;
  /** For `mix`: expertMask's rows as index lists made ahead (./utils.ts ExpertRows): no read of the mask. */
  expertRows?: ExpertRows;
}

export function computeEntropyLoss(
  name: EntropyLossName,
  input: EntropyLossInput,
  options: Partial<EntropyLossOptions> = {},
): { loss: Tensor; metrics: Metrics } {
  const o = { ...ENTROPY_LOSS_DEFAULTS, ...options };
  if (!(ENTROPY_LOSS_FNS as readonly string[]).includes(name)) {
    throw new Error(`unknown entropy_loss_fn '${name}'; registered: ${ENTROPY_LOSS_FNS.join(', ')}`);
  }
  if (name === 'none')
    return { loss: torch.zeros([], { dtype: input.entropy.dtype, device: input.entropy.device }), metrics: {} };
  return torch.scope((): { loss: Tensor; metrics: Metrics } => {
    let { entropy, actionMask } = input;
    if (name === 'mix') {
      if (input.expertMask === undefined && input.expertRows === undefined)
        throw new Error(`entropy_loss_fn 'mix' needs input.expertMask`);
      if (input.expertRows !== undefined) checkExpertRows(input.expertRows, entropy.size(0), `entropy_loss_fn 'mix'`);
      const usual = (input.expertRows ?? expertRowsOf(input.expertMask as Tensor)).usual;
      if (usual.size(0) === 0) return { loss: torch.zeros([], { dtype: entropy.dtype, device: entropy.device }), metrics: {} };
      entropy = entropy.indexSelect(0, usual);
      actionMask = actionMask.indexSelect(0, usual);
    }
    const h = aggregateLoss(entropy, actionMask, o.lossAggMode);
    return { loss: h.mul(-o.entropyCoef), metrics: { entropy: h.detach(), entropy_coef: o.entropyCoef } };
  });
}

/** `entropy_loss_fn` by name with snake_case (YAML) or camelCase args. */
export function createEntropyLossFn(
  name: string,
  args: Readonly<Record<string, unknown>> = {},
): (input: EntropyLossInput) => { loss: Tensor; metrics: Metrics } {
  if (!(ENTROPY_LOSS_FNS as readonly string[]).includes(name)) {
    throw new Error(`unknown entropy_loss_fn '${name}'; registered: ${ENTROPY_LOSS_FNS.join(', ')}`);
  }
  const options = resolveArgs(`entropy_loss_fn '${name}'`, ENTROPY_LOSS_DEFAULTS, args);
  return (input) => computeEntropyLoss(name as EntropyLossName, input, options);
}
