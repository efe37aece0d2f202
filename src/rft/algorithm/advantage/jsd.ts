// Jensen–Shannon on-policy distillation advantage — Trinity-RFT's `advantage_fn: jsd` (name, arguments lambda_coef,
// kl_coef, temperature); the generalised JSD of Agarwal et al., "On-Policy Distillation of Language Models" (GKD,
// arXiv 2306.13649) with the mixture M = β·T + (1 − β)·S of teacher T and student S. Per response token, with
// s = log S(y_t) / τ (the student that sampled it), t = log T(y_t) / τ and β = lambda_coef:
//   log m = logsumexp(s + log(1 − β), t + log β)
//   A     = kl_coef · (1 − β) · (log m − s)          0 < β < 1
//   A     = kl_coef · (t − s)                        β = 0 (M = S: the reverse KL, as on_policy_distill)
//   A     = kl_coef · (e^(t − s) − 1)                β = 1 (the forward KL)
// Why: ∇_θ JSD = (1 − β)·E_{y~S}[∇log S(y)·(s − log m)] exactly (the teacher's term moves only through M, and the
// derivative terms of Σ_y cancel), so A is the policy-gradient advantage that lowers the JSD; at β = 1 the forward
// KL's gradient is E_S[∇log S·(1 − T/S)]. test/rft/algorithm/reference-more.test.ts checks E_S[A·∇log S] against
// autograd of the full-vocabulary JSD. Trinity-RFT's JSDAdvantage uses −[β(t − log m) + (1 − β)(s − log m)] instead,
// which is ≤ 0 for every token (Jensen's inequality: log m ≥ βt + (1 − β)s), so its advantage rewards disagreement with
// the teacher in either direction and moves the student away from it (measured: a distilled student's KL to the
// teacher grew ten-fold); this module departs from it there, on purpose.
// Metrics: jsd/mean and jsd/std over the per-sequence sums of an unbiased per-token estimate of the JSD from the
// student's samples, β·e^(t − s)·(t − log m) + (1 − β)·(s − log m) (β = 0: s − t; β = 1: e^(t − s)·(t − s)), and
// advantages/mean. (Trinity's chunk_size only bounds its peak memory; these are a few element-wise ops on [B, R].)
import * as torch from '../../../torch/index.js';
import { floatMask, maskedSum } from '../utils.js';
import { ADVANTAGE_FN } from './registry.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export interface JsdAdvantageOptions {
  /** β: the teacher's weight in the mixture and in the sum of the two KLs; 0 and 1 are the two plain KLs. */
  lambdaCoef: number;
  /** Scale of the advantages. */
  klCoef: number;
  /** T: both log-probs are divided by it (as logits / T). */
  temperature: number;
}

export const JSD_ADVANTAGE_DEFAULTS: Readonly<JsdAdvantageOptions> = { lambdaCoef: 0.5, klCoef: 1.0, temperature: 1.0 };

export function computeJsdAdvantages(input: AdvantageInput, options: Partial<JsdAdvantageOptions> = {}): AdvantageResult {
  const { lambdaCoef: beta, klCoef, temperature } = { ...JSD_ADVANTAGE_DEFAULTS, ...options };
  if (!(beta >= 0 && beta <= 1)) throw new Error(`jsd: lambda_coef must be in [0, 1], got ${beta}`);
  if (!(temperature > 0)) throw new Error(`jsd: temperature must be > 0, got ${temperature}`);
  const logprobs = requireField(input, 'logprobs', 'jsd');
  const teacher = requireField(input, 'teacherLogprobs', 'jsd');
  return torch.scope(() => {
    const s = logprobs.detach().div(temperature);
    const t = teacher.detach().div(temperature);
    const mask = floatMask(input.actionMask, s);
    let advantage: torch.Tensor;
    let jsd: torch.Tensor;
    if (beta === 0) {
      advantage = t.sub(s);
      jsd = s.sub(t);
    } else if (beta === 1) {
      const ratio = t.sub(s).exp(); // T / S on the sampled token
      advantage = ratio.sub(1);
      jsd = ratio.mul(t.sub(s));
    } else {
      const logMixture = torch.stack([s.add(Math.log(1 - beta)), t.add(Math.log(beta))]).logsumexp(0);
      advantage = logMixture.sub(s).mul(1 - beta);
      jsd = t
        .sub(s)
        .exp()
        .mul(t.sub(logMixture))
        .mul(beta)
        .add(s.sub(logMixture).mul(1 - beta));
    }
    const advantages = advantage.mul(klCoef).mul(mask);
    const perSequence = maskedSum(jsd, mask, -1);
    return {
      advantages,
      returns: advantages.clone(),
      keep: torch.ones([s.size(0)], { dtype: 'bool', device: s.device }),
      metrics: {
        'jsd/mean': perSequence.mean().item(),
        'jsd/std': perSequence.size(0) > 1 ? perSequence.std().item() : 0,
        'advantages/mean': advantages.sum(-1).mean().item(),
      },
    };
  });
}

export const jsdAdvantage: AdvantageModule<JsdAdvantageOptions> = {
  name: 'jsd',
  description: 'policy-gradient advantage of the generalised JSD to the teacher (on-policy distillation, arXiv 2306.13649)',
  defaults: JSD_ADVANTAGE_DEFAULTS,
  computeInTrainer: true,
  run: computeJsdAdvantages,
};

ADVANTAGE_FN.register(jsdAdvantage);
