// The OpenAI API over a rollout engine, without HTTP: request bodies in, response bodies (or streams of chunks) out.
// ./server.ts puts it behind node:http; the explorer's workflows and `trinity serve` both use it.
//
//   chat.completions  messages → chat template (continuing a recorded conversation exactly when the request scope
//                     has a ConversationTracker) → generate → choices with tool calls parsed (Hermes blocks)
//   completions       prompt (text, ids, or a list of either) → generate
//
// Limits (all configurable): prompt tokens ≤ maxPromptTokens, max_tokens ≤ maxTokens and prompt + max_tokens ≤ the
// engine's context (maxLength), n ≤ maxN. Streaming sends text as it is generated, holding back what could still
// turn out to be the start of a stop string or of a <tool_call> block, so the streamed text always equals the final
// text.
import { randomBytes } from 'node:crypto';
import {
  type ChatEngine,
  type ChatResult,
  type Completion,
  type ConversationTracker,
  chatResult,
  type GenerateOptions,
  type GenerateResult,
  GenerationError,
  IncrementalDetokenizer,
  renderChatPrompt,
  TOOL_CALL_OPEN,
  type TokenEvent,
} from '../engine/index.js';
import type { ChatMessage, Tokenizer, ToolDefinition } from '../tokenizer/index.js';
import {
  type ChatCompletionRequest,
  ChatCompletionRequestSchema,
  type CompletionRequest,
  CompletionRequestSchema,
  contentText,
  OpenAIHttpError,
  parseRequest,
} from './protocol.js';

/** What the service needs of an engine: RolloutEngine, WorkerRolloutEngine or a remote engine. */
export interface OpenAIBackend extends ChatEngine {
  /** Context length (prompt + completion) of a sequence, when the engine has one. */
  readonly maxLength?: number;
}

export interface OpenAIServiceOptions {
  /** The model id clients name (`model` in requests, /v1/models). */
  modelName: string;
  /** Other names accepted for the same model. */
  aliases?: readonly string[];
  backend: OpenAIBackend;
  /** Largest max_tokens a request may ask for (default 4096). */
  maxTokens?: number;
  /** Longest prompt in tokens (default: the engine's maxLength, else 32768). */
  maxPromptTokens?: number;
  /** Largest n (default 16). */
  maxN?: number;
  /** Per-request generation timeout (default: the engine's). */
  requestTimeoutMs?: number;
  /** Accept any `model` name (an agent's hard-coded one) instead of 404 (the explorer's internal endpoint). */
  acceptAnyModel?: boolean;
}

/** Per-request context from the caller (the HTTP route): conversation recording and cancellation. */
export interface RequestScope {
  /** Continue and record conversations here (exact multi-turn ids). */
  conversation?: ConversationTracker;
  /** Kept with each recorded turn. */
  turnMeta?: Record<string, unknown>;
  /** Cancels generation (client went away). */
  signal?: AbortSignal;
  /** The weights version now served, kept with each recorded turn as meta.modelVersion. */
  modelVersion?: () => number;
  /** Called after a chat completion finished with its result and response id. */
  onChatResult?: (result: ChatResult, responseId: string) => void;
}

export type ServiceReply = { stream: false; body: Record<string, unknown> } | { stream: true; chunks: AsyncIterable<unknown> };

const DEFAULTS = { maxTokens: 4096, maxPromptTokens: 32768, maxN: 16 };

export class OpenAIService {
  readonly modelName: string;
  readonly backend: OpenAIBackend;
  readonly maxTokens: number;
  readonly maxPromptTokens: number;
  readonly maxN: number;
  readonly #names: Set<string>;
  readonly #created = Math.floor(Date.now() / 1000);
  readonly #requestTimeoutMs: number | undefined;
  readonly #acceptAnyModel: boolean;

  constructor(options: OpenAIServiceOptions) {
    this.modelName = options.modelName;
    this.backend = options.backend;
    this.#names = new Set([options.modelName, ...(options.aliases ?? [])]);
    this.maxTokens = options.maxTokens ?? DEFAULTS.maxTokens;
    this.maxPromptTokens = options.maxPromptTokens ?? options.backend.maxLength ?? DEFAULTS.maxPromptTokens;
    this.maxN = options.maxN ?? DEFAULTS.maxN;
    this.#requestTimeoutMs = options.requestTimeoutMs;
    this.#acceptAnyModel = options.acceptAnyModel ?? false;
  }

