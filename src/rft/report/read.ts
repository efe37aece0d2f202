// Reads the files a run leaves in its job folder (src/rft/run/stage.ts, src/rft/monitor/monitor.ts):
//
//   JOB_DIR/metrics.jsonl                  a single-stage run
//   JOB_DIR/<stage>/metrics.jsonl          one folder per stage (checkpoint_root_dir/project/name/<stage>)
//   JOB_DIR/<stage>/bench/metrics.jsonl    mode bench (two levels deep at most)
//   .../eval_samples.jsonl                 optional: sampled eval problems with the model's answers
//   JOB_DIR/stages.json                    optional: ["sft", "grpo"], the stage folders in run order
//
// Without stages.json the stages are ordered by their earliest metric time. Bad lines are skipped with a warning
// that names file and line; a job folder without any metrics.jsonl is an error. Files are read in bounded chunks
// (./jsonl-chunks.ts): one too large to read is an error naming it, not a crash.
import { type Dirent, existsSync } from 'node:fs';
import { open, readdir } from 'node:fs/promises';
import { basename, join, posix, relative, resolve, sep } from 'node:path';
import { type ChunkLimits, checkRunFileSize, LineAssembler, type LineParser, readChunkedLines } from './jsonl-chunks.js';
import { openInside } from '../../util/confined-path.js';

/** One line of metrics.jsonl: the step, the time (unix seconds) when present, and every numeric metric. */
export interface MetricsRow {
  step: number;
  time?: number;
  metrics: Record<string, number>;
}

/** One line of eval_samples.jsonl. */
export interface EvalSample {
  step: number;
  taskset: string;
  taskId: string;
  prompt: string;
  response: string;
  reference: string;
  reward: number;
}

export interface StageData {
  /** The folder relative to the job folder ('grpo', 'grpo/bench'), or the job folder's own name. */
  name: string;
  /** The folder relative to the job folder as stages.json names it ('.' for the job folder itself). */
  path: string;
  dir: string;
  /** In file order. */
  rows: MetricsRow[];
  samples: EvalSample[];
}

export interface RunData {
  jobDir: string;
  stages: StageData[];
  /** Problems met while reading (bad lines, empty files), each naming the file. */
  warnings: string[];
}

export const METRICS_FILE = 'metrics.jsonl';
export const SAMPLES_FILE = 'eval_samples.jsonl';
export const STAGES_FILE = 'stages.json';

/** Lists a folder's entries (readdir with file types; a parameter for tests). */
export type ListDir = (dir: string) => Promise<Dirent[]>;

/**
 * Folders under `jobDir` (itself included, two levels down at most) that hold a metrics.jsonl. A running job replaces
 * folders as it goes (final_model, checkpoints): one that is gone by the time it is listed is skipped; the job folder
 * itself missing is an error.
 */
export async function findStageDirs(
  jobDir: string,
  listDir: ListDir = (dir) => readdir(dir, { withFileTypes: true }),
): Promise<string[]> {
  const found: string[] = [];
  const visit = async (dir: string, depth: number): Promise<void> => {
    if (existsSync(join(dir, METRICS_FILE))) found.push(dir);
    if (depth === 2) return;
    let entries: Dirent[];
    try {
      entries = await listDir(dir);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (depth > 0 && (code === 'ENOENT' || code === 'ENOTDIR')) return;
      throw error;
    }
    for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name)))
      if (entry.isDirectory() && !entry.name.startsWith('.')) await visit(join(dir, entry.name), depth + 1);
  };
  await visit(jobDir, 0);
  return found;
}

function lines(text: string, firstLine: number): { line: string; number: number }[] {
  return text
    .split('\n')
    .map((line, i) => ({ line: line.trim(), number: firstLine + i }))
    .filter((l) => l.line !== '');
}

function parseLine(file: string, number: number, line: string, warnings: string[]): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(line);
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) return value as Record<string, unknown>;
    warnings.push(`${file}:${number}: not a JSON object: skipped`);
  } catch (error) {
    warnings.push(`${file}:${number}: not valid JSON (${(error as Error).message}): skipped`);
  }
  return null;
}

/** Parses metrics.jsonl text, warning when it holds no row; `file` names it in warnings. */
export function parseMetrics(text: string, file: string, warnings: string[], firstLine = 1): MetricsRow[] {
  const rows = parseMetricsLines(text, file, warnings, firstLine);
  if (rows.length === 0) warnings.push(noMetricsLines(file));
  return rows;
}

const noMetricsLines = (file: string) => `${file}: no metrics lines (the stage wrote nothing yet)`;

/** Parses lines of metrics.jsonl (a part of the file: no warning when there is no row among them). */
export function parseMetricsLines(text: string, file: string, warnings: string[], firstLine = 1): MetricsRow[] {
  const rows: MetricsRow[] = [];
  for (const { line, number } of lines(text, firstLine)) {
    const object = parseLine(file, number, line, warnings);
    if (object === null) continue;
    const { step, time, ...rest } = object;
    if (typeof step !== 'number' || !Number.isInteger(step)) {
      warnings.push(`${file}:${number}: no integer "step": skipped`);
      continue;
    }
    const metrics: Record<string, number> = {};
    const ignored: string[] = [];
    for (const [key, value] of Object.entries(rest)) {
      if (typeof value === 'number' && Number.isFinite(value)) metrics[key] = value;
      else ignored.push(key);
    }
    if (ignored.length) warnings.push(`${file}:${number}: not finite numbers, left out: ${ignored.join(', ')}`);
    rows.push(typeof time === 'number' ? { step, time, metrics } : { step, metrics });
  }
  return rows;
}

