// The task pipeline (Trinity-RFT's `data_processor.task_pipeline`, run by `check_and_run_task_pipeline` before a
// stage explores): the input files' rows → target_fields → each operator in order → the output taskset (JSONL), which
// the stage's taskset then reads.
//
// Reuse: beside the output goes `<output>.manifest.json` with the run's key,
//   key = sha256(inputs' paths and content hashes, target_fields, the taskset's format, every operator's name and
//               arguments (and a plug-in's file content), the model for operators that sample it),
// the output's own hash and the per-operator counts. The same command run again (a resumed stage, a rerun) finds
// the same key and an intact output and reuses it without running an operator; a changed input file, argument or
// operator list runs the pipeline again.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { resolveArgs } from '../../../util/index.js';
import { isModulePath } from '../../../util/module-path.js';
import type { AuxiliaryModels } from '../../auxiliary/types.js';
import type { TasksetConfig } from '../../buffer/index.js';
import { SplitError, splitFiles } from '../../buffer/split.js';
import { ProgressReporter } from '../../monitor/index.js';
import { expandDataJuicer } from '../data-juicer.js';
import { TASK_OPERATORS } from './operators/index.js';
import { fileSha256, readInputRows, TaskPipelineError, writeRows } from './rows.js';
import type {
  ModelSampler,
  OperatorReport,
  TaskOperatorContext,
  TaskOperatorModule,
  TaskPipelineEvent,
  TaskPipelineSettings,
  TaskRow,
} from './types.js';

export interface TaskPipelineOptions {
  settings: TaskPipelineSettings;
  /** The taskset the output feeds: its files are the default inputs, its format keys tell operators where text is. */
  taskset: TasksetConfig;
  /** The stage's job folder: the default output is <jobDir>/task_pipeline/<taskset>.jsonl. */
  jobDir: string;
  /** Module-path operators and relative paths resolve against it (the config file's folder). */
  baseDir: string;
  seed: number;
  /** Which model `model()` samples (part of the reuse key of operators that sample it). */
  modelId: string;
  /** Starts the current model's sampler on first use; the caller closes what it started. */
  model?: () => Promise<ModelSampler>;
  auxiliaryModels?: AuxiliaryModels | null;
  signal?: AbortSignal;
  log?: (line: string) => void;
  progress?: ProgressReporter;
  onEvent?: (event: TaskPipelineEvent) => void;
}

export interface TaskPipelineResult {
  /** The taskset file the stage reads. */
  outputPath: string;
  /** True when an earlier run's output was reused (no operator ran). */
  reused: boolean;
  rows: number;
  /** Per operator: rows in and out, its counts and time (from the earlier run when reused). */
  operators: OperatorReport[];
}

interface Manifest {
  key: string;
  outputSha256: string;
  rows: number;
  inputs: { path: string; sha256: string }[];
  operators: OperatorReport[];
}

/** The output taskset's path for these settings (configured, else in the job folder). */
export function taskPipelineOutput(settings: TaskPipelineSettings, taskset: TasksetConfig, jobDir: string): string {
  return settings.output ?? join(jobDir, 'task_pipeline', `${taskset.name}.jsonl`);
}

const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