  models(): Record<string, unknown> {
    return {
      object: 'list',
      data: [...this.#names].map((id) => ({ id, object: 'model', created: this.#created, owned_by: 'trinity-rft' })),
    };
  }

  async chatCompletion(body: unknown, scope: RequestScope = {}): Promise<ServiceReply> {
    const request = parseRequest(ChatCompletionRequestSchema, body);
    this.#checkModel(request.model);
    const tokenizer = this.#tokenizer();
    const tools = request.tools?.map((t) => t as ToolDefinition);
    const parseTools = tools !== undefined && tools.length > 0 && request.tool_choice !== 'none';
    const messages = request.messages.map(toChatMessage);
    const chatOptions = {
      ...(tools && tools.length > 0 ? { tools } : {}),
      ...(request.chat_template_kwargs ? { templateVariables: request.chat_template_kwargs } : {}),
      ...(scope.conversation ? { conversation: scope.conversation } : {}),
      ...(scope.turnMeta ? { turnMeta: scope.turnMeta } : {}),
    };
    let prompt: ReturnType<typeof renderChatPrompt>;
    try {
      prompt = renderChatPrompt(tokenizer, messages, chatOptions);
    } catch (error) {
      throw new OpenAIHttpError(400, `messages: cannot render the chat template: ${(error as Error).message}`, {
        param: 'messages',
      });
    }
    const options = this.#generateOptions(request, prompt.promptIds.length, request.max_completion_tokens ?? request.max_tokens);
    const id = `chatcmpl-${randomBytes(12).toString('hex')}`;
    const turnMeta = {
      ...scope.turnMeta,
      responseId: id,
      ...(scope.modelVersion ? { modelVersion: scope.modelVersion() } : {}),
    };
    const created = Math.floor(Date.now() / 1000);
    const head = { id, created, model: request.model };
    const finish = (result: GenerateResult) => {
      const chat = chatResult(result, prompt, { ...chatOptions, parseToolCalls: parseTools, turnMeta });
      scope.onChatResult?.(chat, id);
      return chat;
    };
    const logprobsOf = (ids: readonly number[], logprobs: readonly number[]) =>
      request.logprobs ? { content: this.#tokenLogprobs(ids, logprobs, request.return_tokens_as_token_ids ?? false) } : null;

    if (!request.stream) {
      const result = await this.#generate(prompt.promptIds, options, scope);
      const chat = finish(result);
      return {
        stream: false,
        body: {
          ...head,
          object: 'chat.completion',
          choices: chat.choices.map((choice) => ({
            index: choice.index,
            message: {
              role: 'assistant',
              content: choice.message.tool_calls && choice.message.content === '' ? null : choice.message.content,
              ...(choice.message.tool_calls ? { tool_calls: choice.message.tool_calls } : {}),
            },
            logprobs: logprobsOf(choice.completionIds, choice.logprobs),
            finish_reason: choice.message.tool_calls ? 'tool_calls' : choice.finishReason,
            ...(request.return_token_ids ? { token_ids: choice.completionIds } : {}),
          })),
          usage: usage(result.promptIds.length, result.completions),
          ...(request.return_token_ids ? { prompt_token_ids: result.promptIds } : {}),
        },
      };
    }

    const chunkHead = { ...head, object: 'chat.completion.chunk' };
    return this.#stream(prompt.promptIds, options, scope, request, {
      holdToolCalls: parseTools,
      first: (index) => ({ ...chunkHead, choices: [{ index, delta: { role: 'assistant', content: '' }, finish_reason: null }] }),
      delta: (index, text, ids, logprobs) => ({
        ...chunkHead,
        choices: [
          {
            index,
            delta: { content: text },
            logprobs: logprobsOf(ids, logprobs),
            finish_reason: null,
            ...(request.return_token_ids ? { token_ids: ids } : {}),
          },
        ],
      }),
      end: (result) => {
        const chat = finish(result);
        return {
          texts: chat.choices.map((choice) => choice.message.content),
          chunks: chat.choices.map((choice) => ({
            ...chunkHead,
            choices: [
              {
                index: choice.index,
                delta: choice.message.tool_calls
                  ? { tool_calls: choice.message.tool_calls.map((call, i) => ({ index: i, ...call })) }
                  : {},
                finish_reason: choice.message.tool_calls ? 'tool_calls' : choice.finishReason,
              },
            ],
            ...(request.return_token_ids ? { prompt_token_ids: result.promptIds } : {}),
          })),
        };
      },
      usage: (result) => ({ ...chunkHead, choices: [], usage: usage(result.promptIds.length, result.completions) }),
    });
  }

