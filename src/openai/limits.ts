// Request limits as one pure function: what a request asks for, against what this server allows, → the error it is
// answered with (or the completion budget it gets). The HTTP layer checks the body size with it, the service the rest.
//
//   body            bodyBytes                      ≤ maxBodyBytes                      else 413
//   prompt          promptTokens                   ≤ maxPromptTokens                   else 400 (param: the prompt's field)
//                   promptTokens                   < contextLength                     else 400 (no room to generate)
//   completion      max_tokens                     ≤ maxTokens                         else 400 (param: its field)
//                   promptTokens + max_tokens      ≤ contextLength                     else 400 (param: its field)
//                   not given: min(maxTokens, contextLength - promptTokens, the work budget's share below)
//                   capTokens: a max_tokens over either bound is lowered to min(max_tokens, maxTokens,
//                   contextLength - promptTokens) instead of refused (mode serve: the run's max_response_tokens)
//   samples         n                              ≤ maxN                              else 400 (param: n)
//   work            completions = prompts × n      ≤ maxCompletions                    else 400 (param: the prompts'
//                                                                                           field, or n for one prompt)
//                   tokens = Σ prompt tokens + completions × budget
//                                                  ≤ maxRequestTokens                  else 400 (param: the budget's
//                                                                                           field, else the prompts')
//                   not given: the budget shrinks to ⌊(maxRequestTokens - Σ prompt tokens) / completions⌋ (≥ 1)
//
// The work limits bound what one request may hold the engine for (a list of 1,000 prompts with n 32 is 32,000
// completions: the per-prompt limits above each pass). A limit or a measure left out is not checked. The first broken
// limit, in the order above, is the answer.
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
  /** Most completions per request: prompts × n. */
  maxCompletions?: number;
  /** Most tokens per request: its prompts' tokens + completions × the completion budget. */
  maxRequestTokens?: number;
  /**
   * A completion budget asked for over maxTokens or over the room the prompt leaves in the context is lowered to fit
   * instead of refused (the reply ends with finish_reason 'length' there). Default false: refused (400).
   */
  capTokens?: boolean;
}

/** What a request asks for; a measure left out is not checked. */
export interface RequestSize {
  bodyBytes?: number;
  /** Tokens of the (longest) prompt, and the request field it came from ('messages', 'prompt', 'prompt.2'). */
  prompt?: { tokens: number; param: string };
  /** The completion budget asked for (null: not given), and the field that asked ('max_tokens', 'max_completion_tokens'). */
  maxTokens?: { value: number | null; param: string };
  n?: number;
  /**
   * A request with a list of prompts (/v1/completions): how many, their tokens together, and the field ('prompt').
   * Left out: one prompt, `prompt`.
   */
  prompts?: { count: number; tokens: number; param: string };
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
  // capTokens: a budget asked for is lowered like the default one, and the work limits shrink it as they shrink that
  const capped = asked !== undefined && asked.value !== null && limits.capTokens === true;
  let budget: number | null = null;
  if (asked !== undefined && asked.value !== null && !capped) {
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
  } else if (prompt !== undefined || capped) {
    const wanted = capped ? (asked?.value ?? Number.POSITIVE_INFINITY) : Number.POSITIVE_INFINITY;
    budget = Math.min(wanted, limits.maxTokens ?? Number.POSITIVE_INFINITY, context - (prompt?.tokens ?? 0));
    if (!Number.isFinite(budget)) budget = null;
  }
  if (n !== undefined && limits.maxN !== undefined && n > limits.maxN) {
    throw new OpenAIHttpError(400, `'n' ${n} exceeds this server's limit of ${limits.maxN}`, { param: 'n' });
  }
  if (capped) {
    const { maxTokens: _lowered, ...unasked } = size;
    return { maxTokens: checkRequestWork(unasked, limits, budget) };
  }
  return { maxTokens: checkRequestWork(size, limits, budget) };
}

/** The work limits (see the header): returns the completion budget, shrunk to the token limit when not asked for. */
function checkRequestWork(size: RequestSize, limits: RequestLimits, budget: number | null): number | null {
  const { prompt, maxTokens: asked, prompts } = size;
  const count = prompts?.count ?? 1;
  const samples = size.n ?? 1;
  const completions = count * samples;
  const promptsParam = prompts?.param ?? prompt?.param ?? 'prompt';
  const what = `${count} prompt${count === 1 ? '' : 's'} × n ${samples} = ${completions} completions`;
  if (limits.maxCompletions !== undefined && completions > limits.maxCompletions) {
    const param = count > 1 ? promptsParam : 'n';
    throw new OpenAIHttpError(400, `'${param}': ${what}; this server allows at most ${limits.maxCompletions} per request`, {
      param,
    });
  }
  const max = limits.maxRequestTokens;
  if (max === undefined || budget === null) return budget;
  const promptTokens = prompts?.tokens ?? prompt?.tokens ?? 0;
  if (promptTokens + completions * budget <= max) return budget;
  const askedBudget = asked !== undefined && asked.value !== null;
  const room = Math.floor((max - promptTokens) / completions);
  if (!askedBudget && room >= 1) return room;
  // a smaller budget fixes it only when one token per completion would fit
  const param = askedBudget && room >= 1 ? asked.param : promptsParam;
  const budgetField = askedBudget ? `'${asked.param}'` : 'the default budget';
  throw new OpenAIHttpError(
    400,
    `'${param}': the request asks for up to ${promptTokens + completions * budget} tokens (${promptTokens} prompt ` +
      `tokens + ${what} × ${budgetField} ${budget}); this server allows at most ${max} per request`,
    { param },
  );
}
