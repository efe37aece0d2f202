// The shared experience buffer (Trinity-RFT's `storage_type: sql`): the durable buffer between explorer processes
// and a trainer, with read cursors committed at checkpoints. Two backends behind one contract, chosen by the path:
//
//   postgresql://user:pass@host:port/db   PostgresBuffer (./postgres.ts): many writers on many machines
//   anything else (a file, sqlite:///f)   SqliteBuffer (./sqlite.ts): processes on one machine
//
// The run loop talks to SharedExperienceBuffer (./shared-contract.ts) only.
import { isPostgresUrl, PostgresBuffer, postgresTarget } from './postgres.js';
import type { SharedExperienceBuffer } from './shared-contract.js';
import { SqliteBuffer } from './sqlite.js';
import type { ExperienceBuffer } from './types.js';

export type { Awaitable, SharedBatch, SharedExperienceBuffer, SharedWriteOptions } from './shared-contract.js';

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