  async completion(body: unknown, scope: RequestScope = {}): Promise<ServiceReply> {
    const request = parseRequest(CompletionRequestSchema, body);
    this.#checkModel(request.model);
    const tokenizer = this.#tokenizer();
    const prompts = promptList(request.prompt).map((p) => (typeof p === 'string' ? tokenizer.encode(p) : p));
    const longest = Math.max(...prompts.map((p) => p.length));
    const options = this.#generateOptions(request, longest, request.max_tokens ?? 16);
    const id = `cmpl-${randomBytes(12).toString('hex')}`;
    const head = { id, created: Math.floor(Date.now() / 1000), model: request.model };
    const n = options.n ?? 1;
    const logprobsOf = (ids: readonly number[], logprobs: readonly number[]) => {
      if (request.logprobs == null) return null;
      const tokens = ids.map((t) => this.#tokenText(t, request.return_tokens_as_token_ids ?? false));
      let offset = 0;
      const textOffset = tokens.map((t) => {
        const at = offset;
        offset += t.length;
        return at;
      });
      return {
        tokens,
        token_logprobs: [...logprobs],
        top_logprobs: request.logprobs > 0 ? tokens.map((t, i) => ({ [t]: logprobs[i] })) : null,
        text_offset: textOffset,
      };
    };
    if (!request.stream || prompts.length > 1) {
      if (request.stream)
        throw new OpenAIHttpError(400, 'stream with more than one prompt is not supported', { param: 'stream' });
      const results = await Promise.all(prompts.map((p) => this.#generate(p, options, scope)));
      const choices = results.flatMap((result, p) =>
        result.completions.map((c) => ({
          index: p * n + c.index,
          text: c.text ?? '',
          logprobs: logprobsOf(c.tokenIds, c.logprobs),
          finish_reason: c.finishReason,
          ...(request.return_token_ids ? { prompt_token_ids: result.promptIds, token_ids: c.tokenIds } : {}),
        })),
      );
      const promptTokens = results.reduce((sum, r) => sum + r.promptIds.length, 0);
      return {
        stream: false,
        body: {
          ...head,
          object: 'text_completion',
          choices,
          usage: usage(
            promptTokens,
            results.flatMap((r) => r.completions),
          ),
        },
      };
    }
    const chunkHead = { ...head, object: 'text_completion' };
    return this.#stream(prompts[0] as number[], options, scope, request, {
      holdToolCalls: false,
      first: () => null,
      delta: (index, text, ids, logprobs) => ({
        ...chunkHead,
        choices: [
          {
            index,
            text,
            logprobs: logprobsOf(ids, logprobs),
            finish_reason: null,
            ...(request.return_token_ids ? { token_ids: ids } : {}),
          },
        ],
      }),
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
              ...(request.return_token_ids ? { prompt_token_ids: result.promptIds } : {}),
            },
          ],
        })),
      }),
      usage: (result) => ({ ...chunkHead, choices: [], usage: usage(result.promptIds.length, result.completions) }),
    });
  }

  #checkModel(name: string): void {
    if (!this.#acceptAnyModel && !this.#names.has(name)) {
      throw new OpenAIHttpError(404, `The model '${name}' does not exist; this server serves: ${[...this.#names].join(', ')}`, {
        param: 'model',
        code: 'model_not_found',
      });
    }
  }

  #tokenizer(): Tokenizer {
    const tokenizer = this.backend.tokenizer;
    if (tokenizer === null) throw new OpenAIHttpError(500, 'the served model has no tokenizer', { code: 'no_tokenizer' });
    return tokenizer;
  }

  /** Sampling options from a request, with the limits checked. */
  #generateOptions(
    request: ChatCompletionRequest | CompletionRequest,
    promptLength: number,
    requestedMaxTokens: number | null | undefined,
  ): GenerateOptions {
    if (promptLength > this.maxPromptTokens) {
      throw new OpenAIHttpError(
        400,
        `the prompt has ${promptLength} tokens; this server accepts at most ${this.maxPromptTokens}`,
        {
          param: 'messages',
          code: 'context_length_exceeded',
        },
      );
    }
    const context = this.backend.maxLength ?? Number.POSITIVE_INFINITY;
    const room = context - promptLength;
    if (room < 1) {
      throw new OpenAIHttpError(400, `the prompt has ${promptLength} tokens, which fills the model's context of ${context}`, {
        code: 'context_length_exceeded',
      });
    }
    let maxTokens: number;
    if (requestedMaxTokens == null) maxTokens = Math.min(this.maxTokens, room);
    else {
      if (requestedMaxTokens > this.maxTokens) {
        throw new OpenAIHttpError(400, `max_tokens ${requestedMaxTokens} exceeds this server's limit of ${this.maxTokens}`, {
          param: 'max_tokens',
        });
      }
      if (requestedMaxTokens > room) {
        throw new OpenAIHttpError(
          400,
          `This model's maximum context length is ${context} tokens. However, you requested ${promptLength + requestedMaxTokens} ` +
            `tokens (${promptLength} in the prompt, ${requestedMaxTokens} in the completion).`,
          { param: 'max_tokens', code: 'context_length_exceeded' },
        );
      }
      maxTokens = requestedMaxTokens;
    }
    const n = request.n ?? 1;
    if (n > this.maxN) throw new OpenAIHttpError(400, `n ${n} exceeds this server's limit of ${this.maxN}`, { param: 'n' });
    return {
      maxTokens,
      n,
      temperature: request.temperature ?? 1,
      ...(request.top_p != null ? { topP: request.top_p } : {}),
      ...(request.top_k != null && request.top_k > 0 ? { topK: request.top_k } : {}),
      ...(request.min_p != null ? { minP: request.min_p } : {}),
      ...(request.seed != null ? { seed: request.seed } : {}),
      ...(request.stop != null ? { stop: request.stop } : {}),
      ...(request.stop_token_ids ? { stopTokenIds: request.stop_token_ids } : {}),
      ...(request.ignore_eos ? { ignoreEos: true } : {}),
      ...(request.skip_special_tokens != null ? { skipSpecialTokens: request.skip_special_tokens } : {}),
      ...(this.#requestTimeoutMs !== undefined ? { timeoutMs: this.#requestTimeoutMs } : {}),
    };
  }

  async #generate(promptIds: number[], options: GenerateOptions, scope: RequestScope, onToken?: (e: TokenEvent) => void) {
    try {
      return await this.backend.generate({
        ...options,
        promptIds,
        ...(scope.signal ? { signal: scope.signal } : {}),
        ...(onToken ? { onToken } : {}),
      });
    } catch (error) {
      throw asHttpError(error);
    }
  }

  #tokenText(id: number, asIds: boolean): string {
    return asIds ? `token_id:${id}` : this.#tokenizer().decode([id], { skipSpecialTokens: false });
  }

  #tokenLogprobs(ids: readonly number[], logprobs: readonly number[], asIds: boolean) {
    return ids.map((id, i) => {
      const token = this.#tokenText(id, asIds);
      return { token, logprob: logprobs[i] as number, bytes: [...Buffer.from(token, 'utf8')], top_logprobs: [] };
    });
  }

  /** Streams deltas as tokens arrive, then the end chunks (and usage); see the header on what is held back. */
  async #stream(
    promptIds: number[],
    options: GenerateOptions,
    scope: RequestScope,
    request: ChatCompletionRequest | CompletionRequest,
    shape: {
      holdToolCalls: boolean;
      first: (index: number) => unknown;
      delta: (index: number, text: string, ids: number[], logprobs: number[]) => unknown;
      /** The final text of each completion (in result order) and the closing chunks. */
      end: (result: GenerateResult) => { texts: string[]; chunks: unknown[] };
      usage: (result: GenerateResult) => unknown;
    },
  ): Promise<ServiceReply> {
    const tokenizer = this.#tokenizer();
    const queue = new ChunkQueue();
    const stops = request.stop == null ? [] : typeof request.stop === 'string' ? [request.stop] : request.stop;
    const holdBack = Math.max(0, ...stops.map((s) => s.length - 1));
    const skipSpecialTokens = request.skip_special_tokens ?? true;
    const n = options.n ?? 1;
    const streams = Array.from({ length: n }, () => ({
      detokenizer: new IncrementalDetokenizer(tokenizer, { skipSpecialTokens }),
      sent: '',
      ids: [] as number[],
      logprobs: [] as number[],
    }));
    for (let i = 0; i < n; i++) {
      const first = shape.first(i);
      if (first !== null) queue.push(first);
    }
    const onToken = (event: TokenEvent) => {
      const s = streams[event.index];
      if (s === undefined) return;
      s.ids.push(event.tokenId);
      s.logprobs.push(event.logprob);
      s.detokenizer.push(event.tokenId);
      const safe = safeText(s.detokenizer.text, holdBack, shape.holdToolCalls);
      if (safe.length > s.sent.length && safe.startsWith(s.sent)) {
        queue.push(shape.delta(event.index, safe.slice(s.sent.length), s.ids, s.logprobs));
        s.sent = safe;
        s.ids = [];
        s.logprobs = [];
      }
    };
    this.#generate(promptIds, options, scope, onToken).then(
      (result) => {
        const { texts, chunks } = shape.end(result);
        result.completions.forEach((completion, k) => {
          const s = streams[completion.index];
          if (s === undefined) return;
          const text = texts[k] ?? '';
          const rest = text.startsWith(s.sent) ? text.slice(s.sent.length) : '';
          if (rest.length > 0 || s.ids.length > 0) queue.push(shape.delta(completion.index, rest, s.ids, s.logprobs));
        });
        for (const chunk of chunks) queue.push(chunk);
        if (request.stream_options?.include_usage) queue.push(shape.usage(result));
        queue.end();
      },
      (error: unknown) => queue.fail(asHttpError(error)),
    );
    // A request that fails before its first token (bad stop ids, closed engine) is still an HTTP error, not a stream.
    await queue.started();
    return { stream: true, chunks: queue };
  }
}

