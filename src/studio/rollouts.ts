// Rollouts as runs store them: experience buffers (the shared SQLite buffer's tables, through the buffer's own
// read-only reader; the experience pipeline's save_input table) and experience dumps (*.jsonl, one Experience a line).
// A source is read incrementally (rows after the last id, bytes after the last offset) and kept in memory, so a
// filter over 10,000 rollouts is an array scan, not a query per request. A rollout whose experience carries no
// advantages (GRPO and the other estimators computed in the trainer) takes the one its stage trained it with, from
// the stage's trainer_advantages.jsonl (src/rft/monitor/advantage-record.ts), joined by experience id.
import { existsSync, readdirSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative } from 'node:path';
import Database from 'better-sqlite3';
import { parseExperienceLine } from '../rft/buffer/jsonl.js';
import { PostgresBuffer, PostgresBufferError } from '../rft/buffer/postgres.js';
import { SqliteBuffer } from '../rft/buffer/sqlite.js';
import { contentText, type Experience, responseLength } from '../rft/experience.js';
import { ADVANTAGES_FILE, parseAdvantageLine } from '../rft/monitor/advantage-record.js';
import { type Tokenizer, Tokenizer as TokenizerClass } from '../tokenizer/index.js';
import { JsonlTail } from './tail.js';

/** One rollout as the list shows it. */
export interface RolloutRow {
  /** Row id in its source (SQLite id, or line order in a dump). */
  id: number;
  eid: string;
  step: number | null;
  taskId: string;
  /** Which repeat of the task (info.runId). */
  repeat: number | null;
  reward: number | null;
  /**
   * Mean advantage over the response tokens the model produced (action mask 1): the experience's own, else the one
   * the trainer recorded for it; null when neither has one (not trained yet, or an algorithm without advantages).
   */
  advantage: number | null;
  responseLength: number;
  /** 'length' when the response hit max_tokens, 'prompt_truncated', else 'stop'. */
  finishReason: 'stop' | 'length' | 'prompt_truncated';
  truncated: boolean;
  /** Turns of a multi-turn conversation (0: single-turn). */
  turns: number;
  prompt: string;
  response: string;
}

export interface RolloutToken {
  id: number;
  text: string;
  logprob: number | null;
  advantage: number | null;
  /** 1: the model produced it; 0: spliced in (tool output, the user's next turn). */
  mask: number;
}

export interface RolloutDetail extends RolloutRow {
  promptTokens: number;
  messages: { role: string; content: string }[];
  tokens: RolloutToken[];
  metrics: Record<string, number>;
  /** The tokenizer folder the token texts come from, or null (token ids shown). */
  tokenizer: string | null;
}

export interface RolloutFilter {
  step?: number;
  task?: string;
  minReward?: number;
  maxReward?: number;
  minLength?: number;
  maxLength?: number;
  truncated?: boolean;
}

export interface RolloutPage {
  total: number;
  matched: number;
  rows: RolloutRow[];
  steps: number[];
  tasks: number;
}

/** A table of an SQLite file that holds experiences: a shared buffer's (with its _cursors table) or save_input's. */
export interface SqliteTable {
  name: string;
  kind: 'buffer' | 'save_input';
}

/** A PostgreSQL buffer a stage's buffer.json points at (the URL has no password: pg takes PGPASSWORD or ~/.pgpass). */
export interface PostgresSource {
  url: string;
  table: string;
}

/** A PostgreSQL buffer could not be read (server down, no such table, authentication): the message names the server. */
export class PostgresSourceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PostgresSourceError';
  }
}

const PREVIEW_CHARS = 600;
const SAVE_INPUT_TABLE = 'experience_pipeline_input';

/** The experience tables of an SQLite file (opened read-only, closed at once). */
export function sqliteExperienceTables(file: string): SqliteTable[] {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    const names = new Set(
      (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map((r) => r.name),
    );
    const tables: SqliteTable[] = [];
    for (const name of [...names].sort())
      if (names.has(`${name}_cursors`) && names.has(`${name}_meta`)) tables.push({ name, kind: 'buffer' });
      else if (name === SAVE_INPUT_TABLE) tables.push({ name, kind: 'save_input' });
    return tables;
  } finally {
    db.close();
  }
}

interface Loaded {
  id: number;
  experience: Experience;
}

