// The shared experience buffer's contract (storage_type sql), implemented by SqliteBuffer (./sqlite.ts) and
// PostgresBuffer (./postgres.ts); ./shared.ts opens one by path. Methods that are synchronous for SQLite (a local
// file) and asynchronous for PostgreSQL (a network round trip) return Awaitable: callers always await them.
import type { Experience } from '../experience.js';
import type { ExperienceBuffer, ReadOptions, WriteOptions } from './types.js';

export type Awaitable<T> = T | Promise<T>;

/** A stored row: its id (ascending in commit order) and experience. */
export interface StoredExperience {
  id: number;
  experience: Experience;
}

export interface SharedBatch {
  experiences: Experience[];
  /** Pass to commit() once the batch is safely used (a checkpoint holds it). */
  cursor: number;
  /** The rows' ids, one per experience (ascending). */
  ids: number[];
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
  /** The buffer's table (experience_buffer.name; PostgreSQL folds it to lower case); its other tables start with it. */
  readonly table: string;
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
  /** The storage of reader `reader`'s priority replay state (./sql-replay.ts) in this buffer's tables. */
  replayStore(reader: string): ReplayStore;
}

/** One replay entry as stored: the row `id` it replays, with the ReplayEntries fields (./priority.ts). */
export interface StoredReplayEntry {
  seq: number;
  id: number;
  modelVersion: number;
  useCount: number;
  priority: number;
  /** Date.now() from which it can be read. */
  availableAt: number;
}

/** A replay revision's scalars: a revision is the replay's state after one of its reads (./sql-replay.ts). */
export interface StoredReplayRevision {
  revision: number;
  /** The last row id taken into the replay. */
  position: number;
  nextSeq: number;
  noiseDraws: number;
  /** Date.now() when the revision was made: cooldowns left are measured from it on load. */
  at: number;
}

/**
 * Replay state in SQL, one reader's, as revisions: revision r's entries are the rows added at r' <= r and not dropped
 * at r'' <= r. Each method is one transaction.
 */
export interface ReplayStore {
  /** The committed revision (the oldest kept; null: this reader has none yet). */
  committedRevision(): Promise<number | null>;
  /** Revision `revision`'s scalars and entries (null: not stored). */
  load(revision: number): Promise<{ revision: StoredReplayRevision; entries: StoredReplayEntry[] } | null>;
  /** Forgets the revisions after `revision` (what later reads did): a restore to it. */
  dropAfter(revision: number): Promise<void>;
  /** Stores the next revision: its scalars, the entries it put and the seqs of those it dropped. */
  append(revision: StoredReplayRevision, put: readonly StoredReplayEntry[], dropped: readonly number[]): Promise<void>;
  /**
   * Makes `revision` the committed one: forgets older revisions and entries dropped by then, and sets the `cursorReader`
   * cursor to its position, in one transaction.
   */
  commit(revision: number, cursorReader: string): Promise<void>;
  /** The experiences of rows `ids` (an id with no row is missing from the map). */
  experiences(ids: readonly number[]): Promise<Map<number, Experience>>;
}
