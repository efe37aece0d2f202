// A paged key/value cache: sequences hold fixed-size blocks of positions, allocated as they grow, shared where their
// prefixes are the same, and kept after they end for a later sequence with the same prefix (vLLM's PagedAttention and
// automatic prefix caching, after Kwon et al. 2023, "Efficient Memory Management for Large Language Model Serving
// with PagedAttention").
//
// Layout, per layer (allocated in the constructor):
//   keys[layer], values[layer] : [numBlocks · blockSize, kvHeads, headDim]     position-major
//   position p of slot s lives at row  table(s)[⌊p / blockSize⌋] · blockSize + p mod blockSize
// Block 0 is scratch: padding tokens of a padded prefill are written there and never read (./kv-blocks.ts).
//
// A forward over a plan (plan(), then begin() inside the model):
//   write   rows[writeIndex[b, t]] = new key/value of token t of row b               (indexCopy_, one op per buffer)
//   read    keys of row b = blocks readBlocks[b, i] for i < ⌈keyLength / blockSize⌉, as [B, kvHeads, keyLength,
//           headDim] (whole blocks by indexSelect, then a view; past a row's blocks the scratch block; masked)
//   mask    mask[b, 0, t, j] = j <= position(b, t)
// Padding is right padding only (the real tokens of a row come first), so every position below a real query's is a
// real token of its own sequence. One-token steps on the CPU (decode steps) read a copy of the batch's rows kept
// between steps instead of gathering them again (./paged-decode-copy.ts: gathered when the batch changes, the new
// token written into the blocks and the copy). Measured: bench/README.md (bench:paged-decode, bench:multiturn).
//
// Slot s is a sequence's handle (numSlots of them: the most sequences held at once); its memory is its blocks. The
// engine admits a sequence by free blocks (admit, admitSample), grows it one block at a time while it decodes
// (grow: false when no block is left, so the engine can preempt) and releases it when it ends (reset). Full blocks
// are registered in the prefix cache at commit, keyed by every token before their end; admit() reuses the longest
// cached prefix of a prompt (always leaving its last token to compute: its logits give the first sampled token).
// A sequence started before invalidatePrefixCache() (a weight sync) registers nothing: its keys and values were
// computed, at least in part, by the old weights.
import { noGrad, type Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { KVBlockPool, type PrefixCacheStats } from './kv-blocks.js';
import { type CachePlan, type CacheStep, type PlanOptions, type SequenceKVCache, writeRows } from './kv-cache.js';
import { DecodeCopy, gatherBlocks } from './paged-decode-copy.js';

export interface PagedKVCacheOptions {
  numLayers: number;
  numKeyValueHeads: number;
  headDim: number;
  /** Sequences held at once (block tables). */
  slots: number;
  /** Positions per sequence, at most (prompt + generated tokens). */
  maxLength: number;
  /** Blocks of storage (block 0 is scratch); at least enough for one sequence of maxLength positions. */
  numBlocks: number;
  /** Positions per block. Default 16. */
  blockSize?: number;
  /** Keep full blocks for reuse by a later sequence with the same prefix. */
  prefixCaching: boolean;
  /**
   * Decode steps on the CPU read a copy of the batch's rows kept between steps (./paged-decode-copy.ts) instead of
   * gathering every row's blocks each step. Default true; false gathers each step (the same values, less memory).
   */
  decodeCopy?: boolean;
  dtype?: torch.DType;
  device?: string;
}

/** The blocks and counters of a paged cache now (for metrics). */
export interface PagedKVCacheStats extends PrefixCacheStats {
  blockSize: number;
  totalBlocks: number;
  heldBlocks: number;
  cachedBlocks: number;
  freeBlocks: number;
  /** Positions per layer of the decode batch's copy held now (./paged-decode-copy.ts), beside the blocks. */
  decodeCopyPositions: number;
  /** Times the decode copy was gathered from the blocks (a batch's rows changed, or one outgrew the copy). */
  decodeCopyRebuilds: number;
}

/** How a plan's forward reads the rows: whole blocks gathered, or the decode copy (its version when planned). */
type PlanReads = { blocks: Tensor } | { copy: number };

interface SlotState {
  table: number[];
  /** Positions written (all real tokens). */
  length: number;
  /** The token ids at positions [0, length) (for prefix keys). */
  tokens: number[];
  /** keys[i]: the prefix key of full block i; the blocks registered so far. */
  keys: string[];
  /** The block pool's generation when the sequence started (an older one registers nothing). */
  generation: number;
  /** Length after the plan in flight (plan() sets it, commit() makes it the length). */
  planned: number;
}

export class PagedKVCache implements SequenceKVCache {
  readonly numSlots: number;
  readonly maxLength: number;
  readonly blockSize: number;
  readonly dtype: torch.DType;
  readonly #pool: KVBlockPool;
  readonly #keys: Tensor[] = [];
  readonly #values: Tensor[] = [];
  readonly #slots: SlotState[];
  readonly #device: string;
  /** Null: every forward gathers the blocks it reads. */
  readonly #decodeCopy: DecodeCopy | null;
  #disposed = false;
  readonly #plans = new WeakMap<CachePlan, PlanReads>();

  constructor(options: PagedKVCacheOptions) {
    const { numLayers, numKeyValueHeads, headDim, slots, maxLength, numBlocks } = options;
    const blockSize = options.blockSize ?? 16;
    for (const [name, v] of Object.entries({ numLayers, numKeyValueHeads, headDim, slots, maxLength, blockSize })) {
      if (!Number.isInteger(v) || v <= 0) throw new RangeError(`PagedKVCache: ${name} must be a positive integer, got ${v}`);
    }
    const perSequence = Math.ceil(maxLength / blockSize);
    if (!Number.isInteger(numBlocks) || numBlocks < perSequence + 1)
      throw new RangeError(
        `PagedKVCache: numBlocks must hold one sequence of maxLength ${maxLength} (${perSequence} blocks of ${blockSize} + the scratch block), got ${numBlocks}`,
      );
    this.numSlots = slots;
    this.maxLength = maxLength;
    this.blockSize = blockSize;
    this.dtype = options.dtype ?? 'float32';
    this.#device = options.device ?? 'cpu';
    this.#pool = new KVBlockPool({ numBlocks, blockSize, prefixCaching: options.prefixCaching });
    const create = { dtype: this.dtype, device: this.#device };
    for (let layer = 0; layer < numLayers; layer++) {
      this.#keys.push(torch.keep(torch.zeros([numBlocks * blockSize, numKeyValueHeads, headDim], create)));
      this.#values.push(torch.keep(torch.zeros([numBlocks * blockSize, numKeyValueHeads, headDim], create)));
    }
    this.#slots = Array.from({ length: slots }, () => emptySlot(0));
    const copies = (options.decodeCopy ?? true) && this.#device === 'cpu';
    this.#decodeCopy = copies ? new DecodeCopy({ blockSize, maxLength, maxPositions: numBlocks * blockSize }) : null;
  }

  get prefixCaching(): boolean {
    return this.#pool.prefixCaching;
  }

  get stats(): PagedKVCacheStats {
    const pool = this.#pool;
    return {
      ...pool.stats,
      blockSize: this.blockSize,
      totalBlocks: pool.numBlocks - 1,
      heldBlocks: pool.held,
      cachedBlocks: pool.cached,
      freeBlocks: pool.available - pool.cached,
      decodeCopyPositions: this.#decodeCopy?.positions ?? 0,
      decodeCopyRebuilds: this.#decodeCopy?.rebuilds ?? 0,
    };
  }

  /** Blocks a sequence could get now (free, or cached and unused). */
  get availableBlocks(): number {
    return this.#pool.available;
  }

  length(slot: number): number {
    return this.#slot(slot).length;
  }

  /** Real tokens cached: the same as length (a paged cache keeps no padding). */
  tokenCount(slot: number): number {
    return this.#slot(slot).length;
  }

  /** Blocks slot `slot` holds. */
  blocks(slot: number): readonly number[] {
    return this.#slot(slot).table;
  }

  /** Positions of `tokenIds` that admit() would find cached now (nothing changes, nothing is counted). */
  cachedLength(tokenIds: readonly number[]): number {
    if (!this.#pool.prefixCaching) return 0;
    const keys = this.#pool.blockKeys(tokenIds, Math.floor((tokenIds.length - 1) / this.blockSize));
    return this.#pool.lookup(keys).length * this.blockSize;
  }

  /**
   * Starts a sequence in empty slot `slot` whose first forward will write `tokenIds` (a prompt, or a preempted
   * sequence's tokens): reuses the longest cached prefix of full blocks (never the last token) and takes blocks for
   * the rest. Returns the cached positions (the caller runs tokenIds from there), or null, changing nothing, when
   * the blocks are not available.
   */
  admit(slot: number, tokenIds: readonly number[]): number | null {
    const state = this.#emptySlot(slot);
    const bs = this.blockSize;
    const needed = Math.ceil(tokenIds.length / bs);
    const keys = this.#pool.prefixCaching ? this.#pool.blockKeys(tokenIds, Math.floor((tokenIds.length - 1) / bs)) : [];
    const matched = this.#pool.lookup(keys);
    if (this.#pool.availableBesides(matched) < needed - matched.length) return null;
    this.#pool.take(matched, keys.length);
    const cached = matched.length * bs;
    Object.assign(state, emptySlot(this.#pool.generation), {
      table: [...matched],
      length: cached,
      planned: cached,
      tokens: tokenIds.slice(0, cached),
      keys: keys.slice(0, matched.length),
    });
    while (state.table.length < needed) state.table.push(this.#pool.allocate());
    return cached;
  }

  /**
   * Starts a sample of a prompt of `promptLength` tokens in empty slot `slot`, to get the prompt's blocks by
   * planCopy: takes the one block its copy of the prompt's last, partial block needs (none when the prompt fills
   * whole blocks). False, changing nothing, when no block is available.
   */
  admitSample(slot: number, promptLength: number): boolean {
    const state = this.#emptySlot(slot);
    const partial = promptLength % this.blockSize !== 0 ? 1 : 0;
    if (this.#pool.available < partial) return false;
    Object.assign(state, emptySlot(this.#pool.generation), { table: partial ? [this.#pool.allocate()] : [] });
    return true;
  }

  /** Takes the blocks slot `slot` needs for `tokens` more positions; false, changing nothing, if not available. */
  grow(slot: number, tokens: number): boolean {
    const state = this.#slot(slot);
    const needed = Math.ceil((state.length + tokens) / this.blockSize) - state.table.length;
    if (needed <= 0) return true;
    if (this.#pool.available < needed) return false;
    for (let i = 0; i < needed; i++) state.table.push(this.#pool.allocate());
    return true;
  }

  /** Ends slot `slot`'s sequence: its blocks are released (kept in the prefix cache where registered). */
  reset(slot: number): void {
    const state = this.#slot(slot);
    this.#decodeCopy?.drop(slot);
    this.#pool.release(state.table);
    this.#slots[slot] = emptySlot(this.#pool.generation);
  }

  /** Weight sync: no block computed before it is reused after it. */
  invalidatePrefixCache(): void {
    this.#pool.invalidate();
  }

  /**
   * The samples in slots `to` (each started by admitSample) get `from`'s prompt at commit(): its full blocks shared,
   * its last partial block copied into their own block. Plan after `from`'s prefill plan, commit after its forward.
   * Creates tensors in the caller's scope.
   */
  planCopy(from: number, to: readonly number[]): { commit(): void } {
    const source = this.#slot(from);
    const length = source.planned;
    const full = Math.floor(length / this.blockSize);
    const partial = length % this.blockSize !== 0 ? (source.table[full] as number) : null;
    for (const slot of to) {
      const state = this.#slot(slot);
      if (slot === from || state.length !== 0 || state.table.length !== (partial === null ? 0 : 1))
        throw new RangeError(`PagedKVCache: planCopy onto slot ${slot}, which was not started by admitSample`);
    }
    const targets = to.map((slot) => this.#slot(slot).table[0] as number);
    const targetIndex =
      partial === null || to.length === 0 ? null : torch.tensor(BigInt64Array.from(targets, BigInt), { device: this.#device });
    let done = false;
    return {
      commit: () => {
        if (done) return;
        done = true;
        if (targetIndex !== null) this.#copyBlock(partial as number, targetIndex, to.length);
        const shared = source.table.slice(0, full);
        for (const slot of to) {
          this.#pool.share(shared);
          const state = this.#slot(slot);
          Object.assign(state, {
            table: [...shared, ...state.table],
            length,
            planned: length,
            tokens: [...source.tokens],
            keys: [...source.keys],
            generation: source.generation,
          });
        }
      },
    };
  }

  #copyBlock(source: number, targets: Tensor, count: number): void {
    noGrad(() =>
      torch.scope(() => {
        for (const buffer of [...this.#keys, ...this.#values]) {
          const [rows, heads, dim] = buffer.shape as [number, number, number];
          const blocks = buffer.view([rows / this.blockSize, this.blockSize, heads, dim]);
          const block = blocks.narrow(0, source, 1).clone();
          blocks.indexCopy_(0, targets, block.expand([count, this.blockSize, heads, dim]));
        }
      }),
    );
  }

  /**
   * Plans a forward of T new tokens for the sequences in `slots`; each row's real tokens come first (right padding
   * only). Takes the blocks the new tokens need (a RangeError when they are not available: grow() first). Creates
   * the plan's tensors in the caller's scope.
   */
  plan(
    slots: readonly number[],
    newTokens: number,
    realTokens: readonly (readonly boolean[])[] | null,
    options: PlanOptions = {},
  ): CachePlan {
    if (this.#disposed) throw new Error('PagedKVCache was disposed');
    if (new Set(slots).size !== slots.length)
      throw new RangeError(`PagedKVCache: slots must be distinct, got [${slots.join(', ')}]`);
    const bucket = options.keyBucket ?? 1;
    if (!Number.isInteger(bucket) || bucket <= 0)
      throw new RangeError(`PagedKVCache: keyBucket must be a positive integer, got ${bucket}`);
    const batch = slots.length;
    const reals = slots.map((slot, b) => realCount(realTokens?.[b] ?? null, newTokens, slot));
    slots.forEach((slot, b) => {
      const state = this.#slot(slot);
      const real = reals[b] as number;
      if (state.length + real > this.maxLength)
        throw new RangeError(
          `PagedKVCache: slot ${slot} is full: ${state.length} positions used + ${real} new > maxLength ${this.maxLength}`,
        );
      if (!this.grow(slot, real))
        throw new RangeError(
          `PagedKVCache: no block left for slot ${slot} (${this.#pool.available} available): grow() before planning`,
        );
    });
    const starts = slots.map((s) => this.#slot(s).length);
    const keyLength = Math.min(this.maxLength, Math.ceil((Math.max(...starts) + newTokens) / bucket) * bucket);
    const write = new BigInt64Array(batch * newTokens); // pads: row 0 (scratch)
    const positions = new BigInt64Array(batch * newTokens);
    slots.forEach((slot, b) => {
      const { table } = this.#slot(slot);
      const start = starts[b] as number;
      const end = start + (reals[b] as number);
      for (let t = 0; t < newTokens; t++) {
        positions[b * newTokens + t] = BigInt(start + t);
        if (start + t < end) write[b * newTokens + t] = BigInt(this.#row(table, start + t));
      }
    });
    const device = this.#device;
    const writeIndex = torch.tensor(write, { device });
    const cachePositions = torch.tensor(positions, { shape: [batch, newTokens], device });
    const tokenOffsets = torch.tensor(BigInt64Array.from(starts, BigInt), { shape: [batch, 1], device });
    const padded = realTokens !== null && reals.some((r) => r !== newTokens);
    const real = padded
      ? torch.tensor(
          Uint8Array.from({ length: batch * newTokens }, (_, i) =>
            i % newTokens < (reals[Math.floor(i / newTokens)] as number) ? 1 : 0,
          ),
          {
            shape: [batch, newTokens],
            dtype: 'bool',
            device,
          },
        )
      : null;
    const { reads, inputs, shape } = this.#planReads(slots, starts, reals, newTokens === 1 && !padded, keyLength, bucket);
    slots.forEach((slot, b) => {
      this.#slot(slot).planned = (starts[b] as number) + (reals[b] as number);
    });
    let committed = false;
    const plan: CachePlan = {
      slots: [...slots],
      newTokens,
      keyLength,
      shapeKey: `paged:${batch}x${newTokens}:${keyLength}:${real === null ? 'real' : 'masked'}:${shape}`,
      stepInputs: [writeIndex, cachePositions, tokenOffsets, ...inputs],
      realTokens: real,
      tokenOffsets,
      commit: () => {
        if (committed) return;
        committed = true;
        slots.forEach((slot, b) => {
          this.#advance(slot, reals[b] as number, options.tokenIds?.[b] ?? null);
        });
        if ('copy' in reads) this.#decodeCopy?.advance(reads.copy);
      },
    };
    this.#plans.set(plan, reads);
    return plan;
  }

  /**
   * How a plan's forward reads its rows: a one-token step on the CPU (`oneToken`) reads the decode copy, rebuilt here
   * when it does not hold these rows as they are (its tensors become step inputs); anything else gathers whole blocks
   * (the block ids, past a row's real tokens the scratch block, are the step input).
   */
  #planReads(
    slots: readonly number[],
    starts: readonly number[],
    reals: readonly number[],
    oneToken: boolean,
    keyLength: number,
    bucket: number,
  ): { reads: PlanReads; inputs: readonly Tensor[]; shape: string } {
    const copy = this.#decodeCopy;
    if (copy !== null && oneToken) {
      if (copy.holds(slots, starts, keyLength) || copy.fits(starts, keyLength, bucket)) {
        if (!copy.holds(slots, starts, keyLength)) {
          const tables = slots.map((slot) => this.#slot(slot).table);
          copy.rebuild({ keys: this.#keys, values: this.#values }, { slots, tables, lengths: starts }, keyLength, bucket);
        }
        return { reads: { copy: copy.version }, inputs: copy.tensors, shape: `copy${copy.capacity}` };
      }
      copy.drop(); // a batch whose copy would not fit the memory bound gathers its rows each step
    }
    const bs = this.blockSize;
    const perRow = Math.ceil(keyLength / bs);
    const read = new BigInt64Array(slots.length * perRow);
    slots.forEach((slot, b) => {
      const { table } = this.#slot(slot);
      const used = Math.ceil(((starts[b] as number) + (reals[b] as number)) / bs);
      for (let i = 0; i < used; i++) read[b * perRow + i] = BigInt(table[i] as number);
    });
    const blocks = torch.tensor(read, { device: this.#device });
    return { reads: { blocks }, inputs: [blocks], shape: 'blocks' };
  }

  /** Starts a forward over `plan` (from plan() on this cache). Creates tensors in the caller's scope. */
  begin(plan: CachePlan): CacheStep {
    if (this.#disposed) throw new Error('PagedKVCache was disposed');
    const reads = this.#plans.get(plan);
    if (reads === undefined) throw new Error('PagedKVCache: this plan was made by another cache');
    if ('copy' in reads && reads.copy !== this.#decodeCopy?.version)
      throw new Error('PagedKVCache: the decode copy this plan reads was rebuilt or dropped since (plan the step again)');
    const [writeIndex, cachePositions, , ...readInputs] = plan.stepInputs as Tensor[];
    const batch = plan.slots.length;
    const { keyLength } = plan;
    const key = torch.arange(keyLength, { device: this.#device }).view([1, 1, 1, keyLength]);
    const attentionMask = key.le((cachePositions as Tensor).unsqueeze(-1).unsqueeze(1)); // [B, 1, T, keyLength]
    const layers = this.#keys.length;
    // the decode copy: row b of its tensors is the plan's row b, written at the row's new position
    const rowList = 'copy' in reads ? torch.arange(batch, { device: this.#device }) : null;
    const read = (layer: number, which: 0 | 1, source: Tensor): Tensor => {
      if (rowList === null)
        return gatherBlocks(
          (which === 0 ? this.#keys : this.#values)[layer] as Tensor,
          readInputs[0] as Tensor,
          batch,
          this.blockSize,
          keyLength,
        );
      const copy = readInputs[which * layers + layer] as Tensor;
      noGrad(() => writeRows(copy, rowList, cachePositions as Tensor, source.detach()));
      return copy.narrow(2, 0, keyLength);
    };
    return {
      plan,
      attentionMask,
      update: (layer, keys, values) => {
        noGrad(() => {
          for (const [buffer, source] of [
            [this.#keys[layer] as Tensor, keys],
            [this.#values[layer] as Tensor, values],
          ] as const) {
            const [, heads, tokens, dim] = source.shape as [number, number, number, number];
            buffer.indexCopy_(
              0,
              writeIndex as Tensor,
              source
                .detach()
                .transpose(1, 2)
                .reshape([batch * tokens, heads, dim]),
            );
          }
        });
        return { keys: read(layer, 0, keys), values: read(layer, 1, values) };
      },
      commit: () => plan.commit(),
    };
  }

  /** After a forward: the new positions count, and blocks they filled join the prefix cache. */
  #advance(slot: number, real: number, tokenIds: readonly number[] | null): void {
    const state = this.#slot(slot);
    state.length += real;
    state.planned = state.length;
    if (!this.#pool.prefixCaching) return;
    if (tokenIds === null || tokenIds.length !== real)
      throw new RangeError(`PagedKVCache: prefix caching needs each row's ${real} new token ids (plan's tokenIds)`);
    state.tokens.push(...tokenIds);
    if (state.generation !== this.#pool.generation) return;
    const bs = this.blockSize;
    for (let i = state.keys.length; i < Math.floor(state.length / bs); i++) {
      const key = this.#pool.blockKey(state.keys[i - 1] ?? '', state.tokens.slice(i * bs, (i + 1) * bs));
      state.keys.push(key);
      this.#pool.register(state.table[i] as number, key);
    }
  }

  #row(table: readonly number[], position: number): number {
    return (table[Math.floor(position / this.blockSize)] as number) * this.blockSize + (position % this.blockSize);
  }

  #slot(slot: number): SlotState {
    const state = this.#slots[slot];
    if (!Number.isInteger(slot) || state === undefined)
      throw new RangeError(`PagedKVCache slot ${slot} out of range: the cache has ${this.numSlots} slots`);
    return state;
  }

  #emptySlot(slot: number): SlotState {
    const state = this.#slot(slot);
    if (state.table.length > 0) throw new RangeError(`PagedKVCache: slot ${slot} holds a sequence (reset it first)`);
    return state;
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#decodeCopy?.drop();
    for (const t of [...this.#keys, ...this.#values]) t.dispose();
  }

  get isDisposed(): boolean {
    return this.#disposed;
  }
}

function emptySlot(generation: number): SlotState {
  return { table: [], length: 0, tokens: [], keys: [], generation, planned: 0 };
}

/** The real tokens of a row: a prefix of its T tokens (right padding only). */
function realCount(row: readonly boolean[] | null, newTokens: number, slot: number): number {
  if (row === null) return newTokens;
  const real = row.findIndex((r) => !r);
  const count = real === -1 ? newTokens : real;
  for (let t = count; t < newTokens; t++)
    if (row[t]) throw new RangeError(`PagedKVCache: slot ${slot}'s tokens are padded on the left or inside (right padding only)`);
  return count;
}
