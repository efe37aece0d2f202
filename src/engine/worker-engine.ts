// A RolloutEngine on its own worker thread. Its decode loop — forwards, sampling — runs there, so the caller's event
// loop (an HTTP server, hundreds of concurrent workflows) never waits on a forward. Requests and results are plain
// data; weights for a sync travel by reference (src/torch/worker.ts) and are copied into the engine's model there.
//
//   const engine = await WorkerRolloutEngine.start('path/to/model', { slots: 16, numThreads: 2 });
//   const reply = await engine.chat([{ role: 'user', content: 'Hi' }], { temperature: 0.7 });
//   await engine.syncWeights(trainer.model.parameters());     // after a training step
//   await engine.close();
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { LoadModelOptions } from '../model/index.js';
import { type ChatInputMessage, Tokenizer } from '../tokenizer/index.js';
import { type Tensor, TensorWorker } from '../torch/index.js';
import { type ChatEngine, type ChatOptions, type ChatResult, chat } from './chat.js';
import type { ImagePrompts } from './vision-chat.js';
import { imagePromptsOf } from './vision-requests.js';
import {
  type GenerateRequest,
  type GenerateResult,
  GenerationError,
  type GenerationFailure,
  type RolloutEngineOptions,
  type RolloutEngineStats,
  type ScoreOptions,
  type ScoreResult,
  type TokenEvent,
} from './types.js';

export interface WorkerEngineOptions
  extends Omit<RolloutEngineOptions, 'tokenizer' | 'ownsModel'>,
    Pick<LoadModelOptions, 'dtype' | 'device'> {
  /** Intra-op threads of the worker's libtorch ops. */
  numThreads?: number;
  /** How long loading the model may take (default 10 minutes). */
  startTimeoutMs?: number;
  /**
   * syncWeightsFromDir reads at most this many bytes of the folder's weights at a time, each bucket copied in and
   * freed (./weight-sync.ts syncModelWeightsFromDirStreamed; Trinity's weight_sync_buffer_size). Default: the whole
   * folder at once.
   */
  weightSyncBufferBytes?: number;
}

/** What the worker's `load` answers: the engine's cache shape and vocabulary. */
export interface EngineShape {
  slots: number;
  maxLength: number;
  vocabSize: number;
}

/** What the worker answers: results, or a generation failure kept as data so its reason survives the boundary. */
export type WorkerReply<T> = { ok: true; value: T } | { ok: false; reason: GenerationFailure; message: string };

/** A generate request as it crosses into the worker: plain data, plus the event name for streamed tokens. */
export type WorkerGenerateRequest = Omit<GenerateRequest, 'signal' | 'onToken'> & { streamEvent?: string };

const DEFAULT_REQUEST_TIMEOUT_MS = 30 * 60 * 1000;

export class WorkerRolloutEngine implements ChatEngine {
  readonly tokenizer: Tokenizer | null;
  /** KV-cache slots and context length per sequence of the worker's engine. */
  readonly slots: number;
  readonly maxLength: number;
  /** Token ids are < this: the model's config.json vocab_size (can exceed the tokenizer's vocabulary; see RolloutEngine). */
  readonly vocabSize: number;
  /** A vision-language model's image token and processor, read from the folder here (chat() renders images here). */
  readonly vision: ImagePrompts | null;
  readonly #worker: TensorWorker;
  readonly #requestTimeoutMs: number;
  #nextId = 1;
  #closed = false;

  private constructor(
    worker: TensorWorker,
    tokenizer: Tokenizer | null,
    requestTimeoutMs: number,
    shape: EngineShape,
    vision: ImagePrompts | null,
  ) {
    this.vision = vision;
    this.slots = shape.slots;
    this.maxLength = shape.maxLength;
    this.vocabSize = shape.vocabSize;
    this.#worker = worker;
    this.tokenizer = tokenizer;
    this.#requestTimeoutMs = requestTimeoutMs;
  }

  /** Starts a worker thread that loads the model folder (and its tokenizer) into a RolloutEngine. */
  static async start(dir: string, options: WorkerEngineOptions = {}): Promise<WorkerRolloutEngine> {
    const { numThreads, startTimeoutMs, ...engineOptions } = options;
    const worker = await TensorWorker.start(new URL('./engine-worker-main.ts', import.meta.url), {
      ...(numThreads ? { numThreads } : {}),
      startTimeoutMs: startTimeoutMs ?? 600_000,
    });
    let shape: EngineShape;
    try {
      shape = await worker.call('load', [dir, engineOptions], { timeoutMs: startTimeoutMs ?? 600_000 });
    } catch (error) {
      await worker.terminate();
      throw error;
    }
    // The tokenizer also lives here: chat() renders templates without a round trip.
    const tokenizer = existsSync(join(dir, 'tokenizer.json')) ? Tokenizer.load(dir) : null;
    const timeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    return new WorkerRolloutEngine(worker, tokenizer, timeoutMs, shape, imagePromptsOf(dir));
  }

