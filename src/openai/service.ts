// The OpenAI API over a rollout engine, without HTTP: request bodies in, response bodies (or streams of chunks) out.
// ./server.ts puts it behind node:http; the explorer's workflows and `trinity serve` both use it.
//
//   chat.completions  messages → chat template (continuing a recorded conversation exactly when the request scope
//                     has a ConversationTracker) → generate → choices with tool calls parsed (Hermes blocks)
//   completions       prompt (text, ids, or a list of either) → generate; echo: the prompt's text and log-probs first
//                     (backend.score: one forward over the prompt; max_tokens 0 with echo scores the prompt alone)
//
// Request bodies are checked by ./protocol.ts (zod), their sizes by ./limits.ts (prompt tokens ≤ maxPromptTokens,
// max_tokens ≤ maxTokens, prompt + max_tokens ≤ the engine's context, n ≤ maxN), and what depends on the loaded model
// here, before the engine sees it: every token id (token-id prompts, stop_token_ids, and the ids text prompts and
// rendered messages encode to: a tokenizer can hold tokens the model lacks) < the model's vocabulary size, no empty
// prompt, top log-probs ≤ the vocabulary. So a client's mistake is a 400 naming its field; what the engine still
// refuses (GenerationError 'invalid') is a 400 with the engine's message, never an engine failure. A tokenizer larger
// than the model's vocabulary is said once when the model is loaded (tokenizerVocabularyWarning), not only per request.
// Bodies are built by ./responses.ts, streams by ./streaming.ts with the chunk shapes of ./stream-shapes.ts.
import { randomBytes } from 'node:crypto';
import {
  type ChatEngine,
  type ChatImages,
  type ChatResult,
  type ConversationTracker,
  chatImages,
  chatResult,
  hasImageParts,
  type GenerateOptions,
  type GenerateRequest,
  type GenerateResult,
  renderChatPrompt,
  type ScoreOptions,
  type ScoreResult,
  TOOL_CALL_CLOSE,
  type TokenEvent,
} from '../engine/index.js';
import { type ChatInputMessage, ChatTemplateError, type Tokenizer, type ToolDefinition } from '../tokenizer/index.js';
import { checkRequestLimits, type RequestLimits, type RequestSize } from './limits.js';
import {
  asHttpError,
  type ChatCompletionRequest,
  ChatCompletionRequestSchema,
  type CompletionRequest,
  CompletionRequestSchema,
  messageContent,
  OpenAIHttpError,
  parseRequest,
} from './protocol.js';
import {
  assistantMessage,
  type ChatCompletionBody,
  type ChatCompletionChunkBody,
  chatFinishReason,
  chatLogprobs,
  type ModelList,
  modelList,
  type ResponseHead,
  type TextCompletionBody,
  type TextCompletionChunkBody,
  type TokenSpan,
  textLogprobs,
  completionUsage,
  echoLogprobs,
} from './responses.js';
import { chatChunkShape, textChunkShape } from './stream-shapes.js';
import { type StreamShape, streamChunks } from './streaming.js';

/** What the service needs of an engine: RolloutEngine, WorkerRolloutEngine or a remote engine. */
export interface OpenAIBackend extends ChatEngine {
  /** Context length (prompt + completion) of a sequence, when the engine has one. */
  readonly maxLength?: number;
  /** The model's vocabulary size (config.json's vocab_size), when the engine knows it. */
  readonly vocabSize?: number;
  /** Log-probs of given ids (RolloutEngine.score); without it `echo` is refused. */
  score?(tokenIds: readonly number[], options?: ScoreOptions): Promise<ScoreResult>;
}

