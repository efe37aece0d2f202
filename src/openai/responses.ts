// Response bodies of the OpenAI API, typed with the `openai` package's own types (so what we send is what its client
// reads), plus vLLM's token-id extensions: prompt_token_ids and each choice's token_ids (return_token_ids).
//
// Log-probs (each from the distribution the engine samples from, log_softmax(logits / temperature); see
// ../engine/sampling.ts):
//   chat         logprobs.content[i] = { token, logprob, bytes, top_logprobs: the top_logprobs most likely tokens,
//                most likely first }
//   completions  logprobs = { tokens, token_logprobs, top_logprobs, text_offset }, top_logprobs[i] = { token: logprob }
//                for the `logprobs` most likely tokens (most likely first) and the sampled token when it is not among
//                them (so up to logprobs + 1 entries, as OpenAI and vLLM answer); two ids with the same text share a key
//                (the more likely one is kept) unless tokens are shown as ids (return_tokens_as_token_ids)
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionMessageFunctionToolCall,
  ChatCompletionTokenLogprob,
  CompletionChoice,
  CompletionUsage,
  Model,
  Completion as OpenAICompletion,
} from 'openai/resources';
import type { ChatChoice, Completion, TopLogprob } from '../engine/index.js';
import type { ToolCall } from '../tokenizer/index.js';

/** vLLM's return_token_ids: the exact ids a choice produced. */
interface TokenIds {
  token_ids?: number[];
}

export type ChatCompletionBody = Omit<ChatCompletion, 'choices'> & {
  choices: Array<ChatCompletion.Choice & TokenIds>;
  prompt_token_ids?: number[];
};

export type ChatCompletionChunkBody = Omit<ChatCompletionChunk, 'choices'> & {
  choices: Array<ChatCompletionChunk.Choice & TokenIds>;
  prompt_token_ids?: number[];
};

/**
 * Text-completion log-probs; with echo the prompt's tokens come first and its first token has no log-prob (null in
 * token_logprobs and top_logprobs, as vLLM answers).
 */
export interface TextLogprobs {
  tokens: string[];
  token_logprobs: Array<number | null>;
  top_logprobs: Array<Record<string, number> | null>;
  text_offset: number[];
}

export type TextCompletionChoice = Omit<CompletionChoice, 'logprobs'> & {
  logprobs: TextLogprobs | null;
  prompt_token_ids?: number[];
} & TokenIds;

export type TextCompletionBody = Omit<OpenAICompletion, 'choices'> & { choices: TextCompletionChoice[] };

/** A streamed text completion: a body whose choices have finish_reason null until they end. */
export type TextCompletionChunkBody = Omit<OpenAICompletion, 'choices'> & {
  choices: Array<Omit<TextCompletionChoice, 'finish_reason'> & { finish_reason: CompletionChoice['finish_reason'] | null }>;
};

export interface ModelList {
  object: 'list';
  data: Model[];
}

/** The fields every body and chunk of one response shares. */
export interface ResponseHead {
  id: string;
  created: number;
  model: string;
}

/** How a token is shown in log-probs: its text, or "token_id:<id>" (return_tokens_as_token_ids). */
export type TokenText = (id: number) => string;

/** Tokens a choice or a streamed delta covers: ids, their log-probs and, when asked, each position's most likely tokens. */
export interface TokenSpan {
  ids: readonly number[];
  logprobs: readonly number[];
  topLogprobs?: readonly (readonly TopLogprob[])[] | undefined;
}

export function modelList(names: Iterable<string>, created: number): ModelList {
  return { object: 'list', data: [...names].map((id) => ({ id, object: 'model', created, owned_by: 'trinity-rft' })) };
}

export function completionUsage(promptTokens: number, completions: readonly Pick<Completion, 'tokenIds'>[]): CompletionUsage {
  const completionTokens = completions.reduce((sum, c) => sum + c.tokenIds.length, 0);
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}

const utf8 = (text: string): number[] => [...Buffer.from(text, 'utf8')];

