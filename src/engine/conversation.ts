// Multi-turn conversations with exact token ids: the prompt of a follow-up call is the earlier call's exact ids,
// never the conversation re-rendered and re-tokenised from text.
//
// A chat call whose messages extend an earlier call's messages plus the reply it produced (the client appended the
// assistant message and then new tool/user/system turns) continues that conversation:
//
//   prompt ids = earlier prompt ids ++ earlier completion ids ++ encode(rest)
//   rest       = what the chat template renders after the assistant's reply: the end of its turn (less the stop
//                token the model already generated), the new turns, and the generation prompt
//
// `rest` is found by rendering [system?, user 'x', assistant SENTINEL, ...new turns] and taking the text after the
// sentinel, so templates that rewrite earlier turns (Qwen3 drops old <think> blocks) cannot change ids the model
// already produced. Every prompt id knows whether the model generated it (mask 1, with its log-prob) or not (0), so a
// whole conversation becomes one experience whose action mask marks the generated tokens (conversationTokens()).
//
// Re-tokenising would differ whenever the model produced a non-canonical split (e.g. 'h','e','l','l','o' where the
// tokenizer would give 'hello') or a template renders a reply differently from how it was generated.
import { randomUUID } from 'node:crypto';
import type { ChatInputMessage, ChatMessage, Tokenizer, ToolCall, ToolDefinition } from '../tokenizer/index.js';
import type { FinishReason } from './stopping.js';

/** Template options that must match for a call to continue an earlier one. */
export interface ConversationOptions {
  tools?: readonly ToolDefinition[];
  templateVariables?: Record<string, unknown>;
}

/** A prompt ready to generate from. */
export interface ConversationPrompt {
  promptIds: number[];
  /** Per prompt id: 1 when the model generated it in an earlier turn, else 0. */
  generatedMask: number[];
  /** Per prompt id: its rollout log-prob when generated, else 0. */
  logprobs: number[];
  /** Prompt length of the conversation's first call (the experience's prompt). */
  rootPromptLength: number;
  /** The turn this call continues, or null for a fresh conversation. */
  parent: ConversationTurn | null;
  /** The messages as given (the key of the turns recorded from this prompt). */
  messages: readonly ChatInputMessage[];
  options: ConversationOptions;
  /** The images of the whole prompt as data URLs, in placeholder order (./vision-chat.ts; a vision-language model). */
  images?: string[];
}

/** One generated reply within a conversation. */
export interface ConversationTurn {
  readonly id: string;
  readonly prompt: ConversationPrompt;
  readonly completionIds: readonly number[];
  readonly completionLogprobs: readonly number[];
  readonly finishReason: FinishReason;
  /** The assistant message as the client sees it (and sends back in the next call). */
  readonly reply: ChatMessage;
  /** Anything the caller keeps with the turn (model version, request id, task id, ...). */
  readonly meta: Record<string, unknown>;
}

/** Tokens of a conversation up to and including a turn, as one experience sees them. */
export interface ConversationTokens {
  tokens: number[];
  promptLength: number;
  /** Per response token (after promptLength). */
  actionMask: number[];
  /** Per response token: rollout log-prob where generated, 0 elsewhere. */
  logprobs: number[];
}

export function conversationTokens(turn: ConversationTurn): ConversationTokens {
  const { prompt } = turn;
  const start = prompt.rootPromptLength;
  return {
    tokens: [...prompt.promptIds, ...turn.completionIds],
    promptLength: start,
    actionMask: [...prompt.generatedMask.slice(start), ...turn.completionIds.map(() => 1)],
    logprobs: [...prompt.logprobs.slice(start), ...turn.completionLogprobs],
  };
}

const SENTINEL = 'TRINITY-CONVERSATION-SENTINEL-7f3a9c';

export interface ConversationTrackerOptions {
  /** Turns kept for matching; the oldest are forgotten first (default 10,000). */
  maxTurns?: number;
}

/** Remembers generated turns and builds exact prompts for calls that continue them; see the header. */
export class ConversationTracker {
  readonly tokenizer: Tokenizer;
  readonly maxTurns: number;
  /** key of (options, messages ++ reply) → turn; Map order is insertion order (oldest first). */
  readonly #byKey = new Map<string, ConversationTurn>();
  readonly #byId = new Map<string, ConversationTurn>();

  constructor(tokenizer: Tokenizer, options: ConversationTrackerOptions = {}) {
    this.tokenizer = tokenizer;
    this.maxTurns = options.maxTurns ?? 10_000;
  }

  get size(): number {
    return this.#byId.size;
  }

  /** The prompt for a chat call: continues the longest recorded conversation the messages extend, else fresh. */
  prompt(messages: readonly ChatInputMessage[], options: ConversationOptions = {}): ConversationPrompt {
    if (messages.length === 0) throw new RangeError('chat: messages is empty');
    const continued = this.continues(messages, options);
    if (continued !== null) return this.#continuation(continued.parent, messages, continued.newFrom, options);
    const promptIds = this.tokenizer.encodeChat(messages, templateOptions(options));
    return {
      promptIds,
      generatedMask: promptIds.map(() => 0),
      logprobs: promptIds.map(() => 0),
      rootPromptLength: promptIds.length,
      parent: null,
      messages: [...messages],
      options,
    };
  }

