// A preallocated key/value cache with independent slots, for incremental decoding and continuous batching.
//
// Each slot holds one sequence (one request). Slots advance independently: a forward names the slot of each batch
// row, appends that row's new tokens at the slot's own end, and attends over the slot's valid prefix. Requests join
// (reset a free slot, prefill it) and leave (reset it) between decode steps without touching the other slots.
//
// Per slot s the cache remembers
//   length(s)      cache positions used (tokens written, pads included); the next token goes to position length(s)
//   tokenCount(s)  real (non-pad) tokens written = the RoPE position id of the next real token
//   keyValid[s, j] whether cache position j holds a real token: pads written by a padded batch stay false, so no
//                  later query ever attends to them
// Right padding is trimmed: a row's length advances only to just past its last real token, so the next forward
// overwrites the pads. Left padding (pads before real tokens) occupies cache positions that are masked forever.
//
// The cache is for inference: values are written detached, so no gradient flows through cached keys and values.
import { noGrad, type Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';

export interface KVCacheOptions {
  numLayers: number;
  numKeyValueHeads: number;
  headDim: number;
  /** Batch rows that can be cached at once (independent sequences). */
  slots: number;
  /** Cache positions per slot (prompt + generated tokens, pads of padded prefills included). */
  maxLength: number;
  dtype?: torch.DType;
  device?: string;
}

/** One forward's view of the cache (internal to the model): where each row's new tokens go, and the attention mask. */
export interface CacheStep {
  /** Cache position of each new token: [B, T] int64 (row b, token t at length(slot_b) + t). */
  readonly cachePositions: Tensor;
  /** Real tokens already in each row's slot (the RoPE position offset of the new tokens). */
  readonly tokenOffsets: readonly number[];
  /** Keys/values attended over: positions [0, keyLength) of each row's slot. */
  readonly keyLength: number;
  /** Boolean mask [B, 1, T, keyLength], true = attend: causal within the slot, real keys only, plus the diagonal. */
  readonly attentionMask: Tensor;
  /** Writes layer `layer`'s new keys/values [B, kvHeads, T, headDim]; returns the row's keys/values [B, kvHeads, keyLength, headDim]. */
  update(layer: number, keys: Tensor, values: Tensor): { keys: Tensor; values: Tensor };
  /** Advances the slots' lengths once every layer has written (a forward that throws leaves the lengths as they were). */
  commit(): void;
}

export class KVCache {
  readonly numLayers: number;
  readonly numSlots: number;
  readonly maxLength: number;
  readonly dtype: torch.DType;
  // Layout, per layer:  keys[layer], values[layer] : [slots, kvHeads, maxLength, headDim]
  //   slot-major so that one slot's prefix is keys[layer][s, :, :length(s), :] and the rows of a batch in consecutive
  //   slots 0..B-1 are a view (no copy); written in place with indexPut_ at [slot, :, position, :].
  readonly #keys: Tensor[] = [];
  readonly #values: Tensor[] = [];
  // keyValid : [slots, maxLength] bool, true where the position holds a real token.
  readonly #keyValid: Tensor;
  readonly #lengths: number[];
  readonly #tokens: number[];
  #disposed = false;

  constructor(options: KVCacheOptions) {
    const { numLayers, numKeyValueHeads, headDim, slots, maxLength } = options;
    for (const [name, v] of Object.entries({ numLayers, numKeyValueHeads, headDim, slots, maxLength })) {
      if (!Number.isInteger(v) || v <= 0) throw new RangeError(`KVCache: ${name} must be a positive integer, got ${v}`);
    }
    this.numLayers = numLayers;
    this.numSlots = slots;
    this.maxLength = maxLength;
    this.dtype = options.dtype ?? 'float32';
    const create = { dtype: this.dtype, ...(options.device ? { device: options.device } : {}) };
    try {
      for (let layer = 0; layer < numLayers; layer++) {
        this.#keys.push(torch.keep(torch.zeros([slots, numKeyValueHeads, maxLength, headDim], create)));
        this.#values.push(torch.keep(torch.zeros([slots, numKeyValueHeads, maxLength, headDim], create)));
      }
      this.#keyValid = torch.keep(
        torch.zeros([slots, maxLength], { dtype: 'bool', ...(options.device ? { device: options.device } : {}) }),
      );
    } catch (error) {
      for (const t of [...this.#keys, ...this.#values]) t.dispose();
      throw error;
    }
    this.#lengths = new Array<number>(slots).fill(0);
    this.#tokens = new Array<number>(slots).fill(0);
  }

  /** Cache positions used by `slot` (pads included). */
  length(slot: number): number {
    return this.#lengths[this.#checkSlot(slot)] as number;
  }

  /** Real tokens cached in `slot`: the position id of its next token. */
  tokenCount(slot: number): number {
    return this.#tokens[this.#checkSlot(slot)] as number;
  }

  /** Empties `slot` for a new sequence (its buffers are reused, not freed). */
  reset(slot: number): void {
    this.#checkSlot(slot);
    this.#lengths[slot] = 0;
    this.#tokens[slot] = 0;
    torch.scope(() => this.#keyValid.select(0, slot).fill_(false));
  }

  /**
   * Copies `from`'s cached sequence into each slot of `to` (n samples of one prompt: the prompt is prefilled once,
   * then shared). Only the used positions are copied.
   */
  copySlot(from: number, to: readonly number[]): void {
    this.#checkSlot(from);
    for (const slot of to) {
      this.#checkSlot(slot);
      if (slot === from) throw new RangeError(`KV cache: copySlot from slot ${from} onto itself`);
    }
    if (to.length === 0) return;
    const length = this.#lengths[from] as number;
    noGrad(() =>
      torch.scope(() => {
        const device = this.#keyValid.device;
        const targets = torch.tensor(BigInt64Array.from(to, BigInt), { device });
        const sources = torch.tensor(
          BigInt64Array.from(to, () => BigInt(from)),
          { device },
        );
        const copy = (t: Tensor) =>
          t.narrow(-2, 0, length).indexCopy_(0, targets, t.narrow(-2, 0, length).indexSelect(0, sources));
        if (length > 0) {
          for (const t of [...this.#keys, ...this.#values]) copy(t);
          this.#keyValid.narrow(1, 0, length).indexCopy_(0, targets, this.#keyValid.narrow(1, 0, length).indexSelect(0, sources));
        }
        for (const slot of to)
          this.#keyValid
            .select(0, slot)
            .narrow(0, length, this.maxLength - length)
            .fill_(false);
      }),
    );
    for (const slot of to) {
      this.#lengths[slot] = length;
      this.#tokens[slot] = this.#tokens[from] as number;
    }
  }

  resetAll(): void {
    this.#lengths.fill(0);
    this.#tokens.fill(0);
    this.#keyValid.fill_(false);
  }

  /** Frees every buffer. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const t of [...this.#keys, ...this.#values, this.#keyValid]) t.dispose();
  }

  get isDisposed(): boolean {
    return this.#disposed;
  }

  #checkSlot(slot: number): number {
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.numSlots) {
      throw new RangeError(`KV cache slot ${slot} out of range: the cache has ${this.numSlots} slots`);
    }
    return slot;
  }

  /**
   * Plans a forward of T new tokens for batch rows placed in `slots` (one distinct slot per row). `realTokens[b][t]`
   * says whether token t of row b is real (null: all real). Creates tensors in the caller's scope.
   */
  begin(slots: readonly number[], newTokens: number, realTokens: readonly (readonly boolean[])[] | null): CacheStep {
    if (this.#disposed) throw new Error('KV cache was disposed');
    if (new Set(slots).size !== slots.length) throw new RangeError(`KV cache slots must be distinct, got [${slots.join(', ')}]`);
    const starts = slots.map((s) => this.length(s));
    starts.forEach((start, b) => {
      if (start + newTokens > this.maxLength) {
        throw new RangeError(
          `KV cache slot ${slots[b]} is full: ${start} positions used + ${newTokens} new > maxLength ${this.maxLength} (reset the slot or allocate a longer cache)`,
        );
      }
    });
    const batch = slots.length;
    const keyLength = Math.max(...starts) + newTokens;
    const tokenOffsets = slots.map((s) => this.tokenCount(s));
    const positions = new BigInt64Array(batch * newTokens);
    const valid = new Uint8Array(batch * newTokens);
    const newLengths: number[] = [];
    const newTokenCounts: number[] = [];
    for (let b = 0; b < batch; b++) {
      let lastReal = -1;
      let real = 0;
      for (let t = 0; t < newTokens; t++) {
        positions[b * newTokens + t] = BigInt((starts[b] as number) + t);
        const isReal = realTokens === null || (realTokens[b]?.[t] ?? false);
        valid[b * newTokens + t] = isReal ? 1 : 0;
        if (isReal) {
          lastReal = t;
          real++;
        }
      }
      newLengths.push((starts[b] as number) + lastReal + 1);
      newTokenCounts.push((tokenOffsets[b] as number) + real);
    }
    const device = this.#keyValid.device;
    const slotList = torch.tensor(BigInt64Array.from(slots, BigInt), { device });
    const slotIndex = slotList.unsqueeze(1); // [B, 1], broadcast against [B, T]
    const cachePositions = torch.tensor(positions, { shape: [batch, newTokens], device });
    noGrad(() =>
      this.#keyValid.indexPut_(
        [slotIndex, cachePositions],
        torch.tensor(valid, { shape: [batch, newTokens], dtype: 'bool', device }),
      ),
    );

    // Rows in consecutive slots read the buffers through a view; otherwise gather the rows' prefixes.
    const consecutive = slots.every((s, b) => s === (slots[0] as number) + b);
    const rows = (buffer: Tensor): Tensor => {
      const prefix = buffer.narrow(buffer.ndim === 4 ? 2 : 1, 0, keyLength);
      return consecutive ? prefix.narrow(0, slots[0] as number, batch) : prefix.indexSelect(0, slotList);
    };
    // mask[b, 0, t, j] = (keyValid[slot_b, j] && j <= pos[b, t]) || j == pos[b, t]
    const query = cachePositions.unsqueeze(-1).unsqueeze(1); // [B, 1, T, 1]
    const key = torch.arange(keyLength, { device }).view([1, 1, 1, keyLength]);
    const attentionMask = rows(this.#keyValid).view([batch, 1, 1, keyLength]).logicalAnd(key.le(query)).logicalOr(key.eq(query));

    return {
      cachePositions,
      tokenOffsets,
      keyLength,
      attentionMask,
      update: (layer, keys, values) => {
        // [B, kvHeads, T, D] -> [B, T, kvHeads, D]: indexing [slot, :, position] puts the indexed dims first.
        noGrad(() => {
          (this.#keys[layer] as Tensor).indexPut_([slotIndex, null, cachePositions], keys.detach().transpose(1, 2));
          (this.#values[layer] as Tensor).indexPut_([slotIndex, null, cachePositions], values.detach().transpose(1, 2));
        });
        return { keys: rows(this.#keys[layer] as Tensor), values: rows(this.#values[layer] as Tensor) };
      },
      commit: () => {
        slots.forEach((s, b) => {
          this.#lengths[s] = newLengths[b] as number;
          this.#tokens[s] = newTokenCounts[b] as number;
        });
      },
    };
  }
}
