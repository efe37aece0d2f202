// Durable experience buffer in one SQLite file (Trinity-RFT's `storage_type: sql`), shared by processes: explorers
// write, a trainer reads; either may start first, and either may be killed and restarted.
//
// Tables (t = options.table, default "experiences"; ./shared.ts passes experience_buffer.name; lower case):
//   schema_version (table_name TEXT PRIMARY KEY, version INTEGER)  the layout version of each buffer's tables
//   <t>          (id INTEGER PRIMARY KEY AUTOINCREMENT, eid TEXT UNIQUE, task_id, model_version, reward,
//                 created_at, data TEXT)   data = the Experience as JSON; duplicate eids are ignored on insert
//   <t>_cursors  (reader TEXT PRIMARY KEY, position INTEGER)   last id a reader has committed
//   <t>_meta     (key TEXT PRIMARY KEY, value TEXT)            "writer_finished" = "1" after finishWriting()
//   <t>_replay, <t>_replay_revs                                 priority replay state (./sql-replay.ts, ./sql-replay-store.ts)
//
// Layout versions: 1 = the three buffer tables (files written before schema_version existed are version 1), 2 = the
// replay tables too. Code before experience_buffer.name named the table wrote every buffer to table "experiences":
// opening such a file (no schema_version row for it) under another name renames its tables to that name once, so
// a run resumed with new code reads on from its buffer.
//
// Delivery is at-least-once up to the commit and exactly-once across it: read() hands out rows after the
// in-memory position and advances it; commit(cursor) persists the position after the trainer step succeeded. A
// reader killed between read and commit restarts from the committed position and gets the same batch again; a
// batch that was committed is never delivered again. Ids increase in commit order because SQLite has one writer
// at a time, so a reader never skips a row that commits later with a smaller id.
//
// Queries: reads are `id > ? ORDER BY id LIMIT ?` and counts `id > ?` (rowid range scans); duplicate detection
// uses the UNIQUE index on eid. Those are the only lookups, so there are no other indexes. WAL mode lets readers
// poll while a writer writes; busy_timeout covers the short write locks (the file's plumbing: ../store/sqlite.ts).
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type Database from 'better-sqlite3';
import type { Experience } from '../experience.js';
import { newerSchemaProblem } from '../store/schema-version.js';
import {
  createSchemaVersionTable,
  inSqliteFile,
  inWriteTransaction,
  openSqliteFile,
  setSqliteSchemaVersion,
  sqliteSchemaVersion,
} from '../store/sqlite.js';
import { runStepsSync, type SqlRow, type SqlStatement } from '../store/sql-steps.js';
import type { ReplayStore, StoredExperience } from './shared-contract.js';
import { type ReplaySqlDialect, sqlReplayStore } from './sql-replay-store.js';
import {
  BUFFER_SCHEMA_VERSION,
  bufferTablesAmong,
  LEGACY_TABLE,
  onlyBufferTable,
  quoteIdentifier as q,
  tableNameProblem,
} from './sql-names.js';
import {
  BufferClosedError,
  BufferTimeoutError,
  checkReadArgs,
  type ExperienceBuffer,
  type ReadOptions,
  type WriteOptions,
} from './types.js';

export interface SqliteBufferOptions {
  /** The database file (created if missing). */
  path: string;
  /** Name in errors (default: the table name). */
  name?: string;
  /** Table name prefix, so one file can hold several buffers (default "experiences"; read-only: the file's only buffer). */
  table?: string;
  /** Whose read position this handle uses and commits (default "trainer"); one process per reader id. */
  readerId?: string;
  /** How often a waiting read polls (default 20 ms). */
  pollIntervalMs?: number;
  /** How long a statement waits for another process's lock (default 10 s). */
  busyTimeoutMs?: number;
  /** Open without creating or writing anything (viewers). */
  readonly?: boolean;
}

export interface SqliteBatch {
  experiences: Experience[];
  /** Pass to commit() once the batch is safely used. */
  cursor: number;
  /** The rows' ids, one per experience. */
  ids: number[];
}