/** Chat log-probs of a span; `top` most likely tokens per position (0: an empty list, as OpenAI answers). */
export function chatLogprobs(span: TokenSpan, tokenText: TokenText, top: number): ChatCompletion.Choice.Logprobs {
  const content = span.ids.map((id, i): ChatCompletionTokenLogprob => {
    const token = tokenText(id);
    return {
      token,
      logprob: span.logprobs[i] as number,
      bytes: utf8(token),
      top_logprobs: (span.topLogprobs?.[i] ?? []).slice(0, top).map((t) => {
        const text = tokenText(t.tokenId);
        return { token: text, logprob: t.logprob, bytes: utf8(text) };
      }),
    };
  });
  return { content, refusal: null };
}

/** Text-completion log-probs of a span whose first token starts at `textOffset` characters into the completion. */
export function textLogprobs(span: TokenSpan, tokenText: TokenText, textOffset: number): TextLogprobs {
  const tokens = span.ids.map(tokenText);
  let offset = textOffset;
  const offsets = tokens.map((t) => {
    const at = offset;
    offset += t.length;
    return at;
  });
  const topLogprobs = tokens.map((sampled, i) => {
    const entries: Record<string, number> = {};
    for (const t of span.topLogprobs?.[i] ?? []) {
      const key = tokenText(t.tokenId);
      if (!(key in entries)) entries[key] = t.logprob;
    }
    if (!(sampled in entries)) entries[sampled] = span.logprobs[i] as number;
    return entries;
  });
  return { tokens, token_logprobs: [...span.logprobs], top_logprobs: topLogprobs, text_offset: offsets };
}

/** The message a chat choice answers with: content null when the reply is only tool calls. */
export function assistantMessage(choice: ChatChoice): ChatCompletion.Choice['message'] {
  const calls = choice.message.tool_calls;
  return {
    role: 'assistant',
    content: calls && choice.message.content === '' ? null : choice.message.content,
    refusal: null,
    ...(calls ? { tool_calls: calls.map(functionToolCall) } : {}),
  };
}

export function chatFinishReason(choice: ChatChoice): ChatCompletion.Choice['finish_reason'] {
  return choice.message.tool_calls ? 'tool_calls' : choice.finishReason;
}

/** The closing delta of a streamed chat choice: its tool calls (whole; they are only known at the end), or nothing. */
export function finalChatDelta(choice: ChatChoice): ChatCompletionChunk.Choice.Delta {
  const calls = choice.message.tool_calls;
  return calls ? { tool_calls: calls.map((call, index) => ({ index, ...functionToolCall(call) })) } : {};
}

function functionToolCall(call: ToolCall): ChatCompletionMessageFunctionToolCall {
  const args = call.function.arguments;
  return {
    id: call.id ?? '',
    type: 'function',
    function: { name: call.function.name, arguments: typeof args === 'string' ? args : JSON.stringify(args) },
  };
}

/**
 * echo: the prompt's log-probs (`prompt.logprobs[0]` null: nothing precedes the first token) followed by the
 * completion's, whose text offsets continue after the prompt's tokens.
 */
export function echoLogprobs(
  prompt: { ids: readonly number[]; logprobs: readonly (number | null)[]; topLogprobs?: readonly (readonly TopLogprob[])[] },
  completion: TokenSpan,
  tokenText: TokenText,
): TextLogprobs {
  const rest = textLogprobs(
    { ids: prompt.ids.slice(1), logprobs: prompt.logprobs.slice(1) as number[], topLogprobs: prompt.topLogprobs?.slice(1) },
    tokenText,
    tokenText(prompt.ids[0] as number).length,
  );
  const first = tokenText(prompt.ids[0] as number);
  const promptEnd =
    rest.text_offset.length > 0 ? (rest.text_offset.at(-1) as number) + (rest.tokens.at(-1) as string).length : first.length;
  const generated = textLogprobs(completion, tokenText, promptEnd);
  return {
    tokens: [first, ...rest.tokens, ...generated.tokens],
    token_logprobs: [null, ...rest.token_logprobs, ...generated.token_logprobs],
    top_logprobs: [null, ...rest.top_logprobs, ...generated.top_logprobs],
    text_offset: [0, ...rest.text_offset, ...generated.text_offset],
  };
}
