// Gradient accumulation over a step's micro-batches: the plan (which rows each micro-batch holds) and each
// micro-batch's weights.
//
// Each micro-batch's loss is weighted by its share of the batch in the loss's aggregation
// unit, as the policy loss declares it (../algorithm/policy-loss/types.ts: tokens for token-mean, rows for
// seq-mean-*, pairs for DPO, 1 for seq-mean-token-sum-norm whose normaliser R is already global; a mix loss weighs
// its on-policy and expert terms by their own counts), so the accumulated gradient equals the whole-batch gradient.
// The KL, entropy and critic terms are weighted the same way by their loss_agg_mode.
//   share_t(m) = count_t(m) / count_t(batch)      (1 for the 'constant' unit)
// The counts come from BatchCounts, read from the device in one transfer before the first micro-batch is queued.
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { aggregationUnit, type LossAggMode } from '../algorithm/loss-agg.js';
import type { LossAccumulation, LossTerm } from '../algorithm/policy-loss/types.js';
import type { TrainBatch } from './train-batch.js';

/** Rows [start, start + n) of the batch, as the aggregation units count them. */
export interface RowCounts {
  rows: number;
  tokens: number;
  usualRows: number;
  usualTokens: number;
  /** Masked tokens that carry rollout log-probs (the rollout mask's). */
  rolloutTokens: number;
}

/**
 * Per-row counts of the batch (masked tokens, on-policy or not, tokens with rollout log-probs), read in one transfer
 * before the micro-batches run: the loop then asks the host for its counts instead of the device.
 */
export class BatchCounts {
  readonly #perRow: Float64Array; // [B, 4]: tokens, usual, usual tokens, rollout tokens

  constructor(batch: TrainBatch, rolloutMask: Tensor) {
    this.#perRow = torch.scope(() =>
      torch.noGrad(() => {
        const tokens = batch.actionMask.sum(-1).to({ dtype: 'float64' });
        const usual = batch.expertMask.logicalNot().to({ dtype: 'float64' });
        const rollout = rolloutMask.sum(-1).to({ dtype: 'float64' });
        return torch.stack([tokens, usual, tokens.mul(usual), rollout], 1).toTypedArray() as Float64Array;
      }),
    );
  }

  /** Counts of rows [start, start + n). */
  rows(start: number, n: number): RowCounts {
    const sum = (column: number) => {
      let total = 0;
      for (let b = start; b < start + n; b++) total += this.#perRow[b * 4 + column] as number;
      return total;
    };
    return { rows: n, tokens: sum(0), usualRows: sum(1), usualTokens: sum(2), rolloutTokens: sum(3) };
  }
}

/** How many of a term's units rows with `counts` hold. */
function unitCount(term: Pick<LossTerm, 'rows' | 'unit'>, counts: RowCounts, rowsPerGroup: number): number {
  const pick = (all: number, usual: number) => (term.rows === 'all' ? all : term.rows === 'usual' ? usual : all - usual);
  switch (term.unit) {
    case 'token':
      return pick(counts.tokens, counts.usualTokens);
    case 'row':
      return pick(counts.rows, counts.usualRows);
    case 'group':
      return pick(counts.rows, counts.usualRows) / rowsPerGroup;
    case 'constant':
      return 1;
  }
}

/** A micro-batch's weight for a term: its share of the term's units in the batch (see the header). */
export function termShare(term: Pick<LossTerm, 'rows' | 'unit'>, micro: RowCounts, batch: RowCounts, rowsPerGroup = 1): number {
  if (term.unit === 'constant') return 1;
  const total = unitCount(term, batch, rowsPerGroup);
  return total > 0 ? unitCount(term, micro, rowsPerGroup) / total : 0;
}

/** The single term of a loss aggregated over every row by `mode` (KL, entropy, critic). */
export const modeTerm = (mode: LossAggMode) => ({ rows: 'all', unit: aggregationUnit(mode) }) as const;

/** Rows per micro-batch: the setting, else the whole batch split evenly over the ranks (one process: the batch). */
export function microBatchSize(setting: number | undefined, B: number, worldSize: number): number {
  const micro = setting ?? Math.ceil(B / worldSize);
  if (!Number.isInteger(micro) || micro < 1)
    throw new Error(`train step: microBatchSize must be a positive integer, got ${micro}`);
  return micro;
}

/** The micro-batches of a B-row batch, `size` rows each but the last. */
export function microBatches(B: number, size: number): { start: number; n: number }[] {
  const out: { start: number; n: number }[] = [];
  for (let start = 0; start < B; start += size) out.push({ start, n: Math.min(size, B - start) });
  return out;
}

/** A B-row batch is whole groups of the loss's rows (`lossName` names the loss in the error). */
export function checkWholeGroups(B: number, rowsPerGroup: number, lossName: string): void {
  if (B % rowsPerGroup !== 0)
    throw new Error(`train step: policy_loss_fn '${lossName}' takes rows in groups of ${rowsPerGroup}, got ${B} rows`);
}

/**
 * The policy update's micro-batches: microBatchSize rounded up to whole groups of the loss's rows, so that a group never
 * straddles two micro-batches (`lossName` names the loss in the error when the batch is not whole groups).
 */
export function groupedMicroBatches(
  B: number,
  rowsPerGroup: number,
  lossName: string,
  setting: number | undefined,
  worldSize: number,
): { start: number; n: number }[] {
  checkWholeGroups(B, rowsPerGroup, lossName);
  const size = microBatchSize(setting, B, worldSize);
  return microBatches(B, Math.ceil(size / rowsPerGroup) * rowsPerGroup);
}

/** A policy micro-batch's weights (see the header), from its counts and the whole batch's. */
export interface MicroBatchWeights {
  /** Each policy-loss term's share (input.termWeights of a loss with several terms). */
  readonly terms: Record<string, number>;
  /** The policy loss's weight: its single term's share; 1 for several terms, which the loss weighs itself. */
  readonly policy: number;
  /** Of the policy's metrics: the share of the batch's masked tokens (of its rows, when it has no masked token). */
  readonly metrics: number;
  /** Of the rollout-correction metrics measured per micro-batch: the share of the tokens with rollout log-probs. */
  readonly rollout: number;
  /** Of a term aggregated over every row by `mode` (KL, entropy). */
  share(mode: LossAggMode): number;
}

export function microBatchWeights(accumulation: LossAccumulation, micro: RowCounts, whole: RowCounts): MicroBatchWeights {
  const group = accumulation.rowsPerGroup;
  const terms = Object.fromEntries(accumulation.terms.map((t) => [t.name, termShare(t, micro, whole, group)]));
  const multiTerm = accumulation.terms.length > 1;
  return {
    terms,
    policy: multiTerm ? 1 : (terms[(accumulation.terms[0] as LossTerm).name] as number),
    metrics: whole.tokens > 0 ? micro.tokens / whole.tokens : micro.rows / whole.rows,
    rollout: micro.rolloutTokens / whole.rolloutTokens,
    share: (mode) => termShare(modeTerm(mode), micro, whole),
  };
}
