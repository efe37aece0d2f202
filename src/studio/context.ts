// What every route handler shares: the runs folder (a real path), the run index, the rollout sources read so far,
// and the live-update hub. One per server.
import { extname, relative, sep } from 'node:path';
import { resolveInside, StudioPathError } from './paths.js';
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
}

const SQLITE = new Set(['.db', '.sqlite', '.sqlite3']);

/** Experience sources by file and table, read incrementally and kept. */
export class SourceCache {
  readonly #sources = new Map<string, ExperienceSource>();
  readonly #tokenizers = new TokenizerCache();

  constructor(readonly root: string) {}

  /** The experience sources of one file (relative to the runs folder): an SQLite file's tables, or a dump. */
  async describe(file: string): Promise<SourceInfo[]> {
    const path = await this.#checked(file);
    const rel = relative(this.root, path).split(sep).join('/');
    if (!SQLITE.has(extname(path))) return [{ file: rel, table: null, kind: 'dump' }];
    return sqliteExperienceTables(path).map((t) => ({ file: rel, table: t.name, kind: t.kind }));
  }

  /** The source, read up to now. `table` is required for an SQLite file and must be one of its experience tables. */
  async get(file: string, table: string | null): Promise<ExperienceSource> {
    const path = await this.#checked(file);
    const sqlite = SQLITE.has(extname(path));
    let tableInfo = null;
    if (sqlite) {
      const tables = sqliteExperienceTables(path);
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
      source = new ExperienceSource(path, tableInfo, this.#tokenizers);
      this.#sources.set(key, source);
    }
    await source.refresh();
    return source;
  }

  async #checked(file: string): Promise<string> {
    const path = await resolveInside(this.root, file);
    if (!SQLITE.has(extname(path)) && extname(path) !== '.jsonl')
      throw new StudioPathError(403, `'${file}' is not an experience buffer (.db, .sqlite) or dump (.jsonl)`);
    return path;
  }
}