export async function runTaskPipeline(options: TaskPipelineOptions): Promise<TaskPipelineResult> {
  const { settings, taskset } = options;
  const log = options.log ?? ((line: string) => console.log(line));
  const outputPath = taskPipelineOutput(settings, taskset, options.jobDir);
  const manifestPath = `${outputPath}.manifest.json`;

  // the operators and their arguments first: a misspelt name or argument fails before anything is read or run
  const operators = await resolveOperators(settings, options.baseDir);

  const inputs = settings.inputs.length > 0 ? settings.inputs : tasksetFiles(taskset);
  for (const file of inputs) if (!existsSync(file)) throw new TaskPipelineError(`task pipeline input ${file} does not exist`);
  const inputHashes = await Promise.all(inputs.map(async (path) => ({ path, sha256: await fileSha256(path) })));
  const key = reuseKey(inputHashes, settings.targetFields, taskset, operators, options.modelId);

  const earlier = readManifest(manifestPath);
  if (earlier?.key === key && existsSync(outputPath) && (await fileSha256(outputPath)) === earlier.outputSha256) {
    log(`task pipeline: inputs and operators unchanged; reusing ${outputPath} (${earlier.rows} rows)`);
    return { outputPath, reused: true, rows: earlier.rows, operators: earlier.operators };
  }

  let rows: TaskRow[] = await readInputRows(inputs);
  if (settings.targetFields.length > 0)
    rows = rows.map((row) =>
      Object.fromEntries(settings.targetFields.filter((f) => Object.hasOwn(row, f)).map((f) => [f, row[f]])),
    );
  log(`task pipeline: ${rows.length} rows from ${inputs.length} file(s); ${operators.length} operator(s)`);

  const progress = options.progress ?? new ProgressReporter({ label: 'task_pipeline', total: rows.length });
  let sampler: Promise<ModelSampler> | null = null;
  const reports: OperatorReport[] = [];
  for (const [i, op] of operators.entries()) {
    options.signal?.throwIfAborted();
    const counts: Record<string, number> = {};
    const label = `task_pipeline ${i + 1}/${operators.length} ${op.name}`;
    let shownProgress = false;
    const context: TaskOperatorContext = {
      name: op.name,
      position: i + 1,
      taskset,
      textKey: taskset.format?.promptKey ?? 'prompt',
      workDir: dirname(outputPath),
      seed: options.seed,
      numProcess: settings.numProcess,
      ...(options.signal ? { signal: options.signal } : {}),
      baseDir: options.baseDir,
      model: () => {
        if (!options.model) return Promise.reject(new TaskPipelineError(`${op.name}: this stage has no model to sample`));
        sampler ??= options.model();
        return sampler;
      },
      auxiliaryModels: options.auxiliaryModels ?? null,
      log: (line) => (options.progress ?? progress).log(line),
      progress: (done, total) => {
        if (!shownProgress) progress.setLabel(label, total);
        shownProgress = true;
        progress.update(done);
      },
      count: (name, amount = 1) => {
        counts[name] = (counts[name] ?? 0) + amount;
      },
      emit: (event) => options.onEvent?.(event),
    };
    const started = performance.now();
    let out: TaskRow[];
    try {
      out = await op.module.run(rows, op.options, context);
    } catch (error) {
      if (options.signal?.aborted) throw error;
      const message = (error as Error).message;
      throw new TaskPipelineError(
        message.startsWith(op.name) ? `task pipeline: ${message}` : `task pipeline: ${op.name}: ${message}`,
        {
          cause: error,
        },
      );
    }
    if (!Array.isArray(out)) throw new TaskPipelineError(`task pipeline: ${op.name} returned ${typeof out}, not a list of rows`);
    if (shownProgress) progress.done();
    const report: OperatorReport = {
      name: op.name,
      rowsIn: rows.length,
      rowsOut: out.length,
      counts,
      seconds: (performance.now() - started) / 1000,
    };
    reports.push(report);
    log(describeReport(i + 1, operators.length, report));
    rows = out;
  }
  if (rows.length === 0) throw new TaskPipelineError('task pipeline: the operators left no rows; the stage would have no tasks');

  writeRows(outputPath, rows);
  const manifest: Manifest = {
    key,
    outputSha256: await fileSha256(outputPath),
    rows: rows.length,
    inputs: inputHashes,
    operators: reports,
  };
  writeFileSync(`${manifestPath}.tmp`, `${JSON.stringify(manifest, null, 2)}\n`);
  renameSync(`${manifestPath}.tmp`, manifestPath);
  log(`task pipeline: ${rows.length} rows written to ${outputPath}`);
  return { outputPath, reused: false, rows: rows.length, operators: reports };
}

