// Durable experience buffer in PostgreSQL (`storage_type: sql` with `path: postgresql://user:pass@host:port/db`):
// the SqliteBuffer's contract (./shared.ts) for explorers and trainers on several machines.
//
// Tables (t = options.table, default "experiences"; ./shared.ts passes experience_buffer.name, in lower case; quoted
// in every statement, ./sql-names.ts):
//   schema_version (table_name TEXT PRIMARY KEY, version INTEGER)  the layout version of each buffer's tables
//   t          (id BIGSERIAL PRIMARY KEY, eid TEXT UNIQUE, task_id, model_version, reward, created_at, data TEXT)
//   t_cursors  (reader TEXT PRIMARY KEY, position BIGINT)   last id a reader has committed
//   t_meta     (key TEXT PRIMARY KEY, value TEXT)            writer_finished, explorer positions
//   t_replay, t_replay_revs                                  priority replay state (./sql-replay.ts, ./sql-replay-store.ts)
//
// Migrations (./postgres-tables.ts, under the schema lock, in one transaction): version 1 gets the replay tables
// (version 2). Code before experience_buffer.name named the table wrote every buffer to "experiences" at version 1: a
// buffer opened under another name that has no tables yet takes those over (renamed), so a run resumed with new code
// reads on.
//
// Ordering: a reader hands out rows `id > position ORDER BY id` and moves its position to the last id. That skips
// nothing only if no row becomes visible later with a smaller id than one already seen. PostgreSQL draws ids when a
// row is inserted, not when its transaction commits, so two concurrent writers could commit ids 6 then 5. Writers
// therefore take a transaction-scoped advisory lock (per table) before they draw ids: ids are drawn and committed in
// the same order, as with SQLite's single writer. Readers take no lock.
//
// Waiting: each write transaction sends NOTIFY on the channel t (delivered at commit); a waiting reader holds a
// LISTEN connection and re-counts when woken, with its deadline as the only timer. A notification that arrives
// between a reader's count and its wait bumps a generation number, so the reader counts again instead of sleeping.
//
// Errors name the server (host:port), database and user, never the password. The pool, transactions, LISTEN with
// reconnect, the schema lock and the redaction are ../store/postgres.ts's and ../store/postgres-listen.ts's.
import { PostgresListener } from '../store/postgres-listen.js';
import {
  CONNECT_TIMEOUT_MS,
  describeServer,
  hidePassword,
  messageOf,
  PostgresDatabase,
  type PostgresTarget,
  postgresClient,
  postgresTarget,
  urlPassword,
} from '../store/postgres.js';
import { newerSchemaProblem } from '../store/schema-version.js';
import { postgresPlaceholders, runSteps } from '../store/sql-steps.js';
import type { Experience } from '../experience.js';
import type { ReplayStore, SharedBatch, SharedExperienceBuffer, SharedWriteOptions } from './shared-contract.js';
import { createBufferTables } from './postgres-tables.js';
import { type ReplaySqlDialect, sqlReplayStore } from './sql-replay-store.js';
import {
  BUFFER_SCHEMA_VERSION,
  bufferTablesAmong,
  LEGACY_TABLE,
  onlyBufferTable,
  quoteIdentifier as q,
  tableNameProblem,
} from './sql-names.js';
import type { StoredExperience } from './sqlite.js';
import { BufferClosedError, BufferTimeoutError, checkReadArgs, type ReadOptions, Waiters } from './types.js';

// the URL plumbing lives in ../store/postgres.ts; these names stay importable from the buffer
export {
  isPostgresUrl,
  type PostgresTarget,
  postgresTarget,
  postgresUrlWithoutPassword,
  runTransaction,
} from '../store/postgres.js';

/** The layout of the tables this code writes (./sql-names.ts); a database with a newer one was written by a newer trinity. */
export const POSTGRES_SCHEMA_VERSION = BUFFER_SCHEMA_VERSION;

