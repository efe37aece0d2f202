// Tasksets: dataset rows (JSONL, JSON, parquet: ./rows.ts) turned into Task objects by format keys (Trinity-RFT's
// `TasksetConfig` with `format: {prompt_key, response_key, messages_key, system_prompt_key, system_prompt,
// reply_prefix, workflow_key, reward_fn_key, tools_key}`; defaults prompt/response/tools), read from the `split` and
// `subset_name` of a file, a folder laid out as Hugging Face datasets lays them out, or the hub cache (./split.ts);
// or from an SQLite table (storage_type sql, as Trinity's SQL task storage: the table named after the taskset, each
// row's `raw_task` column a JSON object, in `id` order). A bad row is an error naming file:line (file row n for
// parquet, db:table:id for SQL) and the key.
//
//   {"question": "1+1=", "answer": "2"}   with promptKey "question", responseKey "answer"
//   → Task { id: "math:0", prompt: "1+1=", response: "2", workflow: <default>, ... }
//
// A prompt column that holds {role, content} turns is the task's conversation (task.messages), and a dotted key the
// row has no column of that name for reads nested objects: BOTS' rows `{prompt: [{role: user, ...}],
// reward_model: {ground_truth: "3"}}` with response_key `reward_model.ground_truth`.
import { existsSync } from 'node:fs';
import Database from 'better-sqlite3';
import type { ToolDefinition } from '../../tokenizer/index.js';
import type { ChatTurn } from '../experience.js';
import type { Task } from '../task.js';
import { attachTaskImages, imageBaseDir } from './dataset-images.js';
import { DatasetReadError, readDatasetRows } from './rows.js';
import { isPostgresUrl, postgresTarget } from './postgres.js';
import { readPostgresTaskRows, type SqlTaskRows } from './postgres-taskset.js';
import { inSqliteFile } from './sqlite.js';

export interface TasksetFormat {
  /** Prompt text column (default "prompt"). */
  promptKey?: string;
  /** Reference answer column (default "response"); optional in rows. */
  responseKey?: string;
  /** Conversation column (list of {role, content}); when set, rows carry messages instead of a prompt. */
  messagesKey?: string;
  /** Per-row system prompt column; else `systemPrompt`. */
  systemPromptKey?: string;
  systemPrompt?: string;
  /** Assistant prefill (e.g. "<think>"). */
  replyPrefix?: string;
  /** Per-row workflow / reward function name columns. */
  workflowKey?: string;
  rewardFnKey?: string;
  /** Column of the tools the model may call (default "tools"; optional in rows): a list of OpenAI tool definitions,
   * or that list as JSON text. They reach the chat template. */
  toolsKey?: string;
  /** Row id column (default "id"; rows without it get `<taskset>:<index>`). */
  idKey?: string;
  /** Numeric columns copied into task.features for selectors (each row must have them). */
  featureKeys?: string[];
  /** The prompt's images column (Trinity's image_key): they join the prompt as content parts (./dataset-images.ts). */
  imageKey?: string;
}

export interface TasksetConfig {
  /** Unique name (task ids and errors use it). */
  name: string;
  /** A .jsonl/.json/.parquet file, a dataset folder, a hub cache folder or cached hub id (./split.ts). */
  path: string;
  /** The split of a folder to read (default 'train'). */
  split?: string;
  /** The subset (Hugging Face config; Trinity's subset_name) of a folder to read; unset: the default one. */
  subset?: string | null;
  /**
   * file (default): path is a file or folder; sql: path is an SQLite file (or sqlite:///file), or a PostgreSQL URL
   * (postgresql://user:pass@host:port/db), with a table named `name`.
   */
  storageType?: 'file' | 'sql';
  format?: TasksetFormat;
  defaultWorkflowType?: string;
  /**
   * Rows may lack the prompt column: the default workflow builds its tasks from the rows' own fields (a FrozenLake
   * row's seed, size, p; WorkflowSpec.readsPrompt false), and a column that is not text (a list, an object) is left
   * to it in the raw row rather than refused. Default false: a row without it is an error.
   */
  promptOptional?: boolean;
  defaultRewardFnType?: string;
  workflowArgs?: Record<string, unknown>;
  rewardFnArgs?: Record<string, unknown>;
  rolloutArgs?: Record<string, unknown>;
  isEval?: boolean;
}

