// A rollout engine on any OpenAI-compatible server (vLLM, SGLang, llama.cpp server, `trinity serve`): the explorer
// and bench run workflows against it exactly as against the embedded engine.
//
//   generate  POST /v1/completions with the prompt as token ids, logprobs max(1, topLogprobs), return_token_ids
//             (vLLM ≥ 0.10.2) and return_tokens_as_token_ids ("token_id:<id>" logprob tokens) — the completion's exact
//             ids come from whichever the server answers, never from re-tokenising its text; topLogprobs are the
//             most likely entries of each position's top_logprobs
//   chat      rendered here with the model folder's tokenizer and chat template (exact prompt ids), then generate;
//             tool calls parsed as the embedded engine does (src/engine/chat.ts)
//   images    a request with images (a vision-language model folder: `vision`) goes as its chat, POST
//             /v1/chat/completions with image_url parts, its prompt ids checked against the server's (./remote-images.ts)
//   score     POST /v1/completions with the ids as prompt, echo: true, max_tokens 1, temperature 0, logprobs
//             max(1, topLogprobs) and return_tokens_as_token_ids (what vLLM clients such as lm-eval send): the
//             prompt's log-probs, the first null; the one generated token is dropped. vLLM and `trinity serve` answer
//             it; prompt log-probs are the raw distribution (temperature 1) on both
//   weights   syncWeightsFromDir(dir): POST /update_weights_from_disk {model_path: dir} (SGLang's API; `trinity serve
//             --allow-reload-from ROOT` answers it too); the server must see the same file system
//
// Log-probs are the server's (vLLM: logprobs_mode decides whether they are raw or processed). Every request has a
// timeout; failures are GenerationErrors naming the server and what it answered.
import {
  type ChatEngine,
  type ChatOptions,
  type ChatResult,
  chat,
  type Completion,
  type FinishReason,
  type GenerateRequest,
  type GenerateResult,
  GenerationError,
  type ImagePrompts,
  type ScoreOptions,
  type ScoreResult,
} from '../engine/index.js';
import type { ChatInputMessage, Tokenizer } from '../tokenizer/index.js';
import { imageChatRequest, imageChatResult } from './remote-images.js';
import { samplingFields, tokensAsIds, topLogprobsOf } from './remote-protocol.js';

export interface RemoteEngineOptions {
  /** The server's base URL including /v1 (e.g. http://127.0.0.1:8000/v1). */
  baseURL: string;
  /** The model id to request (the server's /v1/models). */
  model: string;
  apiKey?: string | null;
  /** Renders chat prompts and decodes; required for chat(). */
  tokenizer: Tokenizer | null;
  /** Per-request timeout (default 30 minutes). */
  requestTimeoutMs?: number;
  /**
   * A vision-language model folder's image token and processor (imagePromptsOf): chat() then takes image parts and
   * generate() sends requests with images as chats (./remote-images.ts). Absent or null: images are refused.
   */
  vision?: ImagePrompts | null;
}

const DEFAULT_TIMEOUT_MS = 30 * 60 * 1000;

/**
 * A request the server did not answer properly: unreachable, the connection dropped, HTTP 5xx, not JSON, or no answer
 * within the timeout. Another server may answer it (./remote-pool.ts retries it there); a 4xx is the request's fault
 * and stays a plain GenerationError.
 */
export class RemoteServerError extends GenerationError {
  readonly baseURL: string;
  constructor(baseURL: string, reason: 'failed' | 'timeout', message: string, options?: { cause?: unknown }) {
    super(reason, message, options);
    this.name = 'RemoteServerError';
    this.baseURL = baseURL;
  }
}

interface CompletionChoice {
  index: number;
  text: string;
  finish_reason: string | null;
  stop_reason?: number | string | null;
  token_ids?: number[] | null;
  logprobs?: {
    tokens?: string[];
    token_logprobs?: Array<number | null>;
    top_logprobs?: Array<Record<string, number> | null>;
  } | null;
}

