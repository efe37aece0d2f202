// Jensen–Shannon on-policy distillation advantage — Trinity-RFT `advantage_fn: jsd` (JSDAdvantage); the generalised
// JSD of Agarwal et al., "On-Policy Distillation of Language Models" (GKD, arXiv 2306.13649). Per response token, with
// s = log π_old(y_t) (the student that sampled it), t = log π_teacher(y_t) and β = lambda_coef:
//   log m = logsumexp(s + log(1 − β), t + log β)                     the mixture β·teacher + (1 − β)·student
//   jsd   = β · e^t · (t − log m) + (1 − β) · e^s · (s − log m)     the sampled token's terms of the two KLs to m
//   A[b, t] = −kl_coef · jsd · mask[b, t]                            (β ≤ 0 or β ≥ 1: the mixture is one side, A = 0)
// Metrics: jsd/mean and jsd/std over the per-sequence sums, advantages/mean.
import * as torch from '../../../torch/index.js';
import { floatMask, maskedSum } from '../utils.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export interface JsdAdvantageOptions {
  /** β: the teacher's weight in the mixture and in the sum of the two KLs. */
  lambdaCoef: number;
  /** Scale of the advantages. */
  klCoef: number;
}

export const JSD_ADVANTAGE_DEFAULTS: Readonly<JsdAdvantageOptions> = { lambdaCoef: 0.5, klCoef: 1.0 };

export function computeJsdAdvantages(input: AdvantageInput, options: Partial<JsdAdvantageOptions> = {}): AdvantageResult {
  const { lambdaCoef: beta, klCoef } = { ...JSD_ADVANTAGE_DEFAULTS, ...options };
  const logprobs = requireField(input, 'logprobs', 'jsd');
  const teacher = requireField(input, 'teacherLogprobs', 'jsd');
  return torch.scope(() => {
    const s = logprobs.detach();
    const t = teacher.detach();
    const mask = floatMask(input.actionMask, s);
    let jsd = torch.zerosLike(s);
    if (beta > 0 && beta < 1) {
      const logMixture = torch.stack([s.add(Math.log(1 - beta)), t.add(Math.log(beta))]).logsumexp(0);
      jsd = t
        .exp()
        .mul(t.sub(logMixture))
        .mul(beta)
        .add(
          s
            .exp()
            .mul(s.sub(logMixture))
            .mul(1 - beta),
        );
    }
    const advantages = jsd.mul(-klCoef).mul(mask);
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
  description: '−kl_coef · per-token generalised JSD to the teacher (on-policy distillation, arXiv 2306.13649)',
  defaults: JSD_ADVANTAGE_DEFAULTS,
  computeInTrainer: true,
  run: computeJsdAdvantages,
};