export type { StoredExperience } from './shared-contract.js';

interface Statements {
  insert: Database.Statement<[string, string | null, number | null, number | null, number, string]>;
  rowsAfter: Database.Statement<[number, number], { id: number; eid: string; data: string }>;
  page: Database.Statement<[number, number, number], { id: number; data: string }>;
  countAfter: Database.Statement<[number], { n: number }>;
  finished: Database.Statement<[], { value: string }>;
}

// the file plumbing lives in ../store/sqlite.ts; these names stay importable from the buffer
export { inSqliteFile, SqliteFileError } from '../store/sqlite.js';

export class SqliteBuffer implements ExperienceBuffer {
  readonly name: string;
  readonly path: string;
  readonly table: string;
  readonly readerId: string;
  readonly pollIntervalMs: number;
  readonly #db: Database.Database;
  /** Last id handed out by this handle (starts at the committed position). */
  #position: number;
  #closed = false;
  readonly #statements: Statements;
  /** The replay store's statements, by text (./sql-replay-store.ts). */
  readonly #prepared = new Map<string, Database.Statement>();
  /** The quoted table names: the rows, the cursors, the meta entries. */
  readonly #t: string;
  readonly #cursors: string;
  readonly #meta: string;
  /** The legacy table this open renamed to this buffer's (see the header); null: none. */
  migratedFrom: string | null = null;

