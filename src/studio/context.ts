// What every route handler shares: the runs folder (a real path), the run index, the rollout sources read so far,
// and the live-update hub. One per server.
import { basename, extname, relative, sep } from 'node:path';
import { BUFFER_RECORD, type BufferRecord, readBufferRecord } from '../rft/buffer/buffer-record.js';
import { resolveInside, StudioPathError } from './paths.js';
import { HttpError } from './http-error.js';
import { ExperienceSource, sqliteExperienceTables, TokenizerCache } from './rollouts.js';
import type { RunIndex } from './runs.js';
import type { EventHub } from './events.js';

export interface StudioContext {
  /** The runs folder, a real path. */
  root: string;
  runs: RunIndex;
  sources: SourceCache;
  events: EventHub;
}

export interface SourceInfo {
  /** The file relative to the runs folder. */
  file: string;
  /** SQLite: the table; null for a JSONL dump. */
  table: string | null;
  kind: 'buffer' | 'save_input' | 'dump';
  /** 'postgresql': `file` is a stage's buffer.json and `location` the server (postgresql://user@host:port/db). */
  backend: 'sqlite' | 'postgresql' | 'jsonl';
  location?: string;
}

const SQLITE = new Set(['.db', '.sqlite', '.sqlite3']);

/**
 * `read()`, with SQLite's refusals of the file (not a database, corrupt, locked away) as a 422 naming the file: a bad
 * buffer file is a problem of that file, not of the Studio (SQLite's errors carry a code SQLITE_*).
 */
function unreadableDbAs422<T>(file: string, read: () => T): T {
  const named = (error: unknown): never => {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('SQLITE_'))
      throw new HttpError(422, `${file} is not a readable SQLite database (${code}: ${(error as Error).message})`);
    throw error;
  };
  try {
    const value = read();
    return value instanceof Promise ? (value.catch(named) as T) : value;
  } catch (error) {
    return named(error);
  }
}

/** Experience sources by file and table, read incrementally and kept. */
export class SourceCache {
  readonly #sources = new Map<string, ExperienceSource>();
  readonly #tokenizers = new TokenizerCache();

  constructor(readonly root: string) {}

  /** The experience sources of one file (relative to the runs folder): an SQLite file's tables, or a dump. */
  async describe(file: string): Promise<SourceInfo[]> {
    const path = await this.#checked(file);
    const rel = relative(this.root, path).split(sep).join('/');
    if (basename(path) === BUFFER_RECORD) {
      const record = this.#record(path, file);
      // an SQLite buffer is listed as its file when it is under the runs folder (runs.ts bufferFiles); one elsewhere
      // is not the Studio's to open
      if (record.backend !== 'postgresql') return [];
      return [{ file: rel, table: record.table, kind: 'buffer', backend: 'postgresql', location: record.url }];
    }
    if (!SQLITE.has(extname(path))) return [{ file: rel, table: null, kind: 'dump', backend: 'jsonl' }];
    return unreadableDbAs422(file, () => sqliteExperienceTables(path)).map((t) => ({
      file: rel,
      table: t.name,
      kind: t.kind,
      backend: 'sqlite',
    }));
  }

  /** The source, read up to now. `table` is required for an SQLite file and must be one of its experience tables. */
  async get(file: string, table: string | null): Promise<ExperienceSource> {
    const path = await this.#checked(file);
    if (basename(path) === BUFFER_RECORD) return this.#postgres(path, file, table);
    const sqlite = SQLITE.has(extname(path));
    let tableInfo = null;
    if (sqlite) {
      const tables = unreadableDbAs422(file, () => sqliteExperienceTables(path));
      tableInfo = tables.find((t) => t.name === (table ?? tables[0]?.name)) ?? null;
      if (tableInfo === null)
        throw new StudioPathError(
          404,
          `${file} has no experience table${table === null ? 's' : ` '${table}'`} (it has: ${tables.map((t) => t.name).join(', ') || 'none'})`,
        );
    }
    const key = `${path}#${tableInfo?.name ?? ''}`;
    let source = this.#sources.get(key);
    if (source === undefined) {
      source = new ExperienceSource(path, tableInfo, this.#tokenizers, null, this.root);
      this.#sources.set(key, source);
    }
    const reading = source;
    await unreadableDbAs422(file, () => reading.refresh());
    return source;
  }

  /**
   * The PostgreSQL buffer a stage's buffer.json names: the server and table come from that file (inside the runs
   * folder), never from the request; the password from this process's environment.
   */
  async #postgres(path: string, file: string, table: string | null): Promise<ExperienceSource> {
    const record = this.#record(path, file);
    if (record.backend !== 'postgresql')
      throw new StudioPathError(404, `${file} records an SQLite buffer: open the file it records (${record.url})`);
    if (table !== null && table !== '' && table !== record.table)
      throw new StudioPathError(404, `${file} records the buffer table '${record.table}', not '${table}'`);
    const key = `${path}#${record.url}#${record.table}`;
    let source = this.#sources.get(key);
    if (source === undefined) {
      source = new ExperienceSource(path, null, this.#tokenizers, { url: record.url, table: record.table }, this.root);
      this.#sources.set(key, source);
    }
    await source.refresh();
    return source;
  }

  #record(path: string, file: string): BufferRecord {
    try {
      return readBufferRecord(path);
    } catch (error) {
      throw new HttpError(422, `${file}: ${(error as Error).message.replace(`${path}: `, '')}`);
    }
  }

  async #checked(file: string): Promise<string> {
    const path = await resolveInside(this.root, file);
    if (!SQLITE.has(extname(path)) && extname(path) !== '.jsonl' && basename(path) !== BUFFER_RECORD)
      throw new StudioPathError(
        403,
        `'${file}' is not an experience buffer (.db, .sqlite, a stage's ${BUFFER_RECORD}) or dump (.jsonl)`,
      );
    return path;
  }
}
