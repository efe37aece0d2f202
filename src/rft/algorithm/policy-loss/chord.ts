// CHORD — Zhang et al., "On-Policy RL Meets Off-Policy Experts: Harmonizing Supervised Fine-Tuning and Reinforcement
// Learning via Dynamic Weighting" (arXiv 2508.11408). Trinity-RFT `policy_loss_fn: mix_chord`:
//   loss = (1 − μ(step)) · w_usual · L_ppo(usual rows) + μ(step) · w_expert · L_sft(expert rows)   (w: see ./mix.ts)
// with a global μ schedule (warm up linearly to μ_peak, cosine-decay to μ_valley) and, when enable_phi_function, the
// token-wise φ = p(1 − p) weighting of the SFT term (`sft_phi`; plain NLL otherwise):
//   μ(s) = s / warmup · μ_peak                                             s < warmup
//        = μ_valley + (μ_peak − μ_valley) · ½(1 + cos(π (s − warmup) / decay))   warmup ≤ s < warmup + decay
//        = μ_valley                                                         s ≥ warmup + decay
import * as torch from '../../../torch/index.js';
import type { LossAggMode } from '../loss-agg.js';
import { mixAccumulation, mixLosses } from './mix.js';
import { computePpoPolicyLoss } from './ppo.js';
import { POLICY_LOSS_FN } from './registry.js';
import { computeSftLoss, computeSftPhiLoss } from './sft.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export interface ChordPolicyLossOptions {
  muWarmupSteps: number;
  muDecaySteps: number;
  muPeak: number;
  muValley: number;
  enablePhiFunction: boolean;
  clipRange: number | null;
  clipRangeLow: number | null;
  clipRangeHigh: number | null;
  /** Trinity-RFT use_token_level_loss_in_sft: true → token-mean. */
  sftLossAggMode: LossAggMode;
}

export const CHORD_POLICY_LOSS_DEFAULTS: Readonly<ChordPolicyLossOptions> = {
  muWarmupSteps: 0,
  muDecaySteps: 0,
  muPeak: 0.1,
  muValley: 0.1,
  enablePhiFunction: true,
  clipRange: 0.2,
  clipRangeLow: null,
  clipRangeHigh: null,
  sftLossAggMode: 'token-mean',
};

/** CHORD's μ at a global step (cosine decay with linear warmup). */
export function chordMuSchedule(
  step: number,
  o: Pick<ChordPolicyLossOptions, 'muWarmupSteps' | 'muDecaySteps' | 'muPeak' | 'muValley'>,
): number {
  if (step < o.muWarmupSteps) return (step / o.muWarmupSteps) * o.muPeak;
  if (step >= o.muWarmupSteps + o.muDecaySteps) return o.muValley;
  const cosine = 0.5 * (1 + Math.cos((Math.PI * (step - o.muWarmupSteps)) / o.muDecaySteps));
  return (o.muPeak - o.muValley) * cosine + o.muValley;
}

export function computeChordPolicyLoss(input: PolicyLossInput, options: Partial<ChordPolicyLossOptions> = {}): PolicyLossResult {
  const o = { ...CHORD_POLICY_LOSS_DEFAULTS, ...options };
  const step = need(input, 'step', 'mix_chord');
  const mu = chordMuSchedule(step, o);
  const result = mixLosses(
    'mix_chord',
    input,
    mu,
    (usual) =>
      computePpoPolicyLoss(usual, { clipRange: o.clipRange, clipRangeLow: o.clipRangeLow, clipRangeHigh: o.clipRangeHigh }),
    (expert) =>
      o.enablePhiFunction
        ? computeSftPhiLoss(expert, { lossAggMode: o.sftLossAggMode })
        : computeSftLoss(expert, { lossAggMode: o.sftLossAggMode }),
  );
  return torch.scope(() => ({ loss: result.loss, metrics: { ...result.metrics, mu } }));
}

export const chordPolicyLoss: PolicyLossModule<ChordPolicyLossOptions> = {
  name: 'mix_chord',
  description: 'PPO + mu(step)-scheduled, phi-weighted SFT on expert rows (CHORD, arXiv 2508.11408)',
  defaults: CHORD_POLICY_LOSS_DEFAULTS,
  run: computeChordPolicyLoss,
  accumulation: (o) => mixAccumulation(o.sftLossAggMode),
};

POLICY_LOSS_FN.register(chordPolicyLoss);