  constructor(options: SqliteBufferOptions) {
    this.path = options.path;
    // read-only without a table: the file's only buffer (viewers)
    const table =
      options.table ?? (options.readonly ? onlyBufferTable(SqliteBuffer.bufferTables(this.path), this.path) : LEGACY_TABLE);
    this.table = table.toLowerCase();
    this.name = options.name ?? this.table;
    this.readerId = options.readerId ?? 'trainer';
    this.pollIntervalMs = options.pollIntervalMs ?? 20;
    const problem = tableNameProblem(this.table);
    if (problem !== null) throw new Error(`buffer '${this.name}': table name ${problem}`);
    this.#t = q(this.table);
    this.#cursors = q(`${this.table}_cursors`);
    this.#meta = q(`${this.table}_meta`);
    // the writer or the reader may start first: whichever does makes the file's folder (a reader opening readonly
    // needs the file to exist already)
    if (!options.readonly) mkdirSync(dirname(this.path), { recursive: true });
    const db = this.#sql(() =>
      openSqliteFile(this.path, {
        readonly: options.readonly ?? false,
        busyTimeoutMs: options.busyTimeoutMs ?? 10_000,
        ...(options.readonly ? {} : { wal: true, synchronousNormal: true }),
      }),
    );
    this.#db = db;
    try {
      this.#statements = this.#sql(() => this.#prepare(db, options));
      this.#position = this.committedPosition;
    } catch (error) {
      db.close();
      throw error;
    }
  }

  /** The buffer tables in the file at `path` (read-only; viewers). */
  static bufferTables(path: string): string[] {
    return inSqliteFile(path, 'list the buffer tables', () => {
      const db = openSqliteFile(path, { readonly: true });
      try {
        const rows = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[];
        return bufferTablesAmong(rows.map((r) => r.name));
      } finally {
        db.close();
      }
    });
  }

  /** Makes the tables (unless read-only); returns the statements. */
  #prepare(db: Database.Database, options: SqliteBufferOptions): Statements {
    const [t, meta] = [this.#t, this.#meta];
    if (!options.readonly) inWriteTransaction(db, () => this.#createTables(db));
    return {
      insert: db.prepare(
        `INSERT OR IGNORE INTO ${t} (eid, task_id, model_version, reward, created_at, data) VALUES (?, ?, ?, ?, ?, ?)`,
      ),
      rowsAfter: db.prepare(`SELECT id, eid, data FROM ${t} WHERE id > ? ORDER BY id LIMIT ?`),
      page: db.prepare(`SELECT id, data FROM ${t} WHERE id > ? ORDER BY id LIMIT ? OFFSET ?`),
      countAfter: db.prepare(`SELECT COUNT(*) AS n FROM ${t} WHERE id > ?`),
      finished: db.prepare(`SELECT value FROM ${meta} WHERE key = 'writer_finished'`),
    };
  }

  /** Creates (or migrates, see the header) this buffer's tables; runs inside a write transaction. */
  #createTables(db: Database.Database): void {
    const table = this.table;
    const exists = (name: string) =>
      db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE").get(name) !== undefined;
    createSchemaVersionTable(db);
    const versionOf = (name: string) => sqliteSchemaVersion(db, name);
    const version = versionOf(table);
    const problem = newerSchemaProblem(table, version, BUFFER_SCHEMA_VERSION);
    if (problem !== null) throw new Error(`buffer '${this.name}': ${this.path}: ${problem}; upgrade this one`);
    if (version === BUFFER_SCHEMA_VERSION) return;
    const legacy =
      version === null && table !== LEGACY_TABLE && !exists(table) && exists(LEGACY_TABLE) && versionOf(LEGACY_TABLE) === null;
    if (legacy) {
      for (const suffix of ['', '_cursors', '_meta'])
        if (exists(`${LEGACY_TABLE}${suffix}`))
          db.exec(`ALTER TABLE ${q(`${LEGACY_TABLE}${suffix}`)} RENAME TO ${q(`${table}${suffix}`)}`);
      this.migratedFrom = LEGACY_TABLE;
    }
    db.exec(`
      CREATE TABLE IF NOT EXISTS ${this.#t} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        eid TEXT NOT NULL UNIQUE,
        task_id TEXT,
        model_version INTEGER,
        reward REAL,
        created_at INTEGER NOT NULL,
        data TEXT NOT NULL
      );
      CREATE TABLE IF NOT EXISTS ${this.#cursors} (reader TEXT PRIMARY KEY, position INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS ${this.#meta} (key TEXT PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS ${q(`${table}_replay`)} (
        reader TEXT NOT NULL,
        seq INTEGER NOT NULL,
        id INTEGER NOT NULL,
        model_version REAL NOT NULL,
        use_count INTEGER NOT NULL,
        priority REAL NOT NULL,
        available_at REAL NOT NULL,
        added INTEGER NOT NULL,
        dropped INTEGER,
        PRIMARY KEY (reader, seq)
      );
      CREATE TABLE IF NOT EXISTS ${q(`${table}_replay_revs`)} (
        reader TEXT NOT NULL,
        revision INTEGER NOT NULL,
        position INTEGER NOT NULL,
        next_seq INTEGER NOT NULL,
        noise_draws INTEGER NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (reader, revision)
      );
    `);
    setSqliteSchemaVersion(db, table, BUFFER_SCHEMA_VERSION);
  }

  /** Runs `fn`; an SQLite error names this buffer and its file (a damaged or foreign file, a full disk...). */
  #sql<T>(fn: () => T): T {
    return inSqliteFile(this.path, `buffer '${this.name}'`, fn);
  }

  /** Where it lives, for messages (the shared buffer contract, ./shared.ts). */
  get location(): string {
    return this.path;
  }

  /** Rows this reader has not been handed yet. */
  get size(): number {
    this.#checkOpen('size');
    return this.#sql(() => this.#statements.countAfter.get(this.#position)?.n ?? 0);
  }

  /** Rows in the table. */
  get total(): number {
    this.#checkOpen('total');
    return this.#sql(() => this.#statements.countAfter.get(0)?.n ?? 0);
  }

  /** The position persisted by the last commit of this reader id (0 = nothing committed). */
  get committedPosition(): number {
    return this.#sql(() => {
      const row = this.#db.prepare(`SELECT position FROM ${this.#cursors} WHERE reader = ?`).get(this.readerId) as
        | { position: number }
        | undefined;
      return row?.position ?? 0;
    });
  }

  /**
   * Stores experiences in one transaction; duplicates (same eid) are ignored. Resolves with how many were new.
   * `meta` entries are written in the same transaction (an explorer's position goes with the rows it wrote).
   */
  async write(
    experiences: readonly Experience[],
    options: WriteOptions & { meta?: Readonly<Record<string, string>> } = {},
  ): Promise<number> {
    this.#checkOpen('write');
    const now = Date.now();
    const insertAll = () => {
      for (const [key, value] of Object.entries(options.meta ?? {}))
        this.#db.prepare(`INSERT OR REPLACE INTO ${this.#meta} (key, value) VALUES (?, ?)`).run(key, value);
      let inserted = 0;
      for (const e of experiences) {
        const taskId = e.info.taskId === undefined ? null : String(e.info.taskId);
        const version = typeof e.info.modelVersion === 'number' ? e.info.modelVersion : null;
        inserted += this.#statements.insert.run(e.eid, taskId, version, e.reward ?? null, now, JSON.stringify(e)).changes;
      }
      // New data after a finish (a restarted explorer) reopens the buffer for readers.
      if (inserted > 0) this.#db.prepare(`DELETE FROM ${this.#meta} WHERE key = 'writer_finished'`).run();
      return inserted;
    };
    return this.#sql(() => inWriteTransaction(this.#db, insertAll));
  }

  async read(n: number, options: ReadOptions): Promise<Experience[]> {
    return (await this.readBatch(n, options)).experiences;
  }

  /**
   * Waits (polling) for n rows after this reader's position, hands them out and advances the in-memory position.
   * Nothing is persisted until commit(cursor).
   */
  async readBatch(n: number, options: ReadOptions): Promise<SqliteBatch> {
    const minCount = checkReadArgs(this.name, n, options);
    const deadline = Date.now() + options.timeoutMs;
    for (;;) {
      this.#checkOpen(`read of ${n} experiences`);
      // One read transaction: the finished flag and the rows come from the same snapshot.
      const snapshot = this.#sql(() =>
        this.#db.transaction(() => {
          const available = this.#statements.countAfter.get(this.#position)?.n ?? 0;
          const finished = this.#statements.finished.get()?.value === '1';
          return { available, finished };
        })(),
      );
      const timedOut = Date.now() >= deadline;
      if (snapshot.available >= n || snapshot.finished || (timedOut && snapshot.available >= minCount)) {
        return this.#take(n);
      }
      if (timedOut) {
        throw new BufferTimeoutError(
          this.name,
          `${n} experiences from ${this.path} for reader '${this.readerId}' after position ${this.#position} ` +
            `(${snapshot.available} available, at least ${minCount} accepted)`,
          options.timeoutMs,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(this.pollIntervalMs, Math.max(0, deadline - Date.now()))));
    }
  }

  /** Persists this reader's position (default: everything handed out so far). Never moves backwards. */
  commit(cursor: number = this.#position): void {
    this.#checkOpen('commit');
    if (!Number.isInteger(cursor) || cursor < 0 || cursor > this.#position) {
      throw new RangeError(
        `buffer '${this.name}': commit cursor ${cursor} must be an integer in [0, ${this.#position}] (handed out)`,
      );
    }
    this.#sql(() =>
      this.#db
        .prepare(
          `INSERT INTO ${this.#cursors} (reader, position) VALUES (?, ?)
           ON CONFLICT(reader) DO UPDATE SET position = max(position, excluded.position)`,
        )
        .run(this.readerId, cursor),
    );
  }

  /** Forgets uncommitted hand-outs: the next read starts again at the committed position. */
  rewind(): void {
    this.#position = this.committedPosition;
  }

  /**
   * Sets and persists this reader's position to a checkpoint's cursor (a trainer resuming: the checkpoint is the
   * truth, whether or not the commit after it was written before the process died).
   */
  restore(cursor: number): void {
    this.#checkOpen('restore');
    if (!Number.isInteger(cursor) || cursor < 0)
      throw new RangeError(`buffer '${this.name}': restore cursor ${cursor} must be a non-negative integer`);
    this.#sql(() =>
      this.#db
        .prepare(
          `INSERT INTO ${this.#cursors} (reader, position) VALUES (?, ?)
           ON CONFLICT(reader) DO UPDATE SET position = excluded.position`,
        )
        .run(this.readerId, cursor),
    );
    this.#position = cursor;
  }

  /** A meta entry written with write({ meta }) (null when absent). */
  readMeta(key: string): string | null {
    this.#checkOpen('readMeta');
    const row = this.#sql(() => this.#db.prepare(`SELECT value FROM ${this.#meta} WHERE key = ?`).get(key)) as
      | { value: string }
      | undefined;
    return row?.value ?? null;
  }

  /** Rows in id order without touching any cursor (viewers, debugging). */
  peek(options: { afterId?: number; offset?: number; limit: number }): StoredExperience[] {
    this.#checkOpen('peek');
    return this.#sql(() => this.#statements.page.all(options.afterId ?? 0, options.limit, options.offset ?? 0)).map((row) => ({
      id: row.id,
      experience: this.#parse(row.id, row.data),
    }));
  }

  /** Reader `reader`'s priority replay state in this file's <t>_replay tables (./sql-replay-store.ts). */
  replayStore(reader: string): ReplayStore {
    return sqlReplayStore(this.#replaySql, this.table, reader);
  }

  /** What SQLite does its own way for the replay store: every call one BEGIN IMMEDIATE, a row per insert. */
  readonly #replaySql: ReplaySqlDialect = {
    run: (what, _kind, steps) => {
      this.#checkOpen(what);
      return Promise.resolve(
        this.#sql(() => inWriteTransaction(this.#db, () => runStepsSync(steps(), (statement) => this.#execute(statement)))),
      );
    },
    insertEntries: (entries, reader, put, added) =>
      put.map((e) => ({
        text: `INSERT INTO ${entries} (reader, seq, id, model_version, use_count, priority, available_at, added)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
        values: [reader, e.seq, e.id, e.modelVersion, e.useCount, e.priority, e.availableAt, added],
      })),
    oneOf: (column, values) => ({ text: `${column} IN (SELECT value FROM json_each(?))`, values: [JSON.stringify(values)] }),
    error: (_what, detail) => new Error(`buffer '${this.name}': ${this.path}: ${detail}`),
    experience: (id, data) => this.#parse(id, data),
  };

  /** Runs one statement (prepared once per text): a query's rows, else none. */
  #execute({ text, values }: SqlStatement): SqlRow[] {
    let statement = this.#prepared.get(text);
    if (statement === undefined) {
      statement = this.#db.prepare(text);
      this.#prepared.set(text, statement);
    }
    if (statement.reader) return statement.all(...values) as SqlRow[];
    statement.run(...values);
    return [];
  }

  async finishWriting(): Promise<void> {
    this.#checkOpen('finishWriting');
    this.#sql(() => this.#db.prepare(`INSERT OR REPLACE INTO ${this.#meta} (key, value) VALUES ('writer_finished', '1')`).run());
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#db.close();
  }

  #take(n: number): SqliteBatch {
    const rows = this.#sql(() => this.#statements.rowsAfter.all(this.#position, n));
    const experiences = rows.map((row) => this.#parse(row.id, row.data));
    const last = rows.at(-1);
    if (last !== undefined) this.#position = last.id;
    return { experiences, cursor: this.#position, ids: rows.map((row) => row.id) };
  }

  #parse(id: number, data: string): Experience {
    try {
      return JSON.parse(data) as Experience;
    } catch (error) {
      throw new Error(`buffer '${this.name}': ${this.path} table ${this.table} row ${id}: bad JSON: ${(error as Error).message}`);
    }
  }

  #checkOpen(what: string): void {
    if (this.#closed) throw new BufferClosedError(this.name, `cannot ${what}`);
  }
}
