// Priority replay over the shared sql buffer (`storage_type: sql` with `replay_buffer.enable`), on SQLite and
// PostgreSQL alike: the rules are the in-memory replay's (ReplayEntries, ./priority.ts: the same priority functions,
// use counts, cooldowns, capacity and noise, so the same writes give the same reads), the state lives in the
// database, and the cursor contract of the shared buffer holds (read, commit at checkpoint, re-delivery after a crash).
//
//   rows (explorers write)  ──ingest in id order──▶  replay entries (row id, seq, use count, priority, cooldown)
//                                                     ──read: highest priority first──▶ trainer
//
// Revisions. Every look at the buffer that changes the replay (rows taken in, a batch handed out) makes the next
// revision r and stores it before the batch is handed out, in one transaction (./shared-contract.ts ReplayStore):
// the entries it put (rows in, re-inserted after a use), the entries it dropped (taken, evicted), and its scalars
// (last row id taken in, next seq, noise draws, time). A batch's cursor is its revision. commit(r) at a checkpoint
// makes r the committed revision and forgets what only older revisions needed, in the same transaction as the
// cursor of the rows taken in. restore(r) (a resumed trainer, r from its checkpoint) forgets the revisions after r —
// the reads a killed process made after its checkpoint — and loads r: the next reads are those an uninterrupted run
// made after r. Entries hold row ids, not experiences: a read fetches its rows.
// The store, one implementation over both databases: ./sql-replay-store.ts.
//
// Time: availableAt is Date.now() based; a loaded revision's cooldowns run on from the load for what was left of
// them at the revision's time (as the in-memory replay's state does from the checkpoint's). The priority noise goes on
// after the revision's draws, from the replay's seed. Reuse stops while the writers are finished (writer_finished
// set), as the in-memory replay's does after finishWriting(): the trainer drains it.
//
// Writes go to the buffer underneath: explorers (and mode both's explorer, through this handle) write rows as
// always; only the reader needs the replay.
import type { Experience } from '../experience.js';
import {
  type PriorityReplayOptions,
  type ReplayEntry,
  ReplayEntries,
  type ReplayPolicy,
  resolveReplayPolicy,
} from './priority.js';
import type {
  ReplayStore,
  SharedBatch,
  SharedExperienceBuffer,
  SharedWriteOptions,
  StoredReplayEntry,
} from './shared-contract.js';
import type { StoredExperience } from './shared-contract.js';
import { BufferClosedError, BufferTimeoutError, checkReadArgs, type ReadOptions } from './types.js';

/** Rows taken in per query. */
const INGEST_CHUNK = 1000;

export class SqlReplayBuffer implements SharedExperienceBuffer {
  readonly name: string;
  readonly readerId: string;
  readonly policy: ReplayPolicy;
  readonly #inner: SharedExperienceBuffer;
  readonly #store: ReplayStore;
  readonly #entries: ReplayEntries<number>;
  /** The revision the replay is at (0: the empty start, never stored). */
  #revision = 0;
  /** The committed revision as this handle knows it. */
  #committed = 0;
  /** Last row id taken in, and as of the current revision. */
  #position = 0;
  #revisionPosition = 0;
  /** What the revision being made changed. */
  #put: StoredReplayEntry[] = [];
  #dropped: number[] = [];
  /** Rows read from the buffer underneath, not taken in yet. */
  #pending: { id: number; experience: Experience }[] = [];
  /** Revisions after #revision may be stored (an earlier process's reads after its last commit): forgotten first. */
  #laterRevisions = true;
  #closed = false;

