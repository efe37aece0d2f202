// The OpenAI HTTP API's request bodies, as zod schemas (untrusted input), and its error shape.
//
// Accepted beyond OpenAI's fields (vLLM's names): top_k, min_p, ignore_eos, stop_token_ids, skip_special_tokens,
// chat_template_kwargs, return_token_ids (the response then carries prompt_token_ids and each choice's token_ids: the
// exact ids the model read and produced), return_tokens_as_token_ids (logprob tokens as "token_id:<id>").
// Unknown fields are ignored, as vLLM does; fields we cannot honour (penalties, logit_bias, tool_choice 'required',
// JSON response formats, echo, suffix, best_of) are a 400 naming the field, never silently dropped. A tool's
// parameters must be a JSON Schema object, bounded in depth (./json-schema.ts): the template renders it into the prompt.
//
// parallel_tool_calls: false ends generation after the first complete <tool_call> block, so a reply carries at most
// one tool call and its token ids end with that call (true, the default: every call the model makes).
import { z } from 'zod';
import { GenerationError } from '../engine/index.js';
import { ImageInputError } from '../model/index.js';
import type { ChatInputMessage } from '../tokenizer/index.js';
import { findToolParametersProblem, MAX_SCHEMA_DEPTH, nestsDeeperThan } from './json-schema.js';

/** An error answered as OpenAI does: { error: { message, type, param, code } } with an HTTP status. */
export class OpenAIHttpError extends Error {
  readonly status: number;
  readonly type: string;
  readonly param: string | null;
  readonly code: string | null;
  constructor(status: number, message: string, options: { type?: string; param?: string | null; code?: string | null } = {}) {
    super(message);
    this.name = 'OpenAIHttpError';
    this.status = status;
    this.type = options.type ?? (status >= 500 ? 'server_error' : 'invalid_request_error');
    this.param = options.param ?? null;
    this.code = options.code ?? null;
  }

