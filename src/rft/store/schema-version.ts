// The schema_version table, shared by every user of a database (SQLite file or PostgreSQL) and by both dialects:
//
//   schema_version (table_name TEXT PRIMARY KEY, version INTEGER NOT NULL)
//
// One row per table family: the buffer's table (../buffer/sql-names.ts BUFFER_SCHEMA_VERSION), the weight sync row's
// (../sync/postgres-channel.ts), the explorers' claims (../explorer/task-claims-postgres.ts). Each records the layout
// its code wrote; code that finds a newer version than it knows refuses the table instead of misreading it.
// The dialects' reads and writes of the table: ./postgres.ts (lockSchema, schemaVersion, setSchemaVersion), ./sqlite.ts.

export const SCHEMA_VERSION_TABLE_DDL =
  'CREATE TABLE IF NOT EXISTS schema_version (table_name TEXT PRIMARY KEY, version INTEGER NOT NULL)';

/**
 * Why code that knows layouts up to `known` cannot use `table` at version `found` (null: it can: absent, or not newer).
 * Callers add who they are and what to do.
 */
export function newerSchemaProblem(table: string, found: number | null, known: number): string | null {
  if (found === null || found <= known) return null;
  return (
    `table '${table}' has schema version ${found} (schema_version table), but this trinity knows versions up to ` +
    `${known}: it was written by a newer trinity`
  );
}
