// Clip_V advantage — Trinity-RFT `advantage_fn: clipv` (ClipVAdvantageFn; entropy dynamics, arXiv 2602.03392): the
// GRPO advantage of ./grpo.ts (std_cal_level group), plus a token filter on non-positive advantages. With the current
// policy's log-prob LP, entropy H and necs N at each response token (N from the logits, model/training.ts), p = e^LP:
//   S  = p · (H + LP)                the first-order entropy change of raising the sampled token's logit (negated)
//   N  = Σ_v p_v² (H + log p_v)      = E_{v~p}[S_v], so xD = N − S is centred per token and is not re-centred
//   σ_D = population std of xD over the masked tokens of the batch
//   clip where A ≤ 0 and xD > μ·σ_D                                   (nothing clipped when σ_D < 1e-12)
// Cap: when that clips more than max_frac of the masked tokens and more than K = max(⌊max_frac·n⌋, 1) of them have
// A < 0, only the K negative-advantage tokens with the largest xD are clipped (ties: the earlier token).
// As in Trinity-RFT, zero-advantage tokens (a group whose rewards are all equal) are clipped by the threshold and
// left clipped by the cap; they carry no policy gradient, only weight in the token mean.
// The result's actionMask = mask · keep: the trainer trains on those tokens only; advantages are 0 off it (Trinity-RFT
// leaves them and drops the tokens from response_mask; the loss sees the same).
// Metrics: frac_clipped (all, pos, neg: the share of masked tokens removed), stdD.
import * as torch from '../../../torch/index.js';
import { floatMask } from '../utils.js';
import { tokenClippedResult } from './clipb.js';
import { computeGrpoAdvantages } from './grpo.js';
import { ADVANTAGE_FN } from './registry.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export interface ClipvAdvantageOptions {
  epsilon: number;
  /** μ: non-positive-advantage tokens with xD above μ·σ_D are dropped. */
  mu: number;
  /** The most tokens the filter may drop, as a share of the masked tokens (then the K largest xD with A < 0). */
  maxFrac: number;
}

// Trinity-RFT's default_args() (its constructor's own default mu is 2.0; the registry builds from default_args)
export const CLIPV_ADVANTAGE_DEFAULTS: Readonly<ClipvAdvantageOptions> = { epsilon: 1e-6, mu: 8.5, maxFrac: 1e-4 };

export function computeClipvAdvantages(input: AdvantageInput, options: Partial<ClipvAdvantageOptions> = {}): AdvantageResult {
  const { epsilon, mu, maxFrac } = { ...CLIPV_ADVANTAGE_DEFAULTS, ...options };
  if (!(maxFrac >= 0 && maxFrac <= 1)) throw new Error(`advantage_fn 'clipv': max_frac must be in [0, 1], got ${maxFrac}`);
  const logprobs = requireField(input, 'logprobs', 'clipv');
  const entropy = requireField(input, 'entropy', 'clipv');
  const necs = requireField(input, 'necs', 'clipv');
  return torch.scope(() => {
    const grpo = computeGrpoAdvantages(input, { epsilon });
    const f64 = (t: torch.Tensor) => t.detach().to({ dtype: 'float64' });
    const lp = f64(logprobs);
    const s = lp.exp().mul(f64(entropy).add(lp));
    const mask = floatMask(input.actionMask, s);
    const inMask = mask.gt(0);
    const xD = torch.where(inMask, f64(necs).sub(s), 0);
    const n = Math.max(mask.sum().item(), 1);
    const meanD = xD.mul(mask).sum().item() / n;
    const stdD = Math.sqrt(xD.sub(meanD).square().mul(mask).sum().item() / n);
    const a = grpo.advantages.detach();
    const negative = a.lt(0);
    let clipped = torch.zerosLike(inMask);
    if (stdD >= 1e-12) {
      clipped = inMask.logicalAnd(a.gt(0).logicalNot()).logicalAnd(xD.gt(mu * stdD));
      const cap = Math.max(Math.floor(maxFrac * n), 1);
      const negativeClipped = clipped.logicalAnd(negative);
      const negativeCount = negativeClipped.sum().item();
      if (clipped.sum().item() / n > maxFrac && negativeCount > cap) {
        // the cap largest xD among the negative ones; a stable descending sort keeps the earlier of equal values
        const scores = torch.where(negativeClipped, xD, Number.NEGATIVE_INFINITY).reshape([-1]);
        const top = scores.argsort({ descending: true, stable: true }).narrow(0, 0, cap);
        const limited = torch.zerosLike(scores).scatter(0, top, 1).gt(0).reshape(xD.shape);
        clipped = clipped.logicalAnd(negative.logicalNot()).logicalOr(limited);
      }
    }
    const kept = mask.mul(clipped.logicalNot().to({ dtype: mask.dtype }));
    return tokenClippedResult(grpo, input.actionMask, mask, kept, { stdD });
  });
}

export const clipvAdvantage: AdvantageModule<ClipvAdvantageOptions> = {
  name: 'clipv',
  description: 'GRPO with entropy-dynamics token clipping of negative advantages by necs, capped (Clip_V, arXiv 2602.03392)',
  defaults: CLIPV_ADVANTAGE_DEFAULTS,
  computeInTrainer: true,
  needsEntropy: true,
  needsNecs: true,
  run: computeClipvAdvantages,
};

ADVANTAGE_FN.register(clipvAdvantage);
