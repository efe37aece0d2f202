// PostgreSQL plumbing, written once for every user of the shared buffer's database: the buffer
// (../buffer/postgres.ts), the weight sync row (../sync/postgres-channel.ts), the explorers' task claims
// (../explorer/task-claims-postgres.ts), tasksets and viewers. Each user names its own errors; what they share is here:
//
//   postgresTarget, describeServer,               where a URL points, for messages and records (never the password)
//   postgresUrlWithoutPassword
//   urlPassword, hidePassword                     a server's message can echo the password back: it becomes ***
//   postgresClient, PostgresDatabase              one connection / a pool with the house's connect timeout (10 s);
//                                                 query and transaction name every failure through the user's namer
//   runTransaction                                BEGIN, body, COMMIT; ROLLBACK and a discarded connection on errors
//   lockSchema, schemaVersion, setSchemaVersion   the schema_version table (./schema-version.ts) under one lock
//
// LISTEN with reconnect: ./postgres-listen.ts. This is the bottom of src/rft: it imports nothing from the other parts.
import pg from 'pg';
import { SCHEMA_VERSION_TABLE_DDL } from './schema-version.js';

/** How long connecting may take before it fails, unless a user says otherwise. */
export const CONNECT_TIMEOUT_MS = 10_000;

export function isPostgresUrl(path: string): boolean {
  return /^postgres(ql)?:\/\//i.test(path);
}

/** Where a PostgreSQL URL points, for messages (no password). */
export interface PostgresTarget {
  host: string;
  port: string;
  database: string;
  user: string;
  /** postgresql://user@host:port/database */
  display: string;
}