export class OpenAIRemoteEngine implements ChatEngine {
  readonly baseURL: string;
  readonly model: string;
  readonly tokenizer: Tokenizer | null;
  readonly vision: ImagePrompts | null;
  readonly #apiKey: string | null;
  readonly #timeoutMs: number;
  #requestModel: string | null = null;

  constructor(options: RemoteEngineOptions) {
    this.baseURL = options.baseURL.replace(/\/+$/, '');
    this.model = options.model;
    this.tokenizer = options.tokenizer;
    this.vision = options.vision ?? null;
    this.#apiKey = options.apiKey ?? null;
    this.#timeoutMs = options.requestTimeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /** Checks that the server answers /v1/models and serves `model`. */
  static async connect(options: RemoteEngineOptions): Promise<OpenAIRemoteEngine> {
    const engine = new OpenAIRemoteEngine(options);
    const models = (await engine.#request('GET', '/models', undefined, { timeoutMs: 30_000 })) as { data?: { id: string }[] };
    const ids = (models.data ?? []).map((m) => m.id);
    if (!ids.includes(options.model))
      throw new Error(`${engine.baseURL}: the server does not serve model '${options.model}' (it serves: ${ids.join(', ')})`);
    return engine;
  }

  async generate(request: GenerateRequest): Promise<GenerateResult> {
    if (request.images !== undefined && request.images.length > 0) return this.#imageChat(request);
    const promptIds = request.promptIds ? [...request.promptIds] : null;
    if (promptIds === null && request.prompt === undefined) throw new TypeError('generate: give promptIds or prompt');
    if (promptIds === null && this.tokenizer === null)
      throw new TypeError('generate: a text prompt needs the tokenizer (its exact ids are the experience)');
    const ids = promptIds ?? (this.tokenizer as Tokenizer).encode(request.prompt as string);
    const n = request.n ?? 1;
    const body = {
      model: this.requestModel,
      prompt: ids,
      ...samplingFields(request),
      logprobs: Math.max(1, request.topLogprobs ?? 0),
      return_tokens_as_token_ids: true,
    };
    const reply = (await this.#request('POST', '/completions', body, {
      timeoutMs: request.timeoutMs ?? this.#timeoutMs,
      ...(request.signal ? { signal: request.signal } : {}),
    })) as { choices?: CompletionChoice[] };
    const choices = [...(reply.choices ?? [])].sort((a, b) => a.index - b.index);
    if (choices.length !== n)
      throw new GenerationError('failed', `${this.baseURL}: asked for ${n} completions, got ${choices.length}`);
    const completions = choices.map((choice, index): Completion => {
      const tokenIds = choice.token_ids ?? tokensAsIds(choice.logprobs?.tokens);
      if (tokenIds === null) {
        throw new GenerationError(
          'failed',
          `${this.baseURL}: the completion has no token ids (the server needs return_token_ids, vLLM >= 0.10.2, or ` +
            'return_tokens_as_token_ids)',
        );
      }
      const logprobs = (choice.logprobs?.token_logprobs ?? []).map((v) => v ?? 0);
      if (logprobs.length !== tokenIds.length)
        throw new GenerationError('failed', `${this.baseURL}: ${tokenIds.length} token ids but ${logprobs.length} logprobs`);
      const finishReason: FinishReason = choice.finish_reason === 'length' ? 'length' : 'stop';
      const top = request.topLogprobs ?? 0;
      return {
        index,
        tokenIds,
        logprobs,
        ...(top > 0 ? { topLogprobs: topLogprobsOf(this.baseURL, choice.logprobs?.top_logprobs, tokenIds.length, top) } : {}),
        text: choice.text,
        finishReason,
        stopReason: finishReason === 'stop' ? (choice.stop_reason ?? tokenIds.at(-1) ?? null) : null,
      };
    });
    return { promptIds: ids, completions };
  }

