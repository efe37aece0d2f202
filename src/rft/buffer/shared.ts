// The shared experience buffer (Trinity-RFT's `storage_type: sql`): the durable buffer between explorer processes
// and a trainer, with read cursors committed at checkpoints. Two backends behind one contract, chosen by the path:
//
//   postgresql://user:pass@host:port/db   PostgresBuffer (./postgres.ts): many writers on many machines
//   anything else (a file, sqlite:///f)   SqliteBuffer (./sqlite.ts): processes on one machine
//
// and, for a reader with `replay`, the priority replay over either (./sql-replay.ts). The buffer's tables are named
// after it (experience_buffer.name; ./sql-names.ts). The run loop talks to SharedExperienceBuffer
// (./shared-contract.ts) only.
import { isPostgresUrl, PostgresBuffer, postgresTarget } from './postgres.js';
import type { PriorityReplayOptions } from './priority.js';
import type { SharedExperienceBuffer } from './shared-contract.js';
import { LEGACY_TABLE } from './sql-names.js';
import { SqlReplayBuffer } from './sql-replay.js';
import { SqliteBuffer } from './sqlite.js';
import type { ExperienceBuffer } from './types.js';

export type {
  Awaitable,
  ReplayStore,
  SharedBatch,
  SharedExperienceBuffer,
  SharedWriteOptions,
  StoredReplayEntry,
  StoredReplayRevision,
} from './shared-contract.js';
export { SqlReplayBuffer } from './sql-replay.js';
export { LEGACY_TABLE, MAX_TABLE_NAME, tableNameProblem } from './sql-names.js';

export interface SharedBufferOptions {
  /** A PostgreSQL URL (postgresql:// or postgres://) or an SQLite file. */
  path: string;
  /** The buffer's name (experience_buffer.name): its table unless `table` says otherwise, and its name in errors. */
  name?: string;
  /**
   * The table (prefix), so one database holds several buffers. Default: `name`; without a name "experiences" — or,
   * read-only, the database's only buffer table.
   */
  table?: string;
  /** Default "trainer". */
  readerId?: string;
  /** Open without creating or writing anything (viewers, an explorer looking up its position). */
  readonly?: boolean;
  /**
   * A reader's priority replay (experience_buffer.replay_buffer): reads hand out the highest-priority experiences,
   * with use counts and cooldowns, their state in the database (./sql-replay.ts). Null or absent: write order, once.
   */
  replay?: Omit<PriorityReplayOptions, 'name'> | null;
}

/** Opens the shared buffer at `options.path`: PostgreSQL for a postgresql:// URL, else an SQLite file. */
export async function openSharedBuffer(options: SharedBufferOptions): Promise<SharedExperienceBuffer> {
  const readerId = options.readerId ?? 'trainer';
  // read-only without a table or name: the backend opens the database's only buffer
  const table = options.table ?? options.name ?? (options.readonly ? undefined : LEGACY_TABLE);
  const common = {
    ...(table !== undefined ? { table } : {}),
    ...(options.name !== undefined ? { name: options.name } : {}),
    // a replay takes rows in under a cursor of its own: the plain reader's cursor stays its own
    readerId: options.replay ? `${readerId}.replay` : readerId,
    ...(options.readonly !== undefined ? { readonly: options.readonly } : {}),
  };
  const buffer = isPostgresUrl(options.path)
    ? await PostgresBuffer.open({ url: options.path, ...common })
    : new SqliteBuffer({ path: options.path.replace(/^sqlite:\/\/\//, ''), ...common });
  if (!options.replay) return buffer;
  try {
    return await SqlReplayBuffer.open(buffer, { ...options.replay, readerId });
  } catch (error) {
    await buffer.close();
    throw error;
  }
}

/** A buffer path for messages and logs: a PostgreSQL URL loses its password. */
export function displayBufferPath(path: string): string {
  return isPostgresUrl(path) ? postgresTarget(path).display : path;
}

export function isSharedBuffer(buffer: ExperienceBuffer): buffer is SharedExperienceBuffer {
  return buffer instanceof SqliteBuffer || buffer instanceof PostgresBuffer || buffer instanceof SqlReplayBuffer;
}
