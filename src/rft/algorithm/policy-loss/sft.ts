// SFT losses on expert tokens. Trinity-RFT `policy_loss_fn: sft`, and CHORD's token-weighted variants `sft_is`,
// `sft_phi` — Zhang et al., "On-Policy RL Meets Off-Policy Experts: Harmonizing Supervised Fine-Tuning and
// Reinforcement Learning via Dynamic Weighting" (CHORD, arXiv 2508.11408):
//   sft:      L = −log π_θ(y_t)                                  (negative log-likelihood)
//   sft_is:   L = −sg(p) · log π_θ(y_t),         p = π_θ(y_t)
//   sft_phi:  L = −sg(p(1 − p)) · log π̃_θ(y_t),  log π̃ = min(log π_θ, log cutoff_prob)   (φ downweights tokens
//             the model finds near-certain or near-impossible)
//   loss = aggregate(L, mask, loss_agg_mode)
import * as torch from '../../../torch/index.js';
import { aggregateLoss, type LossAggMode } from '../loss-agg.js';
import { POLICY_LOSS_FN } from './registry.js';
import type { PolicyLossInput, PolicyLossModule, PolicyLossResult } from './types.js';

export interface SftLossOptions {
  lossAggMode: LossAggMode;
}

export interface SftPhiLossOptions {
  lossAggMode: LossAggMode;
  cutoffProb: number;
}

export const SFT_LOSS_DEFAULTS: Readonly<SftLossOptions> = { lossAggMode: 'token-mean' };
export const SFT_PHI_LOSS_DEFAULTS: Readonly<SftPhiLossOptions> = { lossAggMode: 'token-mean', cutoffProb: 1.0 };

export function computeSftLoss(input: PolicyLossInput, options: Partial<SftLossOptions> = {}): PolicyLossResult {
  const o = { ...SFT_LOSS_DEFAULTS, ...options };
  return torch.scope(() => {
    const loss = aggregateLoss(input.logprob.neg(), input.actionMask, o.lossAggMode);
    return { loss, metrics: { sft_loss: loss.detach() } };
  });
}

export function computeSftIsLoss(input: PolicyLossInput, options: Partial<SftLossOptions> = {}): PolicyLossResult {
  const o = { ...SFT_LOSS_DEFAULTS, ...options };
  return torch.scope(() => {
    const prob = input.logprob.detach().exp();
    const loss = aggregateLoss(input.logprob.mul(prob).neg(), input.actionMask, o.lossAggMode);
    return { loss, metrics: { sft_is_loss: loss.detach() } };
  });
}

export function computeSftPhiLoss(input: PolicyLossInput, options: Partial<SftPhiLossOptions> = {}): PolicyLossResult {
  const o = { ...SFT_PHI_LOSS_DEFAULTS, ...options };
  if (!(o.cutoffProb >= 0 && o.cutoffProb <= 1)) throw new Error(`policy_loss_fn 'sft_phi': cutoff_prob must be in [0, 1]`);
  return torch.scope(() => {
    const prob = input.logprob.detach().exp();
    const phi = prob.mul(prob.neg().add(1));
    const logprob = o.cutoffProb < 1 ? input.logprob.clamp(null, Math.log(o.cutoffProb)) : input.logprob;
    const loss = aggregateLoss(logprob.mul(phi).neg(), input.actionMask, o.lossAggMode);
    return { loss, metrics: { sft_phi_loss: loss.detach() } };
  });
}

export const sftLoss: PolicyLossModule<SftLossOptions> = {
  name: 'sft',
  description: 'negative log-likelihood of the expert tokens (SFT)',
  defaults: SFT_LOSS_DEFAULTS,
  run: computeSftLoss,
};

export const sftIsLoss: PolicyLossModule<SftLossOptions> = {
  name: 'sft_is',
  description: 'NLL weighted by the stop-gradient token probability (CHORD, arXiv 2508.11408)',
  defaults: SFT_LOSS_DEFAULTS,
  run: computeSftIsLoss,
};

export const sftPhiLoss: PolicyLossModule<SftPhiLossOptions> = {
  name: 'sft_phi',
  description: 'NLL weighted by phi = p(1-p) (CHORD-phi, arXiv 2508.11408)',
  defaults: SFT_PHI_LOSS_DEFAULTS,
  run: computeSftPhiLoss,
};

POLICY_LOSS_FN.register(sftLoss);
POLICY_LOSS_FN.register(sftIsLoss);
POLICY_LOSS_FN.register(sftPhiLoss);
