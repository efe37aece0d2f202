// The shared experience buffer's contract (storage_type sql), implemented by SqliteBuffer (./sqlite.ts) and
// PostgresBuffer (./postgres.ts); ./shared.ts opens one by path. Methods that are synchronous for SQLite (a local
// file) and asynchronous for PostgreSQL (a network round trip) return Awaitable: callers always await them.
import type { Experience } from '../experience.js';
import type { StoredExperience } from './sqlite.js';
import type { ExperienceBuffer, ReadOptions, WriteOptions } from './types.js';

export type Awaitable<T> = T | Promise<T>;

export interface SharedBatch {
  experiences: Experience[];
  /** Pass to commit() once the batch is safely used (a checkpoint holds it). */
  cursor: number;
}

export interface SharedWriteOptions extends WriteOptions {
  /** Meta entries written in the same transaction as the rows (an explorer's position goes with what it wrote). */
  meta?: Readonly<Record<string, string>>;
}

/**
 * Exactly-once delivery across a commit: readBatch() hands out rows after this handle's position and advances it in
 * memory; commit(cursor) persists it. A reader that dies between the two gets the same rows again on restart.
 */
export interface SharedExperienceBuffer extends ExperienceBuffer {
  /** Where it lives, for messages: a file path, or a PostgreSQL URL without its password. */
  readonly location: string;
  /** Whose read position this handle uses and commits. */
  readonly readerId: string;
  /** Rows stored (all readers). */
  readonly total: Awaitable<number>;
  write(experiences: readonly Experience[], options?: SharedWriteOptions): Promise<number>;
  readBatch(n: number, options: ReadOptions): Promise<SharedBatch>;
  /** Persists this reader's position (default: everything handed out); never moves backwards. */
  commit(cursor?: number): Awaitable<void>;
  /** Forgets uncommitted hand-outs: the next read starts again at the committed position. */
  rewind(): Awaitable<void>;
  /** Sets and persists this reader's position (a trainer resuming from its checkpoint's cursor). */
  restore(cursor: number): Awaitable<void>;
  readMeta(key: string): Awaitable<string | null>;
  /** Rows in id order, no cursor moved (viewers). */
  peek(options: { afterId?: number; offset?: number; limit: number }): Awaitable<StoredExperience[]>;
}
