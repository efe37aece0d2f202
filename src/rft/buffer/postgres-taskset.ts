// A taskset (or eval set) in PostgreSQL: `storage_type: sql` with `path: postgresql://user:pass@host:port/db`, the
// same layout as the SQLite one (./taskset.ts): the table named after the taskset, columns `id` (the order) and
// `raw_task` (a JSON object, as text, json or jsonb). Only rows are read here; ./taskset.ts turns them into tasks.
import { describeServer, hidePassword, postgresClient, postgresTarget, urlPassword } from '../store/postgres.js';
import { quoteIdentifier } from './sql-names.js';

export interface SqlTaskRows {
  /** postgresql://user@host:port/db (no password), for messages. */
  location: string;
  /** Rows in id order; raw_task as stored (a string for text columns, parsed for json/jsonb). */
  rows: { id: unknown; raw_task: unknown }[];
}

/** The (id, raw_task) rows of `table`; a problem (no such table, no such column, no server) as a thrown Error. */
export async function readPostgresTaskRows(url: string, table: string, taskset: string): Promise<SqlTaskRows> {
  const target = postgresTarget(url);
  const where = describeServer(target);
  const password = urlPassword(url);
  const redact = (text: string) => hidePassword(text, password);
  const client = postgresClient({ url });
  try {
    await client.connect();
  } catch (error) {
    throw new Error(`cannot read taskset '${taskset}': ${where}: ${redact((error as Error).message)}`);
  }
  try {
    const exists = await client.query<{ found: boolean }>('SELECT to_regclass($1) IS NOT NULL AS found', [
      quoteIdentifier(table),
    ]);
    if (exists.rows[0]?.found !== true)
      throw new Error(`taskset '${taskset}': ${where} has no table '${table}' (the taskset's name)`);
    try {
      const { rows } = await client.query<{ id: unknown; raw_task: unknown }>(
        `SELECT id, raw_task FROM ${quoteIdentifier(table)} ORDER BY id`,
      );
      return { location: target.display, rows };
    } catch (error) {
      throw new Error(
        `taskset '${taskset}': table '${table}' in ${where} needs columns id and raw_task (${redact((error as Error).message)})`,
      );
    }
  } finally {
    await client.end().catch(() => {});
  }
}
