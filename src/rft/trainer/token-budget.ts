// Token-budget micro-batches: Trinity's trainer.use_dynamic_bsz with trainer.max_token_len_per_gpu (veRL's dynamic
// batch size). Instead of trainer.micro_batch_size rows, a micro-batch takes consecutive rows while the positions its
// forward computes stay within the budget, so a micro-batch of long rows holds few of them and one of short rows many.
//
// Each such micro-batch runs at its own widths (microBatchView): prompts left-padded to its own longest prompt P_m,
// responses right-padded to its own longest response R_m, its rows' shared prompts computed once. What it computes,
// with g distinct prompts among its n rows (src/model/training.ts computedPositions):
//   packed  g·(P_m − 1) + n·R_m      when that is ≤ 0.8·n·(P_m + R_m)
//   plain   n·(P_m + R_m)            otherwise
// and with rows packed without pads (trainer.use_remove_padding, src/model/packed-rows.ts): each distinct prompt but
// its last token once, each row's response length, Σ_g (p_g − 1) + Σ_b r_b.
// Its per-position outputs go back to the batch's response columns [n, R] (zeros past R_m, where the action mask is
// 0), so the loss modules see the batch's layout: every loss_agg_mode (seq-mean-token-sum-norm's T = R included) and
// the micro-batch weights (./micro-batches.ts) are what the row-count split gives, and the gradients are equal.
//
// The plan is built on every rank over the whole batch (like the row-count plan), and micro-batch i runs on rank
// i mod worldSize (./row-sharding.ts). Rows stay in their order: a loss that takes rows in groups (DPO's pairs) gets
// whole groups, and consecutive rows of one GRPO group share their prompt's forward. One group of rows over the
// budget is a micro-batch by itself (tokenBudgetMicroBatches reports it; the trainer says so once per run).
import { computedPositions } from '../../model/training.js';
import type { Tensor } from '../../torch/index.js';
import type { Experience } from '../experience.js';
import type { TrainBatch } from './train-batch.js';

/** Rows [start, start + n) of the batch. */
export interface MicroBatchRange {
  start: number;
  n: number;
}

/** A plan of micro-batches, and the ones that hold a single group of rows over the budget. */
export interface TokenBudgetPlan {
  plan: MicroBatchRange[];
  /** Micro-batches of one row group whose computed positions exceed the budget by themselves. */
  oversized: { start: number; n: number; tokens: number }[];
}

const responseLength = (e: Experience) => e.tokens.length - e.promptLength;

/** Rows [start, start + n) at their own widths: the running state of a micro-batch being filled. */
class OwnLayout {
  promptWidth = 0;
  responseWidth = 0;
  rows = 0;
  /** Σ_g (p_g − 1) + Σ_b r_b so far (rows packed without pads). */
  packedTokens = 0;
  groups = new Set<number>();

  constructor(
    private readonly batch: readonly Experience[],
    private readonly rowGroup: readonly number[],
    private readonly packed: boolean,
  ) {}

  /** The layout once rows [from, from + n) are added too (this one is not changed). */
  #with(from: number, n: number): Pick<OwnLayout, 'promptWidth' | 'responseWidth' | 'rows' | 'packedTokens' | 'groups'> {
    let { promptWidth, responseWidth, packedTokens } = this;
    const groups = new Set(this.groups);
    for (let b = from; b < from + n; b++) {
      const e = this.batch[b] as Experience;
      promptWidth = Math.max(promptWidth, e.promptLength);
      responseWidth = Math.max(responseWidth, responseLength(e));
      const group = this.rowGroup[b] as number;
      packedTokens += responseLength(e) + (groups.has(group) ? 0 : e.promptLength - 1);
      groups.add(group);
    }
    return { promptWidth, responseWidth, rows: this.rows + n, packedTokens, groups };
  }

  /** The positions computed once rows [from, from + n) are added too (the layout is not changed). */
  tokensWith(from: number, n: number): number {
    const next = this.#with(from, n);
    if (this.packed) return next.packedTokens;
    const width = next.promptWidth + next.responseWidth;
    return computedPositions(next.rows, width, next.promptWidth, next.groups.size).positions;
  }

  add(from: number, n: number): void {
    Object.assign(this, this.#with(from, n));
  }
}

