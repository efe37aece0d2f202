// OPMD policy loss — Online Policy Mirror Descent, Trinity-RFT (arXiv 2505.17826; arXiv 2509.24203).
// Trinity-RFT `policy_loss_fn: opmd`. A REINFORCE-style surrogate scaled by the mirror-descent step 1/(1 + τ):
//   L = −A · log π_θ,   loss = aggregate(L, mask, loss_agg_mode) / (1 + τ)
// (π_old is not used: the off-policy correction lives in the advantage's baseline.)
import * as torch from '../../../torch/index.js';
import { aggregateLoss, type LossAggMode } from '../loss-agg.js';
import { POLICY_LOSS_FN } from './registry.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export interface OpmdPolicyLossOptions {
  tau: number;
  lossAggMode: LossAggMode;
}

export const OPMD_POLICY_LOSS_DEFAULTS: Readonly<OpmdPolicyLossOptions> = { tau: 1.0, lossAggMode: 'token-mean' };

export function computeOpmdPolicyLoss(input: PolicyLossInput, options: Partial<OpmdPolicyLossOptions> = {}): PolicyLossResult {
  const o = { ...OPMD_POLICY_LOSS_DEFAULTS, ...options };
  const advantages = need(input, 'advantages', 'opmd');
  return torch.scope(() => {
    const loss = aggregateLoss(advantages.mul(input.logprob).neg(), input.actionMask, o.lossAggMode).div(1 + o.tau);
    return { loss, metrics: { opmd_loss: loss.detach() } };
  });
}

export const opmdPolicyLoss: PolicyLossModule<OpmdPolicyLossOptions> = {
  name: 'opmd',
  description: 'REINFORCE surrogate scaled by 1/(1+tau) (OPMD, Trinity-RFT arXiv 2505.17826)',
  defaults: OPMD_POLICY_LOSS_DEFAULTS,
  run: computeOpmdPolicyLoss,
};

POLICY_LOSS_FN.register(opmdPolicyLoss);
