// Clip_B advantage — Trinity-RFT `advantage_fn: clipb` (ClipBAdvantageFn; entropy dynamics, arXiv 2602.03392): the
// GRPO advantage of ./grpo.ts (std_cal_level group), plus a token filter that keeps entropy from collapsing. With the
// current policy's log-prob LP and entropy H at each response token, p = e^LP:
//   S = p · (H + LP)                     the first-order entropy change of raising the sampled token's logit (negated)
//   E_S, σ_S = mean and population std of S over the masked tokens of the batch
//   keep = 1 where A ≥ 0;  keep = [S − E_S ≥ −μ·σ_S] where A < 0            (every token kept when σ_S < 1e-12)
// The result's actionMask = mask · keep: the trainer trains on those tokens only.
// Metrics: frac_clipped (all, pos, neg: the share of masked tokens removed), ES, varS.
import * as torch from '../../../torch/index.js';
import { floatMask } from '../utils.js';
import { computeGrpoAdvantages } from './grpo.js';
import { ADVANTAGE_FN } from './registry.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export interface ClipbAdvantageOptions {
  epsilon: number;
  /** μ: negative-advantage tokens with S below E_S − μ·σ_S are dropped. */
  mu: number;
}

export const CLIPB_ADVANTAGE_DEFAULTS: Readonly<ClipbAdvantageOptions> = { epsilon: 1e-6, mu: 2.5 };

export function computeClipbAdvantages(input: AdvantageInput, options: Partial<ClipbAdvantageOptions> = {}): AdvantageResult {
  const { epsilon, mu } = { ...CLIPB_ADVANTAGE_DEFAULTS, ...options };
  const logprobs = requireField(input, 'logprobs', 'clipb');
  const entropy = requireField(input, 'entropy', 'clipb');
  return torch.scope(() => {
    const grpo = computeGrpoAdvantages(input, { epsilon });
    const lp = logprobs.detach().to({ dtype: 'float64' });
    const s = lp.exp().mul(entropy.detach().to({ dtype: 'float64' }).add(lp));
    const mask = floatMask(input.actionMask, s);
    const n = Math.max(mask.sum().item(), 1);
    const meanS = s.mul(mask).sum().item() / n;
    const varS = s.sub(meanS).square().mul(mask).sum().item() / n;
    const a = grpo.advantages.detach();
    const keep =
      Math.sqrt(varS) < 1e-12 ? torch.onesLike(mask).bool() : a.ge(0).logicalOr(s.sub(meanS).ge(-mu * Math.sqrt(varS)));
    return tokenClippedResult(grpo, input.actionMask, mask, mask.mul(keep.to({ dtype: mask.dtype })), {
      ES: meanS,
      varS,
    });
  });
}

/**
 * A GRPO result trained only on the `kept` tokens (clipb, clipv): its actionMask, advantages and returns zeroed
 * elsewhere, and the share of masked tokens removed — frac_clipped over all, and over the rows with A > 0 / A < 0.
 */
export function tokenClippedResult(
  grpo: AdvantageResult,
  inputMask: torch.Tensor,
  mask: torch.Tensor,
  kept: torch.Tensor,
  metrics: Record<string, number>,
): AdvantageResult {
  const a = grpo.advantages.detach();
  const fraction = (rows: torch.Tensor) => {
    const m = mask.mul(rows.to({ dtype: mask.dtype }));
    return 1 - kept.mul(m).sum().item() / Math.max(m.sum().item(), 1);
  };
  const actionMask = kept.to({ dtype: inputMask.dtype });
  return {
    ...grpo,
    advantages: grpo.advantages.mul(floatMask(actionMask, grpo.advantages)),
    returns: grpo.returns.mul(floatMask(actionMask, grpo.returns)),
    actionMask,
    metrics: {
      ...grpo.metrics,
      frac_clipped: 1 - kept.sum().item() / Math.max(mask.sum().item(), 1),
      frac_clipped_pos: fraction(a.gt(0)),
      frac_clipped_neg: fraction(a.lt(0)),
      ...metrics,
    },
  };
}

export const clipbAdvantage: AdvantageModule<ClipbAdvantageOptions> = {
  name: 'clipb',
  description: 'GRPO with entropy-dynamics token clipping of negative advantages (Clip_B, arXiv 2602.03392)',
  defaults: CLIPB_ADVANTAGE_DEFAULTS,
  computeInTrainer: true,
  needsEntropy: true,
  run: computeClipbAdvantages,
};

ADVANTAGE_FN.register(clipbAdvantage);
