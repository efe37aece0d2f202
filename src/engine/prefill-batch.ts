// Which sequences an engine step prefills, and how much of each prompt (the admission half of a prefill step of
// ./rollout-engine.ts; the engine runs the forward). A prefill step is one right-padded forward [rows, T]: each row
// runs a prompt past its cached prefix (or a part of it), the last position's logits give the first token of the
// sequences that finished their prompt. Waiting sequences start round-robin over fair-share keys (within a key first
// come first served); the n samples of a prompt share its row (the first sample leads; the others get its cache by
// planCopy and sample from the same logits), so a key's next sequence joins as a sample when its prompt runs in the
// same forward. Samples count in `entries`, the sequences started this step, below.
//
// Without chunked prefill: sequences start while  T × entries ≤ maxPrefillTokens  (padded tokens of the forward);
// the first always starts, so a longer prompt runs whole, alone.
//
// With chunked prefill (vLLM's enable_chunked_prefill; maxPrefillTokens is then its max_num_batched_tokens, the
// token budget of one engine step): every sequence decoding counts one token of the budget, the prefill forward gets
// the rest, and a row takes at most an equal share of it:
//   budget = maxPrefillTokens − decoding        chunk ≤ ⌊budget / entries⌋        T × entries ≤ budget
// A prompt longer than its share runs in chunks over several steps (a partial prefill: its sequence holds a slot and
// its cache grows chunk by chunk, nothing sampled), and each step's chunk is followed by the decode step of every
// running sequence, so they are not stalled by a long prompt. Partial prefills go on first, oldest first, then
// waiting sequences start. A waiting sample of a prompt still part-way waits (its key is passed over) and joins as a
// sample in the step of the prompt's last chunk. Chunks change no result: the cache after the last chunk holds the
// same keys and values as after one whole forward, up to float rounding of the different shapes.
//
// A partial prefill preempted by a decode step short of blocks (paged cache: the most recently started sequence
// goes first) is kept in its place here and started again from its prompt (past the prefix cache) when its turn
// comes.
import type { RequestState, Sequence } from './request-state.js';
import type { SequenceSlots } from './sequence-slots.js';
import { cacheKeys } from './vision-requests.js';

/** A step's prefill: the forward's rows and the sequences that sample their first token from it. */
export interface PrefillBatch {
  /** The forward's rows: each runs `ids` of its sequence's prompt into its slot. */
  rows: Sequence[];
  /** The token ids each row runs: its prompt past the cached prefix, or the next chunk of it. */
  ids: number[][];
  /** Each row's prefix-cache keys of its ids (image tokens keyed by their image: ./vision-requests.ts cacheKeys). */
  keys: number[][];
  /** How many prompt tokens follow each row's ids (0 but for a chunk part-way; a vision row's positions need it). */
  held: number[];
  /** T: the longest row. */
  longest: number;
  /** Sequences that sample their first token in this step (a row whose prompt is complete, and its samples). */
  sampled: Sequence[];
  /** sampled[b]'s logits are those of rows[rowOf[b]]. */
  rowOf: number[];
  /** Rows whose prompt is not complete after this step (nothing sampled for them). */
  partial: Sequence[];
}

/** A prompt prefilled over several steps. */
interface PartialPrefill {
  readonly seq: Sequence;
  /** Its prompt past the cached prefix found when it (last) started. */
  ids: readonly number[];
  /** Where `ids` start in the prompt (the cached prefix's length). */
  from: number;
  /** Of `ids`, the tokens run by earlier steps. */
  done: number;
}

export interface PrefillBatchOptions {
  /** The padded tokens of one prefill forward; with chunked prefill, the token budget of a step. */
  maxPrefillTokens: number;
  /** Prefill long prompts in chunks between decode steps. */
  chunked: boolean;
}

/** Waiting sequences by fair-share key, in round-robin order (as the engine keeps them; every queue non-empty). */
export type WaitingQueues = Map<string | RequestState, Sequence[]>;

export class PrefillBatcher {
  readonly #cache: SequenceSlots;
  readonly #maxPrefillTokens: number;
  readonly #chunked: boolean;
  /** Partial prefills, oldest first. */
  #partials: PartialPrefill[] = [];
  #chunks = 0;

  constructor(cache: SequenceSlots, options: PrefillBatchOptions) {
    this.#cache = cache;
    this.#maxPrefillTokens = options.maxPrefillTokens;
    this.#chunked = options.chunked;
  }

  /** Prompts part-way through a chunked prefill. */
  get partialPrefills(): number {
    return this.#partials.length;
  }

  /** Prompt chunks run so far: a prompt prefilled over k steps counts k (one prefilled whole counts 0). */
  get prefillChunks(): number {
    return this.#chunks;
  }

  /** Whether `seq` is a partial prefill (its prompt not complete: it has no token to decode). */
  isPartial(seq: Sequence): boolean {
    return this.#partials.some((p) => p.seq === seq);
  }

