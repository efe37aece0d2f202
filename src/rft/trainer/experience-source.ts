// The trainer's experience source in modes both and train: the experience buffer (in memory, priority replay or the
// shared SQLite file) seen through staleness control (synchronizer.max_staleness), SQLite cursor tracking and —
// while it waits for rollouts — answers to the explorer's requests for weights (sync_style explorer_driven). Sample
// strategies read it with the ExperienceSource contract of src/rft/buffer/source.ts.
import {
  BufferTimeoutError,
  type ExperienceBuffer,
  type ExperienceSource,
  isSharedBuffer,
  type SourceReadOptions,
} from '../buffer/index.js';
import type { Experience } from '../experience.js';

export interface BufferSourceOptions {
  buffer: ExperienceBuffer;
  /** synchronizer.max_staleness: experiences more than this many versions behind the trainer are dropped. */
  maxStaleness: number | null;
  /** While a read waits, the explorer's weight requests are answered (explorer_driven). */
  answerRequests: (() => Promise<void>) | null;
  /**
   * Mode both: true once the explorer has written every explore step that should have filled train step `step`
   * (see stage.ts). A read then takes what is there instead of waiting for rollouts that will never come (a step
   * whose workflows failed or whose rollouts were rejected): a short batch, named in the step's metrics.
   */
  stepFilled: ((step: number) => boolean) | null;
  /**
   * Mode both: while the explorer waits for the weights that train step `step` makes (sync_style fixed), it writes
   * nothing more before that step is trained. Then this returns the error a read that cannot fill the step fails
   * with at once (given the `buffered` experiences the step found), rather than wait max_read_timeout for
   * experiences that cannot come; null while the explorer does not wait on `step`.
   */
  explorerWaitsOn?: ((step: number) => ((buffered: number) => string) | null) | null;
  /**
   * The stage's stop signal: a read waiting for experiences ends with none when it aborts (Ctrl-C while an online
   * trainer waits for traffic), taking nothing from the buffer.
   */
  signal?: AbortSignal;
}

/** Slice of a waiting read between two looks at the explorer's requests for weights (explorer_driven). */
const REQUEST_CHECK_MS = 250;

export class BufferExperienceSource implements ExperienceSource {
  readonly name: string;
  readonly #options: BufferSourceOptions;
  /** Fresh experiences read by a read that then timed out: handed out first by the next read (nothing is lost). */
  #held: Experience[] = [];
  /** The trainer's weights version (experiences' staleness is measured against it). */
  modelVersion = 0;
  /** The shared buffer's read position after the last read (committed with the next checkpoint). */
  cursor: number | null = null;
  /** Counters of the current step (reset by startStep). */
  staleDropped = 0;
  delivered = 0;
  /** The step's read ended short because the explorer's steps for it were complete (not because writers finished). */
  shortStep = false;
  /** Why the step's reads ended with fewer than they asked for (null: they did not). */
  shortBecause: string | null = null;

  constructor(options: BufferSourceOptions) {
    this.#options = options;
    this.name = options.buffer.name;
  }

  startStep(modelVersion: number): void {
    this.modelVersion = modelVersion;
    this.staleDropped = 0;
    this.delivered = 0;
    this.shortStep = false;
    this.shortBecause = null;
  }