  toJSON(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

const TextPart = z.object({ type: z.literal('text'), text: z.string() });
/** An image for a vision-language model: a data:image/...;base64 URL or a local file path (src/engine/vision-chat.ts). */
const ImagePart = z.object({
  type: z.literal('image_url'),
  image_url: z.object({ url: z.string().min(1), detail: z.string().optional() }),
});
const Content = z.union([z.string(), z.array(z.discriminatedUnion('type', [TextPart, ImagePart])), z.null()], {
  error: "must be a string, an array of {type: 'text', text} and {type: 'image_url', image_url: {url}} parts, or null",
});

const ToolCallSchema = z.object({
  id: z.string().optional(),
  type: z.literal('function').optional(),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
});

export const ChatMessageSchema = z.object({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
  content: Content.optional(),
  name: z.string().optional(),
  tool_calls: z.array(ToolCallSchema).optional(),
  tool_call_id: z.string().optional(),
  reasoning_content: z.string().nullish(),
});

export const ToolSchema = z.object({
  type: z.literal('function'),
  function: z.object({
    name: z.string().min(1),
    description: z.string().optional(),
    /** A JSON Schema object (./json-schema.ts): the chat template renders it into the prompt. */
    parameters: z
      .record(z.string(), z.unknown())
      .optional()
      .superRefine((parameters, context) => {
        const problem = parameters === undefined ? undefined : findToolParametersProblem(parameters);
        if (problem !== undefined) context.addIssue({ code: 'custom', path: problem.path, message: problem.message });
      }),
    strict: z.boolean().nullish(),
  }),
});

const StopString = z.string().min(1, 'a stop string must not be empty');
const Stop = z
  .union([StopString, z.array(StopString).max(16, 'at most 16 stop strings')], {
    error: 'must be a string or an array of strings',
  })
  .nullish();
/** A token id: its upper bound (the vocabulary) is checked by the service against the loaded model. */
const TokenId = z.number().int('a token id must be an integer').min(0, 'a token id must be >= 0');
const nonZero = (message: string) =>
  z
    .number()
    .nullish()
    .refine((v) => v === undefined || v === null || v === 0, message);

/** Sampling fields shared by chat and text completions. */
const SamplingFields = {
  model: z.string().min(1),
  n: z.number().int().min(1, 'must be >= 1').nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().min(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  max_tokens: z.number().int().min(1, 'must be >= 1').nullish(),
  stop: Stop,
  seed: z.number().int().min(0, 'must be a non-negative integer').nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  frequency_penalty: nonZero('frequency_penalty is not supported (only 0)'),
  presence_penalty: nonZero('presence_penalty is not supported (only 0)'),
  logit_bias: z
    .record(z.string(), z.number())
    .nullish()
    .refine((v) => v == null || Object.keys(v).length === 0, 'logit_bias is not supported'),
  user: z.string().nullish(),
  ignore_eos: z.boolean().nullish(),
  stop_token_ids: z.array(TokenId).nullish(),
  skip_special_tokens: z.boolean().nullish(),
  return_token_ids: z.boolean().nullish(),
  return_tokens_as_token_ids: z.boolean().nullish(),
};

export const ChatCompletionRequestSchema = z
  .object({
    ...SamplingFields,
    messages: z.array(ChatMessageSchema).min(1, 'must hold at least one message'),
    max_completion_tokens: z.number().int().min(1, 'must be >= 1').nullish(),
    logprobs: z.boolean().nullish(),
    top_logprobs: z.number().int().min(0).max(20).nullish(),
    tools: z.array(ToolSchema).nullish(),
    tool_choice: z
      .union([
        z.enum(['none', 'auto', 'required']),
        z.object({ type: z.literal('function'), function: z.object({ name: z.string() }) }),
      ])
      .nullish()
      .refine(
        (v) => v == null || v === 'none' || v === 'auto',
        "tool_choice must be 'auto' or 'none' (forcing a tool call is not supported)",
      ),
    parallel_tool_calls: z.boolean().nullish(),
    response_format: z
      .object({ type: z.string() })
      .nullish()
      .refine((v) => v == null || v.type === 'text', "response_format must be {type: 'text'} (JSON modes are not supported)"),
    // rendered by the template too, so bounded like a tool's parameters
    chat_template_kwargs: z
      .record(z.string(), z.unknown())
      .nullish()
      .refine((v) => v == null || !nestsDeeperThan(v, MAX_SCHEMA_DEPTH), `nests more than ${MAX_SCHEMA_DEPTH} levels deep`),
  })
  .superRefine((request, context) => {
    if ((request.top_logprobs ?? 0) > 0 && request.logprobs !== true)
      context.addIssue({ code: 'custom', path: ['top_logprobs'], message: 'top_logprobs needs logprobs: true' });
  });
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequestSchema>;

export const CompletionRequestSchema = z
  .object({
    ...SamplingFields,
    prompt: z.union([z.string(), z.array(z.string()).min(1), z.array(TokenId).min(1), z.array(z.array(TokenId).min(1)).min(1)], {
      error: 'must be a string, an array of strings, an array of token ids, or an array of token-id arrays (none empty)',
    }),
    // 0 only with echo: the prompt's log-probs alone (scoring), as vLLM answers it
    max_tokens: z.number().int().min(0, 'must be >= 0').nullish(),
    logprobs: z.number().int().min(0).max(5).nullish(),
    /** The prompt before the completion in text and log-probs (vLLM: prompt log-probs, the first one null). */
    echo: z.boolean().nullish(),
    suffix: z
      .string()
      .nullish()
      .refine((v) => v == null || v === '', 'suffix is not supported'),
    best_of: z
      .number()
      .int()
      .nullish()
      .refine((v) => v == null || v === 1, 'best_of is not supported (only 1)'),
  })
  .superRefine((request, context) => {
    if (request.max_tokens === 0 && request.echo !== true)
      context.addIssue({ code: 'custom', path: ['max_tokens'], message: 'must be >= 1 (0 only with echo: true)' });
    if (request.echo === true && request.stream === true)
      context.addIssue({ code: 'custom', path: ['echo'], message: 'echo with stream is not supported' });
  });
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;

/**
 * Parses a body with a schema; the first problem becomes a 400 naming its field: a missing field "'X' is required",
 * a wrong type "'X': expected number, received string", anything else "'X': <the rule it breaks>".
 */
export function parseRequest<T>(schema: z.ZodType<T>, body: unknown): T {
  const parsed = schema.safeParse(body, { reportInput: true });
  if (parsed.success) return parsed.data;
  const first = parsed.error.issues[0];
  if (first === undefined) throw new OpenAIHttpError(400, 'invalid request', { code: 'invalid_request' });
  const issue = innermostIssue(first);
  const param = issue.path.map(String).join('.');
  const value = valueAt(body, issue.path);
  let message: string;
  if (value.missing && issue.path.length > 0) message = `'${param}' is required`;
  else if (issue.code === 'invalid_type')
    message = `expected ${issue.expected === 'int' ? 'an integer' : issue.expected}, received ${describeValue(value.value)}`;
  else if (issue.code === 'invalid_union') message = `${issue.message}; received ${describeValue(value.value)}`;
  else message = issue.message;
  if (param && !value.missing) message = `'${param}': ${message}`;
  throw new OpenAIHttpError(400, message, { param: param || null, code: 'invalid_request' });
}

/**
 * The issue that says what is wrong inside a union: the one branch whose type matched (its problem lies deeper, or is
 * a value rule), or else the one that got furthest into the value, else the union's own summary.
 * `stop: ['a', 3]` → 'stop.1': expected string; `prompt: [5, 1.5]` → 'prompt.1': expected an integer.
 */
function innermostIssue(issue: z.core.$ZodIssue): z.core.$ZodIssue {
  if (issue.code !== 'invalid_union') return issue;
  const heads = issue.errors.flatMap((branch) => (branch[0] ? [branch[0]] : []));
  const deeper = heads.filter((i) => i.path.length > 0 || i.code !== 'invalid_type');
  const decisive = deeper.filter((i) => i.code !== 'invalid_type' && i.code !== 'invalid_union');
  const pick = decisive.length === 1 ? decisive[0] : furthest(deeper);
  return pick === undefined ? issue : innermostIssue({ ...pick, path: [...issue.path, ...pick.path] });
}

/** The issue whose path reaches furthest into the value (deepest, then the highest index), if only one does. */
function furthest(issues: readonly z.core.$ZodIssue[]): z.core.$ZodIssue | undefined {
  const reach = (i: z.core.$ZodIssue) => [i.path.length, Number(i.path.at(-1) ?? -1) || 0] as const;
  const sorted = [...issues].sort((a, b) => reach(b)[0] - reach(a)[0] || reach(b)[1] - reach(a)[1]);
  const [best, next] = sorted;
  if (best === undefined) return undefined;
  if (next !== undefined && reach(best)[0] === reach(next)[0] && reach(best)[1] === reach(next)[1]) return undefined;
  return best;
}

/** The value at a zod issue's path in the raw body, or missing when a key on the way is absent. */
function valueAt(body: unknown, path: readonly PropertyKey[]): { missing: boolean; value: unknown } {
  let value = body;
  for (const key of path) {
    if (value === null || typeof value !== 'object' || !Object.hasOwn(value, key)) return { missing: true, value: undefined };
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return { missing: value === undefined, value };
}

/** A JSON value's kind as a client would name it: number 1.5, string, array, object, null, Infinity (too large). */
function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isFinite(value) ? `number ${value}` : 'a number too large to represent';
  return typeof value;
}

/**
 * A message's content for the chat template: text (text parts joined), or its parts when it holds an image (the
 * template renders each image's placeholder).
 */
export function messageContent(content: z.infer<typeof Content> | undefined): ChatInputMessage['content'] {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  if (content.some((part) => part.type === 'image_url'))
    return content.map((part) =>
      part.type === 'text' ? { type: 'text', text: part.text } : { type: 'image_url', image_url: { url: part.image_url.url } },
    );
  return content.map((part) => (part.type === 'text' ? part.text : '')).join('');
}

/**
 * Engine failures as HTTP errors: a request the engine refuses ('invalid', its message naming the field) is a 400, a
 * timeout 504, a closed engine 503, a client gone 499, a failed forward 500.
 */
export function asHttpError(error: unknown): OpenAIHttpError {
  if (error instanceof OpenAIHttpError) return error;
  if (error instanceof GenerationError) {
    const status = { invalid: 400, aborted: 499, timeout: 504, closed: 503, failed: 500 }[error.reason];
    return new OpenAIHttpError(status, error.message, { code: error.reason === 'invalid' ? 'invalid_request' : error.reason });
  }
  if (error instanceof RangeError || error instanceof TypeError) return new OpenAIHttpError(400, error.message);
  // an image content part that cannot be read (src/engine/vision-chat.ts): where names the message and part
  if (error instanceof ImageInputError) return new OpenAIHttpError(400, error.message, { param: error.where });
  return new OpenAIHttpError(500, error instanceof Error ? error.message : String(error));
}
