// The bookkeeping of a paged KV cache (./paged-kv-cache.ts): which blocks are free, who holds each block, and the
// prefix cache over them. Plain JavaScript, no tensors: the cache owns the storage, this file owns the block ids.
//
// A block holds `blockSize` consecutive positions of one sequence. Block 0 is never handed out: it is the scratch
// block where the padding tokens of a padded prefill are written (and never read). Every other block is in exactly
// one of three states:
//   free        on the free list, no content anyone may read
//   held        refs(b) >= 1 sequences have it in their block table (the n samples of a prompt share its full blocks)
//   cached      refs(b) = 0 but its content is a full block registered in the prefix cache: reusable by a later
//               sequence with the same prefix, or evicted (least recently released first) when a block is needed
//
// Prefix cache: a full block is keyed by
//   key(block i of a sequence) = sha256(key(block i − 1) ‖ generation ‖ the block's token ids)
// so a key names the whole prefix up to the block's end, not only its own tokens. `generation` is bumped by
// invalidate() (a weight sync): keys made before it never match after it, and cached blocks are freed at once; a
// block still held then loses its key and is freed when its last holder lets go.
import { createHash } from 'node:crypto';

/** Counters of the prefix cache since the pool was made (cumulative, for metrics). */
export interface PrefixCacheStats {
  /** Full prompt blocks found in the prefix cache (their positions were not prefilled again). */
  hits: number;
  /** Full prompt blocks looked up and not found. */
  misses: number;
  /** Cached blocks taken back for new content (least recently used first). */
  evictions: number;
  /** Times the whole prefix cache was dropped (weight syncs). */
  invalidations: number;
}

export class KVBlockPool {
  readonly numBlocks: number;
  readonly blockSize: number;
  readonly prefixCaching: boolean;
  readonly #refs: Int32Array;
  /** Free blocks, used as a stack (the last freed is reused first). */
  readonly #free: number[] = [];
  /** Cached blocks nobody holds, least recently released first (a Map keeps insertion order). */
  readonly #evictable = new Map<number, true>();
  readonly #blockOfKey = new Map<string, number>();
  readonly #keyOfBlock = new Map<number, string>();
  #generation = 0;
  readonly stats: PrefixCacheStats = { hits: 0, misses: 0, evictions: 0, invalidations: 0 };

  constructor(options: { numBlocks: number; blockSize: number; prefixCaching: boolean }) {
    const { numBlocks, blockSize } = options;
    if (!Number.isInteger(numBlocks) || numBlocks < 2)
      throw new RangeError(`KV block pool: numBlocks must be an integer >= 2 (block 0 is scratch), got ${numBlocks}`);
    if (!Number.isInteger(blockSize) || blockSize <= 0)
      throw new RangeError(`KV block pool: blockSize must be a positive integer, got ${blockSize}`);
    this.numBlocks = numBlocks;
    this.blockSize = blockSize;
    this.prefixCaching = options.prefixCaching;
    this.#refs = new Int32Array(numBlocks);
    for (let b = numBlocks - 1; b >= 1; b--) this.#free.push(b);
  }

  /** Bumped by invalidate(): a sequence started in an older generation registers none of its blocks. */
  get generation(): number {
    return this.#generation;
  }

  /** Blocks a sequence can get now: free ones plus cached ones nobody holds (evicted on demand). */
  get available(): number {
    return this.#free.length + this.#evictable.size;
  }

  /** Blocks held by at least one sequence. */
  get held(): number {
    return this.numBlocks - 1 - this.available;
  }

  /** Cached blocks nobody holds. */
  get cached(): number {
    return this.#evictable.size;
  }

  /** The key of a full block of `tokens` (blockSize ids) after the block keyed `parent` ('' for the first block). */
  blockKey(parent: string, tokens: readonly number[]): string {
    return createHash('sha256')
      .update(`${parent}|${this.#generation}|`)
      .update(new Uint8Array(Int32Array.from(tokens).buffer))
      .digest('hex');
  }

