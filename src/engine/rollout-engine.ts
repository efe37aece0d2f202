// The rollout engine: continuous batching over a preallocated KV cache.
//
// An engine owns a KV cache of `slots` independent sequences (see ../model/kv-cache.ts). Each request expands into n
// sequences; a sequence waits for a free slot, is prefilled into it, then decodes one token per engine step alongside
// every other running sequence, and leaves (freeing the slot) as soon as it finishes. Waiting sequences are admitted
// round-robin over fair-share keys (a request's own, or the fairShareKey it names): one sequence of the first key in
// line takes a slot, and that key goes to the back of the line; within a key, first come first served. So a request
// with many samples (or an HTTP request with many prompts under one key) gets one slot per turn, and a small request
// that arrives behind it waits for one turn, not for all of it. One step:
//
//   prefill   waiting sequences take free slots (lowest first) and their prompts run as one right-padded forward
//             (at most maxPrefillTokens padded tokens); the last prompt position's logits give each its first token.
//             The n samples of one request in the batch run their shared prompt once: the others copy that slot
//             (KVCache.planCopy) and draw their first token from the same logits with their own generators
//   yield     await setImmediate: timers, I/O, HTTP handlers and other requests' callers run
//   decode    every running sequence feeds its last token: one forward [B, 1] over the cache, one sampling pass
//             (./sampling.ts), one read-back of [2, B] values (ids and log-probs; plus each row's top-k ids and
//             log-probs when a request asks for topLogprobs), then stop checks (./stopping.ts)
//   yield
//
// Each forward runs under noGrad inside torch.scope, so a step frees everything it made; the cache is reused. A step
// makes its tensors from JavaScript data before it queues the forward and reads back once at the end: on a GPU a
// transfer in between would wait for the forward (test/engine/host-transfers.test.ts).
// Every row is computed from its own slot and sampled with its own generator, so a request gets the same tokens
// whatever else is in the batch (greedy: exactly; seeded sampling: up to float rounding differences between batch
// shapes, which can in principle flip a near-tie). The generators are CPU generators on every device, so a seed
// draws the same uniforms on the CPU and on a GPU (./sampling.ts drawFromCdf).
//
// Requests end in one of five ways besides success, each a GenerationError naming what happened: 'invalid' (the
// request fails a check: an empty prompt, an id outside the vocabulary, a bad sampling parameter; the message names
// the field, the check's RangeError or TypeError is the cause), 'aborted' (its AbortSignal fired), 'timeout'
// (timeoutMs passed), 'closed' (close() or abortAll() ran first), 'failed' (a forward threw; the other requests carry
// on). The reason is data, so it survives a thread boundary (./worker-engine.ts) where an error's class does not.
//
// This file is the loop: admission (generate), prefill, decode, settle. Its neighbours: ./types.ts (the public request,
// result and error types), ./prepare-request.ts (a request checked and its defaults filled in), ./request-state.ts (a
// request and its sequences inside the engine), ./sampled-step.ts (a step's forward and sampling, eager or captured),
// ./score.ts (teacher-forced log-probs, score()).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import {
  CausalLM,
  checkKVCacheFits,
  type KVCache,
  type LoadModelOptions,
  loadModelConfig,
  type ModelConfig,
} from '../model/index.js';
import { type ChatMessage, Tokenizer } from '../tokenizer/index.js';
import * as torch from '../torch/index.js';
import { type ChatOptions, type ChatResult, chat } from './chat.js';
import { type PreparedRequest, prepareRequest } from './prepare-request.js';
import { recordedLayers, SequenceRouting, StepRecord } from './routed-experts.js';
import {
  completionOf,
  createSequences,
  type Finish,
  type RequestState,
  requestProgress,
  type Sequence,
  watchAbortAndTimeout,
} from './request-state.js';
import { runSampledStep, type StepForward } from './sampled-step.js';
import { prepareSampling } from './sampling.js';
import { checkScoreRequest, scoreTokens } from './score.js';
import { syncModelWeights, syncModelWeightsFromDir } from './weight-sync.js';
import { DecodeSteps, type DecodeStepStats } from './decode-steps.js';
import {
  type GenerateRequest,
  type GenerateResult,
  GenerationError,
  type RolloutEngineOptions,
  type ScoreOptions,
  type ScoreResult,
  type TopLogprob,
} from './types.js';