/** One source's experiences, read incrementally. */
export class ExperienceSource {
  readonly #loaded: Loaded[] = [];
  #rows: RolloutRow[] = [];
  #lastId = 0;
  readonly #tail: JsonlTail<Experience> | null;
  /** The stage's recorded advantages by experience id, and the file they are read from (null: none found). */
  readonly #recorded = new Map<string, number>();
  #advantages: JsonlTail<[string, number][]> | null = null;
  readonly warnings: string[] = [];

  constructor(
    readonly file: string,
    /** SQLite: the table; null for a JSONL dump or a PostgreSQL buffer. */
    readonly table: SqliteTable | null,
    readonly tokenizer: TokenizerCache,
    /** A PostgreSQL buffer (`file` is then the stage's buffer.json: its folder finds the tokenizer). */
    readonly postgres: PostgresSource | null = null,
    /** The runs folder (a real path): the stage's trainer_advantages.jsonl is looked for inside it only. */
    readonly runsRoot: string | null = null,
  ) {
    this.#tail = table === null && postgres === null ? new JsonlTail(dirname(file), file, parseExperiences) : null;
  }

  get rows(): readonly RolloutRow[] {
    return this.#rows;
  }

  /** Reads what was added since the last call, then the advantages recorded since. */
  async refresh(): Promise<void> {
    await this.#refreshExperiences();
    // looked for until found: the trainer writes it after its first step
    const advantagesFile = this.#advantages === null ? stageAdvantagesFile(this.file, this.runsRoot) : null;
    if (advantagesFile !== null)
      this.#advantages = new JsonlTail(this.runsRoot ?? dirname(advantagesFile), advantagesFile, parseAdvantages);
    if (this.#advantages === null) return;
    const { change, added } = await this.#advantages.refresh();
    if (change === 'reset') this.#recorded.clear();
    const lines = change === 'reset' ? this.#advantages.rows : added;
    if (lines.length === 0 && change !== 'reset') return;
    for (const entries of lines) for (const [eid, advantage] of entries) this.#recorded.set(eid, advantage);
    for (const [i, row] of this.#rows.entries()) {
      const own = this.#loaded[i]?.experience.advantages;
      if (own === undefined || own.length === 0) row.advantage = this.#recorded.get(row.eid) ?? null;
    }
  }

  async #refreshExperiences(): Promise<void> {
    if (this.#tail !== null) {
      const { change, added } = await this.#tail.refresh();
      if (change === 'reset') {
        this.#loaded.length = 0;
        this.#rows = [];
        this.#lastId = 0;
        for (const e of this.#tail.rows) this.#add(e);
      } else for (const e of added) this.#add(e);
      return;
    }
    if (this.postgres !== null) {
      await this.#refreshPostgres(this.postgres);
      return;
    }
    const table = this.table as SqliteTable;
    for (;;) {
      const page = table.kind === 'buffer' ? this.#peekBuffer(table.name) : this.#peekSaveInput();
      for (const { id, experience } of page) this.#add(experience, id);
      if (page.length < PAGE) break;
    }
  }

  /**
   * The rows after the last one read, through the buffer's own read-only handle: its connections run every
   * transaction read-only (default_transaction_read_only) and it only SELECTs. Connected per refresh, then closed:
   * an idle Studio holds no connection.
   */
  async #refreshPostgres(source: PostgresSource): Promise<void> {
    let buffer: PostgresBuffer;
    try {
      buffer = await PostgresBuffer.open({
        url: source.url,
        table: source.table,
        readonly: true,
        poolSize: 1,
        name: source.table,
      });
    } catch (error) {
      throw postgresSourceError(error);
    }
    try {
      for (;;) {
        const page = await buffer.peek({ afterId: this.#lastId, limit: PAGE });
        for (const { id, experience } of page) this.#add(experience, id);
        if (page.length < PAGE) break;
      }
    } catch (error) {
      throw postgresSourceError(error);
    } finally {
      await buffer.close();
    }
  }

  #peekBuffer(table: string): Loaded[] {
    const buffer = new SqliteBuffer({ path: this.file, table, readonly: true, name: `${basename(this.file)}:${table}` });
    try {
      return buffer.peek({ afterId: this.#lastId, limit: PAGE });
    } finally {
      void buffer.close();
    }
  }

  #peekSaveInput(): Loaded[] {
    const db = new Database(this.file, { readonly: true, fileMustExist: true });
    try {
      const rows = db
        .prepare(`SELECT id, data FROM ${SAVE_INPUT_TABLE} WHERE id > ? ORDER BY id LIMIT ?`)
        .all(this.#lastId, PAGE) as { id: number; data: string }[];
      return rows.map((r) => ({ id: r.id, experience: JSON.parse(r.data) as Experience }));
    } finally {
      db.close();
    }
  }

  #add(experience: Experience, id = this.#loaded.length + 1): void {
    this.#lastId = id;
    this.#loaded.push({ id, experience });
    this.#rows.push(rolloutRow(id, experience, this.tokenizer.get(this.file), this.#recorded));
  }

  /** The filtered rows, grouped (step, then task, then repeat) or in id order, one page of them. */
  page(filter: RolloutFilter, offset: number, limit: number, order: 'group' | 'id' = 'group'): RolloutPage {
    const matched = this.#rows.filter((r) => matches(r, filter));
    if (order === 'group')
      matched.sort(
        (a, b) =>
          (a.step ?? -1) - (b.step ?? -1) ||
          a.taskId.localeCompare(b.taskId, undefined, { numeric: true }) ||
          (a.repeat ?? 0) - (b.repeat ?? 0) ||
          a.id - b.id,
      );
    const steps = [...new Set(this.#rows.map((r) => r.step).filter((s): s is number => s !== null))].sort((a, b) => a - b);
    return {
      total: this.#rows.length,
      matched: matched.length,
      rows: matched.slice(offset, offset + limit),
      steps,
      tasks: new Set(this.#rows.map((r) => r.taskId)).size,
    };
  }

  /** One rollout with its tokens; null when no row has that id. */
  detail(id: number): RolloutDetail | null {
    const found = this.#loaded.find((l) => l.id === id);
    if (found === undefined) return null;
    const e = found.experience;
    const tok = this.tokenizer.get(this.file);
    const response = e.tokens.slice(e.promptLength);
    const tokens = response.map((tokenId, i) => ({
      id: tokenId,
      text: tok === null ? `‹${tokenId}›` : tok.tokenizer.decode([tokenId]),
      logprob: e.logprobs?.[i] ?? null,
      advantage: e.advantages?.[i] ?? null,
      mask: e.actionMask?.[i] ?? 1,
    }));
    return {
      ...rolloutRow(found.id, e, tok, this.#recorded, Number.POSITIVE_INFINITY),
      promptTokens: e.promptLength,
      messages: (e.messages ?? []).map((m) => ({
        role: m.role,
        content: typeof m.content === 'string' ? m.content : JSON.stringify(m.content),
      })),
      tokens,
      metrics: e.metrics ?? {},
      tokenizer: tok?.dir ?? null,
    };
  }
}

const PAGE = 5000;

/** The buffer's error (it names server, database and user); a password from this process's environment scrubbed too. */
function postgresSourceError(error: unknown): PostgresSourceError {
  let message = error instanceof PostgresBufferError || error instanceof Error ? error.message : String(error);
  const password = process.env.PGPASSWORD;
  if (password) message = message.replaceAll(password, '***');
  return new PostgresSourceError(message);
}

/**
 * The trainer_advantages.jsonl of the stage a source belongs to: in the source's folder (<stage>/buffer.db, a dump,
 * buffer.json) or the one above it (<stage>/buffer/<name>.db) where that is inside the runs folder `runsRoot` (without
 * one: the source's folder only); null when none has one.
 */
function stageAdvantagesFile(source: string, runsRoot: string | null): string | null {
  const inside = (dir: string) => {
    const rel = runsRoot === null ? '..' : relative(runsRoot, dir);
    return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel));
  };
  const parent = dirname(dirname(source));
  for (const dir of [dirname(source), ...(inside(parent) ? [parent] : [])]) {
    const file = join(dir, ADVANTAGES_FILE);
    if (existsSync(file)) return file;
  }
  return null;
}

function parseAdvantages(text: string, file: string, warnings: string[]): [string, number][][] {
  const out: [string, number][][] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    try {
      out.push(parseAdvantageLine(JSON.parse(line)));
    } catch (error) {
      warnings.push(`${file}: ${(error as Error).message}: skipped`);
    }
  }
  return out;
}

function parseExperiences(text: string, file: string, warnings: string[]): Experience[] {
  const out: Experience[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    try {
      out.push(parseExperienceLine(file, 0, JSON.parse(line)));
    } catch (error) {
      warnings.push(`${file}: ${(error as Error).message}: skipped`);
    }
  }
  return out;
}

function clip(text: string, limit: number): string {
  return text.length > limit ? `${text.slice(0, limit)}…` : text;
}

function rolloutRow(
  id: number,
  e: Experience,
  tok: LoadedTokenizer | null,
  recorded: ReadonlyMap<string, number>,
  limit = PREVIEW_CHARS,
): RolloutRow {
  const length = responseLength(e);
  const mask = e.actionMask;
  let advantage: number | null = null;
  if (e.advantages !== undefined && e.advantages.length > 0) {
    let sum = 0;
    let n = 0;
    e.advantages.forEach((a, i) => {
      if ((mask?.[i] ?? 1) > 0) {
        sum += a;
        n++;
      }
    });
    advantage = n > 0 ? sum / n : null;
  } else advantage = recorded.get(e.eid) ?? null;
  const decode = (ids: readonly number[]) => (tok === null ? ids.join(' ') : tok.tokenizer.decode([...ids]));
  const turns = (e.messages ?? []).filter((m) => m.role === 'assistant').length;
  const prompt =
    e.promptText ?? (e.messages?.length ? contentText(e.messages[0]?.content ?? '') : decode(e.tokens.slice(0, e.promptLength)));
  const response = e.responseText ?? decode(e.tokens.slice(e.promptLength));
  return {
    id,
    eid: e.eid,
    step: typeof e.info?.step === 'number' ? e.info.step : null,
    taskId: e.info?.taskId === undefined ? '' : String(e.info.taskId),
    repeat: typeof e.info?.runId === 'number' ? e.info.runId : null,
    reward: typeof e.reward === 'number' ? e.reward : null,
    advantage,
    responseLength: length,
    finishReason:
      e.truncateStatus === 'response_truncated'
        ? 'length'
        : e.truncateStatus === 'prompt_truncated'
          ? 'prompt_truncated'
          : 'stop',
    truncated: e.truncateStatus !== undefined,
    turns: turns > 1 ? turns : 0,
    prompt: clip(prompt, limit),
    response: clip(response, limit),
  };
}

function matches(r: RolloutRow, f: RolloutFilter): boolean {
  if (f.step !== undefined && r.step !== f.step) return false;
  if (f.task !== undefined && f.task !== '' && !r.taskId.includes(f.task)) return false;
  if (f.minReward !== undefined && !(r.reward !== null && r.reward >= f.minReward)) return false;
  if (f.maxReward !== undefined && !(r.reward !== null && r.reward <= f.maxReward)) return false;
  if (f.minLength !== undefined && r.responseLength < f.minLength) return false;
  if (f.maxLength !== undefined && r.responseLength > f.maxLength) return false;
  if (f.truncated !== undefined && r.truncated !== f.truncated) return false;
  return true;
}

interface LoadedTokenizer {
  dir: string;
  tokenizer: Tokenizer;
}

/**
 * The tokenizer of the run a source belongs to, to show token texts: the first tokenizer.json found in the source's
 * stage folder's final_model/ or newest checkpoint's model/. The stage folder is the source's folder, or the one above
 * it for a shared buffer in its default place, <stage>/buffer/<name>.db. Looked up once per source folder.
 */
export class TokenizerCache {
  readonly #byDir = new Map<string, LoadedTokenizer | null>();

  get(sourceFile: string): LoadedTokenizer | null {
    const dir = dirname(sourceFile);
    if (!this.#byDir.has(dir)) this.#byDir.set(dir, findTokenizer(dir) ?? findTokenizer(dirname(dir)));
    return this.#byDir.get(dir) ?? null;
  }
}

function findTokenizer(stageDir: string): LoadedTokenizer | null {
  const candidates = [join(stageDir, 'final_model')];
  let names: string[] = [];
  try {
    names = readdirSync(join(stageDir, 'checkpoints'));
  } catch {
    // no checkpoints yet
  }
  const steps = names
    .map((n) => /^global_step_(\d+)$/.exec(n)?.[1])
    .filter((n): n is string => n !== undefined)
    .map(Number)
    .sort((a, b) => b - a);
  for (const step of steps) candidates.push(join(stageDir, 'checkpoints', `global_step_${step}`, 'model'));
  for (const dir of candidates) {
    if (!existsSync(join(dir, 'tokenizer.json'))) continue;
    try {
      return { dir, tokenizer: TokenizerClass.load(dir) };
    } catch {
      // being written, or not loadable: try the next
    }
  }
  return null;
}