export interface OpenAIServiceOptions {
  /** The model id clients name (`model` in requests, /v1/models). */
  modelName: string;
  /** Other names accepted for the same model (listed by /v1/models). */
  aliases?: readonly string[];
  /** Names accepted but never shown (/v1/models, errors): mode serve accepts the model's local path this way. */
  hiddenAliases?: readonly string[];
  /**
   * Token ids are < this (default: the backend's vocabSize, else the tokenizer's). The model's config.json
   * vocab_size is the true bound; a tokenizer's can be smaller (padded embeddings).
   */
  vocabSize?: number;
  backend: OpenAIBackend;
  /** Largest max_tokens a request may ask for (default 4096), and the budget of a request that asks none. */
  maxTokens?: number;
  /**
   * A max_tokens over maxTokens, or over the room the prompt leaves in the context, is lowered to fit instead of
   * refused (./limits.ts capTokens; mode serve: an agent's max_tokens is a wish, the run's max_response_tokens the bound).
   */
  capMaxTokens?: boolean;
  /** Longest prompt in tokens (default: the engine's maxLength, else 32768). */
  maxPromptTokens?: number;
  /** Largest n (default 16). */
  maxN?: number;
  /** Most completions per request, prompts × n (default 64). */
  maxCompletions?: number;
  /** Most tokens per request: prompt tokens + completions × budget (default 131072). */
  maxRequestTokens?: number;
  /** Per-request generation timeout (default: the engine's). */
  requestTimeoutMs?: number;
  /**
   * Accept any `model` name (an agent's hard-coded one) instead of 404: the explorer's internal endpoint, and servers
   * of one model (mode serve, `trinity serve` without the LoRA API; ./server.ts answers 404 when adapters make several).
   */
  acceptAnyModel?: boolean;
}

/**
 * The warning for a model whose tokenizer makes ids its vocabulary lacks (tokenizer vocabSize > the model's
 * vocab_size), naming both sizes and `modelDir`; null when the tokenizer fits. Whoever loads a model to serve logs it
 * once: each request that encodes to such an id is refused (400) either way.
 */
