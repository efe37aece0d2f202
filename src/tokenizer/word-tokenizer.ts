// A word-level tokenizer for small models: the character tokenizer (char-tokenizer.ts: every printable ASCII character
// a token, so any text encodes; its ChatML template) plus BPE merges that make each given word one token, with its
// leading space (" cabinet") and without (at a line's start, after a quote). The vocabulary stays a few hundred
// tokens (a 151k-token vocabulary such as Qwen3's would make the LM head most of a tiny model's compute on a CPU), and
// the chat template is the character tokenizer's, so the same conversations render to the same text.
// The examples choose the words: examples/household (every letter and digit run of its demonstrations) and
// examples/tool_agent_serve (letter runs only: numbers stay one token per digit, for the calculator's copying).
//
// The merges are built as BPE learns them, word by word (shortest first): the word is encoded with the merges so far
// (lowest rank first, as BPE applies them), and its remaining pieces are merged left to right by new, higher-ranked
// merges; then the written tokenizer is checked with the runtime's BPE (writeWordTokenizer). There is no
// pre-tokenizer: BPE runs over a whole text, but no merge joins a character outside a word (or its leading space), so
// a word between other characters is encoded as on its own.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { charTokenizerFiles } from './char-tokenizer.js';
import { Tokenizer } from './tokenizer.js';

/** A merge's key in the rank table (tokens hold spaces, so not "a b"). */
const pairKey = (left: string, right: string) => `${left}\u0000${right}`;

/** BPE over one word: applies the lowest-ranked merge present until none applies; the pieces. */
function bpe(word: string, ranks: ReadonlyMap<string, number>): string[] {
  const pieces = [...word];
  for (;;) {
    let best = -1;
    let bestRank = Number.POSITIVE_INFINITY;
    for (let i = 0; i + 1 < pieces.length; i++) {
      const rank = ranks.get(pairKey(pieces[i] as string, pieces[i + 1] as string));
      if (rank !== undefined && rank < bestRank) [best, bestRank] = [i, rank];
    }
    if (best < 0) return pieces;
    pieces.splice(best, 2, `${pieces[best]}${pieces[best + 1]}`);
  }
}

/**
 * The words of `texts`: the matches of `pattern` (a global regular expression, e.g. /[A-Za-z]+/g) that occur at least
 * `minCount` times, shortest first (then alphabetically), as writeWordTokenizer takes them.
 */
export function collectWords(texts: readonly string[], pattern: RegExp, minCount = 1): string[] {
  if (!pattern.global) throw new Error(`collectWords: the pattern ${pattern} needs the g flag`);
  const counts = new Map<string, number>();
  for (const text of texts) for (const [word] of text.matchAll(pattern)) counts.set(word, (counts.get(word) ?? 0) + 1);
  return [...counts]
    .filter(([word, count]) => count >= minCount && word !== '')
    .map(([word]) => word)
    .sort((a, b) => a.length - b.length || a.localeCompare(b));
}

interface BpeModel {
  vocab: Record<string, number>;
  merges: [string, string][];
}

/** Adds merges joining `pieces` left to right into one token (ranked after every merge so far). */
function mergeLeftToRight(pieces: readonly string[], model: BpeModel, ranks: Map<string, number>): void {
  for (let merged = pieces[0] as string, i = 1; i < pieces.length; i++) {
    const next = pieces[i] as string;
    if (ranks.has(pairKey(merged, next))) throw new Error(`word tokenizer: the merge ${merged} + ${next} did not apply`);
    ranks.set(pairKey(merged, next), ranks.size);
    model.merges.push([merged, next]);
    merged += next;
    model.vocab[merged] ??= Object.keys(model.vocab).length;
  }
}

/**
 * Writes tokenizer.json and tokenizer_config.json into `dir`: the character tokenizer with merges making each word
 * one token, with and without a leading space (see the header); returns the vocabulary size. The written tokenizer is
 * then loaded and each word encoded by the runtime's own BPE; a word it leaves in pieces (its merge order can differ
 * from the simulation's where a word repeats a piece, as "sinkbasin" does "sin") gets merges joining those pieces,
 * until every word is one token. A word with a character outside the character tokenizer's alphabet is refused.
 */
export function writeWordTokenizer(dir: string, words: readonly string[]): number {
  const { tokenizerJson, tokenizerConfig } = charTokenizerFiles();
  const model = tokenizerJson.model as unknown as BpeModel;
  for (const word of words)
    for (const c of word)
      if (model.vocab[c] === undefined || c === '\n')
        throw new Error(`word tokenizer: the word ${JSON.stringify(word)} has a character outside printable ASCII`);
  const ranks = new Map<string, number>();
  const variants = words.flatMap((w) => [w, ` ${w}`]);
  for (const word of variants) mergeLeftToRight(bpe(word, ranks), model, ranks);
  mkdirSync(dir, { recursive: true });
  for (let round = 0; ; round++) {
    writeFileSync(join(dir, 'tokenizer.json'), `${JSON.stringify(tokenizerJson, null, 2)}\n`);
    writeFileSync(join(dir, 'tokenizer_config.json'), `${JSON.stringify(tokenizerConfig, null, 2)}\n`);
    const tokenizer = Tokenizer.load(dir);
    const split = variants
      .map((word) => tokenizer.encode(word).map((id) => tokenizer.decode([id])))
      .filter((pieces) => pieces.length > 1);
    if (split.length === 0) return Object.keys(model.vocab).length;
    if (round === 3) throw new Error(`word tokenizer: still more than one token: ${split.map((p) => p.join('')).join(', ')}`);
    for (const pieces of split) mergeLeftToRight(pieces, model, ranks);
  }
}
