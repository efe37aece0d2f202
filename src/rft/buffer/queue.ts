// In-memory FIFO experience queue with a capacity (Trinity-RFT's `storage_type: queue` without replay): writers
// wait while it is full (back-pressure on the explorer), readers wait for a full batch. Both waits have deadlines.
import type { Experience } from '../experience.js';
import {
  BufferClosedError,
  BufferTimeoutError,
  checkReadArgs,
  type ExperienceBuffer,
  type ReadOptions,
  Waiters,
  type WriteOptions,
} from './types.js';

export interface QueueBufferOptions {
  name?: string;
  /** Most experiences held at once (Trinity's `capacity`, default 10000). */
  capacity?: number;
  /** How long a write waits for free space when the call gives no timeout (default 60 s). */
  writeTimeoutMs?: number;
}

export class QueueBuffer implements ExperienceBuffer {
  readonly name: string;
  readonly capacity: number;
  readonly writeTimeoutMs: number;
  #items: Experience[] = [];
  #finished = false;
  #closed = false;
  /** Readers wait here for items; writers wait here for space. */
  readonly #readers = new Waiters();
  readonly #writers = new Waiters();

  constructor(options: QueueBufferOptions = {}) {
    this.name = options.name ?? 'queue';
    this.capacity = options.capacity ?? 10000;
    this.writeTimeoutMs = options.writeTimeoutMs ?? 60_000;
    if (!Number.isInteger(this.capacity) || this.capacity < 1) {
      throw new RangeError(`buffer '${this.name}': capacity must be a positive integer, got ${this.capacity}`);
    }
  }

  get size(): number {
    return this.#items.length;
  }

  async write(experiences: readonly Experience[], options: WriteOptions = {}): Promise<number> {
    this.#checkWritable();
    const timeoutMs = options.timeoutMs ?? this.writeTimeoutMs;
    const deadline = Date.now() + timeoutMs;
    let written = 0;
    while (written < experiences.length) {
      const free = this.capacity - this.#items.length;
      if (free > 0) {
        const chunk = experiences.slice(written, written + free);
        this.#items.push(...chunk);
        written += chunk.length;
        this.#readers.notifyAll();
        continue;
      }
      if (Date.now() >= deadline || !(await this.#writers.wait(deadline))) {
        if (this.capacity - this.#items.length > 0) continue;
        throw new BufferTimeoutError(
          this.name,
          `free space to write (${written} of ${experiences.length} experiences written; ${this.#items.length}/${this.capacity} full)`,
          timeoutMs,
        );
      }
      this.#checkWritable();
    }
    return written;
  }

  async read(n: number, options: ReadOptions): Promise<Experience[]> {
    const minCount = checkReadArgs(this.name, n, options);
    if (n > this.capacity) {
      throw new RangeError(`buffer '${this.name}': cannot read ${n} at once from a queue of capacity ${this.capacity}`);
    }
    const deadline = Date.now() + options.timeoutMs;
    for (;;) {
      if (this.#closed) throw new BufferClosedError(this.name, `read of ${n} experiences`);
      if (this.#items.length >= n || this.#finished) return this.#take(n);
      if (Date.now() >= deadline || !(await this.#readers.wait(deadline))) {
        if (this.#items.length >= n || this.#finished) return this.#take(n);
        if (this.#items.length >= minCount && !this.#closed) return this.#take(n);
        throw new BufferTimeoutError(
          this.name,
          `${n} experiences (${this.#items.length} available, at least ${minCount} accepted)`,
          options.timeoutMs,
        );
      }
    }
  }

  /** The experiences waiting to be read, oldest first, left in place (a checkpoint saves the unread ones). */
  peek(): Experience[] {
    return [...this.#items];
  }

  async finishWriting(): Promise<void> {
    this.#finished = true;
    this.#readers.notifyAll();
  }

  async close(): Promise<void> {
    this.#closed = true;
    const error = new BufferClosedError(this.name, 'closed while waiting');
    this.#readers.fail(error);
    this.#writers.fail(error);
  }

  #take(n: number): Experience[] {
    const batch = this.#items.splice(0, n);
    if (batch.length > 0) this.#writers.notifyAll();
    return batch;
  }

  #checkWritable(): void {
    if (this.#closed) throw new BufferClosedError(this.name, 'cannot write');
    if (this.#finished) throw new Error(`buffer '${this.name}': write after finishWriting()`);
  }
}