  /** A request with images, sent as the chat it was rendered from (./remote-images.ts). */
  async #imageChat(request: GenerateRequest): Promise<GenerateResult> {
    const sent = await imageChatRequest(this, request);
    const reply = await this.#request('POST', '/chat/completions', sent.body, {
      timeoutMs: request.timeoutMs ?? this.#timeoutMs,
      ...(request.signal ? { signal: request.signal } : {}),
    });
    return imageChatResult(this, request, sent, reply);
  }

  chat(messages: readonly ChatInputMessage[], options: ChatOptions = {}): Promise<ChatResult> {
    return chat(this, messages, options);
  }

  /** Log-probs of `tokenIds` under the server's model (see the header); temperature other than 1 is refused. */
  async score(tokenIds: readonly number[], options: ScoreOptions = {}): Promise<ScoreResult> {
    if (tokenIds.length === 0) throw new GenerationError('invalid', 'score: the token ids are empty');
    if (options.temperature !== undefined && options.temperature !== 1)
      throw new GenerationError(
        'invalid',
        `score: an OpenAI-compatible server's prompt log-probs are at temperature 1; temperature ${options.temperature} was asked`,
      );
    const top = options.topLogprobs ?? 0;
    const body = {
      model: this.requestModel,
      prompt: [...tokenIds],
      echo: true,
      max_tokens: 1,
      temperature: 0,
      logprobs: Math.max(1, top),
      return_tokens_as_token_ids: true,
    };
    const reply = (await this.#request('POST', '/completions', body, {
      timeoutMs: this.#timeoutMs,
      ...(options.signal ? { signal: options.signal } : {}),
    })) as { choices?: CompletionChoice[] };
    const choice = reply.choices?.[0];
    const where = `${this.baseURL}: echo of ${tokenIds.length} prompt tokens`;
    const tokens = tokensAsIds(choice?.logprobs?.tokens);
    const values = choice?.logprobs?.token_logprobs;
    if (tokens === null || values === undefined || tokens.length < tokenIds.length || values.length !== tokens.length)
      throw new GenerationError(
        'failed',
        `${where}: the answer has no prompt log-probs as "token_id:<id>" tokens (does the server support echo with logprobs?)`,
      );
    const mismatch = tokenIds.findIndex((id, i) => tokens[i] !== id);
    if (mismatch !== -1)
      throw new GenerationError('failed', `${where}: echoed token ${mismatch} is ${tokens[mismatch]}, not ${tokenIds[mismatch]}`);
    const logprobs: (number | null)[] = values.slice(0, tokenIds.length);
    const missing = logprobs.findIndex((v, i) => i > 0 && typeof v !== 'number');
    if (missing !== -1) throw new GenerationError('failed', `${where}: prompt token ${missing} has no log-prob`);
    logprobs[0] = null;
    if (top === 0) return { logprobs };
    const topLogprobs = [
      [],
      ...topLogprobsOf(this.baseURL, choice?.logprobs?.top_logprobs?.slice(1, tokenIds.length), tokenIds.length - 1, top),
    ];
    return { logprobs, topLogprobs };
  }

  /** Asks the server to load the weights of a Hugging Face folder (it must see the same path). */
  async syncWeightsFromDir(dir: string, options: { timeoutMs?: number } = {}): Promise<void> {
    const reply = (await this.#request(
      'POST',
      '/update_weights_from_disk',
      { model_path: dir },
      { timeoutMs: options.timeoutMs ?? 600_000, root: true },
    )) as { success?: boolean; message?: string };
    if (reply.success === false) throw new Error(`${this.baseURL}: weight reload from ${dir} failed: ${reply.message ?? ''}`);
  }

  /**
   * vLLM's dynamic LoRA API (the server needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; `trinity serve
   * --allow-reload-from ROOT` answers it too): POST /v1/load_lora_adapter {lora_name, lora_path}. The server must see
   * the same file system. Requests then name the adapter as their model (useModel).
   */
  async loadLoraAdapter(name: string, path: string, options: { timeoutMs?: number } = {}): Promise<void> {
    await this.#request(
      'POST',
      '/load_lora_adapter',
      { lora_name: name, lora_path: path },
      { timeoutMs: options.timeoutMs ?? 600_000, text: true },
    );
  }

  /** POST /v1/unload_lora_adapter {lora_name}; false when the server has no adapter of that name (its 404). */
  async unloadLoraAdapter(name: string, options: { timeoutMs?: number } = {}): Promise<boolean> {
    try {
      await this.#request(
        'POST',
        '/unload_lora_adapter',
        { lora_name: name },
        { timeoutMs: options.timeoutMs ?? 600_000, text: true },
      );
      return true;
    } catch (error) {
      if (
        error instanceof GenerationError &&
        !(error instanceof RemoteServerError) &&
        /HTTP (404|400): .*(not|cannot be) found/i.test(error.message)
      )
        return false;
      throw error;
    }
  }

  /** The model generate() and score() ask for: a loaded LoRA adapter's name, or null for `model` again. */
  useModel(name: string | null): void {
    this.#requestModel = name;
  }

  /** The model id requests name now (`model`, or the adapter useModel chose). */
  get requestModel(): string {
    return this.#requestModel ?? this.model;
  }

  /** Nothing to free here: the server is not ours. */
  async close(): Promise<void> {}

  async #request(
    method: 'GET' | 'POST',
    path: string,
    body: unknown,
    options: { timeoutMs: number; signal?: AbortSignal; root?: boolean; text?: boolean },
  ): Promise<unknown> {
    const base = options.root ? this.baseURL.replace(/\/v1$/, '') : this.baseURL;
    const timeout = AbortSignal.timeout(options.timeoutMs);
    const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
    let res: Response;
    try {
      res = await fetch(`${base}${path}`, {
        method,
        headers: {
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
          ...(this.#apiKey ? { authorization: `Bearer ${this.#apiKey}` } : {}),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal,
      });
    } catch (error) {
      if (timeout.aborted)
        throw new RemoteServerError(
          this.baseURL,
          'timeout',
          `${method} ${base}${path} did not answer within ${options.timeoutMs} ms`,
        );
      if (options.signal?.aborted) throw new GenerationError('aborted', `${method} ${base}${path} was aborted`);
      throw new RemoteServerError(this.baseURL, 'failed', `${method} ${base}${path} failed: ${describeFetchError(error)}`, {
        cause: error,
      });
    }
    let text: string;
    try {
      text = await res.text();
    } catch (error) {
      if (options.signal?.aborted && !timeout.aborted)
        throw new GenerationError('aborted', `${method} ${base}${path} was aborted`);
      throw new RemoteServerError(
        this.baseURL,
        timeout.aborted ? 'timeout' : 'failed',
        `${method} ${base}${path}: the answer broke off: ${describeFetchError(error)}`,
        { cause: error },
      );
    }
    if (!res.ok) {
      let message = text.slice(0, 500);
      try {
        message = (JSON.parse(text) as { error?: { message?: string } }).error?.message ?? message;
      } catch {}
      const what = `${method} ${base}${path}: HTTP ${res.status}: ${message}`;
      if (res.status >= 500) throw new RemoteServerError(this.baseURL, 'failed', what);
      throw new GenerationError('failed', what);
    }
    if (options.text) return text; // vLLM answers the LoRA endpoints with a plain-text line
    try {
      return JSON.parse(text);
    } catch {
      throw new RemoteServerError(
        this.baseURL,
        'failed',
        `${method} ${base}${path}: the answer is not JSON: ${text.slice(0, 200)}`,
      );
    }
  }
}

/** fetch's 'fetch failed' with the reason underneath (ECONNREFUSED, ECONNRESET, 'other side closed'). */
function describeFetchError(error: unknown): string {
  const message = (error as Error).message;
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  const detail = cause?.code ?? cause?.message;
  return detail && !message.includes(detail) ? `${message} (${detail})` : message;
}
