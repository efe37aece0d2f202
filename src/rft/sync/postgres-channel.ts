// The weight channel between a trainer process (mode train) and explorer processes (mode explore) through the
// PostgreSQL buffer's database: the sync pointer, the sync requests (sync_style explorer_driven) and the trainer's
// finished marker are one row that every process reaches wherever it runs. The weights themselves stay files: the
// trainer writes `<its job dir>/sync/version_<N>/` (./sync-folder.ts's saveSyncVersion) and the row holds that
// absolute path, which every explorer's engine must be able to read (shared storage mounted at the same path on
// every machine; docs/distributed.md).
//
// Table (t = the buffer's table, "experiences" by default), registered in schema_version with its own version:
//   t_sync (id = 1, revision, version, dir, requested, answered, finished_step, finished_revision)
//     revision            bumped by every change: a process keeps the newest row it read
//     version, dir        the pointer (null: nothing published yet)
//     requested/answered  explorer_driven: an explorer's request is number `requested + 1`; the trainer answers every
//                         request it saw after publishing (answered = that number); pending: requested > answered
//     finished_step       the trainer's last step once it stopped; finished_revision: the revision of that change, so
//                         an explorer ignores a marker older than itself (a finished run's), as the folder's mtime did
//
// Every change is one UPDATE that also sends NOTIFY t_sync (delivered at commit). Each process holds a LISTEN
// connection and re-reads the row when notified, so `requestPending()` (the trainer, between buffer reads) answers
// from memory, and explorers waiting for a version or an answer wake on the change (no polling; the synchronizer's
// timeout is the only timer). A dropped LISTEN connection is remade and the row re-read before the next wait
// (../store/postgres-listen.ts).
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import {
  CONNECT_TIMEOUT_MS,
  hidePassword,
  lockSchema,
  messageOf,
  PostgresDatabase,
  postgresTarget,
  runTransaction,
  schemaVersion,
  setSchemaVersion,
  urlPassword,
} from '../store/postgres.js';
import { PostgresListener } from '../store/postgres-listen.js';
import { newerSchemaProblem } from '../store/schema-version.js';
import { saveSyncVersion } from './sync-folder.js';
import {
  type ProcessReceiverOptions,
  type ProcessWeightChannel,
  Signal,
  type SyncPointer,
  SyncTimeoutError,
  type WeightPublisher,
  type WeightReceiver,
  type WeightSaver,
} from './weight-channel.js';

/** The layout of the sync table this code writes. */
export const WEIGHT_SYNC_SCHEMA_VERSION = 1;

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/;

/** The sync row as this process last read it. */
interface SyncRow {
  revision: number;
  version: number | null;
  dir: string | null;
  requested: number;
  answered: number;
  finishedStep: number | null;
  finishedRevision: number | null;
}

interface RawRow {
  revision: string;
  version: number | null;
  dir: string | null;
  requested: string;
  answered: string;
  finished_step: number | null;
  finished_revision: string | null;
}

const parseRow = (r: RawRow): SyncRow => ({
  revision: Number(r.revision),
  version: r.version,
  dir: r.dir,
  requested: Number(r.requested),
  answered: Number(r.answered),
  finishedStep: r.finished_step,
  finishedRevision: r.finished_revision === null ? null : Number(r.finished_revision),
});

export interface PostgresWeightChannelOptions {
  /** postgresql://user:password@host:port/database (the shared buffer's). */
  url: string;
  /** The buffer's table prefix (default "experiences"): the row lives in `<table>_sync`. */
  table?: string;
  /** The trainer's job folder: it writes the version folders under `<jobDir>/sync/`. */
  jobDir: string;
  /** How long connecting may take (default 10 s). */
  connectTimeoutMs?: number;
}

