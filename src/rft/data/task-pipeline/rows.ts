// Rows in and out of the task pipeline: reading input files (.jsonl, .json, .parquet), writing the output
// taskset (JSONL, atomically), and the field access operators share (dotted paths reach nested objects, as Trinity's
// format keys do: `reward_model.ground_truth`).
import { createHash } from 'node:crypto';
import { createReadStream, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatasetReadError, readFileRows } from '../../buffer/rows.js';
import type { TaskRow } from './types.js';

export class TaskPipelineError extends Error {
  override name = 'TaskPipelineError';
}

const isRow = (value: unknown): value is TaskRow => value !== null && typeof value === 'object' && !Array.isArray(value);

/**
 * The rows of the input files in order (.jsonl, .json, .parquet: the dataset reader's formats, src/rft/buffer/rows.ts);
 * a row that is not a JSON object is an error naming where it is.
 */
export async function readInputRows(files: readonly string[]): Promise<TaskRow[]> {
  const rows: TaskRow[] = [];
  for (const file of files) {
    try {
      for await (const { where, value } of readFileRows(file)) {
        if (!isRow(value)) throw new TaskPipelineError(`${where}: a task pipeline input row must be a JSON object`);
        rows.push(value);
      }
    } catch (error) {
      if (error instanceof DatasetReadError)
        throw new TaskPipelineError(`task pipeline input ${error.message}`, { cause: error });
      throw error;
    }
  }
  return rows;
}

/** Writes rows as JSONL through a temporary file and a rename: a reader never sees half a taskset. */
export function writeRows(file: string, rows: readonly TaskRow[]): void {
  mkdirSync(dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}`;
  writeFileSync(tmp, rows.map((row) => `${JSON.stringify(row)}\n`).join(''));
  renameSync(tmp, file);
}

/** sha256 of a file's bytes, streamed. */
export function fileSha256(file: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256');
    createReadStream(file)
      .on('data', (chunk) => hash.update(chunk))
      .on('error', reject)
      .on('end', () => resolve(hash.digest('hex')));
  });
}

/** The value at a dotted path (`a.b.c`); a key that itself contains dots is found first as written. */
export function getField(row: TaskRow, path: string): unknown {
  if (Object.hasOwn(row, path)) return row[path];
  let node: unknown = row;
  for (const key of path.split('.')) {
    if (!isRow(node) || !Object.hasOwn(node, key)) return undefined;
    node = node[key];
  }
  return node;
}

/** A copy of `row` with `value` at the dotted path (objects on the way are copied, not shared). */
export function setField(row: TaskRow, path: string, value: unknown): TaskRow {
  const keys = path.split('.');
  const out: TaskRow = { ...row };
  let node = out;
  for (const key of keys.slice(0, -1)) {
    const child = node[key];
    const copy: TaskRow = isRow(child) ? { ...child } : {};
    node[key] = copy;
    node = copy;
  }
  node[keys[keys.length - 1] as string] = value;
  return out;
}

/** A copy of `row` without the dotted path. */
export function deleteField(row: TaskRow, path: string): TaskRow {
  if (Object.hasOwn(row, path)) {
    const { [path]: _, ...rest } = row;
    return rest;
  }
  const keys = path.split('.');
  const head = keys[0] as string;
  const child = row[head];
  if (keys.length === 1 || !isRow(child)) return row;
  return { ...row, [head]: deleteField(child, keys.slice(1).join('.')) };
}

/**
 * The text of a field for operators that look at text: a string as is, a number as written, a chat (a list of
 * {role, content}) as its contents joined by newlines; null where the field is absent or holds something else.
 */
export function textOf(row: TaskRow, path: string): string | null {
  const value = getField(row, path);
  if (typeof value === 'string') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  if (Array.isArray(value) && value.every((t) => isRow(t) && typeof t.content === 'string'))
    return value.map((t) => (t as { content: string }).content).join('\n');
  return null;
}

/** The text of a row's field, or an error naming the operator, the row and the field. */
export function requireText(row: TaskRow, path: string, where: string, index: number): string {
  const text = textOf(row, path);
  if (text === null) {
    const value = getField(row, path);
    const got = value === undefined ? 'nothing' : Array.isArray(value) ? 'a list' : typeof value;
    throw new TaskPipelineError(`${where}: row ${index} has no text in '${path}' (got ${got}); set the operator's text_key`);
  }
  return text;
}
