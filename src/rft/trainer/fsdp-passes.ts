// When a fully sharded model's units (./fsdp.ts) are gathered, released and reduced during a forward/backward pass:
// the pass pauses at its layer boundaries (../../model/training-trunk.ts PassPoint) and ShardedPasses.at() does the
// unit work there, awaiting its collectives.
//
//   start                      gather the root (embeddings, final norm, LM head: read until the end of the pass);
//                              prefetch layer 0
//   before layer i's forward   wait for layer i's gather, install it; prefetch layer i + 1
//   after layer i's forward    release layer i (reshardAfterForward; else it stays until its backward)
//   before layer i's backward  wait for layer i's gather (issued now if not yet), install it; prefetch layer i - 1
//   after layer i's backward   reduce-scatter layer i's gradients (issued now, awaited at the end), release layer i
//   end                        layers whose backward did not run (no gradient reached them) are walked as if it had,
//                              with zero gradients; reduce-scatter the root's, release it, await every reduction
//
// A forward-only pass (start with backward: false: the step's whole-batch forwards without gradient, ./batch-forwards.ts)
// releases each layer after its forward whatever reshardAfterForward says, and its end releases the root and reduces
// nothing: so those forwards too hold at most the root and two layers, however many rows they run.
//
// A prefetched gather is issued before the layer before it computes, so Gloo's transfer (on a pool thread) overlaps
// that layer's forward or backward; at most two layers and the root are gathered at once. Every rank must issue the
// same collectives in the same order: the schedule depends only on the points, and a rank with fewer micro-batches
// than another runs idlePass(), the same points without compute. The backward points exist only with activation
// checkpointing (each layer recomputed from its input), which fully sharded training therefore requires.
import type { PassPoint } from '../../model/index.js';
import * as torch from '../../torch/index.js';
import type { ProcessGroup, Tensor } from '../../torch/index.js';
import type { GroupStepCollectives } from './data-parallel.js';
import { type FullyShardedModel, ROOT_UNIT } from './fsdp.js';

export interface ShardedPassOptions {
  /** Issue the next layer's gather before this layer computes (default true). */
  prefetch?: boolean;
  /** Release a layer after its forward and gather it again for its backward (default true, FSDP2's default). */
  reshardAfterForward?: boolean;
}

export class ShardedPasses {
  readonly #sharded: FullyShardedModel;
  readonly #group: ProcessGroup;
  readonly #prefetch: boolean;
  readonly #reshard: boolean;
  /** Gathers issued and not yet installed, by unit. */
  readonly #pending = new Map<number, Promise<Map<string, Tensor>>>();
  #reductions: Promise<void>[] = [];
  /** Layers whose backward ran in this pass. */
  readonly #backwardDone = new Set<number>();
  /** This pass has no backward (its start said backward: false). */
  #forwardOnly = false;

  constructor(sharded: FullyShardedModel, group: ProcessGroup, options: ShardedPassOptions = {}) {
    this.#sharded = sharded;
    this.#group = group;
    this.#prefetch = options.prefetch ?? true;
    this.#reshard = options.reshardAfterForward ?? true;
  }