/** The sync row of one buffer, kept current by notifications. */
export class PostgresWeightChannel implements ProcessWeightChannel {
  readonly location: string;
  /** Wakes waiters whenever the row (or the listening connection) changed. */
  readonly changed = new Signal();
  readonly #options: PostgresWeightChannelOptions;
  readonly #table: string;
  readonly #password: string;
  readonly #db: PostgresDatabase;
  readonly #listener: PostgresListener;
  readonly #publishers: PostgresWeightPublisher[] = [];
  #row: SyncRow = {
    revision: -1,
    version: null,
    dir: null,
    requested: 0,
    answered: 0,
    finishedStep: null,
    finishedRevision: null,
  };
  #closed = false;

  private constructor(options: PostgresWeightChannelOptions) {
    this.#options = options;
    this.#table = `${(options.table ?? 'experiences').toLowerCase()}_sync`;
    const target = postgresTarget(options.url);
    this.location = `${target.display} table ${this.#table}`;
    this.#password = urlPassword(options.url);
    if (!IDENTIFIER.test(this.#table))
      throw new Error(`weight sync: table name '${this.#table}' must be an identifier of at most 40 characters`);
    const connection = { url: options.url, connectTimeoutMs: options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS };
    this.#db = new PostgresDatabase({ ...connection, max: 2, applicationName: 'trinity weight sync' }, (what, error) =>
      this.#error(what, error),
    );
    this.#listener = new PostgresListener({
      ...connection,
      applicationName: 'trinity weight sync (listen)',
      channel: this.#table,
      // a new connection re-reads the row: a change while none was up is not missed
      onConnected: () => this.refresh(),
      // a failed re-read drops the connection: the next listen() connects and reads again, or reports why not
      onNotification: (drop) => {
        this.refresh().catch(drop);
      },
      onDropped: () => this.changed.notify(),
      nameError: (error) => this.#error('listen for weight sync changes', error),
    });
  }

  /** Connects, creates or checks the sync table, listens for its changes and reads the row. */
  static async open(options: PostgresWeightChannelOptions): Promise<PostgresWeightChannel> {
    const channel = new PostgresWeightChannel(options);
    try {
      await channel.#setUp();
      await channel.listen();
      return channel;
    } catch (error) {
      await channel.close().catch(() => {});
      throw error;
    }
  }

  /** The row as last read (a notification re-reads it). */
  get row(): Readonly<SyncRow> {
    return this.#row;
  }

  /** False while no LISTEN connection is up (the next listen() makes one). */
  get listening(): boolean {
    return this.#listener.listening;
  }

  async latest(): Promise<SyncPointer | null> {
    await this.listen();
    const { version, dir } = this.#row;
    return version === null || dir === null ? null : { version, dir };
  }

  publisher(trainer: WeightSaver): PostgresWeightPublisher {
    const publisher = new PostgresWeightPublisher(this, trainer, this.#options.jobDir);
    this.#publishers.push(publisher);
    return publisher;
  }

  receiver(options: ProcessReceiverOptions): WeightReceiver {
    return new PostgresWeightReceiver(this, options);
  }

  /** Waits for the publishers' last writes (the finished marker), then disconnects; a failed write is thrown here. */
  async close(): Promise<void> {
    if (this.#closed) return;
    const flushed = await Promise.allSettled(this.#publishers.map((p) => p.flush()));
    this.#closed = true;
    const listenerClosed = this.#listener.close();
    this.changed.notify();
    await Promise.allSettled([this.#db.end(), listenerClosed]);
    for (const result of flushed) if (result.status === 'rejected') throw result.reason;
  }

  /** Makes sure a LISTEN connection is up; a new one re-reads the row (a change while none was up is not missed). */
  async listen(): Promise<void> {
    if (this.#closed) throw new Error(`weight sync in ${this.location}: closed`);
    await this.#listener.listen();
  }

  /** Reads the row and keeps it when it is newer than the one held. */
  async refresh(): Promise<void> {
    const { rows } = await this.#db.query<RawRow>('read the sync row', `SELECT * FROM ${this.#table} WHERE id = 1`, []);
    const raw = rows[0];
    if (raw === undefined) throw this.#error('read the sync row', `table ${this.#table} has no row 1`);
    this.#keep(parseRow(raw));
  }

  /** One change of the row (`set`: assignments, parameters from $2), notified to every listener at commit. */
  async update(what: string, set: string, values: unknown[]): Promise<Readonly<SyncRow>> {
    const { rows } = await this.#db.query<RawRow>(
      what,
      `WITH changed AS (UPDATE ${this.#table} SET ${set}, revision = revision + 1 WHERE id = 1 RETURNING *)
       SELECT changed.*, pg_notify($1, changed.revision::text) FROM changed`,
      [this.#table, ...values],
    );
    const raw = rows[0];
    if (raw === undefined) throw this.#error(what, `table ${this.#table} has no row 1`);
    const row = parseRow(raw);
    this.#keep(row);
    return row;
  }

  #keep(row: SyncRow): void {
    if (row.revision < this.#row.revision) return; // an older read that came back late
    this.#row = row;
    this.changed.notify();
  }

  async #setUp(): Promise<void> {
    const client = await this.#db.pool.connect().catch((error: unknown) => {
      throw this.#error('connect', error);
    });
    try {
      await runTransaction(client, async () => {
        // one process creates the tables; the others wait here, then find them
        await lockSchema(client);
        const found = await schemaVersion(client, this.#table);
        const problem = newerSchemaProblem(this.#table, found, WEIGHT_SYNC_SCHEMA_VERSION);
        if (problem !== null) throw new Error(problem);
        if (found === null) {
          await client.query(`
            CREATE TABLE IF NOT EXISTS ${this.#table} (
              id INTEGER PRIMARY KEY CHECK (id = 1),
              revision BIGINT NOT NULL,
              version INTEGER,
              dir TEXT,
              requested BIGINT NOT NULL,
              answered BIGINT NOT NULL,
              finished_step INTEGER,
              finished_revision BIGINT
            );
            INSERT INTO ${this.#table} (id, revision, requested, answered) VALUES (1, 0, 0, 0) ON CONFLICT (id) DO NOTHING;
          `);
          await setSchemaVersion(client, this.#table, WEIGHT_SYNC_SCHEMA_VERSION);
        }
      });
    } catch (error) {
      throw this.#error('create the weight sync table', error);
    }
  }

  #error(what: string, error: unknown): Error {
    const detail = hidePassword(messageOf(error), this.#password);
    return new Error(`weight sync in ${this.location} (${hostname()}): cannot ${what}: ${detail}`, { cause: error });
  }
}

/** Mode train: the trainer process's side. Its answers and its finished marker are written in order, in the background
 * (the WeightPublisher contract is synchronous there); a failed write fails the next call, and close() waits for them. */
export class PostgresWeightPublisher implements WeightPublisher {
  readonly #channel: PostgresWeightChannel;
  readonly #trainer: WeightSaver;
  readonly #jobDir: string;
  #writes: Promise<void> = Promise.resolve();
  #failed: unknown = null;
  /** The highest request number answered here (the row learns it when the write lands). */
  #answered = 0;

  constructor(channel: PostgresWeightChannel, trainer: WeightSaver, jobDir: string) {
    this.#channel = channel;
    this.#trainer = trainer;
    this.#jobDir = jobDir;
    // a restarted trainer: explorers wait for it again
    this.#background('clear the finished marker', 'finished_step = NULL, finished_revision = NULL', []);
  }

  async publish(version: number): Promise<void> {
    this.#throwIfFailed();
    const dir = await saveSyncVersion(this.#trainer, this.#jobDir, version, this.#channel.row.dir ?? undefined);
    await this.#enqueue(`publish weights version ${version}`, 'version = $2, dir = $3', [version, dir]);
  }

  requestPending(): boolean {
    this.#throwIfFailed();
    // the LISTEN connection dropped: remake it (and re-read the row) for the next look
    if (!this.#channel.listening) this.#channel.listen().catch(() => {});
    const row = this.#channel.row;
    return row.requested > Math.max(row.answered, this.#answered);
  }

  answerRequest(): void {
    const seen = this.#channel.row.requested;
    this.#answered = Math.max(this.#answered, seen);
    this.#background(`answer sync request ${seen}`, 'answered = GREATEST(answered, $2)', [seen]);
  }

  finish(lastStep: number): void {
    this.#background(`mark the trainer finished at step ${lastStep}`, 'finished_step = $2, finished_revision = revision + 1', [
      lastStep,
    ]);
  }

  /** Resolves once every write made so far landed; rejects with the first that failed. */
  async flush(): Promise<void> {
    await this.#writes;
    this.#throwIfFailed();
  }

  #enqueue(what: string, set: string, values: unknown[]): Promise<void> {
    const write = this.#writes.then(async () => {
      await this.#channel.update(what, set, values);
    });
    this.#writes = write.catch((error: unknown) => {
      this.#failed ??= error;
    });
    return write;
  }

  #background(what: string, set: string, values: unknown[]): void {
    this.#enqueue(what, set, values).catch(() => {}); // kept in #failed
  }

  #throwIfFailed(): void {
    if (this.#failed !== null) throw this.#failed;
  }
}

