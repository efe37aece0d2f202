// The OpenAI HTTP API's request bodies, as zod schemas (untrusted input), and its error shape.
//
// Accepted beyond OpenAI's fields (vLLM's names): top_k, min_p, ignore_eos, stop_token_ids, skip_special_tokens,
// chat_template_kwargs, return_token_ids (the response then carries prompt_token_ids and each choice's token_ids: the
// exact ids the model read and produced), return_tokens_as_token_ids (logprob tokens as "token_id:<id>").
// Unknown fields are ignored, as vLLM does; fields we cannot honour (penalties, logit_bias, tool_choice 'required',
// JSON response formats, echo, suffix, best_of) are a 400 naming the field, never silently dropped.
//
// parallel_tool_calls: false ends generation after the first complete <tool_call> block, so a reply carries at most
// one tool call and its token ids end with that call (true, the default: every call the model makes).
import { z } from 'zod';
import { GenerationError } from '../engine/index.js';

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
const Content = z.union([z.string(), z.array(TextPart), z.null()]);

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
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().nullish(),
  }),
});

const Stop = z.union([z.string(), z.array(z.string()).max(16)]).nullish();
const nonZero = (message: string) =>
  z
    .number()
    .nullish()
    .refine((v) => v === undefined || v === null || v === 0, message);

/** Sampling fields shared by chat and text completions. */
const SamplingFields = {
  model: z.string().min(1),
  n: z.number().int().min(1).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().min(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  max_tokens: z.number().int().min(1).nullish(),
  stop: Stop,
  seed: z.number().int().nullish(),
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
  stop_token_ids: z.array(z.number().int().min(0)).nullish(),
  skip_special_tokens: z.boolean().nullish(),
  return_token_ids: z.boolean().nullish(),
  return_tokens_as_token_ids: z.boolean().nullish(),
};

export const ChatCompletionRequestSchema = z
  .object({
    ...SamplingFields,
    messages: z.array(ChatMessageSchema).min(1),
    max_completion_tokens: z.number().int().min(1).nullish(),
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
    chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
  })
  .superRefine((request, context) => {
    if ((request.top_logprobs ?? 0) > 0 && request.logprobs !== true)
      context.addIssue({ code: 'custom', path: ['top_logprobs'], message: 'top_logprobs needs logprobs: true' });
  });
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequestSchema>;

export const CompletionRequestSchema = z.object({
  ...SamplingFields,
  prompt: z.union([
    z.string(),
    z.array(z.string()).min(1),
    z.array(z.number().int().min(0)).min(1),
    z.array(z.array(z.number().int().min(0)).min(1)).min(1),
  ]),
  logprobs: z.number().int().min(0).max(5).nullish(),
  echo: z
    .boolean()
    .nullish()
    .refine((v) => v !== true, 'echo is not supported'),
  suffix: z
    .string()
    .nullish()
    .refine((v) => v == null || v === '', 'suffix is not supported'),
  best_of: z
    .number()
    .int()
    .nullish()
    .refine((v) => v == null || v === 1, 'best_of is not supported (only 1)'),
});
export type CompletionRequest = z.infer<typeof CompletionRequestSchema>;

/** Parses a body with a schema; the first problem becomes a 400 naming its field. */
export function parseRequest<T>(schema: z.ZodType<T>, body: unknown): T {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const param = issue?.path.map(String).join('.') ?? '';
  let message = issue?.message ?? 'invalid request';
  if (issue?.code === 'invalid_type' && issue.input === undefined) message = `'${param}' is required`;
  else if (param) message = `'${param}': ${message}`;
  throw new OpenAIHttpError(400, message, { param: param || null, code: 'invalid_request' });
}

/** The text of a message's content (text parts joined). */
export function contentText(content: z.infer<typeof Content> | undefined): string {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  return content.map((part) => part.text).join('');
}

/** Engine failures as HTTP errors: a bad request is a 400, a timeout 504, a closed engine 503. */
export function asHttpError(error: unknown): OpenAIHttpError {
  if (error instanceof OpenAIHttpError) return error;
  if (error instanceof GenerationError) {
    const status = { aborted: 499, timeout: 504, closed: 503, failed: 500 }[error.reason];
    return new OpenAIHttpError(status, error.message, { code: error.reason });
  }
  if (error instanceof RangeError || error instanceof TypeError) return new OpenAIHttpError(400, error.message);
  return new OpenAIHttpError(500, error instanceof Error ? error.message : String(error));
}
