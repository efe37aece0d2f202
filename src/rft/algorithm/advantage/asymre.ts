// AsymRE advantage — Arnal et al., "Asymmetric REINFORCE for off-Policy Reinforcement Learning: Balancing positive and
// negative rewards" (arXiv 2506.20520). A shifted group baseline; a negative shift favours positive examples:
//   A_i = r_i − (mean_g(r) + baseline_shift)
// A group of one has baseline 0 (Trinity-RFT `advantage_fn: asymre`).
import * as torch from '../../../torch/index.js';
import { groupStats, groupsOf, keepAll, outcomeRewards, perRow, scoresToResult } from './groups.js';
import { ADVANTAGE_FN } from './registry.js';
import type { AdvantageInput, AdvantageModule, AdvantageResult } from './types.js';

export interface AsymreAdvantageOptions {
  baselineShift: number;
}

export const ASYMRE_ADVANTAGE_DEFAULTS: Readonly<AsymreAdvantageOptions> = { baselineShift: -0.1 };

export function computeAsymreAdvantages(input: AdvantageInput, options: Partial<AsymreAdvantageOptions> = {}): AdvantageResult {
  const { baselineShift } = { ...ASYMRE_ADVANTAGE_DEFAULTS, ...options };
  return torch.scope(() => {
    const rewards = outcomeRewards(input, 'asymre');
    const groups = groupsOf(input, 'asymre', rewards);
    const stats = groupStats(rewards, groups);
    const baseline = torch.where(stats.count.eq(1), 0, stats.mean.add(baselineShift));
    const score = rewards.sub(perRow(baseline, groups));
    return scoresToResult(score, input.actionMask, keepAll(rewards.size(0), rewards.device), {
      group_baseline: baseline.mean().item(),
      reward_mean: rewards.mean().item(),
    });
  });
}

export const asymreAdvantage: AdvantageModule<AsymreAdvantageOptions> = {
  name: 'asymre',
  description: 'group mean plus a baseline shift (AsymRE, arXiv 2506.20520)',
  defaults: ASYMRE_ADVANTAGE_DEFAULTS,
  computeInTrainer: false,
  run: computeAsymreAdvantages,
};

ADVANTAGE_FN.register(asymreAdvantage);