  /** The unit work at `point` (see the header). */
  async at(point: PassPoint): Promise<void> {
    const layers = this.#sharded.numLayers;
    if (point.at === 'start') {
      this.#backwardDone.clear();
      this.#reductions = [];
      this.#forwardOnly = point.backward === false;
      this.#issue(ROOT_UNIT);
      if (this.#prefetch && layers > 0) this.#issue(0);
      await this.#install(ROOT_UNIT);
      return;
    }
    if (point.at === 'end' && this.#forwardOnly) {
      for (let i = 0; i < layers; i++) this.#sharded.release(i);
      this.#sharded.release(ROOT_UNIT);
      return;
    }
    if (point.at === 'end') {
      for (let i = layers - 1; i >= 0; i--) {
        if (this.#backwardDone.has(i)) continue;
        await this.at({ at: 'layer', layer: i, phase: 'backward', edge: 'before' });
        await this.at({ at: 'layer', layer: i, phase: 'backward', edge: 'after' });
      }
      this.#reductions.push(this.#sharded.reduceGradients(ROOT_UNIT, this.#group));
      this.#sharded.release(ROOT_UNIT);
      const reductions = this.#reductions;
      this.#reductions = [];
      await Promise.all(reductions);
      return;
    }
    const { layer, phase, edge } = point;
    if (phase === 'forward') {
      if (edge === 'before') {
        if (this.#prefetch && layer + 1 < layers) this.#issue(layer + 1);
        await this.#install(layer);
      } else if (this.#reshard || this.#forwardOnly) this.#sharded.release(layer);
      return;
    }
    if (edge === 'before') {
      if (this.#prefetch && layer > 0 && (this.#reshard || !this.#sharded.isInstalled(layer - 1))) this.#issue(layer - 1);
      await this.#install(layer);
    } else {
      this.#reductions.push(this.#sharded.reduceGradients(layer, this.#group));
      this.#sharded.release(layer);
      this.#backwardDone.add(layer);
    }
  }

  /**
   * The points of one pass without compute: a rank whose share of the step has fewer micro-batches than another's, or
   * no rows of a whole-batch forward (backward false: a forward-only pass).
   */
  async idlePass(options: { backward?: false } = {}): Promise<void> {
    const layers = this.#sharded.numLayers;
    await this.at({ at: 'start', ...options });
    for (let i = 0; i < layers; i++) {
      await this.at({ at: 'layer', layer: i, phase: 'forward', edge: 'before' });
      await this.at({ at: 'layer', layer: i, phase: 'forward', edge: 'after' });
    }
    await this.at({ at: 'end' });
  }

  /** Every unit gathered (a weight sync, a weights folder under LoRA); release with releaseAll. */
  async gatherAll(trainable = false): Promise<void> {
    const gathers = this.#sharded.units.map((u) => ({
      index: u.index,
      gathered: this.#sharded.gather(u.index, this.#group, this.#sharded.computeDtype, trainable),
    }));
    for (const { index, gathered } of gathers) this.#sharded.install(index, await gathered);
  }

  /**
   * A rank that only takes part in another rank's gatherAll (rank 0's weight sync): each unit's all-gather in the
   * same order, each dropped as it arrives, so this rank holds one unit at a time.
   */
  async joinGatherAll(): Promise<void> {
    for (const u of this.#sharded.units)
      this.#sharded.discard(u.index, await this.#sharded.gather(u.index, this.#group, this.#sharded.computeDtype, false));
  }

  releaseAll(): void {
    for (const u of this.#sharded.units) this.#sharded.release(u.index);
  }

  /** Issues unit `index`'s gather unless it is issued or installed. */
  #issue(index: number): void {
    if (this.#pending.has(index) || this.#sharded.isInstalled(index)) return;
    this.#pending.set(index, this.#sharded.gather(index, this.#group));
  }

  async #install(index: number): Promise<void> {
    if (this.#sharded.isInstalled(index)) return;
    this.#issue(index);
    const pending = this.#pending.get(index) as Promise<Map<string, Tensor>>;
    this.#pending.delete(index);
    this.#sharded.install(index, await pending);
  }

  /** Drops gathers still in flight (a failed step): their results are disposed when they arrive. */
  dispose(): void {
    for (const [index, pending] of this.#pending) pending.then((g) => this.#sharded.discard(index, g)).catch(() => {});
    this.#pending.clear();
  }
}

/**
 * The step's collectives for a fully sharded policy: `base` (the group's data-parallel collectives, made without an
 * overlap plan or ZeRO-1) sums the per-row tensors, the metrics and any replicated model's gradients (a critic);
 * the policy's shards get their gradients from the passes' reductions and are clipped by the global norm.
 */
export function shardedCollectives(
  base: GroupStepCollectives,
  sharded: FullyShardedModel,
  group: ProcessGroup,
  options: ShardedPassOptions = {},
): GroupStepCollectives & { passes: ShardedPasses } {
  const passes = new ShardedPasses(sharded, group, options);
  const shards = new Set(sharded.shards);
  const ofShards = (params: readonly Tensor[]) => params.length > 0 && params.every((p) => shards.has(p));
  return {
    passes,
    rank: base.rank,
    worldSize: base.worldSize,
    shardsParameters: true,
    sum: (tensors) => base.sum(tensors),
    sumMetrics: (sums) => base.sumMetrics(sums),
    async sumGradients(params) {
      if (!ofShards(params)) await base.sumGradients(params); // the shards' were reduced layer by layer
    },
    clipGradNorm: async (params, maxNorm) =>
      ofShards(params) ? sharded.clipGradNorm(group, maxNorm) : torch.scope(() => torch.clipGradNorm(params, maxNorm)),
    passPoint: (point) => passes.at(point),
    idlePass: (options) => passes.idlePass(options),
    dispose() {
      passes.dispose();
      base.dispose();
    },
  };
}
