// The decode batch's keys and values in one contiguous copy, kept from one decode step to the next: how a paged KV
// cache (./paged-kv-cache.ts) lets one-token steps on the CPU read each row's history in place.
//
// A decode step attends over each row's whole history. In a paged cache it lives in blocks scattered over the
// buffers, so reading it means gathering it, in every layer, into a [B, kvHeads, keyLength, headDim] tensor: a copy
// of the whole batch's cache each step, which costs more than the attention that reads it (bench/README.md,
// bench:paged-decode). Here that gather happens once, when a batch of rows starts decoding; each step then writes
// its new token's keys and values twice — into the blocks, where they persist and feed the prefix cache, and into
// this copy, where attention reads them as the slot layout reads its rows (a view, no copy).
//
// Layout, per layer (allocated at a rebuild):
//   keys[layer], values[layer] : [B, kvHeads, capacity, headDim], a view of [kvHeads, B, capacity, headDim] storage
//   row b = the step's b-th slot; positions [0, length(b)) hold its history, later ones are stale and masked
//   capacity = the longest row + 1 + HEADROOM, rounded up to the plan's key bucket (at most maxLength), then to whole
//   blocks
// Head-major storage, so that one gather writes it: (row, head)'s positions are contiguous, as attention reads them.
// It is rebuilt (gathered again from the blocks) when a step's slots or their lengths are not what it holds (a row
// joined, left, or was written by another plan, e.g. a prefill chunk) or a row outgrows the capacity, and dropped
// when one of its slots is reset. Memory: B × capacity positions in every layer beside the blocks, while the batch
// decodes (a step's gather held one layer's at a time); so a copy is built only while B × capacity is at most the
// block pool's positions (`maxPositions`: the KV memory at most doubles), and a batch too large for that gathers each
// step as a cache without the copy does. With the engine's default pool (slots × maxLength positions) every batch
// fits; a pool sized as a memory budget (kvBlocks) keeps to it.
//
// Its tensors are inputs of a captured decode step (plan.stepInputs), not constants: a replay binds the copy of the
// moment, and a dropped copy is freed at once, whatever steps were captured over it. CPU only: a CUDA graph replays
// over copies of its inputs (a write into the copy would not outlast the replay), and a GPU gathers at memory speed.
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';

/** Positions past the longest row that a rebuild leaves room for (decode steps before a row outgrows the copy). */
const HEADROOM = 256;

/**
 * buffer [numBlocks · blockSize, kvHeads, headDim] → the rows of `blocks` ([B · blocksPerRow] block ids, row-major)
 * as [B, kvHeads, length, headDim], a view of one gathered copy (whole blocks: one contiguous slice per block). The
 * paged cache's read for forwards without the copy.
 */
export function gatherBlocks(buffer: Tensor, blocks: Tensor, batch: number, blockSize: number, length: number): Tensor {
  const [rows, heads, dim] = buffer.shape as [number, number, number];
  const perRow = blocks.size(0) / batch;
  return buffer
    .view([rows / blockSize, blockSize * heads * dim])
    .indexSelect(0, blocks)
    .view([batch, perRow * blockSize, heads, dim])
    .narrow(1, 0, length)
    .transpose(1, 2);
}

export class DecodeCopy {
  readonly #blockSize: number;
  readonly #maxLength: number;
  readonly #maxPositions: number;
  #slots: number[] = [];
  /** Positions of each row the copy holds. */
  #lengths: number[] = [];
  #capacity = 0;
  /** keys of every layer, then values of every layer. */
  #tensors: Tensor[] = [];
  #version = 0;
  #rebuilds = 0;

  constructor(options: { blockSize: number; maxLength: number; maxPositions: number }) {
    this.#blockSize = options.blockSize;
    this.#maxLength = options.maxLength;
    this.#maxPositions = options.maxPositions;
  }

