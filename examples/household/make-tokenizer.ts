// A subword tokenizer for the household example: the character tokenizer of `trinity model init` (every printable
// ASCII character a token, so any text encodes) plus BPE merges that make every word of the household's text one
// token, with its leading space (" cabinet", " mug") and without (at a line's start). An object name is then two
// or three tokens (" mug", " 2"), a command four to eight, an observation with its admissible actions about a fifth of
// its characters, and the vocabulary stays a few hundred tokens (a 151k-token vocabulary such as Qwen3's would make
// the LM head most of a tiny model's compute on a CPU). The words are those of the given chat-message files (e.g.
// make-data.ts's sft.jsonl: the system prompt, observations and commands), each that occurs at least --min-count times.
//
// The merges are built as BPE learns them, word by word (shortest first): the word is encoded with the merges so far
// (lowest rank first, as BPE applies them), and its remaining pieces are merged left to right by new, higher-ranked
// merges; then the written tokenizer is checked with the runtime's BPE (writeHouseholdTokenizer).
// Usage: node --import tsx examples/household/make-tokenizer.ts OUT_DIR DATA.jsonl... [--min-count N]
//   then: node bin/trinity.js model init MODEL_DIR --tokenizer OUT_DIR ...
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { charTokenizerFiles, Tokenizer } from 'trinity-rft/tokenizer';

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

/** The words of the texts (runs of letters, runs of digits), each at least `minCount` times, shortest first. */
export function householdWords(texts: readonly string[], minCount: number): string[] {
  const counts = new Map<string, number>();
  for (const text of texts)
    for (const [word] of text.matchAll(/[A-Za-z]+|[0-9]+/g)) counts.set(word, (counts.get(word) ?? 0) + 1);
  return [...counts]
    .filter(([, count]) => count >= minCount)
    .map(([word]) => word)
    .sort((a, b) => a.length - b.length || a.localeCompare(b));
}

/** Adds merges joining `pieces` left to right into one token (ranked after every merge so far). */
function mergeLeftToRight(pieces: readonly string[], model: BpeModel, ranks: Map<string, number>): void {
  for (let merged = pieces[0] as string, i = 1; i < pieces.length; i++) {
    const next = pieces[i] as string;
    if (ranks.has(pairKey(merged, next))) throw new Error(`make-tokenizer: the merge ${merged} + ${next} did not apply`);
    ranks.set(pairKey(merged, next), ranks.size);
    model.merges.push([merged, next]);
    merged += next;
    model.vocab[merged] ??= Object.keys(model.vocab).length;
  }
}

interface BpeModel {
  vocab: Record<string, number>;
  merges: [string, string][];
}

/**
 * Writes tokenizer.json and tokenizer_config.json into `dir`: the character tokenizer with merges making each word
 * one token (see the header); returns the vocabulary size. The written tokenizer is then loaded and each word encoded
 * by the runtime's own BPE; a word it leaves in pieces (its merge order can differ from the simulation's where a
 * word repeats a piece, as "sinkbasin" does "sin") gets merges joining those pieces, until every word is one token.
 */
export function writeHouseholdTokenizer(dir: string, words: readonly string[]): number {
  const { tokenizerJson, tokenizerConfig } = charTokenizerFiles();
  const model = tokenizerJson.model as unknown as BpeModel;
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
    if (round === 3) throw new Error(`make-tokenizer: still more than one token: ${split.map((p) => p.join('')).join(', ')}`);
    for (const pieces of split) mergeLeftToRight(pieces, model, ranks);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { 'min-count': { type: 'string', default: '1' } },
  });
  const [out, ...files] = positionals;
  if (out === undefined || files.length === 0) throw new Error('usage: make-tokenizer.ts OUT_DIR DATA.jsonl... [--min-count N]');
  const texts = files.flatMap((file) =>
    readFileSync(file, 'utf8')
      .split('\n')
      .filter((line) => line.trim() !== '')
      .flatMap((line, row) => {
        const messages = (JSON.parse(line) as { messages?: { content?: unknown }[] }).messages;
        if (!Array.isArray(messages)) throw new Error(`${file}: row ${row + 1} has no messages list`);
        return messages.map((m) => String(m.content ?? ''));
      }),
  );
  const words = householdWords(texts, Number(values['min-count']));
  const vocab = writeHouseholdTokenizer(out, words);
  console.log(`wrote ${out}: ${words.length} words, ${vocab} tokens`);
}