const DEFAULT_SLOTS = 8;
const DEFAULT_MAX_LENGTH = 2048;
const DEFAULT_MAX_PREFILL_TOKENS = 8192;
const DEFAULT_REQUEST_TIMEOUT_MS = 30 * 60 * 1000;
const DEFAULT_DECODE_KEY_BUCKET = 32;

/** A positive integer option, or a RangeError naming it. */
function positiveOption(name: string, value: number): number {
  if (!Number.isInteger(value) || value <= 0)
    throw new RangeError(`RolloutEngine: ${name} must be a positive integer, got ${String(value)}`);
  return value;
}

/** The KV cache's size settings with their defaults (the constructor, and load() before it reads any weight). */
function cacheSettings(config: ModelConfig, options: RolloutEngineOptions): { slots: number; maxLength: number } {
  return {
    slots: positiveOption('slots', options.slots ?? DEFAULT_SLOTS),
    maxLength: positiveOption('maxLength', options.maxLength ?? Math.min(config.maxPositionEmbeddings, DEFAULT_MAX_LENGTH)),
  };
}

export class RolloutEngine {
  readonly model: CausalLM;
  readonly tokenizer: Tokenizer | null;
  readonly slots: number;
  readonly maxLength: number;
  /**
   * Token ids are < this: config.json's vocab_size, the rows of the embedding, which can exceed the tokenizer's
   * vocabulary (embeddings padded to a multiple of 64 or 128).
   */
  readonly vocabSize: number;
  readonly maxPrefillTokens: number;
  readonly decodeKeyBucket: number;
  readonly eosTokenIds: readonly number[];
  readonly requestTimeoutMs: number;
  readonly #ownsModel: boolean;
  readonly #cache: KVCache;
  /** Captured decode steps (null: captureDecode off). */
  readonly #decodeSteps: DecodeSteps | null;
  /** The model's device: inputs are created there. */
  readonly #device: string;
  /** Free slots, ascending: low slots first keeps running rows consecutive (the cache then reads a view, no copy). */
  readonly #freeSlots: number[];
  /**
   * Waiting sequences by fair-share key, the keys in their round-robin order (a Map keeps insertion order: the key
   * served moves to the back). Every queue here is non-empty.
   */
  readonly #waiting = new Map<string | RequestState, Sequence[]>();
  #running: Sequence[] = [];
  readonly #requests = new Set<RequestState>();
  #loop: Promise<void> | null = null;
  #closed = false;
  #nextRequestId = 0;
  #steps = 0;
  readonly #recordedLayers: number[] | null;

