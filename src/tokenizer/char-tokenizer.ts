// A character-level tokenizer written out as a standard tokenizer.json (a BPE model with no merges, so every
// character is one token, and a Fuse decoder), with ChatML special tokens and chat template. Tiny models for tests
// and the quickstart use it; transformers and the Rust `tokenizers` load it unchanged.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Special tokens, in id order: padding/end of text, ChatML turn markers, unknown character. */
export const CHAR_SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>', '<unk>'] as const;

/**
 * ChatML, compact enough for character-level models: tools are listed by name on one line of a system
 * turn, an assistant's tool calls follow its text as Hermes <tool_call> blocks (src/engine/tool-calls.ts parses them),
 * and tool results are turns of role 'tool'.
 */
export const CHATML_TEMPLATE =
  "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n' }}{%- endif %}" +
  "{{- 'tools:' }}{%- for tool in tools %}{{- ' ' + tool.function.name }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- endif %}" +
  "{%- for message in messages %}{%- if not (tools and loop.first and message.role == 'system') %}" +
  "{{- '<|im_start|>' + message.role + '\\n' + message.content }}" +
  "{%- if message.tool_calls %}{%- for call in message.tool_calls %}{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}" +
  '{{- \'<tool_call>\\n{"name": "\' + call.function.name + \'", "arguments": \' + (call.function.arguments | tojson) + \'}\\n</tool_call>\' }}' +
  "{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/** The printable ASCII characters plus newline: enough for arithmetic, code-like and English tasks. */
export const DEFAULT_ALPHABET = `\n${Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)).join('')}`;

export interface CharTokenizerFiles {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
}

export function charTokenizerFiles(alphabet: string = DEFAULT_ALPHABET): CharTokenizerFiles {
  const chars = [...new Set([...alphabet])];
  const vocab: Record<string, number> = {};
  CHAR_SPECIAL_TOKENS.forEach((token, id) => {
    vocab[token] = id;
  });
  let size = CHAR_SPECIAL_TOKENS.length;
  for (const c of chars) {
    if (vocab[c] === undefined) vocab[c] = size++; // a counter: Object.keys per character made 49k characters take minutes
  }
  const addedTokens = CHAR_SPECIAL_TOKENS.map((content, id) => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }));
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: null,
    post_processor: null,
    decoder: { type: 'Fuse' },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: '<unk>',
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: [],
    },
  };
  const tokenizerConfig = {
    tokenizer_class: 'PreTrainedTokenizerFast',
    bos_token: null,
    eos_token: '<|im_end|>',
    pad_token: '<|endoftext|>',
    unk_token: '<unk>',
    clean_up_tokenization_spaces: false,
    model_max_length: 32768,
    added_tokens_decoder: Object.fromEntries(addedTokens.map(({ id, ...rest }) => [String(id), rest])),
    chat_template: CHATML_TEMPLATE,
  };
  return { tokenizerJson, tokenizerConfig };
}

/** Writes tokenizer.json and tokenizer_config.json for a character tokenizer into dir; returns the vocabulary size. */
export function writeCharTokenizer(dir: string, alphabet: string = DEFAULT_ALPHABET): number {
  const { tokenizerJson, tokenizerConfig } = charTokenizerFiles(alphabet);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'tokenizer.json'), `${JSON.stringify(tokenizerJson, null, 2)}\n`);
  writeFileSync(join(dir, 'tokenizer_config.json'), `${JSON.stringify(tokenizerConfig, null, 2)}\n`);
  return Object.keys((tokenizerJson.model as { vocab: Record<string, number> }).vocab).length;
}
