// Dr. GRPO advantage — Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective" (arXiv 2503.20783).
// GRPO without the std division, which biases updates toward too-easy and too-hard questions:
//   A_i = r_i − mean_g(r)
// Pair it with loss_agg_mode seq-mean-token-sum-norm (a constant normaliser) to remove the length bias as well.
// Not a module of Python Trinity-RFT (there: grpo with its std turned off); same options as grpo otherwise.
import { computeGrpoAdvantages } from './grpo.js';
import { ADVANTAGE_FN } from './registry.js';
import type { AdvantageInput, AdvantageModule, AdvantageResult } from './types.js';

export interface DrGrpoAdvantageOptions {
  /** Drop groups with reward std ≤ this (and groups of one); null keeps every group. */
  stdThreshold: number | null;
}

export const DR_GRPO_ADVANTAGE_DEFAULTS: Readonly<DrGrpoAdvantageOptions> = { stdThreshold: null };

export function computeDrGrpoAdvantages(input: AdvantageInput, options: Partial<DrGrpoAdvantageOptions> = {}): AdvantageResult {
  const { stdThreshold } = { ...DR_GRPO_ADVANTAGE_DEFAULTS, ...options };
  return computeGrpoAdvantages(input, { stdCalLevel: 'none', stdThreshold });
}

export const drGrpoAdvantage: AdvantageModule<DrGrpoAdvantageOptions> = {
  name: 'dr_grpo',
  description: 'group-centred outcome reward, no std division (Dr. GRPO, arXiv 2503.20783)',
  defaults: DR_GRPO_ADVANTAGE_DEFAULTS,
  computeInTrainer: false,
  run: computeDrGrpoAdvantages,
};

ADVANTAGE_FN.register(drGrpoAdvantage);
