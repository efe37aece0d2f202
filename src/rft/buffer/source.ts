// What a sample strategy reads from: the experience source (the trainer's experience buffer, seen through whatever
// the trainer loop wraps around it) and auxiliary readers (trainer_input.auxiliary_buffers, e.g. mix's expert data).
//
//   ExperienceSource   read(count, { timeoutMs, minCount }) with the experience buffers' read semantics (./types.ts):
//                      resolves with `count` experiences once they are there; with fewer (possibly none) only when
//                      the writers have finished and the source is drained, or at the deadline when at least
//                      `minCount` (default count) are there; otherwise it rejects with BufferTimeoutError at the
//                      deadline having taken nothing. A rejected read consumes nothing, so a caller can retry.
//                      Every ExperienceBuffer (QueueBuffer, PriorityReplayBuffer, SqliteBuffer) is one as it is.
//   sourceFromArray    a finished source over an array (a dataset's batch, tests): never waits.
//   AuxiliaryReader    an in-memory dataset read in order and cycled (epoch after epoch), with its read position as
//                      checkpoint state (state() / loadState()), so a resumed run continues where it stopped. With
//                      totalEpochs (Trinity's total_epochs of an auxiliary buffer) it hands out at most
//                      totalEpochs × size rows: remaining() says how many are left, and a read past them throws.
import { type Experience, validateExperience } from '../experience.js';
import { checkReadArgs, type ReadOptions } from './types.js';

/** A source's read options: ./types.ts ReadOptions (timeoutMs; minCount, default count). */
export type SourceReadOptions = ReadOptions;

/** An async, bounded experience source: see the header. */
export interface ExperienceSource {
  /** Used in errors (BufferTimeoutError's buffer name); default "experience source". */
  readonly name?: string;
  read(count: number, options: SourceReadOptions): Promise<Experience[]>;
}

/** The name errors give a source. */
export function sourceName(source: ExperienceSource): string {
  return source.name ?? 'experience source';
}

export interface ArraySource extends ExperienceSource {
  readonly name: string;
  /** Experiences not handed out yet. */
  readonly remaining: number;
}

/**
 * A finished source over `experiences`: each read hands out the next ones in order; fewer than asked (down to none)
 * once the array is drained. It never waits, so it never times out. Reads are checked like a buffer's.
 */
export function sourceFromArray(experiences: readonly Experience[], options: { name?: string } = {}): ArraySource {
  const name = options.name ?? 'array';
  const items = [...experiences];
  let position = 0;
  return {
    name,
    get remaining() {
      return items.length - position;
    },
    async read(count, readOptions) {
      checkReadArgs(name, count, readOptions);
      const out = items.slice(position, position + count);
      position += out.length;
      return out;
    },
  };
}

/** What a strategy reads an auxiliary buffer through: `count` rows (an AuxiliaryReader always gives `count`). */
export interface AuxiliarySource {
  read(count: number): Experience[] | Promise<Experience[]>;
  /** Rows left to read (Infinity: cycled without end); a source without it never runs out. */
  remaining?(): number;
}

/** An AuxiliaryReader's checkpoint state. */
export interface AuxiliaryReaderState {
  /** Rows handed out since the start of the run (row position % size, epoch ⌊position / size⌋). */
  position: number;
  /** The dataset's row count, checked on load (a resumed run must read the same dataset). */
  size: number;
}

/** An in-memory auxiliary dataset read in order, cycled epoch after epoch; see the header. */
export class AuxiliaryReader implements AuxiliarySource {
  readonly name: string;
  readonly #rows: readonly Experience[];
  /** Passes over the rows it hands out at most; null: cycled without end. */
  readonly totalEpochs: number | null;
  #position = 0;

  constructor(name: string, rows: readonly Experience[], totalEpochs: number | null = null) {
    if (totalEpochs !== null && !(Number.isInteger(totalEpochs) && totalEpochs >= 1))
      throw new RangeError(`auxiliary buffer '${name}': totalEpochs must be a positive integer or null, got ${totalEpochs}`);
    this.name = name;
    this.#rows = [...rows];
    this.totalEpochs = totalEpochs;
  }

  /** Rows left to hand out: totalEpochs × size − position, or Infinity without totalEpochs. */
  remaining(): number {
    return this.totalEpochs === null ? Number.POSITIVE_INFINITY : this.totalEpochs * this.#rows.length - this.#position;
  }

  /** Rows in the dataset. */
  get size(): number {
    return this.#rows.length;
  }

  /** Rows handed out so far. */
  get position(): number {
    return this.#position;
  }

  /** Completed passes over the dataset. */
  get epoch(): number {
    return this.#rows.length === 0 ? 0 : Math.floor(this.#position / this.#rows.length);
  }

  /** The next `count` rows, wrapping around at the end of the dataset (the rows themselves: do not mutate them). */
  read(count: number): Experience[] {
    if (!Number.isInteger(count) || count < 0) {
      throw new RangeError(`auxiliary buffer '${this.name}': read size must be a non-negative integer, got ${count}`);
    }
    if (count === 0) return [];
    if (this.#rows.length === 0) throw new Error(`auxiliary buffer '${this.name}' is empty: cannot read ${count} rows`);
    if (count > this.remaining())
      throw new Error(
        `auxiliary buffer '${this.name}': ${count} rows asked, ${this.remaining()} left of its total_epochs ` +
          `(${this.totalEpochs} × ${this.#rows.length} rows)`,
      );
    const out: Experience[] = [];
    for (let i = 0; i < count; i++) out.push(this.#rows[(this.#position + i) % this.#rows.length] as Experience);
    this.#position += count;
    return out;
  }

  state(): AuxiliaryReaderState {
    return { position: this.#position, size: this.#rows.length };
  }

  loadState(state: unknown): void {
    const s = state as Partial<AuxiliaryReaderState> | null;
    if (s === null || typeof s !== 'object' || !Number.isInteger(s.position) || (s.position as number) < 0) {
      throw new Error(`auxiliary buffer '${this.name}': bad checkpoint state ${JSON.stringify(state)} (want { position, size })`);
    }
    if (s.size !== this.#rows.length) {
      throw new Error(
        `auxiliary buffer '${this.name}': the checkpoint was taken with ${String(s.size)} rows, the dataset now has ` +
          `${this.#rows.length}: resuming needs the same dataset`,
      );
    }
    this.#position = s.position as number;
  }
}

/**
 * Experiences from checkpoint state (a strategy's held-back experiences): checked with validateExperience, so a
 * damaged checkpoint fails on load, naming `where`, rather than in a train step.
 */
export function experiencesFromState(where: string, value: unknown): Experience[] {
  if (!Array.isArray(value)) throw new Error(`${where}: expected a list of experiences, got ${JSON.stringify(value)}`);
  return value.map((e, i) => {
    const problems = e !== null && typeof e === 'object' ? validateExperience(e as Experience) : ['not an object'];
    if (problems.length > 0) throw new Error(`${where}: experience ${i}: ${problems.slice(0, 3).join('; ')}`);
    return e as Experience;
  });
}