export interface Taskset {
  name: string;
  path: string;
  tasks: Task[];
}

export class TasksetError extends Error {
  constructor(
    readonly where: string,
    detail: string,
  ) {
    super(`${where}: ${detail}`);
    this.name = 'TasksetError';
  }
}

/** Reads a taskset (the rows of its split: ./rows.ts, or its SQLite table) into tasks. */
export async function loadTaskset(config: TasksetConfig): Promise<Taskset> {
  const imageKey = config.format?.imageKey;
  if (config.storageType === 'sql') {
    const taskset = await (isPostgresUrl(config.path) ? loadPostgresTaskset(config) : loadSqlTaskset(config));
    if (imageKey !== undefined)
      for (const task of taskset.tasks)
        await attachTaskImages(task, imageKey, `${config.path}:${config.name}:${task.id}`, process.cwd());
    return taskset;
  }
  const baseDir = imageBaseDir(config.path);
  const tasks: Task[] = [];
  const ids = new Map<string, string>();
  try {
    for await (const { where, value } of readDatasetRows(config.path, { split: config.split, subset: config.subset })) {
      const task = rowToTask(config, tasks.length, value, where);
      const previous = ids.get(task.id);
      if (previous !== undefined) throw new TasksetError(where, `duplicate task id '${task.id}' (also at ${previous})`);
      if (imageKey !== undefined) await attachTaskImages(task, imageKey, where, baseDir);
      ids.set(task.id, where);
      tasks.push(task);
    }
  } catch (error) {
    if (!(error instanceof DatasetReadError)) throw error;
    const { where, detail } = error;
    const text = detail.startsWith('cannot read: ')
      ? `cannot read taskset '${config.name}': ${detail.slice('cannot read: '.length)}`
      : `taskset '${config.name}': ${detail}`;
    throw new TasksetError(where, text);
  }
  return { name: config.name, path: config.path, tasks };
}

