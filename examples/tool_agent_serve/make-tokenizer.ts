// The served tool agent's tokenizer: the word-level tokenizer of trinity-rft/tokenizer (writeWordTokenizer: the
// character tokenizer of `trinity model init` plus BPE merges making each word one token, with its leading space and
// without) over every run of letters in the expert conversations as the chat template renders them (the question's
// words, "lookup", "query", "tool_call", ...) and in the document file's places. Each of the 120 place names is then
// one token wherever it stands (" Krelqueth" in the question, "Krelqueth" in {"query":"Krelqueth"} and in the tool
// result), so the model copies a name by copying one token. Numbers stay one token per digit: the calculator's inputs
// are copied digit by digit out of the lookups, and its result digit by digit into the answer. The chat template is
// the character tokenizer's, so the conversations render to the same text as before.
//
//   user       Population of Krelqueth plus Gemotanth?        6 tokens (the character tokenizer: 37)
//
// Usage: node --import tsx examples/tool_agent_serve/make-tokenizer.ts OUT_DIR [--sft FILE] [--documents FILE]
//   (defaults: examples/tool_agent/data/sft.jsonl and src/rft/workflow/agents/tool-agent-documents.json)
//   then: node bin/trinity.js model init MODEL_DIR --tokenizer OUT_DIR ...
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { type ChatInputMessage, charTokenizerFiles, collectWords, Tokenizer, writeWordTokenizer } from 'trinity-rft/tokenizer';

/** The words: runs of letters (not digits) of the rendered conversations and of the documents, shortest first. */
export function toolAgentWords(conversations: readonly ChatInputMessage[][], documentTexts: readonly string[]): string[] {
  const { tokenizerJson, tokenizerConfig } = charTokenizerFiles();
  const template = new Tokenizer(tokenizerJson, tokenizerConfig);
  const rendered = conversations.map((messages) => template.applyChatTemplate(messages));
  return collectWords([...rendered, ...documentTexts], /[A-Za-z]+/g);
}

/** The conversations of a chat-message JSONL file ({messages} per row); errors name the file and the row. */
export function readConversations(file: string): ChatInputMessage[][] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .flatMap((line, i) => {
      if (line.trim() === '') return [];
      const messages = (JSON.parse(line) as { messages?: unknown }).messages;
      if (!Array.isArray(messages)) throw new Error(`${file}:${i + 1}: expected {"messages": [...]}`);
      return [messages as ChatInputMessage[]];
    });
}

/** The key and text of each entry of a document file ([{key, text}]). */
export function documentTexts(file: string): string[] {
  const entries = JSON.parse(readFileSync(file, 'utf8')) as { key?: unknown; text?: unknown }[];
  if (!Array.isArray(entries)) throw new Error(`${file}: expected a JSON array of {key, text}`);
  return entries.flatMap((entry) => [String(entry.key ?? ''), String(entry.text ?? '')]);
}

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

if (process.argv[1] !== undefined && import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      sft: { type: 'string', default: here('../tool_agent/data/sft.jsonl') },
      documents: { type: 'string', default: here('../../src/rft/workflow/agents/tool-agent-documents.json') },
    },
  });
  const [out] = positionals;
  if (out === undefined || positionals.length > 1)
    throw new Error('usage: make-tokenizer.ts OUT_DIR [--sft FILE] [--documents FILE]');
  const words = toolAgentWords(readConversations(values.sft as string), documentTexts(values.documents as string));
  const vocab = writeWordTokenizer(out, words);
  console.log(`wrote ${out}: ${words.length} words, ${vocab} tokens`);
}