/** A pipeline operator resolved: its module, its checked options, and the hash of its file when it is a plug-in. */
interface ResolvedOperator {
  name: string;
  args: Record<string, unknown>;
  where: string;
  module: TaskOperatorModule<Record<string, unknown>>;
  options: Record<string, unknown>;
  pluginSha256: string | null;
}

/** The settings' operators, each module resolved (registered name or module path) and its arguments checked. */
function resolveOperators(settings: TaskPipelineSettings, baseDir: string): Promise<ResolvedOperator[]> {
  let operators: TaskPipelineSettings['operators'];
  try {
    // each data_juicer entry: its recipe's operators, run by their built-in counterparts
    operators = expandDataJuicer(settings.operators, 'data_processor.task_pipeline');
  } catch (error) {
    return Promise.reject(new TaskPipelineError((error as Error).message, { cause: error }));
  }
  return Promise.all(
    operators.map(async (op, i) => {
      const where = `data_processor.task_pipeline.operators[${i}] (${op.name})`;
      let module: TaskOperatorModule<Record<string, unknown>>;
      try {
        module = await TASK_OPERATORS.resolve(op.name, baseDir);
      } catch (error) {
        throw new TaskPipelineError(`${where}: ${(error as Error).message}`, { cause: error });
      }
      const resolved = resolveArgs(where, module.defaults, op.args);
      const plugin = !TASK_OPERATORS.has(op.name) && isModulePath(op.name) ? pluginFile(op.name, baseDir) : null;
      return { ...op, where, module, options: resolved, pluginSha256: plugin ? await fileSha256(plugin) : null };
    }),
  );
}

/** The run's reuse key (see the header): the same inputs, fields, format, operators and model give the same key. */
function reuseKey(
  inputHashes: readonly { path: string; sha256: string }[],
  targetFields: readonly string[],
  taskset: TasksetConfig,
  operators: readonly ResolvedOperator[],
  modelId: string,
): string {
  const usesModel = operators.some((op) => op.module.usesModel === true);
  return sha256(
    JSON.stringify({
      version: 1,
      inputs: inputHashes,
      targetFields,
      format: taskset.format ?? {},
      operators: operators.map((op) => ({ name: op.name, args: op.options, plugin: op.pluginSha256 })),
      model: usesModel ? modelId : null,
    }),
  );
}

/** `[2/3] document_minhash_deduplicator: 120 → 97 rows (23 dropped; candidates_checked 40) in 0.41 s`. */
export function describeReport(position: number, total: number, r: OperatorReport): string {
  const change = r.rowsOut <= r.rowsIn ? `${r.rowsIn - r.rowsOut} dropped` : `${r.rowsOut - r.rowsIn} added`;
  const counts = Object.entries(r.counts).map(([k, v]) => `${k} ${v}`);
  return `task pipeline [${position}/${total}] ${r.name}: ${r.rowsIn} → ${r.rowsOut} rows (${[change, ...counts].join('; ')}) in ${r.seconds.toFixed(2)} s`;
}

function readManifest(path: string): Manifest | null {
  if (!existsSync(path)) return null;
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Manifest;
  } catch {
    return null; // a torn or hand-edited manifest: the pipeline runs again and rewrites it
  }
}

function tasksetFiles(taskset: TasksetConfig): string[] {
  try {
    return splitFiles(taskset.path, taskset.split ?? 'train', taskset.subset ?? null);
  } catch (error) {
    if (error instanceof SplitError)
      throw new TaskPipelineError(`task pipeline input (taskset '${taskset.name}'): ${error.message}`);
    throw error;
  }
}

function pluginFile(spec: string, baseDir: string): string {
  const hash = spec.lastIndexOf('#');
  const path = hash >= 0 ? spec.slice(0, hash) : spec;
  return resolve(baseDir, path);
}
