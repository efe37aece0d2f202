// The runs under the Studio's runs folder, read from what `trinity run` writes (src/rft/run/run.ts, stage.ts,
// src/rft/monitor, src/rft/checkpoint.ts) with the report's readers (src/rft/report/read.ts):
//
//   <job>/stages.json                      the stage folders in run order (written when a run starts)
//   <job>/<stage>/metrics.jsonl            one line per step (JsonlMonitor)
//   <job>/<stage>/eval_samples.jsonl       eval answers per eval step
//   <job>/<stage>/trainer_advantages.jsonl each rollout's advantage as trained (./rollouts.ts joins it by id)
//   <job>/<stage>/done.json                the stage finished
//   <job>/<stage>/checkpoints/global_step_N, latest_checkpointed_iteration.txt
//   <job>/<stage>/*.db, *.sqlite, *.jsonl  experience buffers and dumps (storage_type sql, save_input)
//   <job>/<stage>/buffer.json              where the stage's shared buffer is (src/rft/buffer/buffer-record.ts):
//                                          an SQLite file anywhere under the runs folder, or a PostgreSQL table
//   <job>/<stage>/buffer/<name>.db         the shared SQLite buffer's default place (src/rft/buffer/config.ts),
//                                          looked at when a stage has no buffer.json (it died before opening one)
//   <job>/run_status.json                  optional: {state, pid, host} (see stageStatus)
//
// A job folder is a folder with stages.json (or, from older runs, a metrics.jsonl and no stages.json above it), found
// up to three levels below the runs folder, so --runs may name the checkpoint root, a project folder or one job.
import { existsSync } from 'node:fs';
import { readdir, realpath, stat } from 'node:fs/promises';
import { hostname } from 'node:os';
import { basename, isAbsolute, join, relative, sep } from 'node:path';
import { BUFFER_RECORD, readBufferRecord } from '../rft/buffer/buffer-record.js';
import { ADVANTAGES_FILE } from '../rft/monitor/advantage-record.js';
import {
  type EvalSample,
  findStageDirs,
  METRICS_FILE,
  type MetricsRow,
  orderStages,
  parseMetrics,
  parseSamples,
  readStageOrder,
  SAMPLES_FILE,
  STAGES_FILE,
  type StageData,
} from '../rft/report/read.js';
import { type ChunkLimits, RunFileTooLargeError } from '../rft/report/jsonl-chunks.js';
import { isRecordedProcessAlive, RUN_STATUS_FILE, type RunStatus } from '../rft/run/run-status.js';
import { readTextUnderRoot, resolveInside, StudioPathError } from './paths.js';
import { JsonlTail } from './tail.js';

/**
 * running: written to recently (or its run_status.json names a live process); finished: done.json; failed /
 * interrupted: as run_status.json records; stopped: not finished and quiet for longer than the liveness window, with
 * nothing that says why (a crash and a Ctrl-C leave the same files); pending: listed in stages.json, not started.
 */
export type StageStatus = 'running' | 'finished' | 'failed' | 'interrupted' | 'stopped' | 'pending';

export interface StageSummary {
  /** The folder relative to the job folder ('.' for the job folder itself), as stages.json names it. */
  path: string;
  name: string;
  status: StageStatus;
  /** The highest step written, or null before the first. */
  step: number | null;
  rows: number;
  /** Unix seconds of the newest metrics line. */
  lastTime: number | null;
  /** The newest row's metrics. */
  lastMetrics: Record<string, number>;
  evalSamples: number;
  /** Steps of the complete checkpoints. */
  checkpoints: number[];
  /** Experience buffers and dumps in the stage folder, relative to the runs folder. */
  buffers: string[];
  /** Where the stage starts on the run's shared step axis (report's stageOffsets). */
  offset: number;
}

export interface RunSummary {
  /** The job folder relative to the runs folder ('/'-separated; '.' when --runs names the job folder). */
  id: string;
  status: StageStatus;
  stages: StageSummary[];
  /** Unix seconds of the newest metrics line of any stage. */
  lastTime: number | null;
  warnings: string[];
  /** Why the run could not be read (a file over the size limit); its stages are then not listed. */
  error?: string;
}

/** run_status.json, when a run writes one (src/rft/run/run-status.ts). */
type RecordedStatus = RunStatus;

export interface StageFiles {
  dir: string;
  path: string;
  name: string;
  metrics: JsonlTail<MetricsRow>;
  samples: JsonlTail<EvalSample>;
}

interface JobCache {
  id: string;
  dir: string;
  stages: Map<string, StageFiles>;
}

