// The rollout engine's KV cache and who may use it: slots handed to sequences, and with a paged cache
// (../model/paged-kv-cache.ts) the blocks behind them. The engine (./rollout-engine.ts) asks here whether a waiting
// sequence can start, which running sequences must give their blocks back before a decode step (preemption), and
// what the cache holds for metrics.
//
// Two layouts (RolloutEngineOptions.kvCache):
//   slots   ../model/kv-cache.ts: `slots` sequences of maxLength positions each, reserved whatever they use; a
//           sequence starts when a slot is free and never runs out
//   paged   `slots` block tables over kvBlocks blocks of kvBlockSize positions: a sequence starts when a slot is free
//           and the blocks of its prompt are (less what the prefix cache already holds); it takes a block each
//           kvBlockSize tokens it decodes. When a decode step needs more blocks than are available, the most recently
//           started sequences are preempted (their blocks released, vLLM's recompute policy) until the others fit;
//           a preempted sequence starts again later from its prompt and the tokens it had, with no new sampling
// Slots are handed out lowest first: running rows in consecutive slots read the slot cache through a view.
import type { CausalLM, KVCache, PagedKVCache, PagedKVCacheStats, SequenceKVCache } from '../model/index.js';
import type { Sequence } from './request-state.js';

/** The layout's settings (the engine's options with their defaults). */
export interface CacheLayout {
  slots: number;
  maxLength: number;
  /** null: the slot layout. */
  paged: { numBlocks: number; blockSize: number; prefixCaching: boolean } | null;
}

export class SequenceSlots {
  readonly cache: SequenceKVCache;
  readonly #slotCache: KVCache | null;
  readonly #paged: PagedKVCache | null;
  /** Free slots, ascending. */
  readonly #free: number[];
  /** Running sequences in the order they started (the last is preempted first). */
  readonly #started: Sequence[] = [];
  #preemptions = 0;

  constructor(model: CausalLM, layout: CacheLayout) {
    const { slots, maxLength, paged } = layout;
    if (paged === null) {
      this.#slotCache = model.createKVCache({ slots, maxLength });
      this.#paged = null;
      this.cache = this.#slotCache;
    } else {
      this.#paged = model.createPagedKVCache({ slots, maxLength, ...paged });
      this.#slotCache = null;
      this.cache = this.#paged;
    }
    this.#free = Array.from({ length: slots }, (_, s) => s);
  }

  get freeSlots(): number {
    return this.#free.length;
  }

  /** Sequences preempted so far (paged). */
  get preemptions(): number {
    return this.#preemptions;
  }

  /** The paged cache's blocks and prefix-cache counters; null for the slot layout. */
  get pagedStats(): PagedKVCacheStats | null {
    return this.#paged?.stats ?? null;
  }

  /** Positions of `tokenIds` the prefix cache holds now (0 without one): a start would not prefill them. */
  cachedPrefix(tokenIds: readonly number[]): number {
    return this.#paged?.prefixCaching ? this.#paged.cachedLength(tokenIds) : 0;
  }

  /**
   * Starts `seq`, whose first forward writes `tokenIds`, in the lowest free slot: returns the positions already
   * cached (its forward runs tokenIds from there), or null when no slot or (paged) not enough blocks are free.
   */
  start(seq: Sequence, tokenIds: readonly number[]): number | null {
    const slot = this.#free[0];
    if (slot === undefined) return null;
    let cached = 0;
    if (this.#paged !== null) {
      const admitted = this.#paged.admit(slot, tokenIds);
      if (admitted === null) return null;
      cached = admitted;
    } else this.#slotCache?.reset(slot);
    this.#take(seq, slot);
    return cached;
  }

  /**
   * Starts a sample of a prompt of `promptLength` tokens that another sequence of the batch prefills: it gets that
   * sequence's cache by planCopy. False when no slot or (paged) no block for its copy of the last partial block.
   */
  startSample(seq: Sequence, promptLength: number): boolean {
    const slot = this.#free[0];
    if (slot === undefined) return false;
    if (this.#paged !== null) {
      if (!this.#paged.admitSample(slot, promptLength)) return false;
    } else this.#slotCache?.reset(slot);
    this.#take(seq, slot);
    return true;
  }

  /** The cache of `from` copied (slots) or shared (paged) into each of `to`, at commit (see KVCache.planCopy). */
  planCopy(from: number, to: readonly number[]): { commit(): void } {
    return (this.#paged ?? (this.#slotCache as KVCache)).planCopy(from, to);
  }

  /** `seq` leaves its slot (paged: its blocks are released, kept in the prefix cache where registered). */
  release(seq: Sequence): void {
    const slot = seq.slot;
    seq.slot = -1;
    const at = this.#started.indexOf(seq);
    if (at !== -1) this.#started.splice(at, 1);
    this.#paged?.reset(slot);
    const free = this.#free.findIndex((s) => s > slot);
    this.#free.splice(free === -1 ? this.#free.length : free, 0, slot);
  }

  /**
   * Before a decode step of `batch` (one new position each): takes the blocks it needs, preempting the most
   * recently started sequences until the others fit. Returns the preempted ones (released; the caller requeues
   * them); the slot layout never preempts.
   */
  growForDecode(batch: readonly Sequence[]): Sequence[] {
    const paged = this.#paged;
    if (paged === null) return [];
    const preempted: Sequence[] = [];
    for (const seq of [...this.#started]) {
      if (!batch.includes(seq) || seq.slot === -1) continue;
      while (!paged.grow(seq.slot, 1)) {
        const victim = this.#started[this.#started.length - 1] as Sequence;
        this.release(victim);
        preempted.push(victim);
        this.#preemptions++;
        if (victim === seq) break;
      }
    }
    return preempted;
  }

  /** A weight sync: the prefix cache forgets every block computed before it. */
  invalidatePrefixCache(): void {
    this.#paged?.invalidatePrefixCache();
  }

  #take(seq: Sequence, slot: number): void {
    this.#free.shift();
    seq.slot = slot;
    this.#started.push(seq);
  }
}
