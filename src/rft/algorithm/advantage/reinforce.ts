// REINFORCE advantage — Williams 1992, "Simple statistical gradient-following algorithms for connectionist
// reinforcement learning". Trinity-RFT `advantage_fn: reinforce` (REINFORCEGroupAdvantage, used by TOPR) uses the
// raw reward:
//   A_i = r_i                           baseline: none (default, Trinity-RFT)
//   A_i = r_i − mean_g(r)               baseline: group_mean (a group baseline; groups of one keep r_i)
import * as torch from '../../../torch/index.js';
import { groupStats, groupsOf, keepAll, outcomeRewards, perRow, scoresToResult } from './groups.js';
import { ADVANTAGE_FN } from './registry.js';
import type { AdvantageInput, AdvantageModule, AdvantageResult } from './types.js';

export interface ReinforceAdvantageOptions {
  baseline: 'none' | 'group_mean';
}

export const REINFORCE_ADVANTAGE_DEFAULTS: Readonly<ReinforceAdvantageOptions> = { baseline: 'none' };

export function computeReinforceAdvantages(
  input: AdvantageInput,
  options: Partial<ReinforceAdvantageOptions> = {},
): AdvantageResult {
  const { baseline } = { ...REINFORCE_ADVANTAGE_DEFAULTS, ...options };
  if (baseline !== 'none' && baseline !== 'group_mean') {
    throw new Error(`advantage_fn 'reinforce': baseline must be none or group_mean, got '${String(baseline)}'`);
  }
  return torch.scope(() => {
    const rewards = outcomeRewards(input, 'reinforce');
    let score = rewards;
    if (baseline === 'group_mean') {
      const groups = groupsOf(input, 'reinforce', rewards);
      const stats = groupStats(rewards, groups);
      score = torch.where(perRow(stats.count, groups).gt(1), rewards.sub(perRow(stats.mean, groups)), rewards);
    }
    return scoresToResult(score, input.actionMask, keepAll(rewards.size(0), rewards.device), {
      reward_mean: rewards.mean().item(),
    });
  });
}

export const reinforceAdvantage: AdvantageModule<ReinforceAdvantageOptions> = {
  name: 'reinforce',
  description: 'raw outcome reward, optional group-mean baseline (REINFORCE, Williams 1992)',
  defaults: REINFORCE_ADVANTAGE_DEFAULTS,
  computeInTrainer: false,
  run: computeReinforceAdvantages,
};

ADVANTAGE_FN.register(reinforceAdvantage);