  /** The positions per row a copy of rows at `lengths` gets: the longest + 1 + HEADROOM in key buckets, whole blocks. */
  #capacityFor(lengths: readonly number[], keyLength: number, keyBucket: number): number {
    const wanted = Math.ceil((Math.max(...lengths) + 1 + HEADROOM) / keyBucket) * keyBucket;
    const capacity = Math.min(this.#maxLength, Math.max(keyLength, wanted));
    return Math.ceil(capacity / this.#blockSize) * this.#blockSize;
  }

  /** Whether a copy of rows at `lengths` fits the memory bound (see the header). */
  fits(lengths: readonly number[], keyLength: number, keyBucket: number): boolean {
    return lengths.length * this.#capacityFor(lengths, keyLength, keyBucket) <= this.#maxPositions;
  }

  /** Rebuilds so far (gathers of a whole batch from the blocks). */
  get rebuilds(): number {
    return this.#rebuilds;
  }

  /** Positions per layer held now (B × capacity; 0 when there is no copy). */
  get positions(): number {
    return this.#slots.length * this.#capacity;
  }

  /** Whether it holds exactly the rows `slots`, in order, at `lengths`, with room for `keyLength` positions. */
  holds(slots: readonly number[], lengths: readonly number[], keyLength: number): boolean {
    return (
      this.#tensors.length > 0 &&
      keyLength <= this.#capacity &&
      slots.length === this.#slots.length &&
      slots.every((slot, b) => slot === this.#slots[b] && lengths[b] === this.#lengths[b])
    );
  }

  /**
   * Gathers rows `slots` (block tables `tables`, `lengths` positions each) from the cache's buffers (`keys`,
   * `values` per layer) into a new copy with room for `keyLength` positions at least. Keeps its tensors out of the
   * caller's scope.
   */
  rebuild(
    buffers: { keys: readonly Tensor[]; values: readonly Tensor[] },
    rows: { slots: readonly number[]; tables: readonly (readonly number[])[]; lengths: readonly number[] },
    keyLength: number,
    keyBucket: number,
  ): void {
    this.drop();
    const { slots, tables, lengths } = rows;
    const bs = this.#blockSize;
    const perRow = this.#capacityFor(lengths, keyLength, keyBucket) / bs;
    const blocks = new BigInt64Array(slots.length * perRow); // past a row's blocks: block 0 (scratch)
    tables.forEach((table, b) => {
      const used = Math.ceil((lengths[b] as number) / bs);
      for (let i = 0; i < used; i++) blocks[b * perRow + i] = BigInt(table[i] as number);
    });
    this.#tensors = torch.noGrad(() =>
      torch.scope(() => {
        const device = buffers.keys[0]?.device ?? 'cpu';
        const index = torch.tensor(blocks, { device });
        // [N · bs, heads, d] as [heads, N, bs, d] → [heads, B · perRow, bs, d] in one pass (not a gather of
        // position-major rows and then a transposed copy, the slower way: bench/README.md) → [B, heads, perRow · bs, d]
        return [...buffers.keys, ...buffers.values].map((buffer) => {
          const [rows, heads, dim] = buffer.shape as [number, number, number];
          const gathered = buffer
            .view([rows / bs, bs, heads, dim])
            .permute([2, 0, 1, 3])
            .indexSelect(1, index)
            .view([heads, slots.length, perRow * bs, dim]);
          return torch.keep(gathered.transpose(0, 1));
        });
      }),
    );
    this.#slots = [...slots];
    this.#lengths = [...lengths];
    this.#capacity = perRow * bs;
    this.#rebuilds++;
  }

  /** The copy's tensors (a step's inputs): keys of every layer, then values of every layer. */
  get tensors(): readonly Tensor[] {
    return this.#tensors;
  }

  /** Bumped by every rebuild and drop: a plan over the copy advances it only if it is still the copy it planned on. */
  get version(): number {
    return this.#version;
  }

  /** The positions per row it has room for. */
  get capacity(): number {
    return this.#capacity;
  }

  /** After a step over copy `version`: every row holds one position more. */
  advance(version: number): void {
    if (version === this.#version) this.#lengths = this.#lengths.map((length) => length + 1);
  }

  /** Frees the copy if it holds `slot` (any slot when none is named). */
  drop(slot?: number): void {
    if (slot !== undefined && !this.#slots.includes(slot)) return;
    for (const t of this.#tensors) t.dispose();
    this.#version++;
    this.#tensors = [];
    this.#slots = [];
    this.#lengths = [];
    this.#capacity = 0;
  }
}
