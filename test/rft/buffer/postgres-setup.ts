// Shared setup of the PostgreSQL buffer test files: one real server per file (test/helpers/postgres.ts), a fresh
// database (or SQLite file) per test, and the child process that writes or reads from another process.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { promisify } from 'node:util';
import { PostgresBuffer, type SharedExperienceBuffer } from '../../../src/rft/buffer/index.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { tempDir } from './helpers.js';

const run = promisify(execFile);
export const CHILD = join(import.meta.dirname, 'postgres-child.ts');
// Only stops a hang with an error instead of the suite's test timeout: minutes, far beyond any machine's time for
// these steps. A guard kill is SIGTERM, which read-crash tells apart from the SIGKILL the child sends itself.
export const HANG_GUARD_MS = 300_000;
export const child = (...args: string[]) =>
  run(process.execPath, ['--import', 'tsx', CHILD, ...args], { timeout: HANG_GUARD_MS });
export const eids = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `e${from + i}`);

/** Starts a server before the file's tests and stops it after them; the getter returns it. */
export function useServer(): () => PostgresServer {
  let server: PostgresServer | undefined;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server?.stop();
  });
  return () => {
    if (server === undefined) throw new Error('the PostgreSQL server is not started (use it inside a test)');
    return server;
  };
}

export interface Backend {
  name: string;
  /** A fresh, empty buffer location: an SQLite file path or a new database's URL. */
  fresh: () => Promise<string>;
}

export function backends(server: () => PostgresServer): Backend[] {
  let databases = 0;
  return [
    { name: 'SQLite', fresh: async () => join(tempDir('shared'), 'buffer.db') },
    { name: 'PostgreSQL', fresh: () => server().createDatabase(`buffer_${++databases}`) },
  ];
}

/** Rows the reader has not been handed yet (SQLite counts synchronously, PostgreSQL over the network). */
export async function available(buffer: SharedExperienceBuffer): Promise<number> {
  return buffer instanceof PostgresBuffer ? buffer.available() : buffer.size;
}