  /** Makes the reads so far durable (a checkpoint was written): the shared buffer commits its read position. */
  async commit(): Promise<void> {
    if (isSharedBuffer(this.#options.buffer) && this.cursor !== null) await this.#options.buffer.commit(this.cursor);
  }

  #isFresh(e: Experience): boolean {
    const maxStaleness = this.#options.maxStaleness;
    return maxStaleness === null || this.modelVersion - (e.info.modelVersion ?? this.modelVersion) <= maxStaleness;
  }

  /**
   * `count` fresh experiences; stale ones are dropped and replaced by reading on (the buffer contract holds: fewer only
   * when the writers finished, or at the deadline down to minCount; a timeout below it keeps what was read).
   */
  async read(count: number, options: SourceReadOptions): Promise<Experience[]> {
    const minCount = options.minCount ?? count;
    const deadline = Date.now() + options.timeoutMs;
    const out = this.#held.splice(0, count);
    while (out.length < count) {
      const want = count - out.length;
      let read: Experience[];
      try {
        read = await this.#readRaw(want, Math.max(0, deadline - Date.now()), Math.max(0, minCount - out.length), out.length);
      } catch (error) {
        if (error instanceof BufferTimeoutError) this.#held.unshift(...out);
        throw error;
      }
      const fresh = read.filter((e) => this.#isFresh(e));
      this.staleDropped += read.length - fresh.length;
      out.push(...fresh);
      // short: the writers finished and the buffer is drained, the explorer's steps for this one are complete, or
      // the deadline passed with at least minCount
      if (out.length < count && (read.length < want || Date.now() >= deadline)) {
        this.shortBecause = this.shortStep
          ? 'the explore steps that feed it are written (rollouts failed, or were rejected or filtered out)'
          : read.length < want && Date.now() < deadline
            ? 'the explorer finished'
            : `nothing more came within max_read_timeout (${options.timeoutMs / 1000} s)`;
        break;
      }
    }
    this.delivered += out.length;
    return out;
  }

  async #readRaw(count: number, timeoutMs: number, minCount: number, alreadyRead: number): Promise<Experience[]> {
    const { buffer, answerRequests, stepFilled, explorerWaitsOn, signal } = this.#options;
    const filled = () => stepFilled?.(this.modelVersion + 1) === true;
    // what is there now, down to none (the explorer will write nothing more for this step)
    const readNow = async (n: number): Promise<Experience[]> => {
      if (!isSharedBuffer(buffer)) return buffer.read(n, { timeoutMs: 0, minCount: 0 });
      const batch = await buffer.readBatch(n, { timeoutMs: 0, minCount: 0 });
      this.cursor = batch.cursor;
      return batch.experiences;
    };
    // a slice that is not the last one accepts no short batch: only the read's own deadline does
    const once = async (sliceMs: number, last: boolean): Promise<Experience[]> => {
      const readOptions = { timeoutMs: sliceMs, minCount: last ? Math.min(count, minCount) : count };
      if (!isSharedBuffer(buffer)) return buffer.read(count, readOptions);
      const batch = await buffer.readBatch(count, readOptions);
      this.cursor = batch.cursor;
      return batch.experiences;
    };
    if (answerRequests === null && stepFilled === null && !explorerWaitsOn && signal === undefined) return once(timeoutMs, true);
    // waiting in slices: between two, answer the explorer's requests for weights (it may be waiting on one), look
    // whether the explorer has finished the steps that feed this one or waits for this one's weights, and whether
    // the stage was stopped
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (signal?.aborted) return [];
      await answerRequests?.();
      if (filled()) {
        const there = await readNow(count);
        if (there.length < count) this.shortStep = true;
        return there;
      }
      // the explorer waits for this step's weights: what the buffer holds now is all the step can get
      const deadlock = explorerWaitsOn?.(this.modelVersion + 1) ?? null;
      if (deadlock) {
        const there = await readNow(count);
        if (there.length === count) return there;
        throw new Error(deadlock(this.delivered + alreadyRead + there.length));
      }
      const remaining = Math.max(0, deadline - Date.now());
      const last = remaining <= REQUEST_CHECK_MS;
      try {
        const read = await once(Math.min(REQUEST_CHECK_MS, remaining), last);
        // the explorer wrote the steps that feed this one while the read waited, and then finished: a short step,
        // not an exhausted source (the loop would end a step early)
        if (read.length < count && filled()) this.shortStep = true;
        return read;
      } catch (error) {
        if (!(error instanceof BufferTimeoutError)) throw error;
        // the last slice's own timeout is what was left of the read's: the error names the whole wait
        if (last) throw new BufferTimeoutError(error.buffer, error.waitedFor, timeoutMs);
      }
    }
  }
}