  private constructor(inner: SharedExperienceBuffer, options: PriorityReplayOptions & { readerId: string }) {
    this.#inner = inner;
    this.name = inner.name;
    this.readerId = options.readerId;
    this.policy = resolveReplayPolicy({ ...options, name: inner.name });
    this.#store = inner.replayStore(this.readerId);
    this.#entries = new ReplayEntries<number>(this.policy);
    this.#entries.listener = {
      put: (e) => {
        this.#put.push({
          seq: e.seq,
          id: e.payload,
          modelVersion: e.modelVersion,
          useCount: e.useCount,
          priority: e.priority,
          availableAt: e.availableAt,
        });
      },
      drop: (e) => {
        this.#dropped.push(e.seq);
      },
    };
  }

  /**
   * A replay reader over `inner` (opened with its own reader id: the cursor of the rows taken in), at its committed
   * revision. `readerId` keys the replay state (default "trainer").
   */
  static async open(
    inner: SharedExperienceBuffer,
    options: PriorityReplayOptions & { readerId?: string } = {},
  ): Promise<SqlReplayBuffer> {
    const buffer = new SqlReplayBuffer(inner, { ...options, readerId: options.readerId ?? 'trainer' });
    const committed = (await buffer.#store.committedRevision()) ?? 0;
    await buffer.#load(committed);
    buffer.#committed = committed;
    return buffer;
  }

  get location(): string {
    return this.#inner.location;
  }

  get table(): string {
    return this.#inner.table;
  }

  /** Rows stored (all readers). */
  get total(): Promise<number> | number {
    return this.#inner.total;
  }

  /** Entries held, cooling ones included. */
  get size(): number {
    return this.#entries.entries.length;
  }

  /** The revision the replay is at (the cursor of its last read). */
  get revision(): number {
    return this.#revision;
  }

  /** The entries held (row ids as payloads), oldest first. */
  get entries(): readonly ReplayEntry<number>[] {
    return this.#entries.entries;
  }

  write(experiences: readonly Experience[], options?: SharedWriteOptions): Promise<number> {
    return this.#inner.write(experiences, options);
  }

  finishWriting(): Promise<void> {
    return this.#inner.finishWriting();
  }

  readMeta(key: string): Promise<string | null> | string | null {
    return this.#inner.readMeta(key);
  }

  peek(options: { afterId?: number; offset?: number; limit: number }): Promise<StoredExperience[]> | StoredExperience[] {
    return this.#inner.peek(options);
  }

  replayStore(reader: string): ReplayStore {
    return this.#inner.replayStore(reader);
  }

  async read(n: number, options: ReadOptions): Promise<Experience[]> {
    return (await this.readBatch(n, options)).experiences;
  }

  /**
   * Waits until `n` entries are readable (rows written, cooldowns run out), or the writers finished and nothing cools;
   * hands out the highest-priority ones, as the in-memory replay's read(). The cursor is the revision it made.
   */
  async readBatch(n: number, options: ReadOptions): Promise<SharedBatch> {
    const minCount = checkReadArgs(this.name, n, options);
    const deadline = Date.now() + options.timeoutMs;
    for (;;) {
      this.#checkOpen(`read of ${n} experiences`);
      // the flag before the rows: every row written before the finish is taken in below
      const finished = (await this.#inner.readMeta('writer_finished')) === '1';
      const now = Date.now();
      await this.#ingest(now);
      const available = this.#entries.availableCount(now);
      const cooling = this.#entries.entries.length - available;
      const timedOut = now >= deadline;
      if (available >= n || (finished && cooling === 0) || (timedOut && available >= minCount)) {
        const taken = this.#entries.take(n, now, finished ? null : this.policy.reuseCooldownMs);
        await this.#saveRevision(now);
        return this.#handOut(taken);
      }
      await this.#saveRevision(now);
      if (timedOut) {
        throw new BufferTimeoutError(
          this.name,
          `${n} experiences from ${this.location} for replay reader '${this.readerId}' (${available} available, ` +
            `${cooling} cooling down, at least ${minCount} accepted)`,
          options.timeoutMs,
        );
      }
      // a write, the end of a cooldown, or the deadline, whichever comes first
      const until = Math.min(deadline, this.#entries.nextAvailableAt(now));
      if (finished) await new Promise((resolve) => setTimeout(resolve, Math.max(0, until - Date.now())));
      else {
        const batch = await this.#inner.readBatch(1, { timeoutMs: Math.max(0, until - Date.now()), minCount: 0 });
        this.#pending.push(...pairs(batch));
      }
    }
  }

  /** Makes revision `cursor` (default: the current one) the committed one; never moves backwards. */
  async commit(cursor: number = this.#revision): Promise<void> {
    this.#checkOpen('commit');
    if (!Number.isInteger(cursor) || cursor < 0 || cursor > this.#revision)
      throw new RangeError(
        `buffer '${this.name}': commit cursor ${cursor} must be an integer in [0, ${this.#revision}] (replay revisions made)`,
      );
    if (cursor <= this.#committed) return;
    await this.#store.commit(cursor, this.#inner.readerId);
    this.#committed = cursor;
  }

  /** Goes back to the committed revision (the reads after it are forgotten). */
  async rewind(): Promise<void> {
    this.#checkOpen('rewind');
    await this.restore((await this.#store.committedRevision()) ?? 0);
  }

  /** Goes back to revision `cursor` (a checkpoint's): the revisions after it are forgotten, in the database too. */
  async restore(cursor: number): Promise<void> {
    this.#checkOpen('restore');
    if (!Number.isInteger(cursor) || cursor < 0)
      throw new RangeError(`buffer '${this.name}': restore cursor ${cursor} must be a non-negative integer`);
    const committed = (await this.#store.committedRevision()) ?? 0;
    if (cursor < committed)
      throw new Error(
        `buffer '${this.name}': cannot restore replay revision ${cursor} of reader '${this.readerId}' in ${this.location}: ` +
          `revisions before the committed ${committed} are forgotten (is the checkpoint older than the last one ` +
          'committed, or was it written with replay_buffer off?)',
      );
    await this.#load(cursor);
    await this.#store.dropAfter(cursor);
    this.#laterRevisions = false;
    this.#committed = committed;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#inner.close();
  }

  // --- internals -----------------------------------------------------------------------------------------------

  /** Loads revision `revision` (0: the empty start) into memory and puts the row cursor at its position. */
  async #load(revision: number): Promise<void> {
    const stored = revision === 0 ? null : await this.#store.load(revision);
    if (revision !== 0 && stored === null)
      throw new Error(
        `buffer '${this.name}': there is no replay revision ${revision} of reader '${this.readerId}' in ${this.location} ` +
          '(was the checkpoint written with replay_buffer off, or for another buffer?)',
      );
    const now = Date.now();
    const at = stored?.revision.at ?? now;
    const entries = (stored?.entries ?? []).map(
      (e): ReplayEntry<number> => ({
        payload: e.id,
        modelVersion: e.modelVersion,
        seq: e.seq,
        useCount: e.useCount,
        priority: e.priority,
        availableAt: now + Math.max(0, e.availableAt - at),
      }),
    );
    this.#entries.replace(entries, stored?.revision.nextSeq ?? 0, {
      seed: this.policy.seed,
      draws: stored?.revision.noiseDraws ?? 0,
    });
    this.#position = stored?.revision.position ?? 0;
    this.#revisionPosition = this.#position;
    await this.#inner.restore(this.#position);
    this.#revision = revision;
    this.#put = [];
    this.#dropped = [];
    this.#pending = [];
  }

  /** Takes in every row written after the position, in id order (evicting, or dropping, as the capacity says). */
  async #ingest(now: number): Promise<void> {
    for (;;) {
      const batch = await this.#inner.readBatch(INGEST_CHUNK, { timeoutMs: 0, minCount: 0 });
      this.#pending.push(...pairs(batch));
      if (batch.experiences.length < INGEST_CHUNK) break;
    }
    for (const { id, experience } of this.#pending.splice(0)) {
      this.#entries.insert(id, experience.info.modelVersion ?? 0, experience.info.useCount ?? 0, now);
      this.#position = id;
    }
  }

  /** Stores what changed since the last revision as the next one (nothing changed: none). */
  async #saveRevision(now: number): Promise<void> {
    if (this.#put.length === 0 && this.#dropped.length === 0 && this.#position === this.#revisionPosition) return;
    if (this.#laterRevisions) {
      await this.#store.dropAfter(this.#revision);
      this.#laterRevisions = false;
    }
    const revision = this.#revision + 1;
    try {
      await this.#store.append(
        {
          revision,
          position: this.#position,
          nextSeq: this.#entries.nextSeq,
          noiseDraws: this.#entries.noise.draws,
          at: now,
        },
        this.#put,
        this.#dropped,
      );
    } catch (error) {
      // memory is ahead of the database: back to the last stored revision (the rows are taken in again)
      await this.#load(this.#revision).catch(() => {});
      throw error;
    }
    this.#revision = revision;
    this.#revisionPosition = this.#position;
    this.#put = [];
    this.#dropped = [];
  }

  /** The taken entries' experiences, with their new use counts. */
  async #handOut(taken: ReplayEntry<number>[]): Promise<SharedBatch> {
    const ids = taken.map((e) => e.payload);
    const rows = await this.#store.experiences(ids);
    const experiences = taken.map((entry) => {
      const experience = rows.get(entry.payload);
      if (experience === undefined)
        throw new Error(`buffer '${this.name}': ${this.location}: replayed row ${entry.payload} is gone from the table`);
      return { ...experience, info: { ...experience.info, useCount: entry.useCount } };
    });
    return { experiences, cursor: this.#revision, ids };
  }

  #checkOpen(what: string): void {
    if (this.#closed) throw new BufferClosedError(this.name, `cannot ${what}`);
  }
}

function pairs(batch: SharedBatch): { id: number; experience: Experience }[] {
  return batch.experiences.map((experience, i) => ({ id: batch.ids[i] as number, experience }));
}