/** A quiet stage counts as running for max(LIVENESS_MIN_S, LIVENESS_STEPS × its median step interval). */
export const LIVENESS_MIN_S = 120;
export const LIVENESS_STEPS = 5;
const BUFFER_FILE = /\.(db|sqlite3?)$/;
const NOT_EXPERIENCES = new Set([METRICS_FILE, SAMPLES_FILE, ADVANTAGES_FILE]);

/** Reads and caches the runs under one folder; `root` must be a real path. */
export class RunIndex {
  readonly #jobs = new Map<string, JobCache>();

  /** `limits`: the run files' read limits (src/rft/report/jsonl-chunks.ts; smaller in tests). */
  constructor(
    readonly root: string,
    readonly limits: ChunkLimits = {},
  ) {}

  /** Job folders under the runs folder (absolute paths), sorted. */
  async findJobDirs(): Promise<string[]> {
    const found: string[] = [];
    const visit = async (dir: string, depth: number): Promise<void> => {
      let names: string[];
      try {
        names = (await readdir(dir, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name);
      } catch {
        return; // removed while we looked, or not readable
      }
      if (existsSync(join(dir, STAGES_FILE)) || existsSync(join(dir, METRICS_FILE))) {
        found.push(dir);
        return;
      }
      if (depth === 3) return;
      for (const name of names.sort())
        if (!name.startsWith('.') && name !== 'checkpoints') await visit(join(dir, name), depth + 1);
    };
    await visit(this.root, 0);
    return found;
  }

  /** Every run with its stages, newest first; reads what was appended since the last call. */
  async list(): Promise<RunSummary[]> {
    const dirs = await this.findJobDirs();
    for (const known of this.#jobs.keys()) if (!dirs.includes(known)) this.#jobs.delete(known);
    // a run whose files cannot be read (one too large) is listed with that error; the others as they are
    const runs = await Promise.all(dirs.map((dir) => this.#summarize(dir).catch((error) => this.#unreadable(dir, error))));
    return runs.sort((a, b) => (b.lastTime ?? 0) - (a.lastTime ?? 0) || a.id.localeCompare(b.id));
  }

  /** One run by id (refused when it leads outside the runs folder, 404 when it is no job folder). */
  async run(id: string): Promise<RunSummary> {
    return this.#summarize(await this.jobDir(id));
  }

  /** The job folder of a run id, checked. */
  async jobDir(id: string): Promise<string> {
    const dir = await resolveInside(this.root, id === '.' ? '' : id);
    if (!existsSync(join(dir, STAGES_FILE)) && !existsSync(join(dir, METRICS_FILE)))
      throw new StudioPathError(404, `'${id}' is not a run's job folder (no ${STAGES_FILE} or ${METRICS_FILE})`);
    return dir;
  }

  /** A stage's data, read up to now; the stage path is checked to stay inside the job folder. */
  async stage(id: string, stagePath: string): Promise<StageFiles> {
    const jobDir = await this.jobDir(id);
    const job = await this.#job(jobDir);
    const dir = await resolveInside(this.root, join(relative(this.root, jobDir), stagePath === '.' ? '' : stagePath));
    let stage = job.stages.get(dir);
    if (stage === undefined) {
      if (!existsSync(join(dir, METRICS_FILE))) throw new StudioPathError(404, `run '${id}' has no stage '${stagePath}'`);
      stage = this.#stageCache(jobDir, dir);
      job.stages.set(dir, stage);
    }
    await Promise.all([stage.metrics.refresh(), stage.samples.refresh()]);
    return stage;
  }

  /** The stages of a run in run order, each read up to now. */
  async stages(id: string): Promise<StageFiles[]> {
    const jobDir = await this.jobDir(id);
    const job = await this.#job(jobDir);
    return this.#ordered(job);
  }

  async #job(jobDir: string): Promise<JobCache> {
    let job = this.#jobs.get(jobDir);
    if (job === undefined) {
      const rel = relative(this.root, jobDir);
      job = { id: rel === '' ? '.' : rel.split(sep).join('/'), dir: jobDir, stages: new Map() };
      this.#jobs.set(jobDir, job);
    }
    for (const dir of await findStageDirs(jobDir)) if (!job.stages.has(dir)) job.stages.set(dir, this.#stageCache(jobDir, dir));
    await Promise.all([...job.stages.values()].flatMap((s) => [s.metrics.refresh(), s.samples.refresh()]));
    return job;
  }

  #stageCache(jobDir: string, dir: string): StageFiles {
    const rel = relative(jobDir, dir);
    const path = rel === '' ? '.' : rel.split(sep).join('/');
    return {
      dir,
      path,
      name: rel === '' ? basename(jobDir) : path,
      metrics: new JsonlTail(this.root, join(dir, METRICS_FILE), parseMetrics, this.limits),
      samples: new JsonlTail(this.root, join(dir, SAMPLES_FILE), parseSamples, this.limits),
    };
  }

  async #ordered(job: JobCache): Promise<StageFiles[]> {
    const warnings: string[] = [];
    const byDir = new Map<string, StageFiles>();
    const data: StageData[] = [...job.stages.values()].map((s) => {
      byDir.set(s.dir, s);
      return { name: s.name, path: s.path, dir: s.dir, rows: s.metrics.rows as MetricsRow[], samples: [] };
    });
    return orderStages(data, await readStageOrder(job.dir, warnings, this.root)).map((s) => byDir.get(s.dir) as StageFiles);
  }

  /** The summary of a run that cannot be read: the error named, no stages. Other errors are thrown on. */
  #unreadable(jobDir: string, error: unknown): RunSummary {
    if (!(error instanceof RunFileTooLargeError)) throw error;
    const rel = relative(this.root, jobDir);
    return {
      id: rel === '' ? '.' : rel.split(sep).join('/'),
      status: 'stopped',
      stages: [],
      lastTime: null,
      warnings: [error.message],
      error: error.message,
    };
  }

  async #summarize(jobDir: string): Promise<RunSummary> {
    const job = await this.#job(jobDir);
    const warnings: string[] = [];
    const order = (await readStageOrder(jobDir, warnings, this.root)) ?? [];
    const stages = await this.#ordered(job);
    const recorded = await readRecordedStatus(this.root, jobDir);
    const now = Date.now() / 1000;
    const summaries: StageSummary[] = [];
    let offset = 0;
    for (const stage of stages) {
      const rows = stage.metrics.rows;
      const last = rows.at(-1);
      const step = rows.reduce<number | null>((max, r) => (max === null || r.step > max ? r.step : max), null);
      const buffers = await bufferFiles(this.root, stage.dir);
      summaries.push({
        path: stage.path,
        name: stage.name,
        status: await stageStatus(stage, buffers, recorded, now),
        step,
        rows: rows.length,
        lastTime: last?.time ?? null,
        lastMetrics: last?.metrics ?? {},
        evalSamples: stage.samples.rows.length,
        checkpoints: await checkpointSteps(stage.dir),
        buffers: buffers.map((f) => relative(this.root, f).split(sep).join('/')),
        offset,
      });
      offset += step ?? 0;
      warnings.push(...stage.metrics.warnings, ...stage.samples.warnings);
    }
    // stages listed in stages.json that have written nothing yet
    const normalize = (p: string) => p.replace(/\/$/, '').replace(/^\.\//, '') || '.';
    for (const path of order.map(normalize))
      if (!summaries.some((s) => s.path === path))
        summaries.push({
          path,
          name: path === '.' ? basename(jobDir) : path,
          status: 'pending',
          step: null,
          rows: 0,
          lastTime: null,
          lastMetrics: {},
          evalSamples: 0,
          checkpoints: [],
          buffers: [],
          offset,
        });
    return {
      id: job.id,
      status: runStatus(summaries),
      stages: summaries,
      lastTime: summaries.reduce<number | null>(
        (t, s) => (s.lastTime !== null && (t === null || s.lastTime > t) ? s.lastTime : t),
        null,
      ),
      warnings: warnings.slice(-20),
    };
  }
}

/** A run is running while a stage is; finished when all are; else the first unfinished stage's status. */
export function runStatus(stages: readonly StageSummary[]): StageStatus {
  if (stages.some((s) => s.status === 'running')) return 'running';
  if (stages.length > 0 && stages.every((s) => s.status === 'finished')) return 'finished';
  return stages.find((s) => s.status !== 'finished' && s.status !== 'pending')?.status ?? 'pending';
}

/** The most bytes of run_status.json read (a line of JSON). */
const MAX_STATUS_BYTES = 64 * 1024;

async function readRecordedStatus(root: string, jobDir: string): Promise<RecordedStatus | null> {
  try {
    const text = await readTextUnderRoot(root, join(jobDir, RUN_STATUS_FILE), MAX_STATUS_BYTES);
    const value = JSON.parse(text) as Partial<RecordedStatus>;
    if (value.state === 'running' || value.state === 'finished' || value.state === 'failed' || value.state === 'interrupted')
      return value as RecordedStatus;
  } catch {
    // absent (runs that do not record it) or being replaced: decide from the other files
  }
  return null;
}

/** Newest modification time (unix seconds) of the files a live stage keeps writing (`buffers`: its bufferFiles). */
async function lastActivity(dir: string, buffers: readonly string[]): Promise<number> {
  const files = [
    dir,
    join(dir, METRICS_FILE),
    join(dir, SAMPLES_FILE),
    join(dir, 'explorer', METRICS_FILE),
    join(dir, 'checkpoints'),
    join(dir, 'checkpoints', 'latest_checkpointed_iteration.txt'),
    ...buffers.filter((f) => BUFFER_FILE.test(f)).map((f) => `${f}-wal`),
  ];
  const times = await Promise.all(
    files.map((f) =>
      stat(f).then(
        (s) => s.mtimeMs / 1000,
        () => 0,
      ),
    ),
  );
  return Math.max(...times);
}

/** The median gap between the last 20 metric times, seconds (0 with fewer than two). */
function medianStepSeconds(rows: readonly MetricsRow[]): number {
  const times = rows
    .slice(-21)
    .map((r) => r.time)
    .filter((t): t is number => t !== undefined);
  const gaps = times.slice(1).map((t, i) => t - (times[i] as number));
  if (gaps.length === 0) return 0;
  gaps.sort((a, b) => a - b);
  return gaps[Math.floor(gaps.length / 2)] as number;
}

async function stageStatus(
  stage: StageFiles,
  buffers: readonly string[],
  recorded: RecordedStatus | null,
  now: number,
): Promise<StageStatus> {
  if (existsSync(join(stage.dir, 'done.json'))) return 'finished';
  if (recorded !== null && recorded.state !== 'finished') {
    if (recorded.state !== 'running') return recorded.state;
    // a process of this machine that is gone (or whose pid another process has now) ended without recording how:
    // killed, or crashed hard
    if (recorded.pid !== undefined && recorded.host === hostname())
      return isRecordedProcessAlive(recorded) ? 'running' : 'failed';
  }
  const window = Math.max(LIVENESS_MIN_S, LIVENESS_STEPS * medianStepSeconds(stage.metrics.rows));
  return now - (await lastActivity(stage.dir, buffers)) <= window ? 'running' : 'stopped';
}

async function checkpointSteps(dir: string): Promise<number[]> {
  try {
    const names = await readdir(join(dir, 'checkpoints'));
    return names
      .map((n) => /^global_step_(\d+)$/.exec(n)?.[1])
      .filter((n): n is string => n !== undefined)
      .map(Number)
      .sort((a, b) => a - b);
  } catch {
    return [];
  }
}

/**
 * SQLite buffers (*.db, *.sqlite), the record of a buffer kept elsewhere (buffer.json: PostgreSQL) and experience dumps
 * (*.jsonl but metrics and eval samples) of a stage folder, and the stage's shared SQLite buffer wherever the run put
 * it under the runs folder (sharedSqliteBuffers).
 */
export async function bufferFiles(root: string, dir: string): Promise<string[]> {
  return [...new Set([...(await filesOf(dir, isExperienceFile)), ...(await sharedSqliteBuffers(root, dir))])].sort();
}

const isExperienceFile = (name: string) =>
  BUFFER_FILE.test(name) || name === BUFFER_RECORD || (name.endsWith('.jsonl') && !NOT_EXPERIENCES.has(name));

/**
 * The stage's shared SQLite buffer: the file its buffer.json records (written by the stage when it opens the buffer),
 * when that file is under the runs folder (one elsewhere is not the Studio's to open); without a buffer.json, the
 * SQLite files in the default place, <stage>/buffer/. A PostgreSQL record lists no file: buffer.json stands for it.
 */
async function sharedSqliteBuffers(root: string, dir: string): Promise<string[]> {
  const recordFile = join(dir, BUFFER_RECORD);
  if (!existsSync(recordFile)) return filesOf(join(dir, 'buffer'), (name) => BUFFER_FILE.test(name));
  try {
    const record = readBufferRecord(recordFile);
    if (record.backend !== 'sqlite') return [];
    const file = await realpath(record.url);
    const inside = relative(root, file);
    return inside === '..' || inside.startsWith(`..${sep}`) || isAbsolute(inside) ? [] : [file];
  } catch {
    // a record being replaced, or naming a file not written yet: the next read lists it
    return [];
  }
}

/** The plain files of a folder whose names pass `keep`, with their folder; none when it cannot be read. */
async function filesOf(dir: string, keep: (name: string) => boolean): Promise<string[]> {
  try {
    const entries = await readdir(dir, { withFileTypes: true });
    return entries.filter((e) => e.isFile() && keep(e.name)).map((e) => join(dir, e.name));
  } catch {
    return [];
  }
}