  constructor(model: CausalLM, options: RolloutEngineOptions = {}) {
    this.model = model;
    this.tokenizer = options.tokenizer ?? null;
    ({ slots: this.slots, maxLength: this.maxLength } = cacheSettings(model.config, options));
    this.vocabSize = model.config.vocabSize;
    this.maxPrefillTokens = positiveOption('maxPrefillTokens', options.maxPrefillTokens ?? DEFAULT_MAX_PREFILL_TOKENS);
    const timeout = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    if (!(timeout > 0)) throw new RangeError(`RolloutEngine: requestTimeoutMs must be > 0 (Infinity: none), got ${timeout}`);
    this.requestTimeoutMs = timeout;
    this.eosTokenIds = [...(options.eosTokenIds ?? this.tokenizer?.eosTokenIds ?? configEosIds(model))];
    this.#ownsModel = options.ownsModel ?? false;
    // a mixture of experts' decode step reads its routing back to size each expert's rows (../model/moe.ts): no step
    // of it can be captured or replayed as a CUDA graph, so it runs eagerly (capture would only fail each new shape)
    const isMoe = model.config.moe !== null;
    if (isMoe && options.captureDecode === true)
      throw new RangeError(
        `RolloutEngine: captureDecode is not available for ${model.config.architecture} (a mixture of experts decodes eagerly)`,
      );
    const capture = options.captureDecode ?? !isMoe;
    this.#recordedLayers = recordedLayers(model.config, options.recordRoutedExperts ?? false);
    this.decodeKeyBucket = positiveOption(
      'decodeKeyBucket',
      options.decodeKeyBucket ?? (capture ? DEFAULT_DECODE_KEY_BUCKET : 1),
    );
    this.#device = model.parameters().get('model.embed_tokens.weight')?.device ?? 'cpu';
    const onCuda = this.#device.startsWith('cuda');
    if (options.cudaGraphs === true && !(capture && onCuda))
      throw new RangeError(
        `RolloutEngine: cudaGraphs needs captureDecode and a model on a CUDA device (captureDecode ${capture}, model on ${this.#device})`,
      );
    this.#decodeSteps = capture ? new DecodeSteps({ cudaGraphs: options.cudaGraphs ?? onCuda }) : null;
    this.#cache = model.createKVCache({ slots: this.slots, maxLength: this.maxLength });
    if (capture) model.refreshPackedWeights(); // packed now, not inside the first captured steps
    this.#freeSlots = Array.from({ length: this.slots }, (_, s) => s);
  }

  /**
   * Loads a Hugging Face model folder (and its tokenizer, when it has tokenizer.json) in the inference layout (see
   * WeightLayout in ../model/inference-layout.ts); close() frees the model.
   */
  static load(
    dir: string,
    options: Omit<RolloutEngineOptions, 'ownsModel'> & Pick<LoadModelOptions, 'dtype' | 'device'> = {},
  ): RolloutEngine {
    const { dtype, device, ...engineOptions } = options;
    // the cache's size checked from config.json before any weight is read (a cache that cannot fit is refused now)
    const config = loadModelConfig(dir);
    checkKVCacheFits({
      numLayers: config.numHiddenLayers,
      numKeyValueHeads: config.numKeyValueHeads,
      headDim: config.headDim,
      ...cacheSettings(config, engineOptions),
      dtype: dtype ?? 'float32',
      ...(device ? { device } : {}),
    });
    const tokenizer =
      options.tokenizer !== undefined ? options.tokenizer : existsSync(join(dir, 'tokenizer.json')) ? Tokenizer.load(dir) : null;
    // the inference layout (fused, column-major projections) decodes faster; weight syncs copy into it unchanged
    const model = CausalLM.load(dir, { ...(dtype ? { dtype } : {}), ...(device ? { device } : {}), layout: 'inference' });
    try {
      return new RolloutEngine(model, { ...engineOptions, tokenizer, ownsModel: true });
    } catch (error) {
      model.dispose();
      throw error;
    }
  }

