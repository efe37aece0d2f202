// Policy loss functions (`algorithm.policy_loss_fn`), by Trinity-RFT name. POLICY_LOSS_FN.create('ppo',
// { clip_range_high: 0.28 }) gives input → { loss, metrics }.
import { AGGREGATION_UNITS, aggregationUnit, isLossAggMode, type LossAggMode } from '../loss-agg.js';
import { Registry, resolveArgs } from '../registry.js';
import { chordPolicyLoss } from './chord.js';
import { cispoPolicyLoss } from './cispo.js';
import { dpoLoss } from './dpo.js';
import { gspoPolicyLoss } from './gspo.js';
import { importanceSamplingPolicyLoss } from './importance-sampling.js';
import { m2poPolicyLoss } from './m2po.js';
import { mixPolicyLoss } from './mix.js';
import { opmdPolicyLoss } from './opmd.js';
import { ppoPolicyLoss } from './ppo.js';
import { recPolicyLoss } from './rec.js';
import { sapoPolicyLoss } from './sapo.js';
import { sftIsLoss, sftLoss, sftPhiLoss } from './sft.js';
import { sppoPolicyLoss } from './sppo.js';
import { toprPolicyLoss } from './topr.js';
import { type LossAccumulation, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult, TERM_ROWS } from './types.js';

export const POLICY_LOSS_FN = new Registry<PolicyLossInput, PolicyLossResult>('policy_loss_fn')
  .register(ppoPolicyLoss)
  .register(gspoPolicyLoss)
  .register(cispoPolicyLoss)
  .register(sapoPolicyLoss)
  .register(toprPolicyLoss)
  .register(opmdPolicyLoss)
  .register(sppoPolicyLoss)
  .register(recPolicyLoss)
  .register(importanceSamplingPolicyLoss)
  .register(sftLoss)
  .register(sftIsLoss)
  .register(sftPhiLoss)
  .register(dpoLoss)
  .register(mixPolicyLoss)
  .register(chordPolicyLoss)
  .register(m2poPolicyLoss);

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

export * from './chord.js';
export * from './cispo.js';
export * from './dpo.js';
export * from './gspo.js';
export * from './importance-sampling.js';
export * from './m2po.js';
export * from './mix.js';
export * from './opmd.js';
export * from './ppo.js';
export * from './rec.js';
export * from './sapo.js';
export * from './sft.js';
export * from './sppo.js';
export * from './topr.js';
export * from './types.js';