/** Mode explore: an explorer process loading what the trainer process published. */
export class PostgresWeightReceiver implements WeightReceiver {
  readonly #channel: PostgresWeightChannel;
  readonly #options: ProcessReceiverOptions;
  /** Finished markers written at or before this revision are an earlier run's. */
  readonly #startedRevision: number;
  #version: number;

  constructor(channel: PostgresWeightChannel, options: ProcessReceiverOptions) {
    this.#channel = channel;
    this.#options = options;
    this.#version = options.startVersion;
    this.#startedRevision = channel.row.revision;
  }

  get version(): number {
    return this.#version;
  }

  waitForVersion(version: number, what: string): Promise<void> {
    return this.#wait(() => {
      if (this.#version >= version) return true;
      if (this.trainerFinished)
        throw new Error(
          `the trainer process finished (its last step ${this.#channel.row.finishedStep}, in ${this.#channel.location}) ` +
            `without publishing ${what}`,
        );
      return false;
    }, `${what} (have weights version ${this.#version})`);
  }

  async requestWeights(what: string): Promise<void> {
    await this.#channel.listen();
    await this.#follow();
    const { requested } = await this.#channel.update(
      `ask the trainer for its newest weights (${what})`,
      'requested = requested + 1',
      [],
    );
    await this.#wait(() => this.#channel.row.answered >= requested || this.trainerFinished, what);
  }

  withWeights<T>(work: () => Promise<T>): Promise<T> {
    // this process updates its weights between steps, in waitForVersion / requestWeights (fully_async: through the
    // gate, from followPublishedWeights)
    return work();
  }

  get trainerFinished(): boolean {
    const { finishedRevision } = this.#channel.row;
    return finishedRevision !== null && finishedRevision > this.#startedRevision;
  }

  /** Loads the newest published weights when they are newer than the engine's. */
  async #follow(): Promise<void> {
    const { version, dir } = this.#channel.row;
    if (version === null || dir === null || version <= this.#version) return;
    // fully_async: between two model calls, mid-step; otherwise the explorer is between steps here
    const gate = this.#options.swapGate;
    await (gate ? gate.swap(() => this.#load(version, dir)) : this.#load(version, dir));
  }

  async #load(version: number, dir: string): Promise<void> {
    if (version <= this.#version) return; // a swap asked earlier loaded it meanwhile
    try {
      await this.#options.engine.syncWeightsFromDir(dir, { timeoutMs: this.#options.timeoutMs });
    } catch (error) {
      const hint = existsSync(dir)
        ? ''
        : ` (there is no such folder on ${hostname()}: the trainer's job folder must be on storage every explorer ` +
          'machine mounts at the same path)';
      throw new Error(
        `loading weights version ${version} from ${dir} (sync pointer in ${this.#channel.location})${hint}: ` +
          `${(error as Error).message}`,
        { cause: error },
      );
    }
    this.#version = version;
    this.#options.onVersion?.(version);
  }

  /** Follows the pointer until `done`, waking on every change of the row; the synchronizer's timeout bounds it. */
  async #wait(done: () => boolean, what: string): Promise<void> {
    const { timeoutMs, signal } = this.#options;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (signal?.aborted) throw new Error(`stopped while waiting for ${what}`);
      await this.#channel.listen();
      await this.#follow();
      if (done()) return;
      const seen = this.#channel.row.revision;
      const remaining = deadline - Date.now();
      const timedOut = new SyncTimeoutError(
        `timed out after ${timeoutMs} ms waiting for ${what} (sync state in ${this.#channel.location})`,
      );
      if (remaining <= 0) throw timedOut;
      try {
        await this.#channel.changed.waitUntil(
          () => this.#channel.row.revision !== seen || !this.#channel.listening,
          remaining,
          what,
          signal,
        );
      } catch (error) {
        throw signal?.aborted ? error : timedOut;
      }
    }
  }
}
