// The PostgreSQL buffer's tables (./postgres.ts's header lists them): created, or brought to BUFFER_SCHEMA_VERSION
// (./sql-names.ts), by the first process that opens the buffer writable; the others wait on the schema lock, then
// find them.
import type pg from 'pg';
import { lockSchema, schemaVersion, setSchemaVersion } from '../store/postgres.js';
import { BUFFER_SCHEMA_VERSION, LEGACY_TABLE, quoteIdentifier as q } from './sql-names.js';

/**
 * In a transaction: creates or migrates buffer table `t`'s tables; `checkVersion` refuses a newer layout first.
 * Resolves true when `t` took over the legacy table's (see ./postgres.ts's header).
 */
export async function createBufferTables(
  client: pg.ClientBase,
  t: string,
  checkVersion: (version: number | null) => void,
): Promise<boolean> {
  let migrated = false;
  // one process creates the tables; the others wait here, then find them
  await lockSchema(client);
  const version = await schemaVersion(client, t);
  checkVersion(version);
  if (version === BUFFER_SCHEMA_VERSION) return false;
  // version 1 under the legacy name, written by code that wrote every buffer there: it becomes this buffer
  if (version === null && t !== LEGACY_TABLE && (await schemaVersion(client, LEGACY_TABLE)) === 1) {
    const taken = await client.query<{ taken: boolean }>('SELECT to_regclass($1) IS NOT NULL AS taken', [q(t)]);
    if (taken.rows[0]?.taken !== true) {
      for (const suffix of ['', '_cursors', '_meta'])
        await client.query(`ALTER TABLE IF EXISTS ${q(`${LEGACY_TABLE}${suffix}`)} RENAME TO ${q(`${t}${suffix}`)}`);
      await client.query('DELETE FROM schema_version WHERE table_name = $1', [LEGACY_TABLE]);
      migrated = true;
    }
  }
  // version 1 (or none): what is missing is created; version 2 adds the replay tables
  await client.query(`
      CREATE TABLE IF NOT EXISTS ${q(t)} (
        id BIGSERIAL PRIMARY KEY,
        eid TEXT NOT NULL UNIQUE,
        task_id TEXT,
        model_version BIGINT,
        reward DOUBLE PRECISION,
        created_at BIGINT NOT NULL,
        data TEXT NOT NULL
      );
      CREATE TABLE IF NOT EXISTS ${q(`${t}_cursors`)} (reader TEXT PRIMARY KEY, position BIGINT NOT NULL);
      CREATE TABLE IF NOT EXISTS ${q(`${t}_meta`)} (key TEXT PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS ${q(`${t}_replay`)} (
        reader TEXT NOT NULL,
        seq BIGINT NOT NULL,
        id BIGINT NOT NULL,
        model_version DOUBLE PRECISION NOT NULL,
        use_count BIGINT NOT NULL,
        priority DOUBLE PRECISION NOT NULL,
        available_at DOUBLE PRECISION NOT NULL,
        added BIGINT NOT NULL,
        dropped BIGINT,
        PRIMARY KEY (reader, seq)
      );
      CREATE TABLE IF NOT EXISTS ${q(`${t}_replay_revs`)} (
        reader TEXT NOT NULL,
        revision BIGINT NOT NULL,
        position BIGINT NOT NULL,
        next_seq BIGINT NOT NULL,
        noise_draws BIGINT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (reader, revision)
      );
    `);
  await setSchemaVersion(client, t, BUFFER_SCHEMA_VERSION);
  return migrated;
}
