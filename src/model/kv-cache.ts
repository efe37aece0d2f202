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
//
// Its size is computed and checked before anything is allocated (kvCacheSize, checkKVCacheFits): a cache larger than
// the memory of the device it would live on (the machine's, or a GPU's as nvidia-smi reports it) is refused with a message naming the settings that sized it, not the allocator's text.
import { noGrad, type Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { type DeviceMemory, deviceMemory } from '../util/index.js';

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

/**
 * What a forward will do to the cache, decided in JavaScript before any tensor op of the forward (KVCache.plan):
 * the scalars the forward's ops depend on (batch, new tokens, key length, how the rows read the buffers) and the
 * per-step values as small tensors. A forward over a plan (KVCache.begin) makes no tensor from JavaScript data, so a
 * captured decode step (../torch/capture.ts) can be replayed with the next plan's tensors when its `shapeKey` is the
 * same.
 */
export interface CachePlan {
  readonly slots: readonly number[];
  readonly newTokens: number;
  /** Keys/values attended over: positions [0, keyLength) of each row's slot (rounded up to the plan's bucket). */
  readonly keyLength: number;
  /** Everything besides the tensors' values that the forward's ops depend on. */
  readonly shapeKey: string;
  /** Every per-step tensor the forward's cache ops read (a captured step's inputs, besides the token ids). */
  readonly stepInputs: readonly Tensor[];
  /** [B, T] bool: which new tokens are real; null when all are. */
  readonly realTokens: Tensor | null;
  /** [B, 1] int64: real tokens already in each row's slot (the RoPE position offset of the new tokens). */
  readonly tokenOffsets: Tensor;
  /** Advances the slots' lengths (once; later calls do nothing). Call after every layer has written. */
  commit(): void;
}

/**
 * A cache of independent sequences that a forward appends to (CausalLM.forward's `cache`): this file's slots, or
 * ./paged-kv-cache.ts's blocks. Slot s is a sequence's handle in both.
 */
export interface SequenceKVCache {
  readonly numSlots: number;
  readonly maxLength: number;
  readonly isDisposed: boolean;
  length(slot: number): number;
  tokenCount(slot: number): number;
  plan(
    slots: readonly number[],
    newTokens: number,
    realTokens: readonly (readonly boolean[])[] | null,
    options?: PlanOptions,
  ): CachePlan;
  begin(plan: CachePlan): CacheStep;
  dispose(): void;
}

/** The slot cache's plan: how its rows read the buffers. */
export interface SlotCachePlan extends CachePlan {
  /** Rows in consecutive slots from this one read the buffers through a view; null: the rows are gathered. */
  readonly consecutiveFrom: number | null;
  /** [B] int64: each row's slot. */
  readonly slotList: Tensor;
  /** [B, T] int64: the cache position of each new token (row b, token t at length(slot_b) + t). */
  readonly cachePositions: Tensor;
}

export interface PlanOptions {
  /**
   * Round the key length up to a multiple of this (at most maxLength): steps of one batch then share a shape for
   * many tokens (captured decode steps). The extra positions are masked. Default 1 (the exact length).
   */
  keyBucket?: number;
  /**
   * Each row's new token ids (its real tokens, in order): a paged cache with prefix caching keys its full blocks by
   * them (./paged-kv-cache.ts); the slot cache ignores them.
   */
  tokenIds?: readonly (readonly number[])[];
}

/** One forward's view of the cache (internal to the model): where each row's new tokens go, and the attention mask. */
export interface CacheStep {
  readonly plan: CachePlan;
  /** Boolean mask [B, 1, T, keyLength], true = attend: causal within the slot, real keys only, plus the diagonal. */
  readonly attentionMask: Tensor;
  /** Writes layer `layer`'s new keys/values [B, kvHeads, T, headDim]; returns the row's keys/values [B, kvHeads, keyLength, headDim]. */
  update(layer: number, keys: Tensor, values: Tensor): { keys: Tensor; values: Tensor };
  /** Advances the slots' lengths once every layer has written (a forward that throws leaves the lengths as they were). */
  commit(): void;
}

const GIB = 2 ** 30;
const gib = (bytes: number) => `${(bytes / GIB).toFixed(bytes < 10 * GIB ? 2 : 0)} GiB`;

/**
 * The bytes a cache allocates, and the product that gives them, for messages:
 *   bytes = 2 (keys, values) × layers × slots × kvHeads × maxLength × headDim × bytes(dtype)   the buffers
 *         + slots × maxLength                                                                 keyValid (bool)
 */
export function kvCacheSize(options: KVCacheOptions): { bytes: number; formula: string } {
  const { numLayers, numKeyValueHeads, headDim, slots, maxLength } = options;
  const dtype = options.dtype ?? 'float32';
  const elementBytes = torch.DTYPE_BYTES[dtype];
  const bytes = 2 * numLayers * slots * numKeyValueHeads * maxLength * headDim * elementBytes + slots * maxLength;
  const formula =
    `${slots} slots × ${maxLength} positions (maxLength) × ${numLayers} layers × 2 (keys, values) × ` +
    `${numKeyValueHeads} KV heads × ${headDim} head dims × ${elementBytes} bytes (${dtype})`;
  return { bytes, formula };
}

/**
 * Throws a RangeError naming the settings when the cache alone is larger than the memory of the device it would live
 * on (`memoryOf`, default ../util/device-memory.ts: the machine's on the CPU, a GPU's total as nvidia-smi reports it).
 * A device whose memory cannot be known here (no nvidia-smi) is checked only when the allocation fails (the
 * constructor names the sizes then).
 */
export function checkKVCacheFits(
  options: KVCacheOptions,
  memoryOf: (device: string) => DeviceMemory | null = deviceMemory,
): void {
  const memory = memoryOf(options.device ?? 'cpu');
  if (memory === null) return;
  const { bytes, formula } = kvCacheSize(options);
  if (bytes <= memory.bytes) return;
  throw new RangeError(
    `the KV cache needs ${gib(bytes)} (${formula}), more than ${memory.what} (${gib(memory.bytes)}): ` +
      `lower the slots (serve --slots, explorer.rollout_model.slots) or the context per sequence (serve --max-length, ` +
      `model.max_model_len), or use a smaller dtype`,
  );
}

export class KVCache implements SequenceKVCache {
  readonly numLayers: number;
  readonly numSlots: number;
  readonly maxLength: number;
  readonly dtype: torch.DType;
  // Layout, per layer:  keys[layer], values[layer] : [slots, kvHeads, maxLength, headDim]
  //   slot-major so that one slot's prefix is keys[layer][s, :, :length(s), :] and the rows of a batch in consecutive
  //   slots 0..B-1 are a view (no copy); written in place at [slot, :, position, :] (torch.writeCacheRows on the CPU,
  //   indexPut_ elsewhere).
  readonly #keys: Tensor[] = [];
  readonly #values: Tensor[] = [];
  // keyValid : [slots, maxLength] bool, true where the position holds a real token.
  readonly #keyValid: Tensor;
  readonly #lengths: number[];
  readonly #tokens: number[];
  #disposed = false;
  /** Bumped whenever slot lengths change (commit, reset, copySlot): a plan is valid for the state it was made in. */
  #state = 0;
  readonly #planState = new WeakMap<SlotCachePlan, number>();

  constructor(options: KVCacheOptions) {
    const { numLayers, numKeyValueHeads, headDim, slots, maxLength } = options;
    for (const [name, v] of Object.entries({ numLayers, numKeyValueHeads, headDim, slots, maxLength })) {
      if (!Number.isInteger(v) || v <= 0) throw new RangeError(`KVCache: ${name} must be a positive integer, got ${v}`);
    }
    this.numLayers = numLayers;
    this.numSlots = slots;
    this.maxLength = maxLength;
    this.dtype = options.dtype ?? 'float32';
    checkKVCacheFits(options);
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
      const { bytes, formula } = kvCacheSize(options);
      throw new Error(
        `allocating the KV cache (${gib(bytes)}: ${formula}) on ${options.device ?? 'cpu'} failed: ${(error as Error).message}`,
        { cause: error },
      );
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
    this.#state++;
    this.#tokens[slot] = 0;
    torch.scope(() => {
      this.#keyValid.select(0, slot).fill_(false); // (a scope's return value outlives it: return nothing)
    });
  }

  /**
   * Copies `from`'s cached sequence into each slot of `to` (n samples of one prompt: the prompt is prefilled once,
   * then shared). Only the used positions are copied.
   */
  copySlot(from: number, to: readonly number[]): void {
    torch.scope(() => this.planCopy(from, to).commit());
  }

  /**
   * copySlot in two halves: checks the slots and uploads the target list now, copies at commit() (once; later calls
   * do nothing) what `from` holds then. The engine plans the copies of a prefill before queueing its forward and
   * commits them after it: on a GPU an upload behind queued work waits for all of it. Creates tensors in the caller's
   * scope; commit within it.
   */
  planCopy(from: number, to: readonly number[]): { commit(): void } {
    this.#checkSlot(from);
    for (const slot of to) {
      this.#checkSlot(slot);
      if (slot === from) throw new RangeError(`KV cache: copySlot from slot ${from} onto itself`);
    }
    const targets = to.length === 0 ? null : torch.tensor(BigInt64Array.from(to, BigInt), { device: this.#keyValid.device });
    let done = false;
    return {
      commit: () => {
        if (done || targets === null) return;
        done = true;
        this.#copy(from, to, targets);
      },
    };
  }

  #copy(from: number, to: readonly number[], targets: Tensor): void {
    const length = this.#lengths[from] as number;
    noGrad(() =>
      torch.scope(() => {
        // every target reads one copy of the source slot, broadcast: no source index to upload (copied first, so
        // that the op never reads the buffer it writes)
        const copy = (t: Tensor, positionDim: number) => {
          const used = t.narrow(positionDim, 0, length);
          const source = used.narrow(0, from, 1).clone();
          used.indexCopy_(0, targets, source.expand([to.length, ...source.shape.slice(1)]));
        };
        if (length > 0) {
          for (const t of [...this.#keys, ...this.#values]) copy(t, -2);
          copy(this.#keyValid, 1);
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
      this.#state++;
      this.#tokens[slot] = this.#tokens[from] as number;
    }
  }

  resetAll(): void {
    this.#lengths.fill(0);
    this.#state++;
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
   * says whether token t of row b is real (null: all real). Creates the plan's tensors in the caller's scope.
   */
  plan(
    slots: readonly number[],
    newTokens: number,
    realTokens: readonly (readonly boolean[])[] | null,
    options: PlanOptions = {},
  ): SlotCachePlan {
    if (this.#disposed) throw new Error('KV cache was disposed');
    if (new Set(slots).size !== slots.length) throw new RangeError(`KV cache slots must be distinct, got [${slots.join(', ')}]`);
    const bucket = options.keyBucket ?? 1;
    if (!Number.isInteger(bucket) || bucket <= 0)
      throw new RangeError(`KV cache keyBucket must be a positive integer, got ${bucket}`);
    const starts = slots.map((s) => this.length(s));
    starts.forEach((start, b) => {
      if (start + newTokens > this.maxLength) {
        throw new RangeError(
          `KV cache slot ${slots[b]} is full: ${start} positions used + ${newTokens} new > maxLength ${this.maxLength} (reset the slot or allocate a longer cache)`,
        );
      }
    });
    const batch = slots.length;
    const exactKeyLength = Math.max(...starts) + newTokens;
    const keyLength = Math.min(this.maxLength, Math.ceil(exactKeyLength / bucket) * bucket);
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
    // rows in consecutive slots read the buffers through a view (from the first slot); otherwise gather the rows
    const consecutive = slots.every((s, b) => s === (slots[0] as number) + b);
    let committed = false;
    const slotList = torch.tensor(BigInt64Array.from(slots, BigInt), { device });
    const cachePositions = torch.tensor(positions, { shape: [batch, newTokens], device });
    const offsets = torch.tensor(BigInt64Array.from(tokenOffsets, BigInt), { shape: [batch, 1], device });
    const plan: SlotCachePlan = {
      slots: [...slots],
      newTokens,
      keyLength,
      consecutiveFrom: consecutive ? (slots[0] as number) : null,
      shapeKey: `${batch}x${newTokens}:${keyLength}:${consecutive ? `from${slots[0]}` : 'gather'}:${realTokens === null ? 'real' : 'masked'}`,
      slotList,
      cachePositions,
      realTokens: realTokens === null ? null : torch.tensor(valid, { shape: [batch, newTokens], dtype: 'bool', device }),
      tokenOffsets: offsets,
      stepInputs: [slotList, cachePositions, offsets],
      commit: () => {
        if (committed) return;
        committed = true;
        this.#state++;
        slots.forEach((s, b) => {
          this.#lengths[s] = newLengths[b] as number;
          this.#tokens[s] = newTokenCounts[b] as number;
        });
      },
    };
    this.#planState.set(plan, this.#state);
    return plan;
  }

  /**
   * Starts a forward over `plan` (from plan() on this cache, not yet committed): marks the new positions, builds the
   * attention mask. Its ops depend on the plan's tensors and its shapeKey only. Creates tensors in the caller's scope.
   */
  begin(plan: CachePlan): CacheStep {
    if (this.#disposed) throw new Error('KV cache was disposed');
    if (!isSlotPlan(plan) || this.#planState.get(plan) !== this.#state) {
      throw new Error('KV cache: this plan was made by another cache, or the slots changed since (commit, reset, copySlot)');
    }
    const { slots, newTokens, keyLength, slotList, cachePositions } = plan as SlotCachePlan;
    const batch = slots.length;
    const device = this.#keyValid.device;
    const real = plan.realTokens ?? torch.full([batch, newTokens], true, { dtype: 'bool', device });
    const write = (buffer: Tensor, source: Tensor) => writeRows(buffer, slotList, cachePositions, source);
    // the key-valid flags [S, L] as [S, 1, L, 1]
    const [slotCount, length] = this.#keyValid.shape as [number, number];
    noGrad(() => write(this.#keyValid.view([slotCount, 1, length, 1]), real.view([batch, 1, newTokens, 1])));

    const from = (plan as SlotCachePlan).consecutiveFrom;
    const rows = (buffer: Tensor): Tensor => {
      const prefix = buffer.narrow(buffer.ndim === 4 ? 2 : 1, 0, keyLength);
      return from !== null ? prefix.narrow(0, from, batch) : prefix.indexSelect(0, slotList);
    };
    // mask[b, 0, t, j] = (keyValid[slot_b, j] && j <= pos[b, t]) || j == pos[b, t]
    const query = cachePositions.unsqueeze(-1).unsqueeze(1); // [B, 1, T, 1]
    const key = torch.arange(keyLength, { device }).view([1, 1, 1, keyLength]);
    const attentionMask = rows(this.#keyValid).view([batch, 1, 1, keyLength]).logicalAnd(key.le(query)).logicalOr(key.eq(query));

    return {
      plan,
      attentionMask,
      update: (layer, keys, values) => {
        noGrad(() => {
          write(this.#keys[layer] as Tensor, keys.detach());
          write(this.#values[layer] as Tensor, values.detach());
        });
        return { keys: rows(this.#keys[layer] as Tensor), values: rows(this.#values[layer] as Tensor) };
      },
      commit: () => plan.commit(),
    };
  }
}

/**
 * In place: buffer [S, H, L, D][slots[b], :, positions[b, t], :] = source [B, H, T, D][b, :, t, :] (run under noGrad,
 * the source detached). On the CPU one pass of row copies (torch.writeCacheRows); elsewhere ATen's indexing, whose
 * indexed dims come first ([B, T, H, D]). The slot layout's write, and the paged cache's decode copy's.
 */
export function writeRows(buffer: Tensor, slots: Tensor, positions: Tensor, source: Tensor): void {
  if (buffer.device === 'cpu') torch.writeCacheRows(buffer, slots, positions, source);
  else buffer.indexPut_([slots.unsqueeze(1), null, positions], source.transpose(1, 2));
}

function isSlotPlan(plan: CachePlan): plan is SlotCachePlan {
  return 'consecutiveFrom' in plan;
}
