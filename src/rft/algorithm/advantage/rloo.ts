// RLOO advantage — Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human
// Feedback in LLMs" (arXiv 2402.14740); Kool et al. 2019. Leave-one-out baseline over the n responses of a task:
//   A_i = r_i − 1/(n−1) Σ_{j≠i} r_j = n/(n−1) · (r_i − mean_g(r))
// A group of one keeps its raw reward (Trinity-RFT `advantage_fn: rloo`).
import * as torch from '../../../torch/index.js';
import { groupStats, groupsOf, keepAll, outcomeRewards, perRow, scoresToResult } from './groups.js';
import { ADVANTAGE_FN } from './registry.js';
import type { AdvantageInput, AdvantageModule, AdvantageResult } from './types.js';

export type RlooAdvantageOptions = Record<string, never>;

export function computeRlooAdvantages(input: AdvantageInput, _options: Partial<RlooAdvantageOptions> = {}): AdvantageResult {
  return torch.scope(() => {
    const rewards = outcomeRewards(input, 'rloo');
    const groups = groupsOf(input, 'rloo', rewards);
    const stats = groupStats(rewards, groups);
    const n = perRow(stats.count, groups);
    const loo = rewards.sub(perRow(stats.mean, groups)).mul(n).div(n.sub(1).clamp(1));
    const score = torch.where(n.gt(1), loo, rewards);
    return scoresToResult(score, input.actionMask, keepAll(rewards.size(0), rewards.device), {
      reward_mean: rewards.mean().item(),
    });
  });
}

export const rlooAdvantage: AdvantageModule<RlooAdvantageOptions> = {
  name: 'rloo',
  description: 'leave-one-out baseline (RLOO, arXiv 2402.14740)',
  defaults: {},
  computeInTrainer: true,
  run: computeRlooAdvantages,
};

ADVANTAGE_FN.register(rlooAdvantage);
