// Where a stage's shared buffer is, recorded in its job folder as `buffer.json`, so that a reader of the run folder
// (the Studio) finds a buffer that does not live there (PostgreSQL):
//
//   {"backend": "postgresql", "url": "postgresql://user@host:port/db", "table": "experience_buffer"}
//   {"backend": "sqlite", "url": "/abs/path/buffer.db", "table": "experience_buffer"}
//
// The URL never holds a password: whoever opens the buffer brings its own (PGPASSWORD, ~/.pgpass, as libpq does).
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { isPostgresUrl, postgresUrlWithoutPassword } from './postgres.js';
import { tableNameProblem } from './sql-names.js';

export const BUFFER_RECORD = 'buffer.json';

export interface BufferRecord {
  backend: 'postgresql' | 'sqlite';
  /** PostgreSQL: the URL without its password; SQLite: the file's absolute path. */
  url: string;
  table: string;
}

/** The record of the shared buffer at `path` (a PostgreSQL URL or an SQLite file, as openSharedBuffer takes it). */
export function bufferRecord(path: string, table: string): BufferRecord {
  return isPostgresUrl(path)
    ? { backend: 'postgresql', url: postgresUrlWithoutPassword(path), table }
    : { backend: 'sqlite', url: resolve(path.replace(/^sqlite:\/\/\//, '')), table };
}

/** Writes `<dir>/buffer.json` whole (a temporary file renamed over it: a reader never sees half of it). */
export function writeBufferRecord(dir: string, path: string, table: string): void {
  const file = join(dir, BUFFER_RECORD);
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, `${JSON.stringify(bufferRecord(path, table))}\n`);
  renameSync(temporary, file);
}

/** Reads and checks a buffer.json; errors name the file and what is wrong. */
export function readBufferRecord(file: string): BufferRecord {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new Error(`${file}: not a buffer record: ${(error as Error).message}`);
  }
  const record = value as Partial<Record<keyof BufferRecord, unknown>> | null;
  if (typeof record !== 'object' || record === null) throw new Error(`${file}: not a buffer record: not an object`);
  const { backend, url, table } = record;
  if (backend !== 'postgresql' && backend !== 'sqlite')
    throw new Error(`${file}: "backend" must be "postgresql" or "sqlite", got ${JSON.stringify(backend)}`);
  if (typeof url !== 'string' || url === '') throw new Error(`${file}: "url" must be a non-empty string`);
  if (backend === 'postgresql' && !isPostgresUrl(url))
    throw new Error(`${file}: "url" must be a postgresql:// URL for backend postgresql`);
  if (typeof table !== 'string') throw new Error(`${file}: "table" must be a string`);
  const problem = tableNameProblem(table);
  if (problem !== null) throw new Error(`${file}: "table" ${problem}`);
  return { backend, url, table };
}
