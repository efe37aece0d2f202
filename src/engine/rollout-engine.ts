// The rollout engine: continuous batching over a preallocated KV cache.
//
// An engine owns a KV cache of `slots` sequences (./sequence-slots.ts: slots of maxLength positions, or with kvCache
// 'paged' block tables, a prefix cache, and preemption when blocks run out). A request expands into n sequences; a
// sequence waits for a slot (and its blocks), is prefilled (past its cached prefix), decodes one token per step with
// every other running sequence, and leaves as soon as it finishes. Waiting sequences start round-robin over
// fair-share keys (a request's own, or the fairShareKey it names; within a key first come first served), so a
// request with many samples gets one slot per turn and a small request behind it waits one turn. One step:
//
//   prefill   preempted sequences recompute their tokens (nothing sampled), else waiting sequences take slots
//             (lowest first) and their prompts run as one right-padded forward (at most maxPrefillTokens padded
//             tokens; ./prefill-batch.ts); the last position's logits give each its first token. The n samples of a
//             request share the prompt's forward (planCopy: the slot copied, or the blocks shared) and draw with
//             their own generators. With chunkedPrefill a long prompt runs in chunks, one per step, so the decode
//             steps of the running sequences go on in between
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
// This file is the loop: admission, prefill, decode, settle. Neighbours: ./types.ts (public types), ./engine-options.ts,
// ./prepare-request.ts (a request checked), ./request-state.ts (a request and its sequences), ./sampled-step.ts (a
// step's forward and sampling, eager or captured), ./score.ts (score()), ./vision-requests.ts (images: Qwen2.5-VL,
// Qwen3-VL).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { type CausalLM, type LoadModelOptions, VisionLanguageModel } from '../model/index.js';
import { type ChatInputMessage, Tokenizer } from '../tokenizer/index.js';
import * as torch from '../torch/index.js';
import { type ChatOptions, type ChatResult, chat } from './chat.js';
import { admitRequest } from './prepare-request.js';
import { recordedLayers, SequenceRouting, StepRecord } from './routed-experts.js';
import {
  completionOf,
  createRequestState,
  type Finish,
  type RequestState,
  requestProgress,
  type Sequence,
  acceptSampledToken,
  shareKey,
  watchAbortAndTimeout,
} from './request-state.js';
import { type PrefillBatch, PrefillBatcher } from './prefill-batch.js';
import { rightPadded, runSampledStep, type StepForward } from './sampled-step.js';
import { prepareSampling } from './sampling.js';
import { checkScoreRequest, scoreTokens } from './score.js';
import { syncModelWeights, syncModelWeightsFromDir } from './weight-sync.js';
import { DecodeSteps, type DecodeStepStats } from './decode-steps.js';
import {
  cacheSettings,
  checkCacheFitsModel,
  configEosIds,
  DEFAULT_DECODE_KEY_BUCKET,
  DEFAULT_REQUEST_TIMEOUT_MS,
  positiveOption,
  prefillSettings,
} from './engine-options.js';
import { SequenceSlots } from './sequence-slots.js';
import { cacheKeys, loadEngineModel, releaseVisionRequest, VisionInputs } from './vision-requests.js';
import {
  type GenerateRequest,
  type GenerateResult,
  GenerationError,
  type RolloutEngineOptions,
  type RolloutEngineStats,
  type ScoreOptions,
  type ScoreResult,
} from './types.js';

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
  readonly chunkedPrefill: boolean;
  readonly decodeKeyBucket: number;
  readonly eosTokenIds: readonly number[];
  readonly requestTimeoutMs: number;
  readonly #ownsModel: boolean;
  readonly #cache: SequenceSlots;
  /** Which sequences a prefill step runs, and how much of each prompt (partial prefills with chunkedPrefill). */
  readonly #prefills: PrefillBatcher;
  /** Captured decode steps (null: captureDecode off). */
  readonly #decodeSteps: DecodeSteps | null;
  /** The model's device: inputs are created there. */
  readonly #device: string;
  /** Preempted sequences (paged cache), to be recomputed before any waiting sequence starts. */
  #preempted: Sequence[] = [];
  /** Prompt (and recomputed) positions run through prefill forwards, pads and prefix-cache hits not counted. */
  #prefillTokens = 0;
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
  /** A vision-language model's images (null: a text model); chat() reads its image token and processor. */
  readonly vision: VisionInputs | null;

  constructor(model: CausalLM | VisionLanguageModel, options: RolloutEngineOptions = {}) {
    this.vision = model instanceof VisionLanguageModel ? new VisionInputs(model, options) : null;
    model = this.model = this.vision?.model.language ?? (model as CausalLM);
    this.tokenizer = options.tokenizer ?? null;
    const layout = cacheSettings(model.config, options);
    ({ slots: this.slots, maxLength: this.maxLength } = layout);
    this.vocabSize = model.config.vocabSize;
    ({ maxPrefillTokens: this.maxPrefillTokens, chunked: this.chunkedPrefill } = prefillSettings(options, this.slots));
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
    if (options.batchInvariant !== undefined) model.setBatchInvariant(options.batchInvariant);
    // batch-invariant attention takes keys in eights (a bucket of 8 spares it padding the keys each step)
    const bucket = positiveOption('decodeKeyBucket', options.decodeKeyBucket ?? (capture ? DEFAULT_DECODE_KEY_BUCKET : 1));
    this.decodeKeyBucket = model.batchInvariant && options.decodeKeyBucket === undefined ? Math.ceil(bucket / 8) * 8 : bucket;
    this.#device = model.parameters().get('model.embed_tokens.weight')?.device ?? 'cpu';
    const onCuda = this.#device.startsWith('cuda');
    if (options.cudaGraphs === true && !(capture && onCuda))
      throw new RangeError(
        `RolloutEngine: cudaGraphs needs captureDecode and a model on a CUDA device (captureDecode ${capture}, model on ${this.#device})`,
      );
    this.#decodeSteps = capture ? new DecodeSteps({ cudaGraphs: options.cudaGraphs ?? onCuda }) : null;
    this.#cache = new SequenceSlots(model, layout);
    this.#prefills = new PrefillBatcher(this.#cache, { maxPrefillTokens: this.maxPrefillTokens, chunked: this.chunkedPrefill });
    if (capture) model.refreshPackedWeights(); // packed now, not inside the first captured steps
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
    checkCacheFitsModel(dir, engineOptions, dtype, device); // before any weight is read
    const tokenizer =
      options.tokenizer !== undefined ? options.tokenizer : existsSync(join(dir, 'tokenizer.json')) ? Tokenizer.load(dir) : null;
    // the inference layout (fused, column-major projections) decodes faster; weight syncs copy into it unchanged
    const { model, options: modelOptions } = loadEngineModel(dir, { ...(dtype ? { dtype } : {}), ...(device ? { device } : {}) });
    try {
      return new RolloutEngine(model, { ...engineOptions, ...modelOptions, tokenizer, ownsModel: true });
    } catch (error) {
      model.dispose();
      throw error;
    }
  }

  /** What the engine is doing now. */
  get stats(): RolloutEngineStats {
    return {
      requests: this.#requests.size,
      running: this.#running.length,
      waiting: [...this.#waiting.values()].reduce((sum, queue) => sum + queue.length, this.#preempted.length),
      freeSlots: this.#cache.freeSlots,
      steps: this.#steps,
      closed: this.#closed,
      prefillTokens: this.#prefillTokens,
      prefillChunks: this.#prefills.prefillChunks,
      preemptions: this.#cache.preemptions,
      kvCache: this.#cache.pagedStats,
    };
  }

  /**
   * Generates n completions of one prompt; resolves when all of them finished. A request that fails a check rejects
   * with GenerationError('invalid') before anything runs (a request with images: once they are decoded).
   */
  async generate(request: GenerateRequest): Promise<GenerateResult> {
    // throws (rejects) a GenerationError: 'closed', 'aborted', or 'invalid' naming a failed check
    const { prepared, images } = admitRequest(request, this);
    return new Promise<GenerateResult>((resolve, reject) => {
      const state = createRequestState(prepared, request, this.#nextRequestId++, { resolve, reject }, this.tokenizer);
      SequenceRouting.attach(state.sequences, this.#recordedLayers, this.model.config); // recordRoutedExperts
      state.cleanup = watchAbortAndTimeout(state, request.signal, request.timeoutMs ?? this.requestTimeoutMs, (error) =>
        this.#fail(state, error),
      );
      this.#requests.add(state);
      if (images === null) this.#enqueue(state);
      else
        images.then(
          (vision) => (state.settled ? releaseVisionRequest(vision) : this.#enqueue(Object.assign(state, { vision }))),
          (error: Error) => this.#fail(state, new GenerationError('invalid', error.message, { cause: error })),
        );
    });
  }

  #enqueue(state: RequestState): void {
    const queue = this.#waiting.get(shareKey(state));
    if (queue) queue.push(...state.sequences);
    else this.#waiting.set(shareKey(state), [...state.sequences]);
    this.#startLoop();
  }

  /** Chat completion with the tokenizer's chat template; see ./chat.ts. */
  chat(messages: readonly ChatInputMessage[], options: ChatOptions = {}): Promise<ChatResult> {
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
    return this.#sync('syncWeights', weights);
  }

  /** As syncWeights, from a Hugging Face folder (a checkpoint): a folder that fails a check changes nothing. */
  syncWeightsFromDir(dir: string, streamBufferBytes?: number): number {
    return this.#sync('syncWeightsFromDir', dir, streamBufferBytes);
  }

  /** A copy, then the packed copies repacked in place (captured decode steps hold them) and the prefix cache emptied. */
  #sync(what: string, from: ReadonlyMap<string, torch.Tensor> | string, streamBufferBytes?: number): number {
    this.#checkOpen(what);
    const copied = this.vision
      ? this.vision.syncWeights(from)
      : typeof from === 'string'
        ? syncModelWeightsFromDir(this.model, from, streamBufferBytes)
        : syncModelWeights(this.model, from);
    this.model.refreshPackedWeights();
    this.#cache.invalidatePrefixCache();
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
    if (!this.#cache.cache.isDisposed) {
      this.#cache.cache.dispose();
      if (this.vision) this.vision.dispose(this.#ownsModel);
      else if (this.#ownsModel) this.model.dispose();
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
    releaseVisionRequest(state.vision);
    this.#requests.delete(state);
    const queue = this.#waiting.get(shareKey(state));
    if (queue) {
      const left = queue.filter((s) => s.request !== state);
      if (left.length > 0) this.#waiting.set(shareKey(state), left);
      else this.#waiting.delete(shareKey(state));
    }
    this.#preempted = this.#preempted.filter((s) => s.request !== state);
    this.#prefills.drop(state);
    for (const s of state.sequences) if (s.slot !== -1) this.#release(s);
  }

  #release(seq: Sequence): void {
    this.#running = this.#running.filter((s) => s !== seq);
    this.#cache.release(seq);
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
      const pending = () => this.#waiting.size + this.#running.length + this.#preempted.length + this.#prefills.partialPrefills;
      while (!this.#closed && pending() > 0) {
        // preempted sequences start again before any waiting one (partial prefills go on when none can)
        const started = this.#preempted.length > 0 ? this.#recompute() || this.#prefill(false) : this.#prefill();
        if (started) await yieldToEventLoop();
        if (this.#closed) break;
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

  /**
   * A prefill step: partial prefills go on (chunkedPrefill), then (with `admitNew`) waiting sequences take free slots,
   * their prompts run past what the prefix cache holds (./prefill-batch.ts), and each whose prompt is complete gets
   * its first token. False when nothing could run (no free slot, not enough free blocks for the next in line).
   */
  #prefill(admitNew = true): boolean {
    const next = this.#prefills.next(this.#waiting, this.#running.length, admitNew);
    if (next === null) return false;
    // leaders: the forward's rows; batch: the sequences that sample (a leader whose prompt is complete, its samples)
    const { rows: leaders, ids: suffixes, keys, held, longest, sampled: batch, rowOf } = next;
    this.#running.push(...batch);
    this.#prefillTokens += suffixes.reduce((sum, ids) => sum + ids.length, 0);
    if (batch.length === 0) {
      this.#forwardOnly(next, 'prefill');
      return true;
    }
    const record = this.#recordedLayers && StepRecord.prefill(rowOf, longest, leaders); // recordRoutedExperts
    const prepare = () => {
      const rows = leaders.length;
      const lengths = suffixes.map((ids) => ids.length);
      const { inputIds, realTokens } = rightPadded(suffixes, longest, this.#device);
      const slots = leaders.map((s) => s.slot);
      // everything made from JavaScript data first: on a GPU an upload behind the queued forward waits for all of it
      const cache = this.#cache.cache;
      const cachePlan = cache.plan(slots, longest, realTokens, { tokenIds: keys });
      const device = this.#device;
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
          const forward = { cache, slots, cachePlan, output: 'hidden' as const, ...record?.hook() };
          const hidden = this.vision?.hidden(inputIds, leaders, lengths, forward, held) ?? this.model.forward(inputIds, forward);
          const last = hidden.index(lastPositions); // [B, H]: each row's last prompt position
          for (const copy of copies) copy.commit();
          const logits = this.model.logits(last);
          return rowIndex === null ? logits : logits.indexSelect(0, rowIndex);
        },
        record,
      };
    };
    this.#step(batch, 'prefill', prepare, next.partial);
    return true;
  }

  /**
   * Starts preempted sequences again (paged cache): their prompt and tokens so far, but the last (the next decode step
   * feeds it), run into the cache past the prefix cache's hit, nothing sampled. False when none could start.
   */
  #recompute(): boolean {
    const batch: Sequence[] = [];
    const suffixes: number[][] = [];
    let longest = 0;
    for (const seq of this.#preempted) {
      const ids = [...seq.request.promptIds, ...seq.tokenIds.slice(0, -1)];
      const keys = cacheKeys(seq, 1);
      const length = Math.max(longest, ids.length - this.#cache.cachedPrefix(keys));
      if (this.#cache.freeSlots === 0 || (batch.length > 0 && length * (batch.length + 1) > this.maxPrefillTokens)) break;
      const cached = this.#cache.start(seq, keys);
      if (cached === null) break;
      batch.push(seq);
      suffixes.push(ids.slice(cached));
      longest = length;
    }
    if (batch.length === 0) return false;
    this.#preempted = this.#preempted.slice(batch.length);
    this.#running.push(...batch);
    this.#prefillTokens += suffixes.reduce((sum, ids) => sum + ids.length, 0);
    const keys = batch.map((s, b) => cacheKeys(s, 1).slice(-(suffixes[b] as number[]).length));
    this.#forwardOnly({ rows: batch, ids: suffixes, keys, held: batch.map(() => 1), longest }, 'recompute');
    return true;
  }

  /** A forward that runs `ids` into the rows' slots and samples nothing (recomputed sequences, prompt chunks). */
  #forwardOnly(part: Pick<PrefillBatch, 'rows' | 'ids' | 'keys' | 'held' | 'longest'>, what: string): void {
    const { rows, ids, keys, held, longest } = part;
    try {
      torch.noGrad(() =>
        torch.scope(() => {
          const { inputIds, realTokens } = rightPadded(ids, longest, this.#device);
          const slots = rows.map((s) => s.slot);
          const cache = this.#cache.cache;
          const cachePlan = cache.plan(slots, longest, realTokens, { tokenIds: keys });
          const forward = { cache, slots, cachePlan, output: 'hidden' as const };
          const lengths = ids.map((row) => row.length);
          this.vision?.hidden(inputIds, rows, lengths, forward, held) ?? this.model.forward(inputIds, forward);
        }),
      );
    } catch (error) {
      this.#failStep(rows, what, error);
    }
  }

  /** One token for every running sequence (paged: after taking the blocks it needs, preempting if they run out). */
  #decode(): void {
    const preempted = this.#cache.growForDecode(this.#running);
    if (preempted.length > 0) {
      this.#running = this.#running.filter((s) => !preempted.includes(s));
      // the earliest started first; a partial prefill stays with #prefills, which starts it again
      this.#preempted.push(...preempted.filter((s) => !this.#prefills.isPartial(s)).reverse());
      if (this.#running.length === 0) return;
    }
    const batch = [...this.#running].sort((a, b) => a.slot - b.slot);
    const record = this.#recordedLayers && new StepRecord((b) => [b, 1]); // row b: the token b fed
    this.#step(batch, 'decode', () => {
      const lastTokens = batch.map((s) => [s.tokenIds[s.tokenIds.length - 1] as number]);
      const ids = torch.tensor(
        BigInt64Array.from(lastTokens, ([id]) => BigInt(id as number)),
        {
          shape: [batch.length, 1],
          device: this.#device,
        },
      );
      const slots = batch.map((s) => s.slot);
      const cache = this.#cache.cache;
      const plan = cache.plan(slots, 1, null, { keyBucket: this.decodeKeyBucket, tokenIds: lastTokens });
      const rope = this.vision?.decodeRope(batch, this.#device); // M-RoPE: text position + rope delta
      return {
        logits: () =>
          this.model.forward(ids, { cache, slots, cachePlan: plan, ...record?.hook(), ...rope?.forward() }).select(1, 0),
        record,
        captured: {
          key: plan.shapeKey,
          inputs: [ids, ...(rope?.inputs ?? []), ...plan.stepInputs],
          done: () => plan.commit(), // a replay runs no JavaScript of the forward, so the lengths advance here
        },
      };
    });
  }

  /** How decode steps ran so far (captured, replayed, eager); null when captureDecode is off. */
  get decodeStepStats(): DecodeStepStats | null {
    return this.#decodeSteps?.stats ?? null;
  }

  /** Fails every request with a sequence in a step whose forward (or sampling) threw. */
  #failStep(batch: readonly Sequence[], what: string, error: unknown): void {
    const message = error instanceof Error ? error.message : String(error);
    for (const state of new Set(batch.map((s) => s.request))) {
      const text = `generate: request ${state.id} failed in a ${what} step of ${batch.length} row(s): ${message}`;
      this.#fail(state, new GenerationError('failed', text, { cause: error }));
    }
  }

  /**
   * Prepares and runs the step's forward (→ logits [B, V]), samples one token per row, appends it and applies the stop
   * rules. If it throws, the requests of `batch` and of `unsampledRows` (prompt chunks in the forward) fail.
   */
  #step(
    batch: Sequence[],
    what: 'prefill' | 'decode',
    prepare: () => StepForward & { record?: StepRecord | null },
    unsampledRows: readonly Sequence[] = [],
  ): void {
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
      this.#failStep([...batch, ...unsampledRows], what, error);
      return;
    }
    const rows = batch.length;
    batch.forEach((seq, b) => {
      const request = seq.request;
      if (request.settled) return;
      try {
        // recorded before the stop checks, which may end the request
        const finish = acceptSampledToken(seq, values, b, rows, topK, () => recording.step?.appendTo(seq.routing, b));
        if (finish !== null) this.#finish(seq, finish);
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