  /** As RolloutEngine.generate; an AbortSignal cancels the request inside the worker. */
  async generate(request: GenerateRequest): Promise<GenerateResult> {
    if (this.#closed) throw new GenerationError('closed', 'WorkerRolloutEngine is closed: generate() was called after close()');
    const { signal, onToken, renderedFrom: _chat, ...plain } = request; // the worker's engine reads the ids alone
    if (signal?.aborted) throw new GenerationError('aborted', 'generate: the request was aborted before it started');
    const id = this.#nextId++;
    const onAbort = () => void this.#worker.call('abort', [id]).catch(() => {});
    signal?.addEventListener('abort', onAbort, { once: true });
    // Streamed tokens come back as worker events named after the request.
    const streamEvent = onToken ? `token:${id}` : null;
    const unsubscribe = streamEvent && onToken ? this.#worker.onEvent(streamEvent, (data) => onToken(data as TokenEvent)) : null;
    if (streamEvent) (plain as WorkerGenerateRequest).streamEvent = streamEvent;
    try {
      const timeout = (request.timeoutMs ?? this.#requestTimeoutMs) + 60_000; // the worker's own timeout fires first
      const reply = await this.#worker.call<WorkerReply<GenerateResult>>('generate', [id, plain], { timeoutMs: timeout });
      if (!reply.ok) throw new GenerationError(reply.reason, reply.message);
      return reply.value;
    } finally {
      signal?.removeEventListener('abort', onAbort);
      unsubscribe?.();
    }
  }

  chat(messages: readonly ChatInputMessage[], options: ChatOptions = {}): Promise<ChatResult> {
    return chat(this, messages, options);
  }

  /** As RolloutEngine.score, on the worker's model. */
  async score(tokenIds: readonly number[], options: ScoreOptions = {}): Promise<ScoreResult> {
    if (this.#closed) throw new GenerationError('closed', 'WorkerRolloutEngine is closed: score() was called after close()');
    const { signal, ...plain } = options;
    if (signal?.aborted) throw new GenerationError('aborted', 'score: the request was aborted before it started');
    const reply = await this.#worker.call<WorkerReply<ScoreResult>>('score', [[...tokenIds], plain], {
      timeoutMs: this.#requestTimeoutMs + 60_000,
    });
    if (!reply.ok) throw new GenerationError(reply.reason, reply.message);
    return reply.value;
  }

  /**
   * Copies a full set of weights (Hugging Face names, e.g. model.parameters()) into the worker's model between decode
   * steps, all or nothing: every name, shape and dtype is checked before any tensor is written (./weight-sync.ts);
   * requests in flight continue with the new weights. The tensors travel by reference: do not change them until the
   * promise resolves. Returns the number of tensors copied.
   */
  async syncWeights(weights: Map<string, Tensor>, options: { timeoutMs?: number } = {}): Promise<number> {
    if (this.#closed) throw new Error('WorkerRolloutEngine is closed: syncWeights() was called after close()');
    return this.#worker.call<number>('syncWeights', [Object.fromEntries(weights)], { timeoutMs: options.timeoutMs ?? 600_000 });
  }

  /**
   * Loads a Hugging Face folder's weights into the worker's model (checkpoint sync), all or nothing as syncWeights: a
   * folder with a wrong shape, a missing or an extra tensor is refused with the model unchanged. Returns the tensors
   * copied.
   */
  async syncWeightsFromDir(dir: string, options: { timeoutMs?: number } = {}): Promise<number> {
    if (this.#closed) throw new Error('WorkerRolloutEngine is closed: syncWeightsFromDir() was called after close()');
    return this.#worker.call<number>('syncWeightsFromDir', [dir], { timeoutMs: options.timeoutMs ?? 600_000 });
  }

  /** The engine's counters (requests, running, waiting, free slots, steps). */
  stats(): Promise<RolloutEngineStats> {
    return this.#worker.call('stats');
  }

  /** Rejects pending requests with GenerationError('closed'), frees the model and ends the thread. */
  async close(reason = 'WorkerRolloutEngine was closed'): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try {
      await this.#worker.call('close', [reason], { timeoutMs: 60_000 });
    } finally {
      await this.#worker.terminate();
    }
  }
}
