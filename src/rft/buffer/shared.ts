// The shared experience buffer (Trinity-RFT's `storage_type: sql`): the durable buffer between explorer processes
// and a trainer, with read cursors committed at checkpoints. Two backends behind one contract, chosen by the path:
//
//   postgresql://user:pass@host:port/db   PostgresBuffer (./postgres.ts): many writers on many machines
//   anything else (a file, sqlite:///f)   SqliteBuffer (./sqlite.ts): processes on one machine
//
// The run loop talks to SharedExperienceBuffer only. Methods that are synchronous for SQLite (a local file) and
// asynchronous for PostgreSQL (a network round trip) return Awaitable: callers always await them.
import type { Experience } from '../experience.js';
import { isPostgresUrl, PostgresBuffer, postgresTarget } from './postgres.js';
import { SqliteBuffer, type StoredExperience } from './sqlite.js';
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

export interface SharedBufferOptions {
  /** A PostgreSQL URL (postgresql:// or postgres://) or an SQLite file. */
  path: string;
  /** Name in errors (default: the table). */
  name?: string;
  /** Table (prefix) name, so one database holds several buffers (default "experiences"). */
  table?: string;
  /** Default "trainer". */
  readerId?: string;
  /** Open without creating or writing anything (viewers, an explorer looking up its position). */
  readonly?: boolean;
}

/** Opens the shared buffer at `options.path`: PostgreSQL for a postgresql:// URL, else an SQLite file. */
export async function openSharedBuffer(options: SharedBufferOptions): Promise<SharedExperienceBuffer> {
  const common = {
    ...(options.name !== undefined ? { name: options.name } : {}),
    ...(options.table !== undefined ? { table: options.table } : {}),
    ...(options.readerId !== undefined ? { readerId: options.readerId } : {}),
    ...(options.readonly !== undefined ? { readonly: options.readonly } : {}),
  };
  if (isPostgresUrl(options.path)) return PostgresBuffer.open({ url: options.path, ...common });
  return new SqliteBuffer({ path: options.path.replace(/^sqlite:\/\/\//, ''), ...common });
}

/** A buffer path for messages and logs: a PostgreSQL URL loses its password. */
export function displayBufferPath(path: string): string {
  return isPostgresUrl(path) ? postgresTarget(path).display : path;
}

export function isSharedBuffer(buffer: ExperienceBuffer): buffer is SharedExperienceBuffer {
  return buffer instanceof SqliteBuffer || buffer instanceof PostgresBuffer;
}
