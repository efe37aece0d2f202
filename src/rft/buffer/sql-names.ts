// Names of the shared buffer's SQL tables. A buffer's table is experience_buffer.name; its other tables add a suffix
// (_cursors, _meta, _replay, _replay_revs, the explorers' _claims...). Names are plain identifiers, and every
// statement quotes them, so an SQL keyword (order, user) is a valid name too. PostgreSQL keeps identifiers of at most
// 63 bytes: a name of at most 40 characters leaves room for every suffix.

/** The longest buffer (table) name. */
export const MAX_TABLE_NAME = 40;

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Why `name` cannot name a buffer's tables (null: it can). */
export function tableNameProblem(name: string): string | null {
  if (!IDENTIFIER.test(name))
    return `'${name}' cannot name an SQL table: use letters, digits and _ only, not starting with a digit`;
  if (name.length > MAX_TABLE_NAME)
    return `'${name}' is ${name.length} characters: an SQL table name takes at most ${MAX_TABLE_NAME}`;
  return null;
}

/** `name` as a quoted SQL identifier (SQLite and PostgreSQL alike); name is checked by tableNameProblem first. */
export function quoteIdentifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** The table the code before names existed wrote every buffer to (whatever experience_buffer.name said). */
export const LEGACY_TABLE = 'experiences';

/**
 * The layout of a buffer's tables, recorded per table in the schema_version table: 1 = rows, cursors, meta; 2 = the
 * priority replay tables too (./sql-replay.ts). A database with a newer one was written by a newer trinity.
 */
export const BUFFER_SCHEMA_VERSION = 2;

/** The buffer tables among a database's tables: X such that X_cursors and X_meta are there too (viewers). */
export function bufferTablesAmong(names: readonly string[]): string[] {
  const all = new Set(names.map((n) => n.toLowerCase()));
  return [...all].filter((n) => all.has(`${n}_cursors`) && all.has(`${n}_meta`)).sort();
}

/** The only buffer table of `tables` (a database's, from bufferTablesAmong); else an error that lists them. */
export function onlyBufferTable(tables: readonly string[], where: string): string {
  if (tables.length === 1) return tables[0] as string;
  throw new Error(
    tables.length === 0
      ? `${where} holds no experience buffer tables`
      : `${where} holds several buffers (${tables.join(', ')}): name the table`,
  );
}
