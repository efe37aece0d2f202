// Advantage functions (`algorithm.advantage_fn`), by Trinity-RFT name. ADVANTAGE_FN.create('grpo', { epsilon: 1e-6 })
// gives input → { advantages, returns, keep, metrics }.
import { Registry } from '../registry.js';
import { asymreAdvantage } from './asymre.js';
import { clipbAdvantage } from './clipb.js';
import { clipvAdvantage } from './clipv.js';
import { drGrpoAdvantage } from './dr-grpo.js';
import { gigpoAdvantage } from './gigpo.js';
import { grpoAdvantage } from './grpo.js';
import { grpoVerlAdvantage } from './grpo-verl.js';
import { jsdAdvantage } from './jsd.js';
import { onPolicyDistillAdvantage } from './on-policy-distill.js';
import { opmdAdvantage } from './opmd.js';
import { ppoAdvantage } from './ppo.js';
import { recAdvantage } from './rec.js';
import { reinforceAdvantage } from './reinforce.js';
import { reinforcePlusPlusAdvantage } from './reinforce-plus-plus.js';
import { remaxAdvantage } from './remax.js';
import { rlooAdvantage } from './rloo.js';
import { stepWiseGrpoAdvantage } from './step-wise-grpo.js';
import type { AdvantageInput, AdvantageModule, AdvantageResult } from './types.js';

export const ADVANTAGE_FN = new Registry<AdvantageInput, AdvantageResult>('advantage_fn')
  .register(ppoAdvantage)
  .register(grpoAdvantage)
  .register(drGrpoAdvantage)
  .register(stepWiseGrpoAdvantage)
  .register(reinforcePlusPlusAdvantage)
  .register(reinforceAdvantage)
  .register(remaxAdvantage)
  .register(rlooAdvantage)
  .register(opmdAdvantage)
  .register(asymreAdvantage)
  .register(recAdvantage)
  .register(onPolicyDistillAdvantage)
  .register(jsdAdvantage)
  .register(grpoVerlAdvantage)
  .register(gigpoAdvantage)
  .register(clipbAdvantage)
  .register(clipvAdvantage);

/** Whether advantage function `name` reads input.entropy (the trainer computes it with the current policy first). */
export function advantageNeedsEntropy(name: string): boolean {
  return (ADVANTAGE_FN.get(name) as Partial<AdvantageModule<object>>).needsEntropy === true;
}

/** Whether advantage function `name` reads input.necs (the trainer computes it in the same pass as the entropy). */
export function advantageNeedsNecs(name: string): boolean {
  return (ADVANTAGE_FN.get(name) as Partial<AdvantageModule<object>>).needsNecs === true;
}

/**
 * Trinity-RFT `compute_in_trainer()` of each built-in advantage function (read from the registry as it stands when
 * this file loads, so a new module is registered once, above, and not listed again here).
 */
export const ADVANTAGE_COMPUTE_IN_TRAINER: Readonly<Record<string, boolean>> = Object.fromEntries(
  ADVANTAGE_FN.names().map((name) => [name, (ADVANTAGE_FN.get(name) as AdvantageModule<object>).computeInTrainer]),
);

export * from './asymre.js';
export * from './clipb.js';
export * from './clipv.js';
export * from './dr-grpo.js';
export * from './gigpo.js';
export * from './groups.js';
export * from './grpo.js';
export * from './grpo-verl.js';
export * from './jsd.js';
export * from './on-policy-distill.js';
export * from './opmd.js';
export * from './ppo.js';
export * from './rec.js';
export * from './reinforce.js';
export * from './reinforce-plus-plus.js';
export * from './remax.js';
export * from './rloo.js';
export * from './step-wise-grpo.js';
export * from './types.js';