  /** The keys of the first `fullBlocks` blocks of `tokenIds` (block i covers tokens [i·blockSize, (i+1)·blockSize)). */
  blockKeys(tokenIds: readonly number[], fullBlocks: number): string[] {
    const keys: string[] = [];
    for (let i = 0; i < fullBlocks; i++)
      keys.push(this.blockKey(keys[i - 1] ?? '', tokenIds.slice(i * this.blockSize, (i + 1) * this.blockSize)));
    return keys;
  }

  /** The cached blocks of the longest cached prefix of `keys` (nothing changes: see take()). */
  lookup(keys: readonly string[]): number[] {
    const blocks: number[] = [];
    if (!this.prefixCaching) return blocks;
    for (const key of keys) {
      const block = this.#blockOfKey.get(key);
      if (block === undefined) break;
      blocks.push(block);
    }
    return blocks;
  }

  /** Blocks available to a sequence that would take `matched` (cached blocks it reuses are not available twice). */
  availableBesides(matched: readonly number[]): number {
    return this.available - matched.filter((b) => this.#evictable.has(b)).length;
  }

  /** Holds cached blocks (a prefix hit) and counts `looked` blocks looked up, `blocks.length` of them hits. */
  take(blocks: readonly number[], looked: number): void {
    for (const b of blocks) this.#hold(b);
    this.stats.hits += blocks.length;
    this.stats.misses += looked - blocks.length;
  }

  /** Another holder for held blocks (a sample sharing its prompt's full blocks). */
  share(blocks: readonly number[]): void {
    for (const b of blocks) {
      if ((this.#refs[b] as number) <= 0) throw new Error(`KV block pool: block ${b} is shared but not held`);
      this.#hold(b);
    }
  }

  /** A fresh block, held once: a free one, else the least recently released cached one (evicted). */
  allocate(): number {
    let block = this.#free.pop();
    if (block === undefined) {
      const oldest = this.#evictable.keys().next();
      if (oldest.done) throw new RangeError(`KV block pool: all ${this.numBlocks - 1} blocks are held`);
      block = oldest.value;
      this.#evictable.delete(block);
      this.#forget(block);
      this.stats.evictions++;
    }
    this.#refs[block] = 1;
    return block;
  }

  /** One holder lets go of each block; a block nobody holds becomes cached (if it has a key) or free. */
  release(blocks: readonly number[]): void {
    for (const b of blocks) {
      const refs = (this.#refs[b] as number) - 1;
      if (refs < 0) throw new Error(`KV block pool: block ${b} released more often than held`);
      this.#refs[b] = refs;
      if (refs > 0) continue;
      if (this.#keyOfBlock.has(b)) this.#evictable.set(b, true);
      else this.#free.push(b);
    }
  }

  /**
   * Registers a held full block under its prefix key (prefix caching on). A key already cached keeps its block (two
   * sequences computed the same prefix at once); this one stays unregistered and is freed when released.
   */
  register(block: number, key: string): void {
    if (!this.prefixCaching || this.#blockOfKey.has(key) || this.#keyOfBlock.has(block)) return;
    this.#blockOfKey.set(key, block);
    this.#keyOfBlock.set(block, key);
  }

  /** Drops every key (weight sync): cached blocks are freed now, held ones when released. */
  invalidate(): void {
    this.#generation++;
    this.#blockOfKey.clear();
    this.#keyOfBlock.clear();
    for (const b of this.#evictable.keys()) this.#free.push(b);
    this.#evictable.clear();
    this.stats.invalidations++;
  }

  #hold(block: number): void {
    if ((this.#refs[block] as number) === 0) this.#evictable.delete(block);
    this.#refs[block] = (this.#refs[block] as number) + 1;
  }

  #forget(block: number): void {
    const key = this.#keyOfBlock.get(block);
    if (key === undefined) return;
    this.#keyOfBlock.delete(block);
    this.#blockOfKey.delete(key);
  }
}