export function postgresTarget(url: string): PostgresTarget {
  const parsed = parseUrl(url);
  const host = decodeURIComponent(parsed.hostname) || parsed.searchParams.get('host') || 'localhost';
  const port = parsed.port || parsed.searchParams.get('port') || '5432';
  const user = decodeURIComponent(parsed.username) || process.env.PGUSER || 'postgres';
  const database = decodeURIComponent(parsed.pathname.replace(/^\//, '')) || user;
  return { host, port, database, user, display: `postgresql://${user}@${host}:${port}/${database}` };
}

/** The server, database and user, as errors name them: PostgreSQL host:port, database 'db' (user u). */
export function describeServer(target: PostgresTarget): string {
  return `PostgreSQL ${target.host}:${target.port}, database '${target.database}' (user ${target.user})`;
}

/**
 * The URL without its password (user info and `?password=` both), for records a run leaves on disk
 * (../buffer/buffer-record.ts): whoever connects with it brings the password from its own environment (PGPASSWORD,
 * ~/.pgpass).
 */
export function postgresUrlWithoutPassword(url: string): string {
  const parsed = parseUrl(url);
  parsed.password = '';
  parsed.searchParams.delete('password');
  return parsed.toString();
}

function parseUrl(url: string): URL {
  try {
    return new URL(url);
  } catch {
    throw new Error(`'${redactUrl(url)}' is not a valid PostgreSQL URL (postgresql://user:password@host:port/database)`);
  }
}

/** The URL with its password (if any) replaced by "***". */
function redactUrl(url: string): string {
  return url.replace(/^(postgres(?:ql)?:\/\/[^:/@]*:)[^@]*@/i, '$1***@');
}

/** The password of a URL, decoded as the server sees it (what its messages may echo); "" when there is none. */
export function urlPassword(url: string): string {
  const password = new URL(url).password;
  try {
    return decodeURIComponent(password);
  } catch {
    return password;
  }
}

/** `text` with every occurrence of `password` replaced by "***" (an empty password hides nothing). */
export function hidePassword(text: string, password: string): string {
  return password.length > 0 ? text.replaceAll(password, '***') : text;
}

/** An error's message (a thrown non-Error as text). */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export interface PostgresConnectionOptions {
  /** postgresql://user:password@host:port/database */
  url: string;
  /** How long connecting may take before it fails (default CONNECT_TIMEOUT_MS). */
  connectTimeoutMs?: number;
  /** Shown in pg_stat_activity (default: the driver's, PGAPPNAME). */
  applicationName?: string;
}

/** One connection, not connected yet (a LISTEN connection, a lock holder, a one-off look). */
export function postgresClient(options: PostgresConnectionOptions): pg.Client {
  return new pg.Client({
    connectionString: options.url,
    connectionTimeoutMillis: options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS,
    ...(options.applicationName !== undefined ? { application_name: options.applicationName } : {}),
  });
}

export interface PostgresPoolOptions extends PostgresConnectionOptions {
  /** Connections held at most. */
  max: number;
  /** Every transaction the pool opens is read-only: the server refuses writes even by mistake. */
  readonly?: boolean;
}

/** Names a failure: `what` the user was doing, and the error as it came (a driver's, a server's or the body's). */
export type PostgresErrorNamer = (what: string, error: unknown) => Error;

/** A pool whose queries and transactions name their failures through the user's namer. */
export class PostgresDatabase {
  readonly pool: pg.Pool;
  readonly #name: PostgresErrorNamer;

  constructor(options: PostgresPoolOptions, name: PostgresErrorNamer) {
    this.#name = name;
    this.pool = new pg.Pool({
      connectionString: options.url,
      max: options.max,
      connectionTimeoutMillis: options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS,
      ...(options.applicationName !== undefined ? { application_name: options.applicationName } : {}),
      ...(options.readonly ? { options: '-c default_transaction_read_only=on' } : {}),
    });
    // an idle connection that drops (server restart) is replaced by the next query; nothing waits on it
    this.pool.on('error', () => {});
  }

  async query<R extends pg.QueryResultRow>(what: string, text: string, values: unknown[] = []): Promise<pg.QueryResult<R>> {
    try {
      return await this.pool.query<R>(text, values);
    } catch (error) {
      throw this.#name(what, error);
    }
  }

  /** `body` in one transaction on a pooled connection (./runTransaction); a failure to connect or in it is named. */
  async transaction<T>(what: string, body: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (error) {
      throw this.#name(what, error);
    }
    try {
      return await runTransaction(client, body);
    } catch (error) {
      throw this.#name(what, error);
    }
  }

  end(): Promise<void> {
    return this.pool.end();
  }
}

/**
 * BEGIN, `body`, COMMIT on a connected pool client, then releases it. On an error: ROLLBACK, release (a client whose
 * ROLLBACK fails has lost its connection and is discarded), and rethrow the error as it came, for the caller to name.
 */
export async function runTransaction<T>(client: pg.PoolClient, body: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  try {
    await client.query('BEGIN');
    const result = await body(client);
    await client.query('COMMIT');
    client.release();
    return result;
  } catch (error) {
    const rolledBack = await client.query('ROLLBACK').then(
      () => true,
      () => false,
    );
    client.release(rolledBack ? undefined : true);
    throw error;
  }
}

/**
 * In a transaction: waits for the database's schema lock (held to the transaction's end) and makes sure the
 * schema_version table exists. One process creates its tables at a time; the others wait here, then find them.
 */
export async function lockSchema(client: pg.ClientBase): Promise<void> {
  await client.query("SELECT pg_advisory_xact_lock(hashtext('trinity:schema'))");
  await client.query(SCHEMA_VERSION_TABLE_DDL);
}

/** The layout version recorded for `table` (null: none recorded). */
export async function schemaVersion(client: pg.ClientBase, table: string): Promise<number | null> {
  const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_version WHERE table_name = $1', [table]);
  return rows[0]?.version ?? null;
}

/** Records `version` as `table`'s layout. */
export async function setSchemaVersion(client: pg.ClientBase, table: string, version: number): Promise<void> {
  await client.query(
    `INSERT INTO schema_version (table_name, version) VALUES ($1, $2)
     ON CONFLICT (table_name) DO UPDATE SET version = excluded.version`,
    [table, version],
  );
}
