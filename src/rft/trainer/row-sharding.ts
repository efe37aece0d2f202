// Data parallelism inside one train step: which rows and micro-batches each rank computes, and what the step asks of
// the ranks between its phases (./data-parallel.ts implements it over a c10d process group).
//
// runDistributed (./train-step.ts): N ranks with the same global batch make the same update as run() in one process:
//   every rank builds the whole padded batch; reference log-probs, recomputed old log-probs and critic values are
//   computed by each rank for its own contiguous share of rows (ownRows) and summed across ranks (zeros elsewhere);
//   advantages, group statistics, the micro-batch plan and every micro-batch's weights are computed by every rank
//   over the whole batch; micro-batch i runs forward/backward on rank i mod N (micro_batch_size unset: N micro-
//   batches of ⌈B/N⌉ rows; by a token budget: the plan of ./token-budget.ts, the same on every rank); gradients are summed across ranks (bucketed), then every rank clips the global norm and
//   applies the same optimizer step, so parameters stay identical. Metrics that micro-batches add up (loss, pg_loss,
//   policy/*, kl, entropy, critic/*) are summed across ranks; the rest every rank computes alike.
import type { PassPoint } from '../../model/index.js';
import type { Tensor } from '../../torch/index.js';

/** Which of `worldSize` ranks this process is (one process: rank 0 of 1). */
export interface Shard {
  readonly rank: number;
  readonly worldSize: number;
  /**
   * Called before this rank's last policy backward of the step (none when it runs no micro-batch): ranks that sum
   * gradients while the backward runs (./data-parallel.ts) start listening here.
   */
  beforeLastBackward?(): void;
  /**
   * The policy's parameters are sharded over the ranks (./fsdp.ts): its passes run as programs that pause at their
   * layer boundaries for the ranks' collectives (pass points), every rank runs as many passes as the rank with the
   * most micro-batches (idle passes), and the optimizer's parameters are this rank's shards.
   */
  readonly shardsParameters?: boolean;
}

export const ONE_PROCESS: Shard = { rank: 0, worldSize: 1 };

/**
 * What runDistributed needs from the ranks (./data-parallel.ts implements it over a c10d process group). Every rank
 * calls the same collectives in the same order with tensors of the same shapes.
 */
export interface StepCollectives extends Shard {
  /** Sums each tensor across the ranks, in place. */
  sum(tensors: readonly Tensor[]): Promise<void>;
  /**
   * Sums the parameters' gradients across the ranks, in place; a parameter that has a gradient on some rank gets one
   * on every rank (zeros where it had none before the sum).
   */
  sumGradients(params: readonly Tensor[]): Promise<void>;
  /**
   * After the policy's optimizer step, before the compute weights are published: a sharded optimizer (./zero.ts)
   * all-gathers the parameters each rank updated. Absent: nothing to do.
   */
  afterOptimizerStep?(params: readonly Tensor[]): Promise<void>;
  /** The sum across the ranks of each metric that any rank has. */
  sumMetrics(sums: ReadonlyMap<string, number>): Promise<Map<string, number>>;
  /** Sharded parameters: the unit work at a policy pass's point (./fsdp-passes.ts). */
  passPoint?(point: PassPoint): Promise<void>;
  /**
   * Sharded parameters: one pass's collectives without compute, for a rank with fewer micro-batches (or, backward
   * false, no rows of a whole-batch forward).
   */
  idlePass?(options?: { backward?: false }): Promise<void>;
  /** Clips the gradients of `params` to a global norm of maxNorm across the ranks; returns the norm. Absent: local. */
  clipGradNorm?(params: readonly Tensor[], maxNorm: number): Promise<number>;
}

/** What the step asks of the ranks between its phases. */
export type Collective =
  | { kind: 'sum'; tensors: Tensor[] }
  | { kind: 'gradients'; params: Tensor[] }
  | { kind: 'stepped'; params: Tensor[] }
  | { kind: 'metrics'; sums: Map<string, number> }
  | { kind: 'clip'; params: Tensor[]; maxNorm: number }
  | { kind: 'pass'; point: PassPoint }
  | { kind: 'idlePass'; backward?: false };

/** What a collective answers: the metrics' sums (metrics), the gradient norm (clip); nothing for the others. */
export type CollectiveAnswer = Map<string, number> | number | undefined;

export type StepProgram = Generator<Collective, void, CollectiveAnswer>;

/** Rows [start, start + n) of a B-row batch whose log-probs and values this rank computes (a contiguous share). */
export function ownRows(B: number, shard: Shard): { start: number; n: number } {
  const start = Math.floor((shard.rank * B) / shard.worldSize);
  return { start, n: Math.floor(((shard.rank + 1) * B) / shard.worldSize) - start };
}

/** Micro-batch i runs on rank i mod worldSize (a rank may get none). */
export const owns = (i: number, shard: Shard) => i % shard.worldSize === shard.rank;
