// What policy loss functions take and give. Per-token tensors are [B, T]; `logprob` carries the gradient.
//
// Gradient accumulation is part of a loss's contract. The trainer splits a batch into micro-batches m and
// accumulates Σ_m w_m · loss(m); that equals the whole batch's gradient only if the weights undo each micro-batch's
// own normalisation. A loss declares how it normalises (`accumulation`): one or more terms, each a mean over its
// unit (tokens, rows, groups of rows, or a constant) within its rows (all, on-policy, expert). For a term t,
//   share_t(m) = count_t(m) / count_t(batch)          (1 for the 'constant' unit: its normaliser is global already)
// A one-term loss is weighted by share(m) by the trainer; a loss with several terms gets
// input.termWeights[t] = share_t(m) and multiplies each term by its own weight (the trainer then weighs it by 1).
// Rows of a group (rowsPerGroup, e.g. DPO's chosen/rejected pair) always share a micro-batch.
import type { Tensor } from '../../../torch/index.js';
import type { AggregationUnit } from '../loss-agg.js';
import type { Metrics } from '../metrics.js';
import type { ExpertRows } from '../utils.js';
import type { AlgorithmModule } from '../registry.js';

export interface PolicyLossInput {
  /** [B, T] log π_θ(y_t | ·) of the current policy (requires grad). */
  logprob: Tensor;
  /** [B, T] 1 (or true) on the tokens that count. */
  actionMask: Tensor;
  /** [B, T] log-probs of the policy that sampled the tokens (π_old). */
  oldLogprob?: Tensor;
  /** [B, T] advantages. */
  advantages?: Tensor;
  /** [B, T] log-probs of the reference policy (dpo). */
  refLogprob?: Tensor;
  /** [B] bool: rows that are expert (SFT) data (mix, mix_chord). */
  expertMask?: Tensor;
  /** expertMask's rows as index lists, made ahead (../utils.ts ExpertRows): a loss that splits rows reads no mask. */
  expertRows?: ExpertRows;
  /** Global training step (mix_chord's μ schedule). */
  step?: number;
  /** Multi-term losses: each term's micro-batch weight by term name (see the header); absent = 1 each. */
  termWeights?: Readonly<Record<string, number>>;
  /** [B, T] bool: this micro-batch's rows of the module's wholeBatchMask (see PolicyLossModule.wholeBatchMask). */
  wholeBatchMask?: Tensor;
}

/** What a whole-batch pass sees: every row of the batch, the current policy's log-probs without gradient. */
export interface WholeBatchInput {
  logprob: Tensor;
  oldLogprob: Tensor;
  advantages: Tensor;
  actionMask: Tensor;
}

export interface PolicyLossResult {
  /** Scalar loss to minimise. */
  loss: Tensor;
  /** Scalar tensors (read by the trainer when the step ends) or numbers: see ../metrics.ts. */
  metrics: Metrics;
}

/** Which rows a term reads: every row, the on-policy rows (not expertMask) or the expert rows. */
export type TermRows = 'all' | 'usual' | 'expert';
export const TERM_ROWS: readonly TermRows[] = ['all', 'usual', 'expert'];

export interface LossTerm {
  /** The key of input.termWeights (multi-term losses). */
  readonly name: string;
  readonly rows: TermRows;
  readonly unit: AggregationUnit;
}

export interface LossAccumulation {
  /** Consecutive rows that belong together and share a micro-batch (default 1; DPO 2: chosen, rejected). */
  readonly rowsPerGroup: number;
  /** One term (the trainer weighs the loss) or several (the loss weighs each by input.termWeights). */
  readonly terms: readonly LossTerm[];
}

export interface PolicyLossModule<Options extends object> extends AlgorithmModule<PolicyLossInput, Options, PolicyLossResult> {
  /**
   * How the loss aggregates, from its resolved options. Default: one term over every row in the unit of
   * options.lossAggMode (or of algorithm.loss_agg_mode when the module has no such option).
   */
  readonly accumulation?: (options: Readonly<Options>) => LossAccumulation;
  /** The loss reads input.refLogprob, so the trainer keeps a reference policy (dpo). Default false. */
  readonly needsReference?: boolean;
  /**
   * A token mask that depends on the whole batch, not on one micro-batch (m2po's second-moment selection). The trainer
   * calls it once per step with the current policy's log-probs of every row (no gradient: the weights the loss then
   * sees, as one step makes one update) and hands each micro-batch its rows as input.wholeBatchMask; its metrics are
   * the step's policy metrics. Without it in the input the loss computes it over the rows it is given.
   */
  readonly wholeBatchMask?: (input: WholeBatchInput, options: Readonly<Options>) => { mask: Tensor; metrics: Metrics };
  /**
   * Each token's loss is proportional to its advantage for a positive scale (w·A gives w·loss: ppo and its clipped
   * kin). The trainer applies per-token rollout importance weights (algorithm.rollout_correction) by scaling the
   * advantages; a loss without this flag refuses rollout_is.
   */
  readonly linearInAdvantages?: boolean;
}

export function need<K extends keyof PolicyLossInput>(
  input: PolicyLossInput,
  field: K,
  module: string,
): NonNullable<PolicyLossInput[K]> {
  const value = input[field];
  if (value === undefined || value === null) throw new Error(`policy_loss_fn '${module}' needs input.${String(field)}`);
  return value as NonNullable<PolicyLossInput[K]>;
}
