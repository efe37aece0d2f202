// Task claims in the shared SQLite file (./task-claims.ts explains the scheme): explorer processes on one machine.
//
// Claims are serialised by SQLite's write lock (BEGIN IMMEDIATE). An explorer registers its process id and host in
// t_explorers; it is alive while that process runs (signal 0 reaches it). A process id the system gave to another
// program since makes a dead explorer look alive (its steps wait for its restart under the same name), never the
// reverse. An explorer registered from another host is taken as alive: an SQLite file is for one machine.
import { hostname } from 'node:os';
import { processExists } from '../../util/index.js';
import type Database from 'better-sqlite3';
import { inSqliteFile, inWriteTransaction, openSqliteFile } from '../store/sqlite.js';
import {
  type Claim,
  type ClaimDecision,
  dealMismatch,
  decideClaim,
  nameTaken,
  type OpenClaim,
  type TaskClaims,
  type TaskClaimsOptions,
} from './task-claims-rule.js';

export class SqliteTaskClaims implements TaskClaims {
  readonly location: string;
  readonly #options: TaskClaimsOptions;
  readonly #db: Database.Database;
  readonly #t: string;
  readonly #host = hostname();

  private constructor(options: TaskClaimsOptions) {
    this.#options = options;
    this.#t = options.table;
    const path = options.path.replace(/^sqlite:\/\/\//, '');
    this.location = path;
    this.#db = this.#sql('open', () => openSqliteFile(path, { busyTimeoutMs: 10_000, wal: true }));
  }

  static async open(options: TaskClaimsOptions): Promise<SqliteTaskClaims> {
    const claims = new SqliteTaskClaims(options);
    try {
      claims.#setUp();
      return claims;
    } catch (error) {
      claims.#db.close();
      throw error;
    }
  }

  async claim(): Promise<Claim> {
    const { stage, explorer, totalSteps } = this.#options;
    const t = this.#t;
    const claimStep = (): Claim => {
      const open = this.#db
        .prepare(`SELECT step, owner FROM ${t}_claims WHERE stage = ? AND done = 0 ORDER BY step`)
        .all(stage) as OpenClaim[];
      const highest = this.#db.prepare(`SELECT max(step) AS step FROM ${t}_claims WHERE stage = ?`).get(stage) as {
        step: number | null;
      };
      return this.#apply(decideClaim(open, highest.step ?? 0, totalSteps, explorer, (owner) => this.#alive(owner)));
    };
    return this.#sql('claim an explore step', () => inWriteTransaction(this.#db, claimStep));
  }

  async complete(step: number): Promise<void> {
    const { stage, explorer } = this.#options;
    const changes = this.#sql(
      `mark explore step ${step} finished`,
      () =>
        this.#db
          .prepare(`UPDATE ${this.#t}_claims SET done = 1 WHERE stage = ? AND step = ? AND owner = ?`)
          .run(stage, step, explorer).changes,
    );
    if (changes !== 1)
      throw new Error(`explorer '${explorer}': ${this.location}: explorer does not own step ${step} of stage '${stage}'`);
  }

  async completedBy(): Promise<number[]> {
    const { stage, explorer } = this.#options;
    return this.#sql('read the finished steps', () =>
      (
        this.#db
          .prepare(`SELECT step FROM ${this.#t}_claims WHERE stage = ? AND owner = ? AND done = 1 ORDER BY step`)
          .all(stage, explorer) as { step: number }[]
      ).map((r) => r.step),
    );
  }

  async close(): Promise<void> {
    if (!this.#db.open) return;
    // gone: this explorer's unfinished claims are free for the others
    this.#sql('unregister the explorer', () =>
      this.#db
        .prepare(`DELETE FROM ${this.#t}_explorers WHERE name = ? AND pid = ? AND host = ?`)
        .run(this.#options.explorer, process.pid, this.#host),
    );
    this.#db.close();
  }

  // --- internals -----------------------------------------------------------------------------------------------

  #setUp(): void {
    const { explorer, stage, deal } = this.#options;
    const t = this.#t;
    this.#sql('create the claims tables', () => {
      this.#db.exec(`
        CREATE TABLE IF NOT EXISTS ${t}_claims (
          stage TEXT NOT NULL, step INTEGER NOT NULL, owner TEXT NOT NULL, done INTEGER NOT NULL,
          PRIMARY KEY (stage, step)
        );
        CREATE TABLE IF NOT EXISTS ${t}_deals (stage TEXT PRIMARY KEY, deal TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS ${t}_explorers (name TEXT PRIMARY KEY, pid INTEGER NOT NULL, host TEXT NOT NULL);
      `);
    });
    const register = () => {
      const row = this.#db.prepare(`SELECT pid, host FROM ${t}_explorers WHERE name = ?`).get(explorer) as
        | { pid: number; host: string }
        | undefined;
      if (row !== undefined && row.pid !== process.pid && (row.host !== this.#host || processExists(row.pid)))
        throw nameTaken(this.location, explorer, `process ${row.pid} on ${row.host}`);
      this.#db
        .prepare(`INSERT OR REPLACE INTO ${t}_explorers (name, pid, host) VALUES (?, ?, ?)`)
        .run(explorer, process.pid, this.#host);
      this.#db.prepare(`INSERT OR IGNORE INTO ${t}_deals (stage, deal) VALUES (?, ?)`).run(stage, deal);
      const theirs = (this.#db.prepare(`SELECT deal FROM ${t}_deals WHERE stage = ?`).get(stage) as { deal: string }).deal;
      if (theirs !== deal) throw dealMismatch(this.location, stage, explorer, deal, theirs);
    };
    this.#sql('register the explorer', () => inWriteTransaction(this.#db, register));
  }

  /** Alive: registered, and its process runs here (or it runs on another host: see the header). */
  #alive(owner: string): boolean {
    const row = this.#db.prepare(`SELECT pid, host FROM ${this.#t}_explorers WHERE name = ?`).get(owner) as
      | { pid: number; host: string }
      | undefined;
    if (row === undefined) return false;
    return row.host !== this.#host || processExists(row.pid);
  }

  #apply(decision: ClaimDecision): Claim {
    const { stage, explorer } = this.#options;
    if (decision.action === 'none') return decision.claim;
    if (decision.action === 'insert')
      this.#db
        .prepare(`INSERT INTO ${this.#t}_claims (stage, step, owner, done) VALUES (?, ?, ?, 0)`)
        .run(stage, decision.step, explorer);
    else
      this.#db.prepare(`UPDATE ${this.#t}_claims SET owner = ? WHERE stage = ? AND step = ?`).run(explorer, stage, decision.step);
    return { kind: 'step', step: decision.step, from: decision.action === 'take' ? decision.from : null };
  }

  #sql<T>(what: string, fn: () => T): T {
    return inSqliteFile(this.location, `explorer '${this.#options.explorer}': task claims: ${what}`, fn);
  }
}