  /** What the engine is doing now. */
  get stats(): { requests: number; running: number; waiting: number; freeSlots: number; steps: number; closed: boolean } {
    return {
      requests: this.#requests.size,
      running: this.#running.length,
      waiting: [...this.#waiting.values()].reduce((sum, queue) => sum + queue.length, 0),
      freeSlots: this.#freeSlots.length,
      steps: this.#steps,
      closed: this.#closed,
    };
  }

  /**
   * Generates n completions of one prompt; resolves when all of them finished. A request that fails a check rejects
   * with GenerationError('invalid') before anything runs.
   */
  generate(request: GenerateRequest): Promise<GenerateResult> {
    if (this.#closed) {
      return Promise.reject(new GenerationError('closed', 'RolloutEngine is closed: generate() was called after close()'));
    }
    if (request.signal?.aborted) {
      return Promise.reject(
        new GenerationError('aborted', 'generate: the request was aborted before it started', { cause: request.signal.reason }),
      );
    }
    let prepared: PreparedRequest;
    try {
      prepared = prepareRequest(request, this);
    } catch (error) {
      // the request checks throw RangeError / TypeError (SamplingParamsError is a RangeError); anything else is a bug
      if (error instanceof RangeError || error instanceof TypeError)
        return Promise.reject(new GenerationError('invalid', error.message, { cause: error }));
      return Promise.reject(error);
    }
    return new Promise<GenerateResult>((resolve, reject) => {
      const state: RequestState = {
        ...prepared,
        onToken: request.onToken ?? null,
        id: this.#nextRequestId++,
        fairShareKey: request.fairShareKey ?? null,
        sequences: [],
        resolve,
        reject,
        settled: false,
        unfinished: prepared.n,
        cleanup: () => {},
      };
      state.sequences.push(...createSequences(state, this.tokenizer));
      SequenceRouting.attach(state.sequences, this.#recordedLayers, this.model.config); // recordRoutedExperts
      state.cleanup = watchAbortAndTimeout(state, request.signal, request.timeoutMs ?? this.requestTimeoutMs, (error) =>
        this.#fail(state, error),
      );
      this.#requests.add(state);
      const queue = this.#waiting.get(shareKey(state));
      if (queue) queue.push(...state.sequences);
      else this.#waiting.set(shareKey(state), [...state.sequences]);
      this.#startLoop();
    });
  }

  /** Chat completion with the tokenizer's chat template; see ./chat.ts. */
  chat(messages: readonly ChatMessage[], options: ChatOptions = {}): Promise<ChatResult> {
    return chat(this, messages, options);
  }

  /**
   * Scores a whole token sequence in one forward without the cache (between two engine steps):
   *   logprobs[t] = log_softmax(logits[t − 1] / τ)[ids[t]] for t ≥ 1, logprobs[0] = null
   * Teachers, reward models and `echo` completions use it. The ids are checked as a prompt's are ('invalid'); see
   * ./score.ts.
   */
  async score(tokenIds: readonly number[], options: ScoreOptions = {}): Promise<ScoreResult> {
    if (this.#closed) throw new GenerationError('closed', 'RolloutEngine is closed: score() was called after close()');
    const request = checkScoreRequest(tokenIds, options, this);
    await yieldToEventLoop(); // never compute inside the caller's call
    if (options.signal?.aborted)
      throw new GenerationError('aborted', 'score: the request was aborted before it ran', { cause: options.signal.reason });
    if (this.#closed) throw new GenerationError('closed', 'RolloutEngine is closed: score() did not run');
    return scoreTokens(this.model, this.#device, request);
  }

  /**
   * Copies a full set of weights (Hugging Face names, e.g. a trainer's parameters()) into the model, all or nothing
   * (see ./weight-sync.ts); it runs between two steps, and requests in flight go on with the new weights. Returns the
   * number of tensors copied; the caller keeps `weights`.
   */
  syncWeights(weights: ReadonlyMap<string, torch.Tensor>): number {
    this.#checkOpen('syncWeights');
    const copied = syncModelWeights(this.model, weights);
    this.model.refreshPackedWeights(); // in place: captured decode steps hold the packed tensors and stay valid
    return copied;
  }

  /** As syncWeights, from a Hugging Face folder (a checkpoint): a folder that fails a check changes nothing. */
  syncWeightsFromDir(dir: string, streamBufferBytes?: number): number {
    this.#checkOpen('syncWeightsFromDir');
    const copied = syncModelWeightsFromDir(this.model, dir, streamBufferBytes);
    this.model.refreshPackedWeights();
    return copied;
  }

  #checkOpen(what: string): void {
    if (this.#closed) throw new Error(`RolloutEngine is closed: ${what}() was called after close()`);
  }

  /** Rejects every unfinished request with GenerationError('closed'); the engine stays open for new ones. */
  abortAll(reason = 'RolloutEngine.abortAll() was called'): void {
    for (const state of [...this.#requests]) {
      this.#fail(state, new GenerationError('closed', `${reason}: request ${state.id} did not finish ${requestProgress(state)}`));
    }
  }

  /**
   * Stops the engine: unfinished requests are rejected with GenerationError('closed'), the running step completes,
   * then the cache (and the model, if the engine owns it) is freed. Later generate() calls reject.
   */
  async close(reason = 'RolloutEngine was closed'): Promise<void> {
    if (!this.#closed) {
      this.#closed = true;
      this.abortAll(reason);
    }
    await this.#loop;
    this.#decodeSteps?.invalidate();
    if (!this.#cache.isDisposed) {
      this.#cache.dispose();
      if (this.#ownsModel) this.model.dispose();
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  get isClosed(): boolean {
    return this.#closed;
  }

  // ---- settling requests: a request ends (resolved or rejected) and its sequences leave their slots ----

  /** Ends a request with an error: its sequences leave the queue and their slots (between steps). */
  #fail(state: RequestState, error: Error): void {
    if (state.settled) return;
    this.#settle(state);
    state.reject(error);
  }

  #settle(state: RequestState): void {
    state.settled = true;
    state.cleanup();
    this.#requests.delete(state);
    const queue = this.#waiting.get(shareKey(state));
    if (queue) {
      const left = queue.filter((s) => s.request !== state);
      if (left.length > 0) this.#waiting.set(shareKey(state), left);
      else this.#waiting.delete(shareKey(state));
    }
    for (const s of state.sequences) if (s.slot !== -1) this.#release(s);
  }

  #release(seq: Sequence): void {
    const slot = seq.slot;
    seq.slot = -1;
    this.#running = this.#running.filter((s) => s !== seq);
    const at = this.#freeSlots.findIndex((s) => s > slot);
    this.#freeSlots.splice(at === -1 ? this.#freeSlots.length : at, 0, slot);
  }

  #finish(seq: Sequence, finish: Finish): void {
    seq.finish = finish;
    this.#release(seq);
    const state = seq.request;
    state.unfinished--;
    if (state.unfinished > 0 || state.settled) return;
    const completions = state.sequences.map((s) => completionOf(s, this.tokenizer));
    // settle only once the texts decoded: if decoding throws, the caller fails the request instead
    this.#settle(state);
    state.resolve({ promptIds: state.promptIds, completions });
  }

  // ---- the loop ----

  #startLoop(): void {
    if (this.#loop !== null) return;
    this.#loop = this.#run();
  }

  async #run(): Promise<void> {
    try {
      await yieldToEventLoop(); // never compute inside the caller's generate()
      while (!this.#closed && (this.#waiting.size > 0 || this.#running.length > 0)) {
        if (this.#waiting.size > 0 && this.#freeSlots.length > 0) {
          this.#prefill();
          await yieldToEventLoop();
          if (this.#closed) break;
        }
        if (this.#running.length > 0) {
          this.#decode();
          await yieldToEventLoop();
        }
      }
    } catch (error) {
      // #step catches what a forward, sampling or decoding throws; anything else is a bug: fail loudly, not silently
      this.abortAll(`RolloutEngine loop failed (${error instanceof Error ? error.message : String(error)})`);
    } finally {
      this.#loop = null; // set synchronously with the exit test, so a generate() right after starts a new loop
    }
  }

  /** Moves waiting sequences into free slots and runs their prompts; each gets its first token. */
  #prefill(): void {
    const batch: Sequence[] = [];
    let longest = 0;
    while (this.#waiting.size > 0 && this.#freeSlots.length > 0) {
      const [key, queue] = this.#waiting.entries().next().value as [string | RequestState, Sequence[]];
      const seq = queue[0] as Sequence;
      const length = Math.max(longest, seq.request.promptIds.length);
      if (batch.length > 0 && length * (batch.length + 1) > this.maxPrefillTokens) break;
      // round-robin: this key's turn is over, it goes to the back of the line (or leaves it, served)
      queue.shift();
      this.#waiting.delete(key);
      if (queue.length > 0) this.#waiting.set(key, queue);
      seq.slot = this.#freeSlots.shift() as number;
      this.#running.push(seq);
      batch.push(seq);
      longest = length;
    }
    // the n samples of a request share one prompt: it runs once (its first sample's row), the others get a copy of
    // that slot's cache and sample their first token from the same logits
    const leaders: Sequence[] = [];
    const leaderRow = new Map<RequestState, number>();
    const rowOf = batch.map((seq) => {
      let row = leaderRow.get(seq.request);
      if (row === undefined) {
        row = leaders.length;
        leaderRow.set(seq.request, row);
        leaders.push(seq);
      }
      return row;
    });
    const record = this.#recordedLayers && StepRecord.prefill(rowOf, longest, leaders); // recordRoutedExperts
    this.#step(batch, 'prefill', () => {
      const rows = leaders.length;
      const lengths = leaders.map((s) => s.request.promptIds.length);
      const ids = new BigInt64Array(rows * longest); // right-padded with id 0; the cache trims right padding
      leaders.forEach((s, b) => {
        s.request.promptIds.forEach((id, t) => {
          ids[b * longest + t] = BigInt(id);
        });
      });
      const slots = leaders.map((s) => s.slot);
      for (const seq of batch) this.#cache.reset(seq.slot);
      const device = this.#device;
      const padded = lengths.some((l) => l !== longest);
      // everything made from JavaScript data first: on a GPU an upload behind the queued forward waits for all of it
      const inputIds = torch.tensor(ids, { shape: [rows, longest], device });
      const realTokens = padded ? lengths.map((l) => Array.from({ length: longest }, (_, t) => t < l)) : null;
      const cachePlan = this.#cache.plan(slots, longest, realTokens);
      const lastPositions = [
        torch.arange(rows, { device }),
        torch.tensor(
          BigInt64Array.from(lengths, (l) => BigInt(l - 1)),
          { device },
        ),
      ];
      const noFollowers = leaders.length === batch.length;
      const rowIndex = noFollowers ? null : torch.tensor(BigInt64Array.from(rowOf, BigInt), { device });
      const followers = leaders.map(() => [] as number[]);
      batch.forEach((seq, b) => {
        const row = rowOf[b] as number;
        if (leaders[row] !== seq) followers[row]?.push(seq.slot);
      });
      const copies = noFollowers
        ? []
        : leaders.map((leader, row) => this.#cache.planCopy(leader.slot, followers[row] as number[]));
      return {
        logits: () => {
          const forward = { cache: this.#cache, slots, cachePlan, output: 'hidden' as const, ...record?.hook() };
          const hidden = this.model.forward(inputIds, forward); // [B, T, H]
          const last = hidden.index(lastPositions); // [B, H]: each row's last prompt position
          for (const copy of copies) copy.commit();
          const logits = this.model.logits(last);
          return rowIndex === null ? logits : logits.indexSelect(0, rowIndex);
        },
        record,
      };
    });
  }

  /** One token for every running sequence. */
  #decode(): void {
    const batch = [...this.#running].sort((a, b) => a.slot - b.slot);
    const record = this.#recordedLayers && new StepRecord((b) => [b, 1]); // row b: the token b fed
    this.#step(batch, 'decode', () => {
      const last = BigInt64Array.from(batch, (s) => BigInt(s.tokenIds[s.tokenIds.length - 1] as number));
      const ids = torch.tensor(last, { shape: [batch.length, 1], device: this.#device });
      const slots = batch.map((s) => s.slot);
      const plan = this.#cache.plan(slots, 1, null, { keyBucket: this.decodeKeyBucket });
      return {
        logits: () => this.model.forward(ids, { cache: this.#cache, slots, cachePlan: plan, ...record?.hook() }).select(1, 0),
        record,
        captured: {
          key: plan.shapeKey,
          inputs: [ids, plan.slotList, plan.cachePositions, plan.tokenOffsets],
          done: () => plan.commit(), // a replay runs no JavaScript of the forward, so the lengths advance here
        },
      };
    });
  }

  /** How decode steps ran so far (captured, replayed, eager); null when captureDecode is off. */
  get decodeStepStats(): DecodeStepStats | null {
    return this.#decodeSteps?.stats ?? null;
  }

  /** Prepares and runs the step's forward (→ logits [B, V]), samples one token per row, appends it and applies the stop rules. */
  #step(batch: Sequence[], what: 'prefill' | 'decode', prepare: () => StepForward & { record?: StepRecord | null }): void {
    let values: Float64Array;
    const recording: { step: StepRecord | null } = { step: null }; // recordRoutedExperts
    const topK = Math.max(0, ...batch.map((s) => s.request.topLogprobs));
    try {
      values = torch.noGrad(() =>
        torch.scope(() => {
          const step = prepare();
          recording.step = step.record ?? null;
          // the sampler's inputs before the forward: on a GPU their uploads then find the stream idle, not behind it
          const sampler = prepareSampling(
            batch.map((s) => ({ params: s.request.params, generator: s.generator })),
            this.#device,
          );
          // one read-back per step: ids (exact in float64) and log-probs [2, B]; with top log-probs also [B, K] ids
          // and [B, K] log-probs
          return runSampledStep(step, sampler, topK, this.#decodeSteps).toTypedArray() as Float64Array;
        }),
      );
      this.#steps++;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      for (const state of new Set(batch.map((s) => s.request))) {
        this.#fail(
          state,
          new GenerationError(
            'failed',
            `generate: request ${state.id} failed in a ${what} step of ${batch.length} row(s): ${message}`,
            {
              cause: error,
            },
          ),
        );
      }
      return;
    }
    const rows = batch.length;
    batch.forEach((seq, b) => {
      const request = seq.request;
      if (request.settled) return;
      const token = values[b] as number;
      const logprob = values[rows + b] as number;
      seq.tokenIds.push(token);
      seq.logprobs.push(logprob);
      recording.step?.appendTo(seq.routing, b);
      let topLogprobs: TopLogprob[] | undefined;
      if (request.topLogprobs > 0) {
        const at = 2 * rows + b * topK;
        topLogprobs = Array.from({ length: request.topLogprobs }, (_, j) => ({
          tokenId: values[at + j] as number,
          logprob: values[at + rows * topK + j] as number,
        }));
        seq.topLogprobs.push(topLogprobs);
      }
      request.onToken?.({ index: seq.index, tokenId: token, logprob, ...(topLogprobs ? { topLogprobs } : {}) });
      try {
        if (request.stopIds.has(token)) this.#finish(seq, { reason: 'stop', stopReason: token });
        else {
          const stop = seq.matcher?.push(token) ?? null;
          if (stop !== null) this.#finish(seq, { reason: 'stop', stopReason: stop });
          else if (seq.tokenIds.length >= request.maxTokens) this.#finish(seq, { reason: 'length', stopReason: null });
        }
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        this.#fail(
          request,
          new GenerationError('failed', `generate: request ${request.id} failed decoding its text: ${message}`, { cause: error }),
        );
      }
    });
  }
}

/** A request's line in the admission round-robin: the fairShareKey it asked for, else the request itself. */
function shareKey(state: RequestState): string | RequestState {
  return state.fairShareKey ?? state;
}

/** config.json's eos_token_id (one id or a list). */
function configEosIds(model: CausalLM): number[] {
  const eos = model.config.raw.eos_token_id;
  if (typeof eos === 'number') return [eos];
  return Array.isArray(eos) ? eos.filter((v): v is number => typeof v === 'number') : [];
}
