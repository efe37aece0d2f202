// SQLite plumbing, written once for the users of the shared SQLite file and its neighbours: the buffer
// (../buffer/sqlite.ts), the explorers' task claims (../explorer/task-claims-sqlite.ts), the experience pipeline's
// saved input (../data/experience-pipeline/save-input.ts), tasksets (../buffer/taskset.ts).
//
//   openSqliteFile        the file with the pragmas its user asks for (busy_timeout, WAL, synchronous)
//   inSqliteFile          better-sqlite3's errors name no file: SqliteFileError names it (and says "damaged")
//   inWriteTransaction    BEGIN IMMEDIATE: the write lock from the start, so two processes' read-then-write
//                         transactions queue on busy_timeout instead of failing with SQLITE_BUSY half-way
//   sqliteSchemaVersion   the schema_version table (./schema-version.ts), as ./postgres.ts reads it
//
// This is the bottom of src/rft: it imports nothing from the other parts.
import Database from 'better-sqlite3';
import { SCHEMA_VERSION_TABLE_DDL } from './schema-version.js';

/** An SQLite error with the file it happened in (better-sqlite3's messages name none); `code` is SQLite's. */
export class SqliteFileError extends Error {
  readonly code: string | undefined;

  constructor(
    readonly path: string,
    what: string,
    cause: Error & { code?: unknown },
  ) {
    const code = typeof cause.code === 'string' ? cause.code : undefined;
    const damaged = code === 'SQLITE_NOTADB' || code?.startsWith('SQLITE_CORRUPT') === true;
    const hint = damaged ? ' (the file is not an SQLite database, or it is damaged: truncated, overwritten)' : '';
    super(`${what}: ${path}: ${cause.message}${hint}`, { cause });
    this.name = 'SqliteFileError';
    this.code = code;
  }
}

/** Runs `fn`; an SQLite error it throws becomes a SqliteFileError naming `path` (other errors pass unchanged). */
export function inSqliteFile<T>(path: string, what: string, fn: () => T): T {
  try {
    return fn();
  } catch (error) {
    if (error instanceof Database.SqliteError) throw new SqliteFileError(path, what, error);
    throw error;
  }
}

export interface SqliteOpenOptions {
  /** Open without creating or writing anything: the file must exist. */
  readonly?: boolean;
  /** How long a statement waits for another process's lock (absent: SQLite's default, it fails at once). */
  busyTimeoutMs?: number;
  /** journal_mode = WAL: readers read while a writer writes (a writer's choice, kept in the file). */
  wal?: boolean;
  /** synchronous = NORMAL: with WAL, a commit survives the process dying, not the machine losing power. */
  synchronousNormal?: boolean;
}

/** Opens (or creates) the SQLite file at `path` and sets its pragmas, in that order; closed again if one fails. */
export function openSqliteFile(path: string, options: SqliteOpenOptions = {}): Database.Database {
  const readonly = options.readonly ?? false;
  const db = new Database(path, { readonly, fileMustExist: readonly });
  try {
    if (options.busyTimeoutMs !== undefined) db.pragma(`busy_timeout = ${options.busyTimeoutMs}`);
    if (options.wal) db.pragma('journal_mode = WAL');
    if (options.synchronousNormal) db.pragma('synchronous = NORMAL');
    return db;
  } catch (error) {
    db.close();
    throw error;
  }
}

/** `fn` in one BEGIN IMMEDIATE transaction (see the header); rolled back if it throws. */
export function inWriteTransaction<T>(db: Database.Database, fn: () => T): T {
  return db.transaction(fn).immediate();
}

/** Creates the schema_version table if it is missing (in a write transaction, before reading it). */
export function createSchemaVersionTable(db: Database.Database): void {
  db.exec(SCHEMA_VERSION_TABLE_DDL);
}

/** The layout version recorded for `table` (null: none). */
export function sqliteSchemaVersion(db: Database.Database, table: string): number | null {
  const row = db.prepare('SELECT version FROM schema_version WHERE table_name = ?').get(table) as { version: number } | undefined;
  return row?.version ?? null;
}

/** Records `version` as `table`'s layout. */
export function setSqliteSchemaVersion(db: Database.Database, table: string, version: number): void {
  db.prepare('INSERT OR REPLACE INTO schema_version (table_name, version) VALUES (?, ?)').run(table, version);
}