export function tokenizerVocabularyWarning(
  tokenizer: Tokenizer | null,
  modelVocabSize: number,
  modelDir: string,
  /** What happens to text with those ids (default: what the server does with such a request). */
  consequence = 'is refused (400)',
): string | null {
  if (tokenizer === null || tokenizer.vocabSize <= modelVocabSize) return null;
  return (
    `warning: ${modelDir}: the tokenizer has ${tokenizer.vocabSize} token ids, the model ${modelVocabSize} ` +
    `(config.json vocab_size): text that encodes to ids ${modelVocabSize}..${tokenizer.vocabSize - 1} ${consequence}`
  );
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

/** A whole response body, or its chunks (stream: true). */
export type ServiceReply<Body = unknown, Chunk = unknown> =
  | { stream: false; body: Body }
  | { stream: true; chunks: AsyncIterable<Chunk> };

const DEFAULTS = { maxTokens: 4096, maxPromptTokens: 32768, maxN: 16, maxCompletions: 64, maxRequestTokens: 131072 };

export class OpenAIService {
  readonly modelName: string;
  readonly backend: OpenAIBackend;
  readonly maxTokens: number;
  readonly maxPromptTokens: number;
  readonly maxN: number;
  readonly maxCompletions: number;
  readonly maxRequestTokens: number;
  readonly #names: Set<string>;
  readonly #hiddenNames: Set<string>;
  readonly #vocabSize: number | undefined;
  readonly #created = Math.floor(Date.now() / 1000);
  readonly #requestTimeoutMs: number | undefined;
  readonly #acceptAnyModel: boolean;
  readonly #capMaxTokens: boolean;

  constructor(options: OpenAIServiceOptions) {
    this.modelName = options.modelName;
    this.backend = options.backend;
    this.#names = new Set([options.modelName, ...(options.aliases ?? [])]);
    this.#hiddenNames = new Set(options.hiddenAliases ?? []);
    this.#vocabSize = options.vocabSize ?? options.backend.vocabSize;
    this.maxTokens = options.maxTokens ?? DEFAULTS.maxTokens;
    this.maxPromptTokens = options.maxPromptTokens ?? options.backend.maxLength ?? DEFAULTS.maxPromptTokens;
    this.maxN = options.maxN ?? DEFAULTS.maxN;
    this.maxCompletions = options.maxCompletions ?? DEFAULTS.maxCompletions;
    this.maxRequestTokens = options.maxRequestTokens ?? DEFAULTS.maxRequestTokens;
    this.#requestTimeoutMs = options.requestTimeoutMs;
    this.#acceptAnyModel = options.acceptAnyModel ?? false;
    this.#capMaxTokens = options.capMaxTokens ?? false;
  }

  /** `name` is this model's name, an alias or a hidden alias (whether or not any name is accepted). */
  servesModel(name: string): boolean {
    return this.#names.has(name) || this.#hiddenNames.has(name);
  }

  models(): ModelList {
    return modelList(this.#names, this.#created);
  }

  async chatCompletion(
    body: unknown,
    scope: RequestScope = {},
  ): Promise<ServiceReply<ChatCompletionBody, ChatCompletionChunkBody>> {
    const request = parseRequest(ChatCompletionRequestSchema, body);
    this.#checkModel(request.model);
    const tokenizer = this.#tokenizer();
    const messages = request.messages.map(toChatMessage);
    // a bad image: ImageInputError, a 400 naming its part (asHttpError); a text chat renders without waiting
    const images = hasImageParts(messages) ? await chatImages(messages, this.backend.vision) : null;
    const { prompt, chatOptions, parseTools } = renderChat(request, messages, images, tokenizer, scope);
    const topLogprobs = request.logprobs ? (request.top_logprobs ?? 0) : 0;
    const options = this.#generateOptions(request, {
      prompt: { tokens: prompt.promptIds.length, param: 'messages' },
      maxTokens:
        request.max_completion_tokens != null
          ? { value: request.max_completion_tokens, param: 'max_completion_tokens' }
          : { value: request.max_tokens ?? null, param: 'max_tokens' },
      topLogprobs: { value: topLogprobs, param: 'top_logprobs' },
      // one tool call at most: generation ends where the first call's block closes
      extraStops: parseTools && request.parallel_tool_calls === false ? [TOOL_CALL_CLOSE] : [],
    });
    // after the fields the client wrote: the rendered ids are what the template and tokenizer made of the messages
    this.#checkTokenIds(prompt.promptIds, 'messages', 'text');
    if (prompt.requestImages) Object.assign(options, { images: prompt.requestImages, renderedFrom: prompt.renderedFrom });
    const head = responseHead('chatcmpl', request.model);
    const turnMeta = {
      ...scope.turnMeta,
      responseId: head.id,
      // the τ the reply's logprobs are taken at (greedy and unset: 1): the trainer recomputes them at the same τ
      temperature:
        request.temperature === undefined || request.temperature === null || request.temperature === 0 ? 1 : request.temperature,
    };
    const returnTokenIds = request.return_token_ids ?? false;
    const tokenText = this.#tokenTextOf(request);
    const finish = (result: GenerateResult) => {
      // the weights version read once the reply is generated: weights swapped between calls (sync_style
      // fully_async) never change under one, so this is the version that served it
      const meta = scope.modelVersion ? { ...turnMeta, modelVersion: scope.modelVersion() } : turnMeta;
      const chat = chatResult(result, prompt, { ...chatOptions, parseToolCalls: parseTools, turnMeta: meta });
      scope.onChatResult?.(chat, head.id);
      return chat;
    };
    const logprobsOf = (span: TokenSpan) => (request.logprobs ? chatLogprobs(span, tokenText, topLogprobs) : null);

    if (!request.stream) {
      const result = await this.#generate(prompt.promptIds, options, scope);
      const chat = finish(result);
      return {
        stream: false,
        body: {
          ...head,
          object: 'chat.completion',
          choices: chat.choices.map((choice, k) => ({
            index: choice.index,
            message: assistantMessage(choice),
            logprobs: logprobsOf({
              ids: choice.completionIds,
              logprobs: choice.logprobs,
              topLogprobs: result.completions[k]?.topLogprobs,
            }),
            finish_reason: chatFinishReason(choice),
            ...(returnTokenIds ? { token_ids: choice.completionIds } : {}),
          })),
          usage: completionUsage(result.promptIds.length, result.completions),
          ...(returnTokenIds ? { prompt_token_ids: result.promptIds } : {}),
        },
      };
    }
    const shape = chatChunkShape({
      head,
      holdToolCalls: parseTools,
      returnTokenIds,
      includeUsage: request.stream_options?.include_usage === true,
      logprobsOf,
      finish,
    });
    return this.#stream(tokenizer, request, prompt.promptIds, options, scope, shape);
  }

  async completion(body: unknown, scope: RequestScope = {}): Promise<ServiceReply<TextCompletionBody, TextCompletionChunkBody>> {
    const request = parseRequest(CompletionRequestSchema, body);
    this.#checkModel(request.model);
    const tokenizer = this.#tokenizer();
    const listed = promptList(request.prompt);
    // each prompt's size is checked as soon as it is encoded: one over the limits is refused before the next is encoded
    const prompts = listed.map((p, i) => {
      const ids = typeof p === 'string' ? tokenizer.encode(p) : p;
      checkRequestLimits({ prompt: { tokens: ids.length, param: listed.length > 1 ? `prompt.${i}` : 'prompt' } }, this.#limits());
      return ids;
    });
    prompts.forEach((ids, i) => {
      const param = listed.length > 1 ? `prompt.${i}` : 'prompt';
      if (ids.length === 0)
        throw new OpenAIHttpError(400, `'${param}': the prompt is empty (no tokens)`, { param, code: 'empty_prompt' });
      this.#checkTokenIds(ids, param, typeof listed[i] === 'string' ? 'text' : 'ids');
    });
    const longest = prompts.reduce((best, p, i) => (p.length > (prompts[best]?.length ?? 0) ? i : best), 0);
    const options = this.#generateOptions(request, {
      prompt: {
        tokens: prompts[longest]?.length ?? 0,
        param: Array.isArray(request.prompt) && listed.length > 1 ? `prompt.${longest}` : 'prompt',
      },
      maxTokens: { value: request.max_tokens ?? 16, param: 'max_tokens' },
      prompts: { count: prompts.length, tokens: prompts.reduce((sum, p) => sum + p.length, 0), param: 'prompt' },
      topLogprobs: { value: request.logprobs ?? 0, param: 'logprobs' },
      extraStops: [],
    });
    const echo = request.echo === true;
    if (echo && this.backend.score === undefined)
      throw new OpenAIHttpError(400, "'echo': this server's backend cannot score prompts", { param: 'echo' });
    const head = responseHead('cmpl', request.model);
    const n = options.n ?? 1;
    const returnTokenIds = request.return_token_ids ?? false;
    const tokenText = this.#tokenTextOf(request);
    if (!request.stream || prompts.length > 1) {
      if (request.stream)
        throw new OpenAIHttpError(400, 'stream with more than one prompt is not supported', { param: 'stream' });
      // one fair-share key for all the prompts: the engine gives this request one turn, not one per prompt
      const results = await Promise.all(
        prompts.map((p) =>
          options.maxTokens === 0 ? noCompletions(p, n) : this.#generate(p, { ...options, fairShareKey: head.id }, scope),
        ),
      );
      const scored = echo
        ? await Promise.all(prompts.map((p) => this.#score(p, { topLogprobs: request.logprobs ?? 0 }, scope)))
        : null;
      const choices = results.flatMap((result, p) =>
        result.completions.map((c) => {
          const span = { ids: c.tokenIds, logprobs: c.logprobs, topLogprobs: c.topLogprobs };
          const promptScore = scored?.[p];
          const promptText = promptScore === undefined ? '' : echoedPrompt(listed[p] as string | number[], tokenizer);
          return {
            index: p * n + c.index,
            text: promptText + (c.text ?? ''),
            logprobs:
              request.logprobs == null
                ? null
                : promptScore === undefined
                  ? textLogprobs(span, tokenText, 0)
                  : echoLogprobs({ ids: result.promptIds, ...promptScore }, span, tokenText),
            finish_reason: c.finishReason,
            ...(returnTokenIds ? { prompt_token_ids: result.promptIds, token_ids: c.tokenIds } : {}),
          };
        }),
      );
      const promptTokens = results.reduce((sum, r) => sum + r.promptIds.length, 0);
      return {
        stream: false,
        body: {
          ...head,
          object: 'text_completion',
          choices,
          usage: completionUsage(
            promptTokens,
            results.flatMap((r) => r.completions),
          ),
        },
      };
    }
    const shape = textChunkShape({
      head,
      n,
      returnTokenIds,
      includeUsage: request.stream_options?.include_usage === true,
      tokenText,
      logprobsOf: (span, textOffset) => (request.logprobs == null ? null : textLogprobs(span, tokenText, textOffset)),
    });
    return this.#stream(tokenizer, request, prompts[0] as number[], options, scope, shape);
  }

  /** Streams one prompt's completions, their chunks built by `shape` (./stream-shapes.ts); both endpoints end here. */
  async #stream<Chunk>(
    tokenizer: Tokenizer,
    request: ChatCompletionRequest | CompletionRequest,
    promptIds: number[],
    options: GenerateOptions,
    scope: RequestScope,
    shape: StreamShape<Chunk>,
  ): Promise<ServiceReply<never, Chunk>> {
    const chunks = await streamChunks<Chunk>({
      tokenizer,
      n: options.n ?? 1,
      stops: stopList(options.stop),
      skipSpecialTokens: request.skip_special_tokens ?? true,
      generate: (onToken) => this.#generate(promptIds, options, scope, onToken),
      shape,
    });
    return { stream: true, chunks };
  }

  #checkModel(name: string): void {
    if (!this.#acceptAnyModel && !this.servesModel(name)) {
      throw new OpenAIHttpError(404, `The model '${name}' does not exist; this server serves: ${[...this.#names].join(', ')}`, {
        param: 'model',
        code: 'model_not_found',
      });
    }
  }

  /**
   * Every id is a token of the loaded model; else a 400 naming the id's place ('prompt.3', 'stop_token_ids.0'), or for
   * ids the tokenizer made from text ('messages', a text prompt) the field and the id.
   */
  #checkTokenIds(ids: readonly number[], param: string, source: 'ids' | 'text' = 'ids'): void {
    const vocab = this.#vocab();
    const bad = ids.findIndex((id) => id >= vocab);
    if (bad === -1) return;
    if (source === 'text') {
      throw new OpenAIHttpError(
        400,
        `'${param}': the tokenizer encodes it to token id ${ids[bad]} (position ${bad}), which this model does not have (vocabulary size ${vocab})`,
        { param, code: 'invalid_token_id' },
      );
    }
    const where = `${param}.${bad}`;
    throw new OpenAIHttpError(400, `'${where}': ${ids[bad]} is not a token id of this model (vocabulary size ${vocab})`, {
      param: where,
      code: 'invalid_token_id',
    });
  }

  #vocab(): number {
    return this.#vocabSize ?? this.#tokenizer().vocabSize;
  }

  #tokenizer(): Tokenizer {
    const tokenizer = this.backend.tokenizer;
    if (tokenizer === null) throw new OpenAIHttpError(500, 'the served model has no tokenizer', { code: 'no_tokenizer' });
    return tokenizer;
  }

  /** This server's request limits (./limits.ts). */
  #limits(): RequestLimits {
    return {
      maxPromptTokens: this.maxPromptTokens,
      maxTokens: this.maxTokens,
      maxN: this.maxN,
      maxCompletions: this.maxCompletions,
      maxRequestTokens: this.maxRequestTokens,
      capTokens: this.#capMaxTokens,
      ...(this.backend.maxLength !== undefined ? { contextLength: this.backend.maxLength } : {}),
    };
  }

  /** Sampling options from a request, its sizes checked against this server's limits. */
  #generateOptions(
    request: ChatCompletionRequest | CompletionRequest,
    size: Required<Pick<RequestSize, 'prompt' | 'maxTokens'>> &
      Pick<RequestSize, 'prompts'> & {
        topLogprobs: { value: number; param: string };
        extraStops: readonly string[];
      },
  ): GenerateOptions {
    const n = request.n ?? 1;
    if (request.stop_token_ids) this.#checkTokenIds(request.stop_token_ids, 'stop_token_ids');
    const topLogprobs = size.topLogprobs.value;
    if (topLogprobs > this.#vocab()) {
      const { param } = size.topLogprobs;
      throw new OpenAIHttpError(400, `'${param}' ${topLogprobs} exceeds the model's vocabulary of ${this.#vocab()} tokens`, {
        param,
      });
    }
    const { maxTokens } = checkRequestLimits(
      { prompt: size.prompt, maxTokens: size.maxTokens, n, ...(size.prompts ? { prompts: size.prompts } : {}) },
      this.#limits(),
    );
    const stop = [...stopList(request.stop ?? undefined), ...size.extraStops];
    return {
      ...(maxTokens !== null ? { maxTokens } : {}),
      n,
      temperature: request.temperature ?? 1,
      ...(request.top_p != null ? { topP: request.top_p } : {}),
      ...(request.top_k != null && request.top_k > 0 ? { topK: request.top_k } : {}),
      ...(request.min_p != null ? { minP: request.min_p } : {}),
      ...(request.seed != null ? { seed: request.seed } : {}),
      ...(stop.length > 0 ? { stop } : {}),
      ...(request.stop_token_ids ? { stopTokenIds: request.stop_token_ids } : {}),
      ...(request.ignore_eos ? { ignoreEos: true } : {}),
      ...(request.skip_special_tokens != null ? { skipSpecialTokens: request.skip_special_tokens } : {}),
      ...(topLogprobs > 0 ? { topLogprobs } : {}),
      ...(this.#requestTimeoutMs !== undefined ? { timeoutMs: this.#requestTimeoutMs } : {}),
    };
  }

  async #generate(
    promptIds: number[],
    options: GenerateOptions & Pick<GenerateRequest, 'images'>,
    scope: RequestScope,
    onToken?: (e: TokenEvent) => void,
  ) {
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

  async #score(promptIds: number[], options: ScoreOptions, scope: RequestScope): Promise<ScoreResult> {
    try {
      return await (this.backend.score as NonNullable<OpenAIBackend['score']>)(promptIds, {
        ...options,
        ...(scope.signal ? { signal: scope.signal } : {}),
      });
    } catch (error) {
      throw asHttpError(error);
    }
  }

  /** How the request wants tokens shown in log-probs: their text (special tokens included) or "token_id:<id>". */
  #tokenTextOf(request: ChatCompletionRequest | CompletionRequest): (id: number) => string {
    if (request.return_tokens_as_token_ids) return (id) => `token_id:${id}`;
    const tokenizer = this.#tokenizer();
    return (id) => tokenizer.decode([id], { skipSpecialTokens: false });
  }
}

