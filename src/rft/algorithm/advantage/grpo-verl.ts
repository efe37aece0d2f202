// GRPO computed in the trainer — Trinity-RFT `advantage_fn: grpo_verl` (GRPOAdvantageFn, verl's
// compute_grpo_outcome_advantage): the group-normalised reward of ./grpo.ts with std_cal_level group and no options
// but ε, run by the trainer on the batch it trains (compute_in_trainer) instead of by the explorer's pipeline:
//   A_i = (r_i − mean_g(r)) / (std_g(r) + ε)          (a group of one: mean 0, std 1)
import { computeGrpoAdvantages } from './grpo.js';
import { ADVANTAGE_FN } from './registry.js';
import type { AdvantageInput, AdvantageModule, AdvantageResult } from './types.js';

export interface GrpoVerlAdvantageOptions {
  epsilon: number;
}

export const GRPO_VERL_ADVANTAGE_DEFAULTS: Readonly<GrpoVerlAdvantageOptions> = { epsilon: 1e-6 };

export function computeGrpoVerlAdvantages(
  input: AdvantageInput,
  options: Partial<GrpoVerlAdvantageOptions> = {},
): AdvantageResult {
  const { epsilon } = { ...GRPO_VERL_ADVANTAGE_DEFAULTS, ...options };
  return computeGrpoAdvantages(input, { epsilon });
}

export const grpoVerlAdvantage: AdvantageModule<GrpoVerlAdvantageOptions> = {
  name: 'grpo_verl',
  description: 'group-normalised outcome reward computed in the trainer (GRPO, verl)',
  defaults: GRPO_VERL_ADVANTAGE_DEFAULTS,
  computeInTrainer: true,
  run: computeGrpoVerlAdvantages,
};

ADVANTAGE_FN.register(grpoVerlAdvantage);
