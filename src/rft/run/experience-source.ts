// Where the trainer loop's experiences come from: the experience buffer (in memory, priority replay or the shared
// SQLite file) seen through staleness control, SQLite cursor tracking and — while it waits for rollouts —
// answers to the explorer's requests for weights (sync_style explorer_driven). Sample strategies read it.
import { BufferTimeoutError, type ExperienceBuffer, SqliteBuffer } from '../buffer/index.js';
import type { Experience } from '../experience.js';

export interface SourceReadOptions {
  timeoutMs: number;
  /** Fewer than `count` are accepted down to this many at the deadline (default: count). */
  minCount?: number;
}

/** An async, bounded experience source (a sample strategy's input). */
export interface ExperienceSource {
  /** Up to `count` experiences; fewer only when the writers finished; BufferTimeoutError at the deadline. */
  read(count: number, options: SourceReadOptions): Promise<Experience[]>;
}

export interface BufferSourceOptions {
  buffer: ExperienceBuffer;
  /** synchronizer.max_staleness: experiences more than this many versions behind the trainer are dropped. */
  maxStaleness: number | null;
  /** While a read waits, the explorer's weight requests are answered (explorer_driven). */
  answerRequests: (() => Promise<void>) | null;
}

/** Slice of a waiting read between two looks at the explorer's requests for weights (explorer_driven). */
const REQUEST_CHECK_MS = 250;

export class BufferExperienceSource implements ExperienceSource {
  readonly #options: BufferSourceOptions;
  /** The trainer's weights version (experiences' staleness is measured against it). */
  modelVersion = 0;
  /** The SQLite read position after the last read (committed with the next checkpoint). */
  cursor: number | null = null;
  /** Counters of the current step (reset by startStep). */
  staleDropped = 0;
  delivered = 0;

  constructor(options: BufferSourceOptions) {
    this.#options = options;
  }

  startStep(modelVersion: number): void {
    this.modelVersion = modelVersion;
    this.staleDropped = 0;
    this.delivered = 0;
  }

  /** Makes the reads so far durable (a checkpoint was written): the SQLite buffer commits its read position. */
  commit(): void {
    if (this.#options.buffer instanceof SqliteBuffer && this.cursor !== null) this.#options.buffer.commit(this.cursor);
  }

  async read(count: number, options: SourceReadOptions): Promise<Experience[]> {
    const read = await this.#readRaw(count, options);
    const maxStaleness = this.#options.maxStaleness;
    const fresh =
      maxStaleness === null
        ? read
        : read.filter((e) => this.modelVersion - (e.info.modelVersion ?? this.modelVersion) <= maxStaleness);
    this.staleDropped += read.length - fresh.length;
    this.delivered += read.length;
    return fresh;
  }

  async #readRaw(count: number, options: SourceReadOptions): Promise<Experience[]> {
    const { buffer, answerRequests } = this.#options;
    const once = async (timeoutMs: number): Promise<Experience[]> => {
      const readOptions = { timeoutMs, ...(options.minCount !== undefined ? { minCount: options.minCount } : {}) };
      if (!(buffer instanceof SqliteBuffer)) return buffer.read(count, readOptions);
      const batch = await buffer.readBatch(count, readOptions);
      this.cursor = batch.cursor;
      return batch.experiences;
    };
    if (answerRequests === null) return once(options.timeoutMs);
    // keep answering the explorer's requests for weights while waiting: it may be waiting on one
    const deadline = Date.now() + options.timeoutMs;
    for (;;) {
      await answerRequests();
      try {
        return await once(Math.max(1, Math.min(REQUEST_CHECK_MS, deadline - Date.now())));
      } catch (error) {
        if (!(error instanceof BufferTimeoutError) || Date.now() >= deadline) throw error;
      }
    }
  }
}

/** A source over a fixed array (a dataset's batch for one step). */
export function sourceFromArray(experiences: readonly Experience[]): ExperienceSource {
  let position = 0;
  return {
    read: async (count) => {
      const out = experiences.slice(position, position + Math.max(0, count));
      position += out.length;
      return out;
    },
  };
}