/**
 * A chat request's messages through the chat template (continuing the scope's conversation). The template's own
 * refusal (raise_exception) and any other input the messages cannot be rendered from are the client's (400); the
 * template failing or running past its budget is the served model's (500, code 'chat_template_failed').
 */
function renderChat(
  request: ChatCompletionRequest,
  messages: ChatInputMessage[],
  images: ChatImages | null,
  tokenizer: Tokenizer,
  scope: RequestScope,
) {
  const tools = request.tools?.map((t) => t as ToolDefinition);
  const parseTools = tools !== undefined && tools.length > 0 && request.tool_choice !== 'none';
  const chatOptions = {
    ...(tools && tools.length > 0 ? { tools } : {}),
    ...(request.chat_template_kwargs ? { templateVariables: request.chat_template_kwargs } : {}),
    ...(scope.conversation ? { conversation: scope.conversation } : {}),
    ...(scope.turnMeta ? { turnMeta: scope.turnMeta } : {}),
  };
  let prompt: ReturnType<typeof renderChatPrompt>;
  try {
    prompt = renderChatPrompt(tokenizer, messages, { ...chatOptions, images });
  } catch (error) {
    if (error instanceof ChatTemplateError) {
      throw new OpenAIHttpError(500, `the served model's chat template cannot render these messages: ${error.message}`, {
        code: 'chat_template_failed',
      });
    }
    throw new OpenAIHttpError(400, `messages: cannot render the chat template: ${(error as Error).message}`, {
      param: 'messages',
    });
  }
  if (prompt.promptIds.length === 0)
    throw new OpenAIHttpError(400, "'messages': the chat template renders them to an empty prompt (no tokens)", {
      param: 'messages',
    });
  return { prompt, chatOptions, parseTools };
}

