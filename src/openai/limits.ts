// Request limits as one pure function: what a request asks for, against what this server allows, → the error it is
// answered with (or the completion budget it gets). The HTTP layer checks the body size with it, the service the rest.
//
//   body            bodyBytes                      ≤ maxBodyBytes                      else 413
//   prompt          promptTokens                   ≤ maxPromptTokens                   else 400 (param: the prompt's field)
//                   promptTokens                   < contextLength                     else 400 (no room to generate)
//   completion      max_tokens                     ≤ maxTokens                         else 400 (param: its field)
//                   promptTokens + max_tokens      ≤ contextLength                     else 400 (param: its field)
//                   not given: min(maxTokens, contextLength - promptTokens)
//   samples         n                              ≤ maxN                              else 400 (param: n)
//
// A limit or a measure left out is not checked. The first broken limit, in the order above, is the answer.
import { OpenAIHttpError } from './protocol.js';

/** What this server allows; a limit left out is not enforced. */
export interface RequestLimits {
  /** Largest request body in bytes. */
  maxBodyBytes?: number;
  /** Longest prompt in tokens. */
  maxPromptTokens?: number;
  /** Prompt + completion positions of one sequence (the engine's context). */
  contextLength?: number;
  /** Largest completion budget a request may ask for (and the default budget). */
  maxTokens?: number;
  /** Most samples per prompt. */
  maxN?: number;
}

/** What a request asks for; a measure left out is not checked. */
export interface RequestSize {
  bodyBytes?: number;
  /** Tokens of the (longest) prompt, and the request field it came from ('messages', 'prompt', 'prompt.2'). */
  prompt?: { tokens: number; param: string };
  /** The completion budget asked for (null: not given), and the field that asked ('max_tokens', 'max_completion_tokens'). */
  maxTokens?: { value: number | null; param: string };
  n?: number;
}

/**
 * Checks `size` against `limits` (see the header): throws the OpenAIHttpError of the first limit broken; returns the
 * completion budget (the one asked for, or the default; null when neither a budget nor a prompt was given).
 */
export function checkRequestLimits(size: RequestSize, limits: RequestLimits): { maxTokens: number | null } {
  const { bodyBytes, prompt, maxTokens: asked, n } = size;
  if (bodyBytes !== undefined && limits.maxBodyBytes !== undefined && bodyBytes > limits.maxBodyBytes) {
    throw new OpenAIHttpError(413, `the request body of ${bodyBytes} bytes exceeds the limit of ${limits.maxBodyBytes} bytes`, {
      code: 'request_too_large',
    });
  }
  const context = limits.contextLength ?? Number.POSITIVE_INFINITY;
  if (prompt !== undefined) {
    if (limits.maxPromptTokens !== undefined && prompt.tokens > limits.maxPromptTokens) {
      throw new OpenAIHttpError(
        400,
        `'${prompt.param}': the prompt has ${prompt.tokens} tokens; this server accepts at most ${limits.maxPromptTokens}`,
        { param: prompt.param, code: 'context_length_exceeded' },
      );
    }
    if (prompt.tokens >= context) {
      throw new OpenAIHttpError(
        400,
        `'${prompt.param}': the prompt has ${prompt.tokens} tokens, which fills the model's context of ${context}`,
        { param: prompt.param, code: 'context_length_exceeded' },
      );
    }
  }
  let budget: number | null = null;
  if (asked !== undefined && asked.value !== null) {
    if (limits.maxTokens !== undefined && asked.value > limits.maxTokens) {
      throw new OpenAIHttpError(400, `'${asked.param}' ${asked.value} exceeds this server's limit of ${limits.maxTokens}`, {
        param: asked.param,
      });
    }
    if (prompt !== undefined && prompt.tokens + asked.value > context) {
      throw new OpenAIHttpError(
        400,
        `This model's maximum context length is ${context} tokens. However, you requested ${prompt.tokens + asked.value} ` +
          `tokens (${prompt.tokens} in the prompt, ${asked.value} in the completion: '${asked.param}').`,
        { param: asked.param, code: 'context_length_exceeded' },
      );
    }
    budget = asked.value;
  } else if (prompt !== undefined) {
    budget = Math.min(limits.maxTokens ?? Number.POSITIVE_INFINITY, context - prompt.tokens);
    if (!Number.isFinite(budget)) budget = null;
  }
  if (n !== undefined && limits.maxN !== undefined && n > limits.maxN) {
    throw new OpenAIHttpError(400, `'n' ${n} exceeds this server's limit of ${limits.maxN}`, { param: 'n' });
  }
  return { maxTokens: budget };
}
