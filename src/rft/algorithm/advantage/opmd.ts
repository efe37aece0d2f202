// OPMD advantage — Online Policy Mirror Descent, Trinity-RFT (arXiv 2505.17826, §3 and the OPMD note
// arXiv 2509.24203 "Group-relative REINFORCE is secretly an off-policy algorithm"). For a group of n responses:
//   A_i = r_i − mean_g(r)                                         opmd_baseline: mean
//   A_i = r_i − τ · (logsumexp_j(r_j / τ) − log n)                 opmd_baseline: logavgexp (soft-max baseline)
// A group of one has baseline 0.
import * as torch from '../../../torch/index.js';
import { groupMembership, groupStats, groupsOf, keepAll, outcomeRewards, perRow, scoresToResult } from './groups.js';
import { ADVANTAGE_FN } from './registry.js';
import type { AdvantageInput, AdvantageModule, AdvantageResult } from './types.js';

export interface OpmdAdvantageOptions {
  opmdBaseline: 'mean' | 'logavgexp';
  /** Temperature of the logavgexp baseline. */
  tau: number;
}

export const OPMD_ADVANTAGE_DEFAULTS: Readonly<OpmdAdvantageOptions> = { opmdBaseline: 'mean', tau: 1.0 };

export function computeOpmdAdvantages(input: AdvantageInput, options: Partial<OpmdAdvantageOptions> = {}): AdvantageResult {
  const { opmdBaseline, tau } = { ...OPMD_ADVANTAGE_DEFAULTS, ...options };
  if (opmdBaseline !== 'mean' && opmdBaseline !== 'logavgexp') {
    throw new Error(`advantage_fn 'opmd': opmd_baseline must be mean or logavgexp, got '${String(opmdBaseline)}'`);
  }
  return torch.scope(() => {
    const rewards = outcomeRewards(input, 'opmd');
    const groups = groupsOf(input, 'opmd', rewards);
    const stats = groupStats(rewards, groups);
    let baseline = stats.mean;
    if (opmdBaseline === 'logavgexp') {
      const scaled = torch.where(groupMembership(groups), rewards.div(tau).unsqueeze(0), Number.NEGATIVE_INFINITY);
      baseline = scaled.logsumexp(1).sub(stats.count.log()).mul(tau);
    }
    baseline = torch.where(stats.count.eq(1), 0, baseline);
    const score = rewards.sub(perRow(baseline, groups));
    return scoresToResult(score, input.actionMask, keepAll(rewards.size(0), rewards.device), {
      reward_mean: rewards.mean().item(),
      baseline_mean: baseline.mean().item(),
    });
  });
}

export const opmdAdvantage: AdvantageModule<OpmdAdvantageOptions> = {
  name: 'opmd',
  description: 'group mean or log-mean-exp baseline (OPMD, Trinity-RFT arXiv 2505.17826)',
  defaults: OPMD_ADVANTAGE_DEFAULTS,
  computeInTrainer: false,
  run: computeOpmdAdvantages,
};

ADVANTAGE_FN.register(opmdAdvantage);
