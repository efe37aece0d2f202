// PPO advantage with GAE — Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage
// Estimation" (arXiv 1506.02438); PPO, arXiv 1707.06347. Over the response tokens t = 0..T−1 with critic values V:
//   δ_t = r_t + γ · V_{t+1} − V_t                      (V_T = 0)
//   Â_t = δ_t + γλ · Â_{t+1}                            (Â_T = 0)
//   returns R_t = Â_t + V_t                              (the critic's targets)
//   advantages = whiten(Â) over the masked tokens        (batch whitening; not re-masked, as Trinity-RFT/verl)
// Trinity-RFT `advantage_fn: ppo` (gamma 1.0, lam 1.0).
import * as torch from '../../../torch/index.js';
import { discountedReverseCumsum, maskedWhiten } from '../utils.js';
import { ADVANTAGE_FN } from './registry.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export interface PpoAdvantageOptions {
  gamma: number;
  lam: number;
}

export const PPO_ADVANTAGE_DEFAULTS: Readonly<PpoAdvantageOptions> = { gamma: 1.0, lam: 1.0 };

export function computeGaeAdvantages(input: AdvantageInput, options: Partial<PpoAdvantageOptions> = {}): AdvantageResult {
  const { gamma, lam } = { ...PPO_ADVANTAGE_DEFAULTS, ...options };
  const tokenRewards = requireField(input, 'tokenLevelRewards', 'ppo');
  const values = requireField(input, 'values', 'ppo');
  return torch.scope(() => {
    const v = values.detach();
    const nextValues = v.slice(1, 1).pad([0, 1]);
    const delta = tokenRewards.detach().add(nextValues.mul(gamma)).sub(v);
    const gae = discountedReverseCumsum(delta, gamma * lam);
    const returns = gae.add(v);
    return {
      advantages: maskedWhiten(gae, input.actionMask),
      returns,
      keep: torch.ones([v.size(0)], { dtype: 'bool', device: v.device }),
      metrics: {},
    };
  });
}

export const ppoAdvantage: AdvantageModule<PpoAdvantageOptions> = {
  name: 'ppo',
  description: 'generalised advantage estimation with a critic, batch-whitened (GAE, arXiv 1506.02438)',
  defaults: PPO_ADVANTAGE_DEFAULTS,
  computeInTrainer: true,
  run: computeGaeAdvantages,
};

ADVANTAGE_FN.register(ppoAdvantage);
