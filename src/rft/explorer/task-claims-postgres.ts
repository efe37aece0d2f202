// Task claims in PostgreSQL (./task-claims.ts explains the scheme): explorers on several machines.
//
// Claims are serialised by a transaction-scoped advisory lock (one claimer at a time per buffer table). An explorer is
// alive while it holds the session advisory lock (namespace, hash of its name) on its own connection: the server
// releases it when the process dies or its connection drops, so no heartbeat or clock decides who is dead. A hash
// collision between two names makes a dead explorer look alive (its steps wait for its restart), never the reverse.
// The tables are registered in the database's schema_version table (../store/schema-version.ts) with their own
// version; the pool, transactions and redaction are ../store/postgres.ts's.
import { hostname } from 'node:os';
import type pg from 'pg';
import {
  hidePassword,
  lockSchema,
  messageOf,
  PostgresDatabase,
  postgresClient,
  postgresTarget,
  schemaVersion,
  setSchemaVersion,
  urlPassword,
} from '../store/postgres.js';
import { newerSchemaProblem } from '../store/schema-version.js';
import {
  type Claim,
  dealMismatch,
  decideClaim,
  nameTaken,
  type OpenClaim,
  type TaskClaims,
  type TaskClaimsOptions,
} from './task-claims-rule.js';

/** The layout of the claims tables this code writes. */
export const CLAIMS_SCHEMA_VERSION = 1;

/** A 31-bit FNV-1a hash: advisory lock keys (non-negative, so pg_locks' oid columns compare equal). */
function lockKey(text: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
  return hash >>> 1;
}

export class PostgresTaskClaims implements TaskClaims {
  readonly location: string;
  readonly #options: TaskClaimsOptions;
  readonly #db: PostgresDatabase;
  /** The connection holding this explorer's name lock (alive while it is). */
  readonly #holder: pg.Client;
  readonly #password: string;
  readonly #claims: string;
  readonly #deals: string;
  /** Advisory lock namespace of this table's explorers. */
  readonly #namespace: number;
  #holderLost: Error | null = null;

