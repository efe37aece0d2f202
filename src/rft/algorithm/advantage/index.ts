// Advantage functions (`algorithm.advantage_fn`), by Trinity-RFT name. ADVANTAGE_FN.create('grpo', { epsilon: 1e-6 })
// gives input → { advantages, returns, keep, metrics }.
//
// An advantage function is one file that ends by registering its module (ADVANTAGE_FN.register(...)), plus one line
// in the list below. The list is the registration order (ADVANTAGE_FN.names(), and the names an error message
// offers): ES modules run in import order, each after the files it imports, so a file comes after the functions it
// builds on (dr_grpo, grpo_verl and clipb after grpo; clipv after clipb). Outside this folder, import the functions
// from here only, never one function's file: a file imported before this one would register first and reorder the
// names.
import { resolveArgs } from '../../../util/module-args.js';
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

/** The info key advantage function `choice` groups steps by (AdvantageModule.stateKey: gigpo's), or null. */
export function advantageStateKey(choice: { name: string; args?: Readonly<Record<string, unknown>> }): string | null {
  const module = ADVANTAGE_FN.get(choice.name) as Partial<AdvantageModule<object>>;
  if (module.stateKey === undefined) return null;
  return module.stateKey(resolveArgs(`advantage_fn '${choice.name}'`, module.defaults ?? {}, choice.args ?? {}));
}

/**
 * What to tell the user when no experience of a train batch has the state key advantage function `choice` groups
 * steps by (null: it has none, or some experience has it): its step-level advantages are then all 0.
 */
export function missingStateKeyWarning(
  choice: { name: string; args?: Readonly<Record<string, unknown>> },
  infos: readonly Readonly<Record<string, unknown>>[],
): string | null {
  const key = advantageStateKey(choice);
  if (key === null || infos.length === 0 || infos.some((info) => info[key] !== undefined && info[key] !== null)) return null;
  return (
    `advantage_fn '${choice.name}': none of the ${infos.length} experiences of this batch has info.${key}, so no ` +
    'two steps share an anchor state and every step-level advantage is 0 (anchor_groups_total 0): only the ' +
    `episode-level advantage trains. The workflow must write info.${key} with each step's experience (the built-in ` +
    'environment workflows do with experience_mode: step)'
  );
}

/**
 * Trinity-RFT `compute_in_trainer()` of each built-in advantage function (read from the registry as it stands when
 * this file loads, every file of the list above registered, so a new module is not listed again here).
 */
export const ADVANTAGE_COMPUTE_IN_TRAINER: Readonly<Record<string, boolean>> = Object.fromEntries(
  ADVANTAGE_FN.names().map((name) => [name, (ADVANTAGE_FN.get(name) as AdvantageModule<object>).computeInTrainer]),
);
