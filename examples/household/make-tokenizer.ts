// A subword tokenizer for the household example: the word-level tokenizer of trinity-rft/tokenizer
// (writeWordTokenizer: the character tokenizer of `trinity model init` plus BPE merges making each word one token,
// with its leading space and without) over every word of the household's text, runs of letters and runs of digits
// alike (" cabinet", " mug", " 2"). An object name is then two or three tokens, a command four to eight, an
// observation with its admissible actions about a fifth of its characters, and the vocabulary a few hundred tokens.
// The words are those of the given chat-message files (e.g. make-data.ts's sft.jsonl: the system prompt,
// observations and commands), each that occurs at least --min-count times.
// Usage: node --import tsx examples/household/make-tokenizer.ts OUT_DIR DATA.jsonl... [--min-count N]
//   then: node bin/trinity.js model init MODEL_DIR --tokenizer OUT_DIR ...
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { collectWords, writeWordTokenizer } from 'trinity-rft/tokenizer';

/** The household's words: runs of letters and runs of digits, each at least `minCount` times, shortest first. */
export const householdWords = (texts: readonly string[], minCount: number): string[] =>
  collectWords(texts, /[A-Za-z]+|[0-9]+/g, minCount);

/** The message contents of chat-message JSONL files ({messages: [{content}]} per row); errors name the file and row. */
export function messageTexts(files: readonly string[]): string[] {
  return files.flatMap((file) =>
    readFileSync(file, 'utf8')
      .split('\n')
      .filter((line) => line.trim() !== '')
      .flatMap((line, row) => {
        const messages = (JSON.parse(line) as { messages?: { content?: unknown }[] }).messages;
        if (!Array.isArray(messages)) throw new Error(`${file}: row ${row + 1} has no messages list`);
        return messages.map((m) => String(m.content ?? ''));
      }),
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { 'min-count': { type: 'string', default: '1' } },
  });
  const [out, ...files] = positionals;
  if (out === undefined || files.length === 0) throw new Error('usage: make-tokenizer.ts OUT_DIR DATA.jsonl... [--min-count N]');
  const words = householdWords(messageTexts(files), Number(values['min-count']));
  const vocab = writeWordTokenizer(out, words);
  console.log(`wrote ${out}: ${words.length} words, ${vocab} tokens`);
}
