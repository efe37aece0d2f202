// Tokenizers and chat templates from Hugging Face model folders:
//   tokenizer.json         the tokenizer (BPE / WordPiece / Unigram ...), run by @huggingface/tokenizers
//   tokenizer_config.json  special tokens and the Jinja chat template, rendered by @huggingface/jinja
//   chat_template.jinja    the chat template as transformers 5 saves it (it then leaves tokenizer_config.json without
//                          one); it takes priority over tokenizer_config.json's, as in transformers. A processor's
//                          older chat_template.json ({"chat_template": "..."}) is read when neither has one.
//   generation_config.json eos_token_id (one id or a list), used for stopping
// Token ids are the currency of RL: a rollout keeps the exact ids the model produced, so callers encode prompts
// once and never re-tokenise generated text.
import { join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { fileErrorDetail, pathExists, readRegularFile } from '../util/index.js';
import { type ChatTemplateBudget, ChatTemplateError, DEFAULT_CHAT_TEMPLATE_BUDGET, renderChatTemplate } from './chat-template.js';

export interface ToolCall {
  id?: string;
  type?: 'function';
  function: { name: string; arguments: string | Record<string, unknown> };
}

/**
 * An OpenAI content part: text, or an image (`url`: a data:image/...;base64 URL or a local file path) for a
 * vision-language model, whose chat template renders the image's placeholder (src/engine/vision-chat.ts).
 */
export type ChatContentPart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  name?: string;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
  reasoning_content?: string;
}

/** A chat message as callers give it: its content text, or content parts (text and images) the template renders. */
export interface ChatInputMessage extends Omit<ChatMessage, 'content'> {
  content: string | ChatContentPart[];
}

export interface ToolDefinition {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

export interface ChatTemplateOptions {
  /** Append the assistant header so the model continues as the assistant. */
  addGenerationPrompt?: boolean;
  tools?: ToolDefinition[];
  /** Extra template variables (e.g. enable_thinking for Qwen3). */
  variables?: Record<string, unknown>;
  /** Limits on the render (./chat-template.ts); default DEFAULT_CHAT_TEMPLATE_BUDGET. */
  budget?: ChatTemplateBudget;
}

export class TokenizerError extends Error {
  constructor(file: string, detail: string) {
    super(`${file}: ${detail}`);
    this.name = 'TokenizerError';
  }
}

type JsonObject = Record<string, unknown>;

function readJson(file: string): JsonObject {
  let text: string;
  try {
    text = readRegularFile(file, 'utf8');
  } catch (error) {
    throw new TokenizerError(file, `cannot read: ${fileErrorDetail(error)}`);
  }
  try {
    const value: unknown = JSON.parse(text);
    if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error('not a JSON object');
    return value as JsonObject;
  } catch (error) {
    throw new TokenizerError(file, `invalid JSON: ${(error as Error).message}`);
  }
}

/** A special token in tokenizer_config.json is a string or an AddedToken object {content: ...}. */
function tokenContent(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (value !== null && typeof value === 'object' && typeof (value as { content?: unknown }).content === 'string') {
    return (value as { content: string }).content;
  }
  return null;
}

/**
 * tokenizer_config.json with the chat template of the folder's own template file in place: chat_template.jinja
 * (transformers 5's form; it wins over the config's entry, as transformers loads it), else the config's entry, else a
 * processor's older chat_template.json.
 */
function withChatTemplateFile(dir: string, config: JsonObject): JsonObject {
  const jinjaFile = join(dir, 'chat_template.jinja');
  if (pathExists(jinjaFile)) {
    try {
      return { ...config, chat_template: readRegularFile(jinjaFile, 'utf8') };
    } catch (error) {
      throw new TokenizerError(jinjaFile, `cannot read: ${fileErrorDetail(error)}`);
    }
  }
  if (config.chat_template !== undefined && config.chat_template !== null) return config;
  const legacyFile = join(dir, 'chat_template.json');
  if (!pathExists(legacyFile)) return config;
  const template = readJson(legacyFile).chat_template;
  if (typeof template !== 'string')
    throw new TokenizerError(
      legacyFile,
      `expected {"chat_template": "<jinja text>"}, got chat_template ${JSON.stringify(template) ?? 'missing'}`,
    );
  return { ...config, chat_template: template };
}

export class Tokenizer {
  readonly #hf: HfTokenizer;
  readonly #template: Template | null;
  readonly #config: JsonObject;
  readonly #vocabSize: number;
  readonly #specialIds: Set<number>;
  /** Ids that end generation: generation_config.json's eos_token_id, else the tokenizer's eos token. */
  readonly eosTokenIds: readonly number[];
  readonly padTokenId: number | null;
  readonly bosTokenId: number | null;
  /**
   * Template variables every render starts from, under each call's own `variables` (a run's chat-template switches,
   * e.g. { enable_thinking: false } from explorer.rollout_model.enable_thinking); none by default.
   */
  templateDefaults: Readonly<Record<string, unknown>> = {};

