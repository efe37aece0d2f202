// When a sequence stops, and what its text is.
//
//   stop token   the sampled id is one of the stop ids (the request's stopTokenIds, plus the eos ids unless
//                ignoreEos). The id stays in the completion's token ids and log-probs; the text leaves it out.
//   stop string  the decoded completion text contains one of the request's stop strings. Checked after every token
//                on text decoded incrementally; the token ids end at the token that completed the string (all
//                of it is kept, even when the string ends inside it), and the text is cut where the string begins
//                (the string and anything after it are dropped).
//   length       maxTokens ids were generated.
//
// Incremental decoding (as vLLM's detokenizer): a sequence keeps two offsets into its ids, prefix ≤ read. New text is
// decode(ids[prefix:]) minus decode(ids[prefix:read]); decoding from a few tokens back keeps tokenizers that strip a
// leading space or merge bytes (SentencePiece, byte-level BPE) right, and text that ends in U+FFFD (an incomplete
// UTF-8 character) waits for the next token.
import type { Tokenizer } from '../tokenizer/index.js';

export type FinishReason = 'stop' | 'length';

export class IncrementalDetokenizer {
  readonly #tokenizer: Tokenizer;
  readonly #skipSpecialTokens: boolean;
  readonly #ids: number[] = [];
  #prefixOffset = 0;
  #readOffset = 0;
  #text = '';

  constructor(tokenizer: Tokenizer, options: { skipSpecialTokens?: boolean } = {}) {
    this.#tokenizer = tokenizer;
    this.#skipSpecialTokens = options.skipSpecialTokens ?? true;
  }

  /** The text decoded so far. */
  get text(): string {
    return this.#text;
  }

  /** Appends one id; returns the new text it completes ('' while a character is incomplete). */
  push(id: number): string {
    this.#ids.push(id);
    const decode = (start: number, end: number) =>
      this.#tokenizer.decode(this.#ids.slice(start, end), { skipSpecialTokens: this.#skipSpecialTokens });
    const prefixText = decode(this.#prefixOffset, this.#readOffset);
    const fullText = decode(this.#prefixOffset, this.#ids.length);
    if (fullText.length <= prefixText.length || fullText.endsWith('\uFFFD')) return '';
    const delta = fullText.slice(prefixText.length);
    this.#prefixOffset = this.#readOffset;
    this.#readOffset = this.#ids.length;
    this.#text += delta;
    return delta;
  }
}

/** Watches a sequence's text for stop strings. */
export class StopStringMatcher {
  readonly #stops: readonly string[];
  readonly #longest: number;
  readonly #detokenizer: IncrementalDetokenizer;

  constructor(stops: readonly string[], tokenizer: Tokenizer, options: { skipSpecialTokens?: boolean } = {}) {
    this.#stops = stops;
    this.#longest = Math.max(...stops.map((s) => s.length));
    this.#detokenizer = new IncrementalDetokenizer(tokenizer, options);
  }

  /** Appends one id; returns the stop string its text now contains (the earliest one), or null. */
  push(id: number): string | null {
    const before = this.#detokenizer.text.length;
    const delta = this.#detokenizer.push(id);
    if (delta === '') return null;
    // only a match that overlaps the new text can be new
    const from = Math.max(0, before - this.#longest + 1);
    return earliestStop(this.#detokenizer.text, this.#stops, from)?.stop ?? null;
  }
}

/** The stop string that occurs first in `text` (at or after `from`), and where; null if none occurs. */
export function earliestStop(text: string, stops: readonly string[], from = 0): { stop: string; index: number } | null {
  let best: { stop: string; index: number } | null = null;
  for (const stop of stops) {
    const index = text.indexOf(stop, from);
    if (index !== -1 && (best === null || index < best.index)) best = { stop, index };
  }
  return best;
}

/**
 * The completion text of finished `tokenIds`: decoded in one piece, without a final stop token, and cut where the
 * first stop string begins when a stop string ended the sequence.
 */
export function completionText(
  tokenizer: Tokenizer,
  tokenIds: readonly number[],
  finish: { stopToken: boolean; stops: readonly string[] | null },
  options: { skipSpecialTokens?: boolean } = {},
): string {
  const ids = finish.stopToken ? tokenIds.slice(0, -1) : tokenIds;
  const text = tokenizer.decode(ids, { skipSpecialTokens: options.skipSpecialTokens ?? true });
  if (finish.stops === null) return text;
  const match = earliestStop(text, finish.stops);
  return match === null ? text : text.slice(0, match.index);
}
