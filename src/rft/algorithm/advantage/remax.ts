// ReMax advantage — Li et al., "ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for Aligning
// Large Language Models" (arXiv 2310.10505). The baseline is the reward of the greedy response to the same prompt:
//   G[b, t] = Σ_{s ≥ t} r[b, s] · mask[b, s]
//   A[b, t] = G[b, t] − r_greedy[b] · mask[b, t]
// returns = G. Trinity-RFT `advantage_fn: remax` (reward_baselines come from the rollout).
import * as torch from '../../../torch/index.js';
import { floatMask } from '../utils.js';
import { ADVANTAGE_FN } from './registry.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export type RemaxAdvantageOptions = Record<string, never>;

export function computeRemaxAdvantages(input: AdvantageInput, _options: Partial<RemaxAdvantageOptions> = {}): AdvantageResult {
  const tokenRewards = requireField(input, 'tokenLevelRewards', 'remax');
  const baselines = requireField(input, 'rewardBaselines', 'remax');
  return torch.scope(() => {
    const mask = floatMask(input.actionMask, tokenRewards);
    const returns = tokenRewards.detach().mul(mask).flip(-1).cumsum(-1).flip(-1);
    const advantages = returns.sub(baselines.detach().unsqueeze(-1).mul(mask));
    return {
      advantages,
      returns,
      keep: torch.ones([returns.size(0)], { dtype: 'bool', device: returns.device }),
      metrics: { reward_baseline_mean: baselines.mean().item() },
    };
  });
}

export const remaxAdvantage: AdvantageModule<RemaxAdvantageOptions> = {
  name: 'remax',
  description: 'returns minus the greedy response reward (ReMax, arXiv 2310.10505)',
  defaults: {},
  computeInTrainer: true,
  run: computeRemaxAdvantages,
};

ADVANTAGE_FN.register(remaxAdvantage);
