// Advantage functions (`algorithm.advantage_fn`), by Trinity-RFT name. ADVANTAGE_FN.create('grpo', { epsilon: 1e-6 })
// gives input → { advantages, returns, keep, metrics }.
//
// An advantage function is one file that ends by registering its module (ADVANTAGE_FN.register(...)), plus one line
// in the list below. The list is the registration order (ADVANTAGE_FN.names(), and the names an error message
// offers): ES modules run in import order, each after the files it imports, so a file comes after the functions it
// builds on (dr_grpo, grpo_verl and clipb after grpo; clipv after clipb). Outside this folder, import the functions
// from here only, never one function's file: a file imported before this one would register first and reorder the
// names.
import { ADVANTAGE_FN } from './registry.js';
import type { AdvantageModule } from './types.js';

export * from './ppo.js';
export * from './grpo.js';
export * from './dr-grpo.js';
export * from './step-wise-grpo.js';
export * from './reinforce-plus-plus.js';
export * from './reinforce.js';
export * from './remax.js';
export * from './rloo.js';
export * from './opmd.js';
export * from './asymre.js';
export * from './rec.js';
export * from './on-policy-distill.js';
export * from './jsd.js';
export * from './grpo-verl.js';
export * from './gigpo.js';
export * from './clipb.js';
export * from './clipv.js';
export * from './groups.js';
export * from './types.js';
export { ADVANTAGE_FN };

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
 * this file loads, every file of the list above registered, so a new module is not listed again here).
 */
export const ADVANTAGE_COMPUTE_IN_TRAINER: Readonly<Record<string, boolean>> = Object.fromEntries(
  ADVANTAGE_FN.names().map((name) => [name, (ADVANTAGE_FN.get(name) as AdvantageModule<object>).computeInTrainer]),
);