  constructor(tokenizerJson: JsonObject, tokenizerConfig: JsonObject, generationConfig: JsonObject = {}, source = 'tokenizer') {
    try {
      this.#hf = new HfTokenizer(tokenizerJson, tokenizerConfig);
    } catch (error) {
      throw new TokenizerError(source, `cannot build the tokenizer from tokenizer.json: ${(error as Error).message}`);
    }
    this.#config = tokenizerConfig;
    const template = tokenizerConfig.chat_template;
    const templateText =
      typeof template === 'string' ? template : Array.isArray(template) ? this.#defaultTemplate(template) : null;
    try {
      this.#template = templateText === null ? null : new Template(templateText);
    } catch (error) {
      throw new TokenizerError(source, `chat_template does not parse: ${(error as Error).message}`);
    }
    const vocab = this.#hf.get_vocab(true);
    let maxId = -1;
    for (const id of vocab.values()) maxId = Math.max(maxId, id);
    this.#vocabSize = maxId + 1;
    this.#specialIds = new Set([...this.#hf.get_added_tokens_decoder().entries()].filter(([, t]) => t.special).map(([id]) => id));
    const idOf = (key: string): number | null => {
      const content = tokenContent(tokenizerConfig[key]);
      return content === null ? null : (this.#hf.token_to_id(content) ?? null);
    };
    const eos = generationConfig.eos_token_id;
    const eosIds = Array.isArray(eos)
      ? eos.filter((v): v is number => typeof v === 'number')
      : typeof eos === 'number'
        ? [eos]
        : [];
    const configEos = idOf('eos_token');
    if (configEos !== null && !eosIds.includes(configEos)) eosIds.push(configEos);
    this.eosTokenIds = eosIds;
    this.padTokenId =
      idOf('pad_token') ?? (typeof generationConfig.pad_token_id === 'number' ? generationConfig.pad_token_id : null);
    this.bosTokenId = idOf('bos_token');
  }

  /** Loads tokenizer.json, tokenizer_config.json and (if present) generation_config.json from a model folder. */
  static load(dir: string): Tokenizer {
    const tokenizerFile = join(dir, 'tokenizer.json');
    if (!pathExists(tokenizerFile)) throw new TokenizerError(tokenizerFile, 'missing: a model folder needs tokenizer.json');
    const configFile = join(dir, 'tokenizer_config.json');
    const generationFile = join(dir, 'generation_config.json');
    return new Tokenizer(
      readJson(tokenizerFile),
      withChatTemplateFile(dir, pathExists(configFile) ? readJson(configFile) : {}),
      pathExists(generationFile) ? readJson(generationFile) : {},
      dir,
    );
  }

  #defaultTemplate(templates: unknown[]): string | null {
    for (const t of templates) {
      if (t && typeof t === 'object' && (t as { name?: unknown }).name === 'default') {
        const text = (t as { template?: unknown }).template;
        if (typeof text === 'string') return text;
      }
    }
    return null;
  }

  /** Number of ids (the largest id + 1), added tokens included. */
  get vocabSize(): number {
    return this.#vocabSize;
  }

  get hasChatTemplate(): boolean {
    return this.#template !== null;
  }

  /** Token ids of `text`. Special-token strings inside the text map to their ids, as in transformers. */
  encode(text: string, options: { addSpecialTokens?: boolean } = {}): number[] {
    return this.#hf.encode(text, { add_special_tokens: options.addSpecialTokens ?? false }).ids;
  }

  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    if (ids.length === 0) return '';
    return this.#hf.decode([...ids], { skip_special_tokens: options.skipSpecialTokens ?? false });
  }

  tokenToId(token: string): number | null {
    return this.#hf.token_to_id(token) ?? null;
  }

  idToToken(id: number): string | null {
    return this.#hf.id_to_token(id) ?? null;
  }

  isSpecial(id: number): boolean {
    return this.#specialIds.has(id);
  }

  /**
   * Renders messages with the model's chat template (tokenizer_config.json's chat_template), within options.budget.
   * Throws ChatTemplateRefusal (the template's raise_exception), ChatTemplateBudgetError or ChatTemplateError.
   */
  applyChatTemplate(messages: readonly ChatInputMessage[], options: ChatTemplateOptions = {}): string {
    if (this.#template === null)
      throw new Error('this tokenizer has no chat template (chat_template.jinja, or chat_template in tokenizer_config.json)');
    const special = (key: string) => tokenContent(this.#config[key]) ?? '';
    const variables = {
      messages: messages.map((m) => ({
        ...m,
        ...(m.tool_calls
          ? {
              tool_calls: m.tool_calls.map((c) => ({
                ...c,
                function: {
                  ...c.function,
                  arguments: typeof c.function.arguments === 'string' ? safeParse(c.function.arguments) : c.function.arguments,
                },
              })),
            }
          : {}),
      })),
      add_generation_prompt: options.addGenerationPrompt ?? false,
      ...(options.tools ? { tools: options.tools } : {}),
      bos_token: special('bos_token'),
      eos_token: special('eos_token'),
      pad_token: special('pad_token'),
      unk_token: special('unk_token'),
      ...this.templateDefaults,
      ...options.variables,
    };
    return renderChatTemplate(this.#template, variables, options.budget ?? DEFAULT_CHAT_TEMPLATE_BUDGET);
  }

  /** Token ids of the rendered chat (the template already holds every special token). */
  encodeChat(messages: readonly ChatInputMessage[], options: ChatTemplateOptions = {}): number[] {
    return this.encode(this.applyChatTemplate(messages, options));
  }
}

/**
 * Renders a one-message chat, so that a template that fails or runs past its budget on the plainest input is the
 * model's error when it is loaded (naming `source`, its folder), not each request's. The template declining the
 * probe (raise_exception) is fine.
 */
export function checkChatTemplate(tokenizer: Tokenizer, source: string): void {
  if (!tokenizer.hasChatTemplate) return;
  try {
    tokenizer.applyChatTemplate([{ role: 'user', content: 'Hello.' }], { addGenerationPrompt: true });
  } catch (error) {
    if (error instanceof ChatTemplateError) {
      throw new TokenizerError(source, `chat_template cannot render a one-message chat: ${error.message}`);
    }
  }
}

/** Tool-call arguments arrive as JSON strings (OpenAI format); templates expect objects. */
function safeParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