/**
 * Positions the forward computes for rows [start, start + n) of `rows` at their own widths (see the header);
 * `rowGroup`: each row's prompt group (./train-batch.ts rowPromptGroups); `packed`: rows packed without pads.
 */
export function microBatchTokens(
  rows: readonly Experience[],
  rowGroup: readonly number[],
  start: number,
  n: number,
  packed = false,
): number {
  return new OwnLayout(rows, rowGroup, packed).tokensWith(start, n);
}

/**
 * The micro-batches of `rows` by a token budget (see the header): consecutive groups of `rowsPerGroup` rows added
 * while the micro-batch's computed positions stay ≤ `budget` (`packed`: counted without pads).
 */
export function tokenBudgetMicroBatches(
  rows: readonly Experience[],
  rowGroup: readonly number[],
  rowsPerGroup: number,
  budget: number,
  packed = false,
): TokenBudgetPlan {
  if (!Number.isInteger(budget) || budget < 1)
    throw new Error(`train step: the micro-batch token budget must be a positive integer, got ${budget}`);
  const plan: MicroBatchRange[] = [];
  const oversized: TokenBudgetPlan['oversized'] = [];
  let start = 0;
  let layout = new OwnLayout(rows, rowGroup, packed);
  for (let b = 0; b < rows.length; b += rowsPerGroup) {
    const n = Math.min(rowsPerGroup, rows.length - b);
    if (layout.rows > 0 && layout.tokensWith(b, n) > budget) {
      plan.push({ start, n: layout.rows });
      start = b;
      layout = new OwnLayout(rows, rowGroup, packed);
    }
    if (layout.rows === 0) {
      const alone = layout.tokensWith(b, n);
      if (alone > budget) oversized.push({ start: b, n, tokens: alone });
    }
    layout.add(b, n);
  }
  if (layout.rows > 0) plan.push({ start, n: layout.rows });
  return { plan, oversized };
}

/** A micro-batch's forward inputs, and its per-position outputs as the batch's response columns. */
export interface MicroBatchView {
  inputIds: Tensor;
  attentionMask: Tensor;
  /** Where its prompts end (forwardBackward's promptWidth). */
  promptWidth: number;
  /** Per-position values of the forward [n, inputIds' width] → the batch's response columns [n, R]. */
  response(perPosition: Tensor): Tensor;
}

/**
 * Rows [start, start + n) of the batch: at the batch's widths, or (`ownWidths`) cut to their own longest prompt and
 * response (see the header; the columns cut are pads of every row in the range).
 */
export function microBatchView(batch: TrainBatch, start: number, n: number, ownWidths: boolean): MicroBatchView {
  const P = batch.promptWidth;
  const R = batch.responseWidth;
  const rows = (t: Tensor) => t.narrow(0, start, n);
  if (!ownWidths) {
    return {
      inputIds: rows(batch.inputIds),
      attentionMask: rows(batch.attentionMask),
      promptWidth: P,
      response: (perPosition) => perPosition.narrow(1, P - 1, R),
    };
  }
  const own = batch.rows.slice(start, start + n);
  const promptWidth = Math.max(...own.map((e) => e.promptLength));
  const responseWidth = Math.max(...own.map(responseLength));
  const columns = (t: Tensor) => rows(t).narrow(1, P - promptWidth, promptWidth + responseWidth);
  return {
    inputIds: columns(batch.inputIds),
    attentionMask: columns(batch.attentionMask),
    promptWidth,
    response: (perPosition) => {
      const response = perPosition.narrow(1, promptWidth - 1, responseWidth);
      return responseWidth === R ? response : response.pad([0, R - responseWidth]);
    },
  };
}
