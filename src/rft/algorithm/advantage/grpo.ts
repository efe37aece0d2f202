// GRPO group-relative advantage — Shao et al., "DeepSeekMath" (arXiv 2402.03300), §4.1.2 outcome supervision.
// Trinity-RFT `advantage_fn: grpo` (GRPOGroupedAdvantage). For the responses i of one task (group g):
//   A_i = (r_i − mean_g(r)) / (std_g(r) + ε)            std_cal_level: group   (unbiased std, as torch.std)
//   A_i = (r_i − mean_g(r)) / (std_batch(r) + ε)        std_cal_level: batch   (std over every reward of the batch)
//   A_i =  r_i − mean_g(r)                              std_cal_level: none    (Dr. GRPO, see dr-grpo.ts)
// broadcast to every response token: A[i, t] = A_i · mask[i, t]. A group of one has mean 0 and std 1.
// std_threshold: groups whose std ≤ threshold (and groups of one) carry no signal and are dropped (keep = false),
// as DAPO's dynamic sampling filter (arXiv 2503.14476).
import * as torch from '../../../torch/index.js';
import { groupStats, groupsOf, outcomeRewards, perRow, scoresToResult } from './groups.js';
import type { AdvantageInput, AdvantageModule, AdvantageResult } from './types.js';

export type StdCalLevel = 'group' | 'batch' | 'none';

export interface GrpoAdvantageOptions {
  /** Added to the std before dividing. */
  epsilon: number;
  /** Drop groups with reward std ≤ this (and groups of one); null keeps every group. */
  stdThreshold: number | null;
  /** Which std divides the centred reward: the group's, the whole batch's, or none. */
  stdCalLevel: StdCalLevel;
}

export const GRPO_ADVANTAGE_DEFAULTS: Readonly<GrpoAdvantageOptions> = {
  epsilon: 1e-6,
  stdThreshold: null,
  stdCalLevel: 'group',
};

export function computeGrpoAdvantages(input: AdvantageInput, options: Partial<GrpoAdvantageOptions> = {}): AdvantageResult {
  const { epsilon, stdThreshold, stdCalLevel } = { ...GRPO_ADVANTAGE_DEFAULTS, ...options };
  if (!['group', 'batch', 'none'].includes(stdCalLevel)) {
    throw new Error(`advantage_fn 'grpo': std_cal_level must be group, batch or none, got '${stdCalLevel}'`);
  }
  return torch.scope(() => {
    const rewards = outcomeRewards(input, 'grpo');
    const groups = groupsOf(input, 'grpo', rewards);
    const stats = groupStats(rewards, groups);
    const single = stats.count.eq(1);
    const mean = torch.where(single, 0, stats.mean);
    const std = torch.where(single, 1, stats.std);
    const centred = rewards.sub(perRow(mean, groups));
    let score = centred;
    if (stdCalLevel === 'group') score = centred.div(perRow(std, groups).add(epsilon));
    else if (stdCalLevel === 'batch') {
      const batchStd = rewards.size(0) > 1 ? rewards.std().item() : 1;
      score = centred.div(batchStd + epsilon);
    }
    let keep = torch.onesLike(rewards).bool();
    if (stdThreshold !== null) keep = perRow(single.logicalOr(stats.std.le(stdThreshold)).logicalNot(), groups);
    const skipped = rewards.size(0) - keep.sum().item();
    return scoresToResult(score, input.actionMask, keep, {
      reward_mean: rewards.mean().item(),
      reward_std: stats.std.mean().item(),
      skipped_count: skipped,
    });
  });
}

export const grpoAdvantage: AdvantageModule<GrpoAdvantageOptions> = {
  name: 'grpo',
  description: 'group-normalised outcome reward (DeepSeekMath, arXiv 2402.03300)',
  defaults: GRPO_ADVANTAGE_DEFAULTS,
  computeInTrainer: false,
  run: computeGrpoAdvantages,
};