/** An error from the server or the connection, naming the buffer, the server and the database. */
export class PostgresBufferError extends Error {
  /** PostgreSQL's SQLSTATE or Node's errno code (ECONNREFUSED...). */
  readonly code: string | undefined;

  constructor(buffer: string, target: PostgresTarget, what: string, detail: string, cause?: unknown) {
    super(`buffer '${buffer}': ${describeServer(target)}: ${what}: ${detail}`, cause === undefined ? undefined : { cause });
    this.name = 'PostgresBufferError';
    const code = (cause as { code?: unknown } | undefined)?.code;
    this.code = typeof code === 'string' ? code : undefined;
  }
}

export interface PostgresBufferOptions {
  /** postgresql://user:password@host:port/database */
  url: string;
  /** Name in errors (default: the table name). */
  name?: string;
  /** Table name prefix, so one database holds several buffers (default "experiences"; read-only: the only buffer). */
  table?: string;
  /** Whose read position this handle uses and commits (default "trainer"); one process per reader id. */
  readerId?: string;
  /** Open without creating or writing anything (viewers): the tables must exist. */
  readonly?: boolean;
  /** Connections for queries (default 4); a waiting reader holds one more for LISTEN. */
  poolSize?: number;
  /** How long connecting may take before it fails (default 10 s). */
  connectTimeoutMs?: number;
}

interface Row {
  id: string;
  data: string;
}

export class PostgresBuffer implements SharedExperienceBuffer {
  readonly name: string;
  readonly table: string;
  readonly readerId: string;
  readonly readonly: boolean;
  readonly target: PostgresTarget;
  readonly #password: string;
  readonly #db: PostgresDatabase;
  readonly #readers = new Waiters();
  /** The LISTEN connection (made by the first read that waits; remade after it drops). */
  readonly #listener: PostgresListener;
  /** Bumped by every notification: a read that saw it change between its count and its wait counts again. */
  #generation = 0;
  /** Last id handed out by this handle (starts at the committed position). */
  #position = 0;
  /** Rows after the position at the last look (see size). */
  #lastAvailable = 0;
  #closed = false;
  /** Resolvers of whenWaiting(). */
  #onWait: (() => void)[] = [];
  #lookups = 0;
  /** The quoted table names: the rows, the cursors, the meta entries. */
  readonly #t: string;
  readonly #cursors: string;
  readonly #meta: string;
  /** The legacy table this open took over (see the header); null: none. */
  migratedFrom: string | null = null;