  /**
   * The recorded turn a chat call with these messages continues (the longest conversation they extend, its reply
   * included) and where its new messages start, or null for a fresh conversation. Tokenizes nothing.
   */
  continues(
    messages: readonly ChatInputMessage[],
    options: ConversationOptions = {},
  ): { parent: ConversationTurn; newFrom: number } | null {
    for (let i = messages.length - 2; i >= 1; i--) {
      if (messages[i]?.role !== 'assistant') continue;
      const parent = this.#byKey.get(conversationKey(messages.slice(0, i + 1), options));
      if (parent !== undefined) return { parent, newFrom: i + 1 };
    }
    return null;
  }

  /** Records one reply generated from `prompt`; later calls that send it back continue from its exact ids. */
  record(
    prompt: ConversationPrompt,
    output: {
      completionIds: readonly number[];
      logprobs: readonly number[];
      finishReason: FinishReason;
      reply: ChatMessage;
      id?: string;
      meta?: Record<string, unknown>;
    },
  ): ConversationTurn {
    if (output.logprobs.length !== output.completionIds.length)
      throw new Error(`conversation: ${output.completionIds.length} completion ids but ${output.logprobs.length} logprobs`);
    const turn: ConversationTurn = {
      id: output.id ?? randomUUID(),
      prompt,
      completionIds: [...output.completionIds],
      completionLogprobs: [...output.logprobs],
      finishReason: output.finishReason,
      reply: output.reply,
      meta: output.meta ?? {},
    };
    const key = conversationKey([...prompt.messages, output.reply], prompt.options);
    this.#byKey.delete(key); // n identical replies: the latest wins, and moves to the young end
    this.#byKey.set(key, turn);
    this.#byId.set(turn.id, turn);
    while (this.#byId.size > this.maxTurns) {
      const [oldestId, oldest] = this.#byId.entries().next().value as [string, ConversationTurn];
      this.#byId.delete(oldestId);
      const oldestKey = conversationKey([...oldest.prompt.messages, oldest.reply], oldest.prompt.options);
      if (this.#byKey.get(oldestKey) === oldest) this.#byKey.delete(oldestKey);
    }
    return turn;
  }

  get(id: string): ConversationTurn | undefined {
    return this.#byId.get(id);
  }

  /** Every recorded turn, oldest first. */
  turns(): ConversationTurn[] {
    return [...this.#byId.values()];
  }

  /** Turns no later turn continues: the ends of the conversations (one experience each), oldest first. */
  leaves(): ConversationTurn[] {
    const parents = new Set<ConversationTurn>();
    for (const turn of this.#byId.values()) if (turn.prompt.parent) parents.add(turn.prompt.parent);
    return [...this.#byId.values()].filter((turn) => !parents.has(turn));
  }

  clear(): void {
    this.#byKey.clear();
    this.#byId.clear();
  }

  #continuation(
    parent: ConversationTurn,
    messages: readonly ChatInputMessage[],
    newFrom: number,
    options: ConversationOptions,
  ): ConversationPrompt {
    const newTurns = messages.slice(newFrom);
    const system = messages[0]?.role === 'system' ? [messages[0]] : [];
    const rendered = this.tokenizer.applyChatTemplate(
      [...system, { role: 'user', content: 'x' }, { role: 'assistant', content: SENTINEL }, ...newTurns],
      { ...templateOptions(options), addGenerationPrompt: true },
    );
    const at = rendered.indexOf(SENTINEL);
    if (at < 0 || rendered.indexOf(SENTINEL, at + 1) >= 0)
      throw new Error('conversation: the chat template does not render an assistant message verbatim; cannot continue');
    let rest = rendered.slice(at + SENTINEL.length);
    // The model generated its turn's end token itself: drop that text so it is not added twice.
    const lastId = parent.completionIds.at(-1);
    if (parent.finishReason === 'stop' && lastId !== undefined) {
      const stopText = this.tokenizer.decode([lastId], { skipSpecialTokens: false });
      if (stopText.length > 0 && rest.startsWith(stopText)) rest = rest.slice(stopText.length);
    }
    const restIds = this.tokenizer.encode(rest);
    const before = parent.prompt;
    return {
      promptIds: [...before.promptIds, ...parent.completionIds, ...restIds],
      generatedMask: [...before.generatedMask, ...parent.completionIds.map(() => 1), ...restIds.map(() => 0)],
      logprobs: [...before.logprobs, ...parent.completionLogprobs, ...restIds.map(() => 0)],
      rootPromptLength: before.rootPromptLength,
      parent,
      messages: [...messages],
      options,
    };
  }
}

function templateOptions(options: ConversationOptions) {
  return {
    addGenerationPrompt: true,
    ...(options.tools ? { tools: [...options.tools] } : {}),
    ...(options.templateVariables ? { variables: options.templateVariables } : {}),
  };
}

/** A canonical string of what identifies a conversation so far: tool-call ids and null/'' content are ignored. */
export function conversationKey(messages: readonly ChatInputMessage[], options: ConversationOptions): string {
  return JSON.stringify([
    options.tools ?? null,
    options.templateVariables ?? null,
    messages.map((m) => [
      m.role,
      m.content ?? '',
      m.tool_calls?.map(canonicalToolCall) ?? null,
      m.role === 'tool' ? (m.tool_call_id ?? null) : null,
      m.name ?? null,
    ]),
  ]);
}

function canonicalToolCall(call: ToolCall): [string, string] {
  const args = call.function.arguments;
  let value: unknown = args;
  if (typeof args === 'string') {
    try {
      value = JSON.parse(args);
    } catch {
      return [call.function.name, args];
    }
  }
  return [call.function.name, JSON.stringify(sortKeys(value))];
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, sortKeys((value as Record<string, unknown>)[k])]),
    );
  }
  return value;
}