  private constructor(options: TaskClaimsOptions) {
    this.#options = options;
    const target = postgresTarget(options.path);
    this.location = `${target.display} table ${options.table}_claims`;
    this.#password = urlPassword(options.path);
    this.#claims = `${options.table}_claims`;
    this.#deals = `${options.table}_deals`;
    this.#namespace = lockKey(`trinity:${options.table}:explorers`);
    this.#db = new PostgresDatabase(
      { url: options.path, max: 2, applicationName: `trinity explorer ${options.explorer}` },
      (what, error) => this.#error(what, error),
    );
    this.#holder = postgresClient({
      url: options.path,
      applicationName: `trinity explorer ${options.explorer} (name lock)`,
    });
    this.#holder.on('error', (error) => {
      // the server released the name lock with the connection: another explorer may take this one's steps now
      this.#holderLost = this.#error('hold the explorer lock', error);
    });
  }

  static async open(options: TaskClaimsOptions): Promise<PostgresTaskClaims> {
    const claims = new PostgresTaskClaims(options);
    try {
      await claims.#setUp();
      return claims;
    } catch (error) {
      await Promise.allSettled([claims.#db.end(), claims.#holder.end()]);
      throw error;
    }
  }

  async claim(): Promise<Claim> {
    if (this.#holderLost) throw this.#holderLost;
    const { stage, explorer, totalSteps } = this.#options;
    return this.#db.transaction('claim an explore step', async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1::int, $2::int)', [this.#namespace, lockKey('claims')]);
      const open = await client.query<{ step: number; owner: string }>(
        `SELECT step, owner FROM ${this.#claims} WHERE stage = $1 AND NOT done ORDER BY step`,
        [stage],
      );
      const highest = await client.query<{ step: number | null }>(
        `SELECT max(step) AS step FROM ${this.#claims} WHERE stage = $1`,
        [stage],
      );
      const unfinished: OpenClaim[] = open.rows.map((r) => ({ step: Number(r.step), owner: r.owner }));
      const living = new Map<string, boolean>();
      for (const { owner } of unfinished)
        if (owner !== explorer && !living.has(owner)) living.set(owner, await this.#alive(client, owner));
      const decision = decideClaim(
        unfinished,
        Number(highest.rows[0]?.step ?? 0),
        totalSteps,
        explorer,
        (owner) => living.get(owner) === true,
      );
      if (decision.action === 'none') return decision.claim;
      if (decision.action === 'insert')
        await client.query(`INSERT INTO ${this.#claims} (stage, step, owner, done) VALUES ($1, $2, $3, false)`, [
          stage,
          decision.step,
          explorer,
        ]);
      else
        await client.query(`UPDATE ${this.#claims} SET owner = $3 WHERE stage = $1 AND step = $2`, [
          stage,
          decision.step,
          explorer,
        ]);
      return { kind: 'step', step: decision.step, from: decision.action === 'take' ? decision.from : null };
    });
  }

  async complete(step: number): Promise<void> {
    const { stage, explorer } = this.#options;
    const result = await this.#db.query(
      `mark explore step ${step} finished`,
      `UPDATE ${this.#claims} SET done = true WHERE stage = $1 AND step = $2 AND owner = $3`,
      [stage, step, explorer],
    );
    if (result.rowCount !== 1)
      throw this.#error(`mark explore step ${step} finished`, `explorer '${explorer}' does not own step ${step} of '${stage}'`);
  }

  async completedBy(): Promise<number[]> {
    const { stage, explorer } = this.#options;
    const { rows } = await this.#db.query<{ step: number }>(
      'read the finished steps',
      `SELECT step FROM ${this.#claims} WHERE stage = $1 AND owner = $2 AND done ORDER BY step`,
      [stage, explorer],
    );
    return rows.map((r) => Number(r.step));
  }

  async close(): Promise<void> {
    await Promise.allSettled([this.#db.end(), this.#holder.end()]);
  }

  // --- internals -----------------------------------------------------------------------------------------------

  async #setUp(): Promise<void> {
    const { explorer, stage, deal } = this.#options;
    try {
      await this.#holder.connect();
    } catch (error) {
      throw this.#error('connect', error);
    }
    const locked = await this.#holder
      .query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1::int, $2::int) AS ok', [this.#namespace, lockKey(explorer)])
      .catch((error: unknown) => {
        throw this.#error('take the explorer lock', error);
      });
    if (locked.rows[0]?.ok !== true) throw nameTaken(this.location, explorer, 'another process holds its lock');
    await this.#db.transaction('create the claims tables', async (client) => {
      await lockSchema(client);
      const found = await schemaVersion(client, this.#claims);
      const problem = newerSchemaProblem(this.#claims, found, CLAIMS_SCHEMA_VERSION);
      if (problem !== null) throw new Error(problem);
      if (found === null) {
        await client.query(`
          CREATE TABLE IF NOT EXISTS ${this.#claims} (
            stage TEXT NOT NULL, step INTEGER NOT NULL, owner TEXT NOT NULL, done BOOLEAN NOT NULL,
            PRIMARY KEY (stage, step)
          );
          CREATE TABLE IF NOT EXISTS ${this.#deals} (stage TEXT PRIMARY KEY, deal TEXT NOT NULL);
        `);
        await setSchemaVersion(client, this.#claims, CLAIMS_SCHEMA_VERSION);
      }
      await client.query(`INSERT INTO ${this.#deals} (stage, deal) VALUES ($1, $2) ON CONFLICT (stage) DO NOTHING`, [
        stage,
        deal,
      ]);
      const stored = await client.query<{ deal: string }>(`SELECT deal FROM ${this.#deals} WHERE stage = $1`, [stage]);
      const theirs = stored.rows[0]?.deal ?? deal;
      if (theirs !== deal) throw dealMismatch(this.location, stage, explorer, deal, theirs);
    });
  }

  /** An explorer is alive while some session holds its name lock (see the header). */
  async #alive(client: pg.PoolClient, owner: string): Promise<boolean> {
    const { rows } = await client.query<{ held: boolean }>(
      `SELECT EXISTS (
         SELECT 1 FROM pg_locks
         WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::oid AND objid = $2::oid
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
       ) AS held`,
      [String(this.#namespace), String(lockKey(owner))],
    );
    return rows[0]?.held === true;
  }

  #error(what: string, error: unknown): Error {
    const message = messageOf(error);
    if (error instanceof Error && message.startsWith(`explorer '`)) return error; // ours, already precise
    const redacted = hidePassword(message, this.#password);
    return new Error(
      `explorer '${this.#options.explorer}' (${hostname()}): task claims in ${this.location}: cannot ${what}: ${redacted}`,
      { cause: error },
    );
  }
}
