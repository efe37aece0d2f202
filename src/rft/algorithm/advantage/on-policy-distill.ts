// On-policy distillation advantage — Agarwal et al., "On-Policy Distillation of Language Models: Learning from
// Self-Generated Mistakes" (GKD, arXiv 2306.13649); Thinking Machines' Tinker recipe. The per-token reverse KL to the
// teacher, negated, is the reward:
//   A[b, t] = kl_coef · (log π_teacher(y_t) − log π_old(y_t)) · mask[b, t]
import * as torch from '../../../torch/index.js';
import { floatMask, maskedSum } from '../utils.js';
import { ADVANTAGE_FN } from './registry.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export interface OnPolicyDistillAdvantageOptions {
  klCoef: number;
}

export const ON_POLICY_DISTILL_ADVANTAGE_DEFAULTS: Readonly<OnPolicyDistillAdvantageOptions> = { klCoef: 1.0 };

export function computeOnPolicyDistillAdvantages(
  input: AdvantageInput,
  options: Partial<OnPolicyDistillAdvantageOptions> = {},
): AdvantageResult {
  const { klCoef } = { ...ON_POLICY_DISTILL_ADVANTAGE_DEFAULTS, ...options };
  const logprobs = requireField(input, 'logprobs', 'on_policy_distill');
  const teacher = requireField(input, 'teacherLogprobs', 'on_policy_distill');
  return torch.scope(() => {
    const mask = floatMask(input.actionMask, logprobs);
    const advantages = teacher.detach().sub(logprobs.detach()).mul(klCoef).mul(mask);
    const klPerSequence = maskedSum(logprobs.detach().sub(teacher.detach()), mask, -1);
    return {
      advantages,
      returns: advantages.clone(),
      keep: torch.ones([logprobs.size(0)], { dtype: 'bool', device: logprobs.device }),
      metrics: { 'kl/mean': klPerSequence.mean().item(), 'advantages/mean': advantages.sum(-1).mean().item() },
    };
  });
}

export const onPolicyDistillAdvantage: AdvantageModule<OnPolicyDistillAdvantageOptions> = {
  name: 'on_policy_distill',
  description: 'kl_coef · (teacher − student log-prob) per token (on-policy distillation, arXiv 2306.13649)',
  defaults: ON_POLICY_DISTILL_ADVANTAGE_DEFAULTS,
  computeInTrainer: true,
  run: computeOnPolicyDistillAdvantages,
};

ADVANTAGE_FN.register(onPolicyDistillAdvantage);
