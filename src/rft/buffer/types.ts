// The experience buffer interface shared by the in-memory queue, the priority replay buffer and the durable SQLite
// buffer (Trinity-RFT's `storage_type: queue | sql`, with `replay_buffer.enable` for the priority queue). An explorer
// writes experiences, a trainer reads batches; every wait has a deadline and a BufferTimeoutError that names the
// buffer and what it waited for.
import type { Experience } from '../experience.js';

export interface ReadOptions {
  /** How long to wait for `n` experiences. */
  timeoutMs: number;
  /**
   * At the deadline, return what is there if it is at least this many (Trinity returns an incomplete batch after
   * `max_read_timeout`); below it the read throws BufferTimeoutError. Default: n (a short batch is an error).
   */
  minCount?: number;
}

export interface WriteOptions {
  /** How long a writer waits for free space in a bounded buffer (default: the buffer's writeTimeoutMs). */
  timeoutMs?: number;
}

export interface ExperienceBuffer {
  /** Name used in errors and logs. */
  readonly name: string;
  /** Experiences that a read could return now (or soon, for a replay buffer's cooling items: see its docs). */
  readonly size: number;
  /** Adds experiences; resolves with how many were stored (duplicates or low-priority items may be dropped). */
  write(experiences: readonly Experience[], options?: WriteOptions): Promise<number>;
  /**
   * Waits until `n` experiences are available and returns them, or returns fewer (possibly none) once the writer has
   * finished and the buffer is drained.
   */
  read(n: number, options: ReadOptions): Promise<Experience[]>;
  /** The writer is done: readers get what is left, then short or empty batches instead of waiting. */
  finishWriting(): Promise<void>;
  /** Releases the buffer; pending waits fail with BufferClosedError. */
  close(): Promise<void>;
}

export class BufferTimeoutError extends Error {
  constructor(
    readonly buffer: string,
    readonly waitedFor: string,
    readonly timeoutMs: number,
  ) {
    super(`buffer '${buffer}': timed out after ${timeoutMs} ms waiting for ${waitedFor}`);
    this.name = 'BufferTimeoutError';
  }
}

export class BufferClosedError extends Error {
  constructor(
    readonly buffer: string,
    detail: string,
  ) {
    super(`buffer '${buffer}' is closed: ${detail}`);
    this.name = 'BufferClosedError';
  }
}

export function checkReadArgs(buffer: string, n: number, options: ReadOptions): number {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`buffer '${buffer}': read size must be a positive integer, got ${n}`);
  if (!(options.timeoutMs >= 0)) throw new RangeError(`buffer '${buffer}': timeoutMs must be >= 0, got ${options.timeoutMs}`);
  const minCount = options.minCount ?? n;
  if (!Number.isInteger(minCount) || minCount < 0 || minCount > n) {
    throw new RangeError(`buffer '${buffer}': minCount must be an integer in [0, ${n}], got ${minCount}`);
  }
  return minCount;
}

/**
 * Wake-ups for tasks waiting on a buffer's state. `wait(deadline)` resolves true when notified, false at the
 * deadline; `fail(error)` rejects every pending wait (close()).
 */
export class Waiters {
  readonly #pending = new Set<{ resolve: (notified: boolean) => void; reject: (error: Error) => void }>();

  wait(deadlineMs: number): Promise<boolean> {
    return new Promise((resolve, reject) => {
      const entry = {
        resolve: (notified: boolean) => {
          clearTimeout(timer);
          this.#pending.delete(entry);
          resolve(notified);
        },
        reject: (error: Error) => {
          clearTimeout(timer);
          this.#pending.delete(entry);
          reject(error);
        },
      };
      // setTimeout fires at once for delays above 2^31 - 1 ms: a longer wait is that long (and waits again)
      const timer = setTimeout(() => entry.resolve(false), Math.min(2 ** 31 - 1, Math.max(0, deadlineMs - Date.now())));
      this.#pending.add(entry);
    });
  }

  notifyAll(): void {
    for (const entry of [...this.#pending]) entry.resolve(true);
  }

  fail(error: Error): void {
    for (const entry of [...this.#pending]) entry.reject(error);
  }
}
