// REINFORCE++ advantage — Hu, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models"
// (arXiv 2501.03262). Token-level discounted returns, whitened over the whole batch (no critic, no groups):
//   G[b, t] = Σ_{s ≥ t} γ^{s−t} · r[b, s]                (r: token-level rewards, KL penalty included if applied)
//   A = whiten(G) · mask,  whiten(x) = (x − mean_m(x)) / sqrt(var_m(x) + 1e-8) over the masked tokens
// returns = G. Trinity-RFT `advantage_fn: reinforceplusplus`.
import * as torch from '../../../torch/index.js';
import { discountedReverseCumsum, floatMask, maskedWhiten } from '../utils.js';
import { ADVANTAGE_FN } from './registry.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export interface ReinforcePlusPlusAdvantageOptions {
  gamma: number;
}

export const REINFORCE_PLUS_PLUS_ADVANTAGE_DEFAULTS: Readonly<ReinforcePlusPlusAdvantageOptions> = { gamma: 1.0 };

export function computeReinforcePlusPlusAdvantages(
  input: AdvantageInput,
  options: Partial<ReinforcePlusPlusAdvantageOptions> = {},
): AdvantageResult {
  const { gamma } = { ...REINFORCE_PLUS_PLUS_ADVANTAGE_DEFAULTS, ...options };
  const tokenRewards = requireField(input, 'tokenLevelRewards', 'reinforceplusplus');
  return torch.scope(() => {
    const returns = discountedReverseCumsum(tokenRewards.detach(), gamma);
    const advantages = maskedWhiten(returns, input.actionMask).mul(floatMask(input.actionMask, returns));
    return {
      advantages,
      returns,
      keep: torch.ones([returns.size(0)], { dtype: 'bool', device: returns.device }),
      metrics: { returns_mean: returns.select(1, 0).mean().item() },
    };
  });
}

export const reinforcePlusPlusAdvantage: AdvantageModule<ReinforcePlusPlusAdvantageOptions> = {
  name: 'reinforceplusplus',
  description: 'discounted token returns, batch-whitened (REINFORCE++, arXiv 2501.03262)',
  defaults: REINFORCE_PLUS_PLUS_ADVANTAGE_DEFAULTS,
  computeInTrainer: true,
  run: computeReinforcePlusPlusAdvantages,
};

ADVANTAGE_FN.register(reinforcePlusPlusAdvantage);