/** Text that can be sent now: all but what might start a stop string or a tool call (and, with tools, trailing space). */
function safeText(text: string, holdBack: number, holdToolCalls: boolean): string {
  let end = Math.max(0, text.length - holdBack);
  if (holdToolCalls) {
    const open = text.indexOf(TOOL_CALL_OPEN);
    if (open >= 0) end = Math.min(end, open);
    else {
      for (let k = Math.min(TOOL_CALL_OPEN.length - 1, text.length); k > 0; k--) {
        if (TOOL_CALL_OPEN.startsWith(text.slice(text.length - k))) {
          end = Math.min(end, text.length - k);
          break;
        }
      }
    }
    while (end > 0 && /\s/.test(text[end - 1] as string)) end--;
  }
  return text.slice(0, end);
}

function usage(promptTokens: number, completions: readonly Completion[]) {
  const completionTokens = completions.reduce((sum, c) => sum + c.tokenIds.length, 0);
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}

function promptList(prompt: CompletionRequest['prompt']): Array<string | number[]> {
  if (typeof prompt === 'string') return [prompt];
  if (prompt.every((p) => typeof p === 'number')) return [prompt as number[]];
  return prompt as Array<string | number[]>;
}

function toChatMessage(m: ChatCompletionRequest['messages'][number]): ChatMessage {
  return {
    role: m.role === 'developer' ? 'system' : m.role,
    content: contentText(m.content),
    ...(m.name !== undefined ? { name: m.name } : {}),
    ...(m.tool_calls ? { tool_calls: m.tool_calls.map((c) => ({ ...c, type: 'function' as const })) } : {}),
    ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
    ...(m.reasoning_content ? { reasoning_content: m.reasoning_content } : {}),
  };
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

/** An async iterable of chunks fed by push(); started() resolves at the first chunk or the end. */
class ChunkQueue implements AsyncIterable<unknown> {
  readonly #items: unknown[] = [];
  #done = false;
  #error: Error | null = null;
  #wake: (() => void) | null = null;
  #startedResolve!: () => void;
  #startedReject!: (e: Error) => void;
  readonly #started = new Promise<void>((resolve, reject) => {
    this.#startedResolve = resolve;
    this.#startedReject = reject;
  });
  #hasStarted = false;

  started(): Promise<void> {
    return this.#started;
  }

  push(item: unknown): void {
    this.#items.push(item);
    this.#start();
    this.#wake?.();
  }

  end(): void {
    this.#done = true;
    this.#start();
    this.#wake?.();
  }

  fail(error: Error): void {
    this.#error = error;
    this.#done = true;
    if (!this.#hasStarted) {
      this.#hasStarted = true;
      this.#startedReject(error);
    }
    this.#wake?.();
  }

  #start(): void {
    if (this.#hasStarted) return;
    this.#hasStarted = true;
    this.#startedResolve();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<unknown> {
    for (;;) {
      if (this.#items.length > 0) {
        yield this.#items.shift();
        continue;
      }
      if (this.#error) throw this.#error;
      if (this.#done) return;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
      this.#wake = null;
    }
  }
}
