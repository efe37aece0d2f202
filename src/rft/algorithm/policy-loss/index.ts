// Policy loss functions (`algorithm.policy_loss_fn`), by Trinity-RFT name. POLICY_LOSS_FN.create('ppo',
// { clip_range_high: 0.28 }) gives input → { loss, metrics }.
//
// A loss is one file that ends by registering its module (POLICY_LOSS_FN.register(...)), plus one line in the list
// below. The list is the registration order (POLICY_LOSS_FN.names(), and the names an error message offers): ES
// modules run in import order, each after the files it imports, so a file comes after the losses it builds on (chord
// after mix, ppo and sft). Outside this folder, import the losses from here only, never one loss's file: a file
// imported before this one would register first and reorder the names.
import { AGGREGATION_UNITS, aggregationUnit, isLossAggMode, type LossAggMode } from '../loss-agg.js';
import { resolveArgs } from '../registry.js';
import { POLICY_LOSS_FN } from './registry.js';
import { type LossAccumulation, type PolicyLossModule, TERM_ROWS } from './types.js';

export * from './ppo.js';
export * from './gspo.js';
export * from './cispo.js';
export * from './sapo.js';
export * from './topr.js';
export * from './opmd.js';
export * from './sppo.js';
export * from './rec.js';
export * from './importance-sampling.js';
export * from './sft.js'; // sft, sft_is, sft_phi
export * from './dpo.js';
export * from './mix.js';
export * from './chord.js';
export * from './m2po.js';
export * from './types.js';
export { POLICY_LOSS_FN };

/** The registered module with its contract's optional parts (the registry keeps the object it was given). */
export function policyLossModule(name: string): PolicyLossModule<object> {
  return POLICY_LOSS_FN.get(name) as PolicyLossModule<object>;
}

/**
 * How policy loss `name` with `args` aggregates (see ./types.ts): its declared accumulation, checked, or one term
 * over every row in the unit of its loss_agg_mode argument (`fallbackMode` when it has none).
 */
export function policyLossAccumulation(
  name: string,
  args: Readonly<Record<string, unknown>>,
  fallbackMode: LossAggMode,
): LossAccumulation {
  const module = policyLossModule(name);
  const options = resolveArgs(`policy_loss_fn '${name}'`, module.defaults, args);
  if (module.accumulation === undefined) {
    const mode = (options as { lossAggMode?: unknown }).lossAggMode;
    const unit = aggregationUnit(typeof mode === 'string' && isLossAggMode(mode) ? mode : fallbackMode);
    return { rowsPerGroup: 1, terms: [{ name: 'loss', rows: 'all', unit }] };
  }
  const declared = module.accumulation(options);
  const where = `policy_loss_fn '${name}': accumulation()`;
  if (!Number.isInteger(declared.rowsPerGroup) || declared.rowsPerGroup < 1)
    throw new Error(`${where}: rowsPerGroup must be a positive integer, got ${String(declared.rowsPerGroup)}`);
  if (!Array.isArray(declared.terms) || declared.terms.length === 0) throw new Error(`${where}: declares no terms`);
  const names = new Set<string>();
  for (const term of declared.terms) {
    if (!AGGREGATION_UNITS.includes(term.unit))
      throw new Error(
        `${where}: term '${term.name}' has unit '${String(term.unit)}'; expected one of ${AGGREGATION_UNITS.join(', ')}`,
      );
    if (!TERM_ROWS.includes(term.rows))
      throw new Error(`${where}: term '${term.name}' has rows '${String(term.rows)}'; expected one of ${TERM_ROWS.join(', ')}`);
    if (names.has(term.name)) throw new Error(`${where}: two terms are named '${term.name}'`);
    names.add(term.name);
  }
  return declared;
}