/** Parses eval_samples.jsonl text; lines without a numeric step or a task id are skipped with a warning. */
export function parseSamples(text: string, file: string, warnings: string[], firstLine = 1): EvalSample[] {
  const samples: EvalSample[] = [];
  const text_ = (v: unknown) => (typeof v === 'string' ? v : v === undefined || v === null ? '' : JSON.stringify(v));
  for (const { line, number } of lines(text, firstLine)) {
    const o = parseLine(file, number, line, warnings);
    if (o === null) continue;
    if (typeof o.step !== 'number' || (typeof o.taskId !== 'string' && typeof o.taskId !== 'number')) {
      warnings.push(`${file}:${number}: needs a numeric "step" and a "taskId": skipped`);
      continue;
    }
    samples.push({
      step: o.step,
      taskset: typeof o.taskset === 'string' ? o.taskset : '',
      taskId: String(o.taskId),
      prompt: text_(o.prompt),
      response: text_(o.response),
      reference: text_(o.reference),
      reward: typeof o.reward === 'number' ? o.reward : Number.NaN,
    });
  }
  return samples;
}

const earliestTime = (stage: StageData) =>
  stage.rows.reduce((t, r) => (r.time !== undefined && r.time < t ? r.time : t), Number.POSITIVE_INFINITY);

/** 'grpo/', './grpo' and 'grpo' name the same folder; '' and '.' the job folder. */
const normalize = (path: string) => posix.normalize(path.replaceAll('\\', '/')).replace(/\/$/, '') || '.';

/** Orders stages by stages.json (names listed there first, in its order), then by earliest metric time. */
export function orderStages(stages: StageData[], order: string[] | null): StageData[] {
  const rank = (s: StageData) => {
    const i = order?.findIndex((entry) => normalize(entry) === s.path) ?? -1;
    return i < 0 ? Number.POSITIVE_INFINITY : i;
  };
  return [...stages].sort((a, b) => rank(a) - rank(b) || earliestTime(a) - earliestTime(b) || a.name.localeCompare(b.name));
}

/** The most bytes of stages.json read (a list of a few folder names). */
const MAX_STAGES_FILE_BYTES = 1024 * 1024;

/** stages.json's list; `root`: read it only inside that folder (the Studio's runs folder: no link out is followed). */
export async function readStageOrder(jobDir: string, warnings: string[], root?: string): Promise<string[] | null> {
  const file = join(jobDir, STAGES_FILE);
  if (!existsSync(file)) return null;
  try {
    const value: unknown = JSON.parse(await readSmallFile(file, MAX_STAGES_FILE_BYTES, root));
    if (Array.isArray(value) && value.every((v) => typeof v === 'string')) return value;
    warnings.push(`${file}: not a JSON array of stage folder names: ignored`);
  } catch (error) {
    warnings.push(`${file}: not valid JSON (${(error as Error).message}): ignored`);
  }
  return null;
}

/** Reads every stage of the job folder; throws when there is none. */
export async function readRun(jobDir: string): Promise<RunData> {
  if (!existsSync(jobDir)) throw new Error(`no such job folder: ${jobDir}`);
  const dirs = await findStageDirs(jobDir);
  if (dirs.length === 0)
    throw new Error(`no ${METRICS_FILE} in ${jobDir} or its subfolders (two levels deep): is this a run's job folder?`);
  const warnings: string[] = [];
  const stages: StageData[] = [];
  for (const dir of dirs) {
    const rel = relative(jobDir, dir);
    const path = rel === '' ? '.' : rel.split(sep).join('/');
    const name = rel === '' ? basename(resolve(jobDir)) : path;
    const metricsFile = join(dir, METRICS_FILE);
    const rows = await readJsonlFile(metricsFile, parseMetricsLines, warnings);
    if (rows.length === 0) warnings.push(noMetricsLines(metricsFile));
    const samplesFile = join(dir, SAMPLES_FILE);
    const samples = existsSync(samplesFile) ? await readJsonlFile(samplesFile, parseSamples, warnings) : [];
    stages.push({ name, path, dir, rows, samples });
  }
  return { jobDir, stages: orderStages(stages, await readStageOrder(jobDir, warnings)), warnings };
}

/** A whole JSONL file's rows, read in bounded chunks (./jsonl-chunks.ts); RunFileTooLargeError over the limit. */
export async function readJsonlFile<T>(
  file: string,
  parse: LineParser<T>,
  warnings: string[],
  limits: ChunkLimits = {},
): Promise<T[]> {
  const handle = await open(file, 'r');
  try {
    const { size } = await handle.stat();
    checkRunFileSize(file, size, limits);
    const lines = new LineAssembler(file, limits.maxLineBytes);
    const { rows } = await readChunkedLines(handle, 0, size, lines, parse, warnings, limits);
    // a last line without its newline (a run killed mid-write) is read as the whole file's end
    const last = lines.push(Buffer.from('\n'), warnings);
    if (last !== null) for (const row of parse(last.text, file, warnings, last.firstLine)) rows.push(row);
    return rows;
  } finally {
    await handle.close();
  }
}

/**
 * A small file's text (stages.json); an error naming it when it is over `maxBytes`. With `root`, the file is opened
 * inside that folder only (src/util/confined-path.ts).
 */
export async function readSmallFile(file: string, maxBytes: number, root?: string): Promise<string> {
  const handle = root === undefined ? await open(file, 'r') : await openInside(root, relative(root, file), file);
  try {
    const { size } = await handle.stat();
    if (size > maxBytes) throw new Error(`${file} is ${size} bytes, over the ${maxBytes} it may have`);
    return await handle.readFile('utf8');
  } finally {
    await handle.close();
  }
}
