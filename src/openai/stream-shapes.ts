// How each endpoint's streamed chunks look: the StreamShape that ./streaming.ts fills as tokens arrive.
//
//   chat.completions  a first chunk per choice with the assistant role, then text deltas, then a closing chunk with the
//                     finish reason (and the tool calls, whose text was held back until then)
//   completions       text deltas whose log-probs' text_offset runs on across a choice's deltas (as in the non-streamed
//                     answer), then a closing chunk with the finish reason
//
// Both end with a usage chunk when the request asks for one (stream_options.include_usage). ./service.ts builds a shape
// per request and starts the stream; ./responses.ts builds the pieces (log-probs, deltas, finish reasons).
import type { ChatCompletion } from 'openai/resources';
import type { ChatResult, GenerateResult } from '../engine/index.js';
import {
  type ChatCompletionChunkBody,
  chatFinishReason,
  completionUsage,
  finalChatDelta,
  type ResponseHead,
  type TextCompletionChunkBody,
  type TextLogprobs,
  type TokenSpan,
  type TokenText,
} from './responses.js';
import type { StreamShape } from './streaming.js';

/** What a chat stream's chunks are made from. */
export interface ChatChunkOptions {
  head: ResponseHead;
  /** Hold back text from a <tool_call> on (the request has tools). */
  holdToolCalls: boolean;
  /** vLLM's return_token_ids. */
  returnTokenIds: boolean;
  /** stream_options.include_usage. */
  includeUsage: boolean;
  /** A delta's log-probs, or null when the request asks for none. */
  logprobsOf: (span: TokenSpan) => ChatCompletion.Choice.Logprobs | null;
  /** The engine's result as a chat result (tool calls parsed, turns recorded). */
  finish: (result: GenerateResult) => ChatResult;
}

export function chatChunkShape(options: ChatChunkOptions): StreamShape<ChatCompletionChunkBody> {
  const { holdToolCalls, returnTokenIds, logprobsOf, finish } = options;
  const chunkHead = { ...options.head, object: 'chat.completion.chunk' as const };
  return {
    holdToolCalls,
    first: (index) => ({
      ...chunkHead,
      choices: [{ index, delta: { role: 'assistant', content: '' }, finish_reason: null }],
    }),
    delta: (index, text, span) => ({
      ...chunkHead,
      choices: [
        {
          index,
          delta: { content: text },
          logprobs: logprobsOf(span),
          finish_reason: null,
          ...(returnTokenIds ? { token_ids: [...span.ids] } : {}),
        },
      ],
    }),
    end: (result) => {
      const chat = finish(result);
      return {
        texts: chat.choices.map((choice) => choice.message.content),
        chunks: chat.choices.map((choice) => ({
          ...chunkHead,
          choices: [{ index: choice.index, delta: finalChatDelta(choice), finish_reason: chatFinishReason(choice) }],
          ...(returnTokenIds ? { prompt_token_ids: result.promptIds } : {}),
        })),
      };
    },
    usage: usageChunk(chunkHead, options.includeUsage),
  };
}

/** What a text-completion stream's chunks are made from. */
export interface TextChunkOptions {
  head: ResponseHead;
  /** Completions streamed (choice indices 0..n-1). */
  n: number;
  /** vLLM's return_token_ids. */
  returnTokenIds: boolean;
  /** stream_options.include_usage. */
  includeUsage: boolean;
  /** How tokens are shown in log-probs (their text's length moves text_offset on). */
  tokenText: TokenText;
  /** A delta's log-probs from `textOffset` on, or null when the request asks for none. */
  logprobsOf: (span: TokenSpan, textOffset: number) => TextLogprobs | null;
}

export function textChunkShape(options: TextChunkOptions): StreamShape<TextCompletionChunkBody> {
  const { returnTokenIds, tokenText, logprobsOf } = options;
  const chunkHead = { ...options.head, object: 'text_completion' as const };
  // text_offset runs on across a choice's deltas, as in the non-streamed answer
  const textOffsets = new Array<number>(options.n).fill(0);
  return {
    holdToolCalls: false,
    first: () => null,
    delta: (index, text, span) => {
      const offset = textOffsets[index] ?? 0;
      textOffsets[index] = offset + span.ids.reduce((sum, t) => sum + tokenText(t).length, 0);
      return {
        ...chunkHead,
        choices: [
          {
            index,
            text,
            logprobs: logprobsOf(span, offset),
            finish_reason: null,
            ...(returnTokenIds ? { token_ids: [...span.ids] } : {}),
          },
        ],
      };
    },
    end: (result) => ({
      texts: result.completions.map((c) => c.text ?? ''),
      chunks: result.completions.map((c) => ({
        ...chunkHead,
        choices: [
          {
            index: c.index,
            text: '',
            logprobs: null,
            finish_reason: c.finishReason,
            ...(returnTokenIds ? { prompt_token_ids: result.promptIds } : {}),
          },
        ],
      })),
    }),
    usage: usageChunk(chunkHead, options.includeUsage),
  };
}

/** The chunk after the closing ones: the whole response's token counts, when the request asks for it. */
function usageChunk<Head extends ResponseHead>(chunkHead: Head, includeUsage: boolean) {
  return (result: GenerateResult) =>
    includeUsage ? { ...chunkHead, choices: [], usage: completionUsage(result.promptIds.length, result.completions) } : null;
}
