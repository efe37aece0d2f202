// Tasksets: JSONL (or a JSON array) rows turned into Task objects by format keys (Trinity-RFT's `TasksetConfig`
// with `format: {prompt_key, response_key, messages_key, system_prompt_key, system_prompt, reply_prefix,
// workflow_key, reward_fn_key}`; defaults prompt/response). A bad row is an error naming file:line and the key.
//
//   {"question": "1+1=", "answer": "2"}   with promptKey "question", responseKey "answer"
//   → Task { id: "math:0", prompt: "1+1=", response: "2", workflow: <default>, ... }
import { readFile, stat } from 'node:fs/promises';
import type { ChatTurn } from '../experience.js';
import type { Task } from '../task.js';
import { readJsonl } from './jsonl.js';

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
  /** Row id column (default "id"; rows without it get `<taskset>:<index>`). */
  idKey?: string;
  /** Numeric columns copied into task.features for selectors (each row must have them). */
  featureKeys?: string[];
}

export interface TasksetConfig {
  /** Unique name (task ids and errors use it). */
  name: string;
  /** A .jsonl file, or a .json file holding an array of rows. */
  path: string;
  format?: TasksetFormat;
  defaultWorkflowType?: string;
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

/** Reads a taskset file into tasks. */
export async function loadTaskset(config: TasksetConfig): Promise<Taskset> {
  const info = await stat(config.path).catch((error: Error) => {
    throw new TasksetError(config.path, `cannot read taskset '${config.name}': ${error.message}`);
  });
  if (!info.isFile()) throw new TasksetError(config.path, `taskset '${config.name}' must be a .jsonl or .json file`);
  const tasks: Task[] = [];
  const ids = new Map<string, string>();
  const add = (where: string, value: unknown) => {
    const task = rowToTask(config, tasks.length, value, where);
    const previous = ids.get(task.id);
    if (previous !== undefined) throw new TasksetError(where, `duplicate task id '${task.id}' (also at ${previous})`);
    ids.set(task.id, where);
    tasks.push(task);
  };
  if (config.path.endsWith('.json')) {
    let rows: unknown;
    try {
      rows = JSON.parse(await readFile(config.path, 'utf8'));
    } catch (error) {
      throw new TasksetError(config.path, `invalid JSON: ${(error as Error).message}`);
    }
    if (!Array.isArray(rows)) throw new TasksetError(config.path, 'a .json taskset must hold an array of rows');
    rows.forEach((row, i) => {
      add(`${config.path}[${i}]`, row);
    });
  } else {
    for await (const { line, value } of readJsonl(config.path)) add(`${config.path}:${line}`, value);
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
  const text = (key: string | undefined, required: boolean): string | undefined => {
    if (key === undefined) return undefined;
    const value = raw[key];
    if (value === undefined || value === null) {
      if (required) throw new TasksetError(where, `missing key '${key}'`);
      return undefined;
    }
    if (typeof value === 'string') return value;
    if (typeof value === 'number' && Number.isFinite(value)) return String(value);
    throw new TasksetError(where, `key '${key}' must be a string, got ${Array.isArray(value) ? 'an array' : typeof value}`);
  };

  const task: Task = { id: '', taskset: config.name, index, raw };
  const idKey = format.idKey ?? 'id';
  task.id = text(idKey, false) ?? `${config.name}:${index}`;
  if (format.messagesKey !== undefined) {
    task.messages = parseMessages(raw[format.messagesKey], format.messagesKey, where);
  } else {
    task.prompt = text(format.promptKey ?? 'prompt', true);
  }
  const response = text(format.responseKey ?? 'response', false);
  if (response !== undefined) task.response = response;
  const systemPrompt = text(format.systemPromptKey, false) ?? format.systemPrompt;
  if (systemPrompt !== undefined) task.systemPrompt = systemPrompt;
  if (format.replyPrefix !== undefined) task.replyPrefix = format.replyPrefix;
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
    return turn as ChatTurn;
  });
}