/** storage_type sql: the rows of table `config.name`, each `raw_task` a JSON object, in id order. */
function loadSqlTaskset(config: TasksetConfig): Taskset {
  const file = config.path.replace(/^sqlite:\/\/\//, '');
  if (!existsSync(file)) throw new TasksetError(file, `cannot read taskset '${config.name}': no such SQLite file`);
  // better-sqlite3's errors name no file: each names this one (not a database, damaged, locked...)
  return inSqliteFile(file, `taskset '${config.name}'`, () => {
    const db = new Database(file, { readonly: true, fileMustExist: true });
    try {
      return readSqlTasks(db, file, config);
    } finally {
      db.close();
    }
  });
}

/** storage_type sql with a postgresql:// path: the same table layout in PostgreSQL (./postgres-taskset.ts). */
async function loadPostgresTaskset(config: TasksetConfig): Promise<Taskset> {
  const target = postgresTarget(config.path).display;
  let read: SqlTaskRows;
  try {
    read = await readPostgresTaskRows(config.path, config.name, config.name);
  } catch (error) {
    throw new TasksetError(target, (error as Error).message);
  }
  return sqlRowsToTaskset(config, read.location, read.rows);
}

/** The tasks of table `config.name` (id, raw_task) of an open database. */
function readSqlTasks(db: Database.Database, file: string, config: TasksetConfig): Taskset {
  const table = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?").get(config.name);
  if (table === undefined) {
    throw new TasksetError(file, `taskset '${config.name}': the database has no table '${config.name}' (the taskset's name)`);
  }
  let rows: { id: unknown; raw_task: unknown }[];
  try {
    rows = db.prepare(`SELECT id, raw_task FROM "${config.name.replaceAll('"', '""')}" ORDER BY id`).all() as typeof rows;
  } catch (error) {
    // a missing column is SQLITE_ERROR; a damaged file (SQLITE_CORRUPT...) is reported as such by the caller
    if ((error as { code?: unknown }).code !== 'SQLITE_ERROR') throw error;
    throw new TasksetError(
      file,
      `taskset '${config.name}': table '${config.name}' needs columns id and raw_task (${(error as Error).message})`,
    );
  }
  return sqlRowsToTaskset(config, file, rows);
}

/** Tasks from SQL rows (id, raw_task: JSON text or an already parsed object); `location` prefixes errors. */
function sqlRowsToTaskset(config: TasksetConfig, location: string, rows: { id: unknown; raw_task: unknown }[]): Taskset {
  const tasks: Task[] = [];
  const ids = new Map<string, string>();
  for (const row of rows) {
    const where = `${location}:${config.name}:${String(row.id)}`;
    let value: unknown;
    try {
      value = typeof row.raw_task === 'string' ? JSON.parse(row.raw_task) : row.raw_task;
    } catch (error) {
      throw new TasksetError(where, `raw_task is not JSON: ${(error as Error).message}`);
    }
    const task = rowToTask(config, tasks.length, value, where);
    const previous = ids.get(task.id);
    if (previous !== undefined) throw new TasksetError(where, `duplicate task id '${task.id}' (also at ${previous})`);
    ids.set(task.id, where);
    tasks.push(task);
  }
  return { name: config.name, path: config.path, tasks };
}

/** Turns one row into a Task; `where` (file:line) prefixes every error. */
export function rowToTask(config: TasksetConfig, index: number, row: unknown, where: string): Task {
  if (row === null || typeof row !== 'object' || Array.isArray(row)) {
    throw new TasksetError(where, `a row must be a JSON object, got ${Array.isArray(row) ? 'an array' : typeof row}`);
  }
  const raw = row as Record<string, unknown>;
  const format = config.format ?? {};
  const text = (key: string | undefined, required: boolean, rowOwned = false): string | undefined => {
    if (key === undefined) return undefined;
    const value = columnValue(raw, key);
    if (value === undefined || value === null) {
      if (required) throw new TasksetError(where, `missing key '${key}'`);
      return undefined;
    }
    if (typeof value === 'string') return value;
    if (typeof value === 'number' && Number.isFinite(value)) return String(value);
    // a workflow that reads the row's own fields takes a list or an object there as it is (R3L's countdown nums)
    if (rowOwned && config.promptOptional === true) return undefined;
    throw new TasksetError(where, `key '${key}' must be a string, got ${Array.isArray(value) ? 'an array' : typeof value}`);
  };

  const task: Task = { id: '', taskset: config.name, index, raw };
  const idKey = format.idKey ?? 'id';
  task.id = text(idKey, false) ?? `${config.name}:${index}`;
  if (format.messagesKey !== undefined) {
    task.messages = parseMessages(raw[format.messagesKey], format.messagesKey, where);
  } else if (isConversation(columnValue(raw, format.promptKey ?? 'prompt'))) {
    // a prompt column holding the conversation ({role, content} turns: BOTS' and learn_to_ask's rows)
    task.messages = parseMessages(columnValue(raw, format.promptKey ?? 'prompt'), format.promptKey ?? 'prompt', where);
  } else {
    const prompt = text(format.promptKey ?? 'prompt', config.promptOptional !== true, true);
    if (prompt !== undefined) task.prompt = prompt;
  }
  const response = text(format.responseKey ?? 'response', false, true);
  if (response !== undefined) task.response = response;
  const systemPrompt = text(format.systemPromptKey, false) ?? format.systemPrompt;
  if (systemPrompt !== undefined) task.systemPrompt = systemPrompt;
  if (format.replyPrefix !== undefined) task.replyPrefix = format.replyPrefix;
  const tools = parseTools(raw[format.toolsKey ?? 'tools'], format.toolsKey ?? 'tools', where);
  if (tools !== undefined) task.tools = tools;
  const workflow = text(format.workflowKey, false) ?? config.defaultWorkflowType;
  if (workflow !== undefined) task.workflow = workflow;
  const rewardFn = text(format.rewardFnKey, false) ?? config.defaultRewardFnType;
  if (rewardFn !== undefined) task.rewardFn = rewardFn;
  if (config.workflowArgs !== undefined) task.workflowArgs = config.workflowArgs;
  if (config.rewardFnArgs !== undefined) task.rewardFnArgs = config.rewardFnArgs;
  if (config.rolloutArgs !== undefined) task.rolloutArgs = config.rolloutArgs;
  if (format.featureKeys !== undefined && format.featureKeys.length > 0) {
    task.features = {};
    for (const key of format.featureKeys) {
      const value = raw[key];
      if (typeof value !== 'number' || !Number.isFinite(value)) {
        throw new TasksetError(
          where,
          `feature key '${key}' must be a finite number, got ${value === undefined ? 'nothing' : JSON.stringify(value)}`,
        );
      }
      task.features[key] = value;
    }
  }
  if (config.isEval) task.isEval = true;
  return task;
}

/**
 * A row's tools (Trinity's tools_key): OpenAI tool definitions `{type: 'function', function: {name, description?,
 * parameters?}}` (a bare `{name, ...}` is taken as the function), as a list or as JSON text of one; null/absent: none.
 */
export function parseTools(value: unknown, key: string, where: string): ToolDefinition[] | undefined {
  if (value === undefined || value === null) return undefined;
  let list = value;
  if (typeof value === 'string') {
    if (value.trim() === '') return undefined;
    try {
      list = JSON.parse(value);
    } catch (error) {
      throw new TasksetError(where, `key '${key}' is text but not JSON: ${(error as Error).message}`);
    }
  }
  if (!Array.isArray(list)) throw new TasksetError(where, `key '${key}' must be a list of tool definitions`);
  return list.map((tool, i): ToolDefinition => {
    const item = tool as Record<string, unknown> | null;
    const fn = (item !== null && typeof item === 'object' && item.type === 'function' ? item.function : item) as Record<
      string,
      unknown
    > | null;
    if (fn === null || typeof fn !== 'object' || typeof fn.name !== 'string' || fn.name === '') {
      throw new TasksetError(where, `key '${key}'[${i}] must be {type: 'function', function: {name, ...}}`);
    }
    return { type: 'function', function: fn as ToolDefinition['function'] };
  });
}

/**
 * A row's column `key`; a dotted key the row has no column of that name for is a path into nested objects
 * (`reward_model.ground_truth`, as BOTS' rows keep their answer).
 */
function columnValue(raw: Record<string, unknown>, key: string): unknown {
  if (key in raw || !key.includes('.')) return raw[key];
  let value: unknown = raw;
  for (const part of key.split('.')) {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

/** A non-empty list of {role: string, ...} objects: a conversation, not text. */
function isConversation(value: unknown): boolean {
  return (
    Array.isArray(value) &&
    value.length > 0 &&
    value.every((turn) => turn !== null && typeof turn === 'object' && typeof (turn as { role?: unknown }).role === 'string')
  );
}

/** A messages column: {role, content} turns, each without its null fields. */
function parseMessages(value: unknown, key: string, where: string): ChatTurn[] {
  if (!Array.isArray(value)) {
    throw new TasksetError(
      where,
      value === undefined ? `missing key '${key}'` : `key '${key}' must be a list of {role, content}`,
    );
  }
  return value.map((turn, i) => {
    if (turn === null || typeof turn !== 'object' || Array.isArray(turn)) {
      throw new TasksetError(where, `key '${key}'[${i}] must be an object {role, content}`);
    }
    const { role, content } = turn as Record<string, unknown>;
    if (typeof role !== 'string') throw new TasksetError(where, `key '${key}'[${i}].role must be a string`);
    if (typeof content !== 'string') throw new TasksetError(where, `key '${key}'[${i}].content must be a string`);
    // the fields a turn lacks, which datasets / parquet fill with null, are not the chat template's to see
    return Object.fromEntries(Object.entries(turn).filter(([, v]) => v !== null && v !== undefined)) as ChatTurn;
  });
}