/** A new response's id ('chatcmpl-…', 'cmpl-…'), creation time and model: the fields its body and chunks share. */
function responseHead(prefix: string, model: string): ResponseHead {
  return { id: `${prefix}-${randomBytes(12).toString('hex')}`, created: Math.floor(Date.now() / 1000), model };
}

function stopList(stop: string | readonly string[] | undefined | null): string[] {
  return stop == null ? [] : typeof stop === 'string' ? [stop] : [...stop];
}

/** max_tokens 0 (echo only): n empty completions of the prompt. */
function noCompletions(promptIds: number[], n: number): GenerateResult {
  return {
    promptIds,
    completions: Array.from({ length: n }, (_, index) => ({
      index,
      tokenIds: [],
      logprobs: [],
      text: '',
      finishReason: 'length' as const,
      stopReason: null,
    })),
  };
}

/** The prompt as echo shows it: the text sent, or the ids decoded (special tokens kept, as vLLM shows them). */
function echoedPrompt(prompt: string | number[], tokenizer: Tokenizer): string {
  return typeof prompt === 'string' ? prompt : tokenizer.decode(prompt, { skipSpecialTokens: false });
}

function promptList(prompt: CompletionRequest['prompt']): Array<string | number[]> {
  if (typeof prompt === 'string') return [prompt];
  if (prompt.every((p) => typeof p === 'number')) return [prompt as number[]];
  return prompt as Array<string | number[]>;
}

function toChatMessage(m: ChatCompletionRequest['messages'][number]): ChatInputMessage {
  return {
    role: m.role === 'developer' ? 'system' : m.role,
    content: messageContent(m.content),
    ...(m.name !== undefined ? { name: m.name } : {}),
    ...(m.tool_calls ? { tool_calls: m.tool_calls.map((c) => ({ ...c, type: 'function' as const })) } : {}),
    ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
    ...(m.reasoning_content ? { reasoning_content: m.reasoning_content } : {}),
  };
}