  private constructor(options: PostgresBufferOptions) {
    this.target = postgresTarget(options.url);
    this.#password = urlPassword(options.url);
    this.table = (options.table ?? LEGACY_TABLE).toLowerCase();
    this.name = options.name ?? this.table;
    this.readerId = options.readerId ?? 'trainer';
    this.readonly = options.readonly ?? false;
    const problem = tableNameProblem(this.table);
    if (problem !== null) throw new Error(`buffer '${this.name}': table name ${problem}`);
    this.#t = q(this.table);
    this.#cursors = q(`${this.table}_cursors`);
    this.#meta = q(`${this.table}_meta`);
    const connectTimeoutMs = options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS;
    this.#db = new PostgresDatabase(
      {
        url: options.url,
        max: options.poolSize ?? 4,
        connectTimeoutMs,
        applicationName: `trinity buffer ${this.name}`,
        // a read-only handle cannot write even by mistake: the server refuses writes in every transaction it opens
        readonly: this.readonly,
      },
      (what, error) => this.#wrap(what, error),
    );
    // a write, or a dropped connection: waiting reads count again (and listen again), nothing is missed
    const wake = () => {
      this.#generation++;
      this.#readers.notifyAll();
    };
    this.#listener = new PostgresListener({
      url: options.url,
      connectTimeoutMs,
      channel: this.#t,
      onNotification: wake,
      onDropped: wake,
      nameError: (error) => this.#wrap('listen for writes', error),
    });
  }

  /** Connects, creates or checks the tables, and starts at this reader's committed position. */
  static async open(options: PostgresBufferOptions): Promise<PostgresBuffer> {
    // read-only without a table: the database's only buffer (viewers)
    const table =
      options.table ??
      (options.readonly
        ? onlyBufferTable(await PostgresBuffer.bufferTables(options.url), postgresTarget(options.url).display)
        : undefined);
    const buffer = new PostgresBuffer({ ...options, ...(table !== undefined ? { table } : {}) });
    try {
      await buffer.#setUp();
      buffer.#position = await buffer.committedPosition();
      return buffer;
    } catch (error) {
      await buffer.#db.end().catch(() => {});
      throw error;
    }
  }

  /** The buffer tables in the database at `url` (viewers). */
  static async bufferTables(url: string): Promise<string[]> {
    const target = postgresTarget(url);
    const client = postgresClient({ url });
    try {
      await client.connect();
      const { rows } = await client.query<{ name: string }>(
        'SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema()',
      );
      return bufferTablesAmong(rows.map((r) => r.name));
    } catch (error) {
      const detail = hidePassword(messageOf(error), urlPassword(url));
      throw new PostgresBufferError('viewer', target, 'list the buffer tables', detail, error);
    } finally {
      await client.end().catch(() => {});
    }
  }

  get location(): string {
    return `${this.target.display} table ${this.table}`;
  }

  /** How many times reads counted the rows (one per look: the first, then one per wake-up). */
  get lookups(): number {
    return this.#lookups;
  }

  /** Rows this reader had not been handed yet at its last look (a read or available()): a network count is async. */
  get size(): number {
    return this.#lastAvailable;
  }

  /** Rows this reader has not been handed yet. */
  async available(): Promise<number> {
    this.#checkOpen('count');
    const { rows } = await this.#db.query<{ n: string }>('count rows', `SELECT count(*) AS n FROM ${this.#t} WHERE id > $1`, [
      this.#position,
    ]);
    this.#lastAvailable = Number(rows[0]?.n ?? 0);
    return this.#lastAvailable;
  }

  /** Rows in the table. */
  get total(): Promise<number> {
    this.#checkOpen('total');
    return this.#db
      .query<{ n: string }>('count rows', `SELECT count(*) AS n FROM ${this.#t}`)
      .then((r) => Number(r.rows[0]?.n ?? 0));
  }

  /** The position persisted by the last commit of this reader id (0 = nothing committed). */
  async committedPosition(): Promise<number> {
    const { rows } = await this.#db.query<{ position: string }>(
      'read the committed position',
      `SELECT position FROM ${this.#cursors} WHERE reader = $1`,
      [this.readerId],
    );
    return Number(rows[0]?.position ?? 0);
  }

  /**
   * Stores experiences in one transaction; duplicates (same eid) are ignored. Resolves with how many were new.
   * `meta` entries are written in the same transaction.
   */
  async write(experiences: readonly Experience[], options: SharedWriteOptions = {}): Promise<number> {
    this.#checkOpen('write');
    this.#checkWritable('write');
    const t = this.table;
    const meta = Object.entries(options.meta ?? {});
    return this.#db.transaction(`write ${experiences.length} experiences`, async (client) => {
      // ids drawn and committed in lock order: see the header
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`trinity:${t}`]);
      if (meta.length > 0)
        await client.query(
          `INSERT INTO ${this.#meta} (key, value) SELECT * FROM unnest($1::text[], $2::text[])
           ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
          [meta.map(([k]) => k), meta.map(([, v]) => v)],
        );
      let inserted = 0;
      if (experiences.length > 0) {
        const result = await client.query(
          `INSERT INTO ${this.#t} (eid, task_id, model_version, reward, created_at, data)
           SELECT r.eid, r.task_id, r.model_version, r.reward, $6, r.data
           FROM unnest($1::text[], $2::text[], $3::bigint[], $4::float8[], $5::text[])
             WITH ORDINALITY AS r(eid, task_id, model_version, reward, data, ord)
           ORDER BY r.ord
           ON CONFLICT (eid) DO NOTHING`,
          [
            experiences.map((e) => e.eid),
            experiences.map((e) => (e.info.taskId === undefined ? null : String(e.info.taskId))),
            experiences.map((e) => (Number.isSafeInteger(e.info.modelVersion) ? e.info.modelVersion : null)),
            experiences.map((e) => (typeof e.reward === 'number' ? e.reward : null)),
            experiences.map((e) => JSON.stringify(e)),
            Date.now(),
          ],
        );
        inserted = result.rowCount ?? 0;
      }
      // new data after a finish (a restarted explorer) reopens the buffer for readers
      if (inserted > 0) await client.query(`DELETE FROM ${this.#meta} WHERE key = 'writer_finished'`);
      if (inserted > 0 || meta.length > 0) await client.query('SELECT pg_notify($1, $2)', [t, '']);
      return inserted;
    });
  }

  async read(n: number, options: ReadOptions): Promise<Experience[]> {
    return (await this.readBatch(n, options)).experiences;
  }

  /**
   * Waits (LISTEN/NOTIFY) for n rows after this reader's position, hands them out and advances the in-memory
   * position. Nothing is persisted until commit(cursor).
   */
  async readBatch(n: number, options: ReadOptions): Promise<SharedBatch> {
    const minCount = checkReadArgs(this.name, n, options);
    const deadline = Date.now() + options.timeoutMs;
    for (;;) {
      this.#checkOpen(`read of ${n} experiences`);
      // listening before counting: a write committed after the count wakes the wait below
      if (options.timeoutMs > 0) await this.#listener.listen();
      const generation = this.#generation;
      // one statement, one snapshot: the count and the finished flag agree
      const { rows } = await this.#db.query<{ available: string; finished: boolean }>(
        'count rows',
        `SELECT (SELECT count(*) FROM ${this.#t} WHERE id > $1) AS available,
                EXISTS (SELECT 1 FROM ${this.#meta} WHERE key = 'writer_finished' AND value = '1') AS finished`,
        [this.#position],
      );
      this.#lookups++;
      const available = Number(rows[0]?.available ?? 0);
      const finished = rows[0]?.finished === true;
      this.#lastAvailable = available;
      const timedOut = Date.now() >= deadline;
      if (available >= n || finished || (timedOut && available >= minCount)) return this.#take(n);
      if (timedOut) {
        throw new BufferTimeoutError(
          this.name,
          `${n} experiences from ${this.location} for reader '${this.readerId}' after position ${this.#position} ` +
            `(${available} available, at least ${minCount} accepted)`,
          options.timeoutMs,
        );
      }
      if (generation !== this.#generation) continue;
      const waiting = this.#readers.wait(deadline);
      for (const resolve of this.#onWait.splice(0)) resolve();
      await waiting;
    }
  }

  /** Resolves when a read next starts waiting for writes (tests and diagnostics wait on it instead of on time). */
  whenWaiting(): Promise<void> {
    return new Promise((resolve) => this.#onWait.push(resolve));
  }

  /** Persists this reader's position (default: everything handed out so far). Never moves backwards. */
  async commit(cursor: number = this.#position): Promise<void> {
    this.#checkOpen('commit');
    this.#checkWritable('commit');
    if (!Number.isInteger(cursor) || cursor < 0 || cursor > this.#position) {
      throw new RangeError(
        `buffer '${this.name}': commit cursor ${cursor} must be an integer in [0, ${this.#position}] (handed out)`,
      );
    }
    await this.#db.query(
      'commit the read position',
      `INSERT INTO ${this.#cursors} (reader, position) VALUES ($1, $2)
       ON CONFLICT (reader) DO UPDATE SET position = GREATEST(${this.#cursors}.position, excluded.position)`,
      [this.readerId, cursor],
    );
  }

  /** Forgets uncommitted hand-outs: the next read starts again at the committed position. */
  async rewind(): Promise<void> {
    this.#checkOpen('rewind');
    this.#position = await this.committedPosition();
  }

  /** Sets and persists this reader's position to a checkpoint's cursor. */
  async restore(cursor: number): Promise<void> {
    this.#checkOpen('restore');
    this.#checkWritable('restore');
    if (!Number.isInteger(cursor) || cursor < 0)
      throw new RangeError(`buffer '${this.name}': restore cursor ${cursor} must be a non-negative integer`);
    await this.#db.query(
      'restore the read position',
      `INSERT INTO ${this.#cursors} (reader, position) VALUES ($1, $2)
       ON CONFLICT (reader) DO UPDATE SET position = excluded.position`,
      [this.readerId, cursor],
    );
    this.#position = cursor;
  }

  /** A meta entry written with write({ meta }) (null when absent). */
  async readMeta(key: string): Promise<string | null> {
    this.#checkOpen('readMeta');
    const { rows } = await this.#db.query<{ value: string }>('read meta', `SELECT value FROM ${this.#meta} WHERE key = $1`, [
      key,
    ]);
    return rows[0]?.value ?? null;
  }

  /** Rows in id order without touching any cursor (viewers, debugging). */
  async peek(options: { afterId?: number; offset?: number; limit: number }): Promise<StoredExperience[]> {
    this.#checkOpen('peek');
    const { rows } = await this.#db.query<Row>(
      'read rows',
      `SELECT id, data FROM ${this.#t} WHERE id > $1 ORDER BY id LIMIT $2 OFFSET $3`,
      [options.afterId ?? 0, options.limit, options.offset ?? 0],
    );
    return rows.map((row) => ({ id: Number(row.id), experience: this.#parse(row) }));
  }

  /** Reader `reader`'s priority replay state in this database's <t>_replay tables (./sql-replay-store.ts). */
  replayStore(reader: string): ReplayStore {
    return sqlReplayStore(this.#replaySql, this.table, reader);
  }

  /** What PostgreSQL writes its own way for the replay store: arrays in one statement, a snapshot for a load. */
  readonly #replaySql: ReplaySqlDialect = {
    run: async (what, kind, steps) => {
      this.#checkOpen(what);
      if (kind === 'read')
        return runSteps(
          steps(),
          async ({ text, values }) => (await this.#db.query(what, postgresPlaceholders(text), values)).rows,
        );
      this.#checkWritable(what);
      return this.#db.transaction(what, async (client) => {
        if (kind === 'snapshot') await client.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
        return runSteps(steps(), async ({ text, values }) => (await client.query(postgresPlaceholders(text), values)).rows);
      });
    },
    insertEntries: (entries, reader, put, added) => [
      {
        text: `INSERT INTO ${entries} (reader, seq, id, model_version, use_count, priority, available_at, added)
               SELECT ?, r.seq, r.id, r.model_version, r.use_count, r.priority, r.available_at, ?
               FROM unnest(?::bigint[], ?::bigint[], ?::float8[], ?::bigint[], ?::float8[], ?::float8[])
                 AS r(seq, id, model_version, use_count, priority, available_at)`,
        values: [
          reader,
          added,
          put.map((e) => e.seq),
          put.map((e) => e.id),
          put.map((e) => e.modelVersion),
          put.map((e) => e.useCount),
          put.map((e) => e.priority),
          put.map((e) => e.availableAt),
        ],
      },
    ],
    oneOf: (column, values) => ({ text: `${column} = ANY(?::bigint[])`, values: [[...values]] }),
    error: (what, detail) => this.#error(what, detail),
    experience: (id, data) => this.#parse({ id: String(id), data }),
  };

  async finishWriting(): Promise<void> {
    this.#checkOpen('finishWriting');
    this.#checkWritable('finishWriting');
    await this.#db.transaction('mark the writer finished', async (client) => {
      await client.query(
        `INSERT INTO ${this.#meta} (key, value) VALUES ('writer_finished', '1')
         ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
      );
      await client.query('SELECT pg_notify($1, $2)', [this.table, '']);
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#readers.fail(new BufferClosedError(this.name, 'closed while waiting'));
    await Promise.allSettled([this.#db.end(), this.#listener.close()]);
  }

  // --- internals -----------------------------------------------------------------------------------------------

  async #setUp(): Promise<void> {
    const t = this.table;
    if (this.readonly) {
      const { rows } = await this.#db.query<{ registry: boolean; buffer: boolean }>(
        'look up the buffer tables',
        "SELECT to_regclass('schema_version') IS NOT NULL AS registry, to_regclass($1) IS NOT NULL AS buffer",
        [this.#t],
      );
      if (rows[0]?.registry !== true || rows[0]?.buffer !== true)
        throw this.#error('open read-only', `there is no buffer table '${t}'`);
      const version = await this.#db.query<{ version: number }>(
        'read the schema version',
        'SELECT version FROM schema_version WHERE table_name = $1',
        [t],
      );
      this.#checkVersion(version.rows[0]?.version ?? null);
      return;
    }
    await this.#db.transaction('create the buffer tables', async (client) => {
      if (await createBufferTables(client, this.table, (version) => this.#checkVersion(version)))
        this.migratedFrom = LEGACY_TABLE;
    });
  }

  #checkVersion(version: number | null): void {
    const problem = newerSchemaProblem(this.table, version, POSTGRES_SCHEMA_VERSION);
    if (problem !== null) throw this.#error('open', `${problem}; upgrade this one, or use another table or database`);
  }

  async #take(n: number): Promise<SharedBatch> {
    const { rows } = await this.#db.query<Row>(
      'read rows',
      `SELECT id, data FROM ${this.#t} WHERE id > $1 ORDER BY id LIMIT $2`,
      [this.#position, n],
    );
    const experiences = rows.map((row) => this.#parse(row));
    const last = rows.at(-1);
    if (last !== undefined) this.#position = Number(last.id);
    this.#lastAvailable = Math.max(0, this.#lastAvailable - rows.length);
    return { experiences, cursor: this.#position, ids: rows.map((row) => Number(row.id)) };
  }

  #wrap(what: string, error: unknown): PostgresBufferError {
    if (error instanceof PostgresBufferError) return error;
    const message = messageOf(error);
    const code = (error as { code?: unknown }).code;
    const hint =
      code === 'ECONNREFUSED'
        ? ' (is the server running, and listening on that address?)'
        : code === '28P01'
          ? ' (check the user and password in the URL)'
          : code === '3D000'
            ? ' (create the database first: CREATE DATABASE)'
            : '';
    return this.#error(what, `${this.#redact(message)}${hint}`, error);
  }

  #error(what: string, detail: string, cause?: unknown): PostgresBufferError {
    return new PostgresBufferError(this.name, this.target, what, this.#redact(detail), cause);
  }

  #redact(text: string): string {
    return hidePassword(text, this.#password);
  }

  #parse(row: Row): Experience {
    try {
      return JSON.parse(row.data) as Experience;
    } catch (error) {
      throw this.#error('read rows', `table ${this.table} row ${row.id}: bad JSON: ${(error as Error).message}`);
    }
  }

  #checkOpen(what: string): void {
    if (this.#closed) throw new BufferClosedError(this.name, `cannot ${what}`);
  }

  #checkWritable(what: string): void {
    if (this.readonly) throw new Error(`buffer '${this.name}': cannot ${what}: opened read-only (${this.location})`);
  }
}