  /** A request ended: its partial prefill, if any, is dropped (the engine releases its slot). */
  drop(state: RequestState): void {
    this.#partials = this.#partials.filter((p) => p.seq.request !== state);
  }

  /**
   * The next prefill step: partial prefills go on, then (with `admitNew`) waiting sequences start, taken from
   * `waiting` and started in the cache. `decoding`: the sequences of the decode step that follows. Null when nothing
   * can run (no free slot, or not enough free blocks for the next in line).
   */
  next(waiting: WaitingQueues, decoding: number, admitNew: boolean): PrefillBatch | null {
    const budget = this.#chunked ? this.#maxPrefillTokens - decoding : this.#maxPrefillTokens;
    const batch: PrefillBatch = { rows: [], ids: [], keys: [], held: [], longest: 0, sampled: [], rowOf: [], partial: [] };
    let entries = 0;
    /** The most tokens the next entry's row may run (chunked), or its cost check (whole prompts). */
    const share = () => Math.floor(budget / (entries + 1));
    const addRow = (seq: Sequence, ids: number[], start: number, complete: boolean) => {
      batch.rows.push(seq);
      batch.ids.push(ids);
      batch.keys.push(cacheKeys(seq).slice(start, start + ids.length));
      batch.held.push(seq.request.promptIds.length - start - ids.length);
      batch.longest = Math.max(batch.longest, ids.length);
      entries++;
      if (complete) {
        batch.rowOf.push(batch.rows.length - 1);
        batch.sampled.push(seq);
      } else batch.partial.push(seq);
    };
    // partial prefills first, oldest first
    for (const partial of [...this.#partials]) {
      if (share() < 1 || batch.longest > share()) break;
      const { seq } = partial;
      if (seq.slot === -1) {
        // preempted: starts again past what the prefix cache holds now
        const cached = this.#cache.start(seq, cacheKeys(seq));
        if (cached === null) break;
        Object.assign(partial, { ids: seq.request.promptIds.slice(cached), from: cached, done: 0 });
      }
      const start = partial.from + partial.done;
      const chunk = partial.ids.slice(partial.done, partial.done + share());
      partial.done += chunk.length;
      const complete = partial.done === partial.ids.length;
      if (complete) this.#partials = this.#partials.filter((p) => p !== partial);
      this.#chunks++;
      addRow(seq, chunk, start, complete);
    }
    if (admitNew) this.#admit(waiting, batch, { share, addRow, entered: () => entries++ });
    return batch.rows.length === 0 ? null : batch;
  }

  /** Waiting sequences start (round-robin over their keys) while slots, blocks and the budget allow. */
  #admit(
    waiting: WaitingQueues,
    batch: PrefillBatch,
    step: {
      share: () => number;
      addRow: (seq: Sequence, ids: number[], start: number, complete: boolean) => void;
      entered: () => void;
    },
  ): void {
    // prompts complete in this forward: their row
    const rowOfRequest = new Map<RequestState, number>(batch.sampled.map((seq, b) => [seq.request, batch.rowOf[b] as number]));
    const partialRequests = new Set(this.#partials.map((p) => p.seq.request));
    while (this.#cache.freeSlots > 0) {
      // the first key whose next sequence may start: a sample of a prompt still part-way waits for its last chunk
      const next = [...waiting].find(([, queue]) => !partialRequests.has((queue[0] as Sequence).request));
      if (next === undefined) break;
      const [key, queue] = next;
      const seq = queue[0] as Sequence;
      const prompt = seq.request.promptIds;
      const row = rowOfRequest.get(seq.request);
      const share = step.share();
      if (row !== undefined) {
        // a sample of a prompt in this forward: no tokens of its own
        if (!this.#chunked && batch.longest > share) break;
        if (!this.#cache.startSample(seq, prompt.length)) break;
        step.entered();
        batch.sampled.push(seq);
        batch.rowOf.push(row);
      } else {
        const keys = cacheKeys(seq); // image tokens keyed by their image (./vision-requests.ts)
        const suffix = prompt.length - this.#cache.cachedPrefix(keys);
        if (this.#chunked ? share < 1 || batch.longest > share : batch.rows.length > 0 && Math.max(batch.longest, suffix) > share)
          break;
        const cached = this.#cache.start(seq, keys);
        if (cached === null) break;
        const ids = prompt.slice(cached);
        const chunk = this.#chunked ? ids.slice(0, share) : ids;
        const complete = chunk.length === ids.length;
        if (complete) rowOfRequest.set(seq.request, batch.rows.length);
        else {
          this.#partials.push({ seq, ids, from: cached, done: chunk.length });
          partialRequests.add(seq.request);
          this.#chunks++;
        }
        step.addRow(seq, chunk, cached, complete);
      }
      // round-robin: this key's turn is over, it goes to the back of the line (or leaves it, served)
      queue.shift();
      waiting.delete(key);
      if (queue.length > 0) waiting.set(key, queue);
    }
  }
}
