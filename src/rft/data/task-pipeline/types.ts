// The task pipeline's contract (Trinity-RFT's `data_processor.task_pipeline`): rows of the input files go through a
// list of operators, each a small module `{ defaults, run(rows, options, context) }` named in YAML by its registered
// name or by module path (`path/to/op.ts#export`). What an operator may reach besides its rows — the current model
// (sampled through the explorer's workflow runner), auxiliary models, events for a waiting human — comes in the
// context, so an operator never imports the run layer.
import type { AuxiliaryModels } from '../../auxiliary/types.js';
import type { TasksetConfig } from '../../buffer/index.js';
import type { Task } from '../../task.js';

/** One row of a taskset as read from its file (a JSON object). */
export type TaskRow = Record<string, unknown>;

/** `data_processor.task_pipeline` as the stage reads it (src/rft/data/config.ts taskPipelineSettings). */
export interface TaskPipelineSettings {
  /** The operators in order: a registered name or a module path, and its YAML arguments (snake_case). */
  operators: { name: string; args: Record<string, unknown> }[];
  /** Input files (.jsonl, .json); empty: the taskset's own files (its split). */
  inputs: string[];
  /** Where the output taskset is written (.jsonl); null: <job dir>/task_pipeline/<taskset name>.jsonl. */
  output: string | null;
  /** The input fields kept (before the operators run); empty: all. */
  targetFields: string[];
  /** Rows an operator works on at once where it waits on a model (num_process). */
  numProcess: number;
}

/** One sampled response's outcome: its reward, and its accuracy metric where the reward function gives one. */
export interface SampledRun {
  reward: number;
  accuracy?: number;
}

/** The outcomes of each task's sampled responses, by task id (a task whose every run failed is absent). */
export type SampledRuns = Map<string, SampledRun[]>;

/** The current model behind the explorer's workflow runner: the same workflows, rewards and engine a stage uses. */
export interface ModelSampler {
  /** Which model it samples (the cache key of an operator that samples it includes this). */
  readonly model: string;
  /** Runs each task `repeatTimes` times through its workflow; the outcomes of the runs that succeeded. */
  sample(tasks: readonly Task[], repeatTimes: number, signal?: AbortSignal): Promise<SampledRuns>;
}

/** Something a person or a test may act on while the pipeline runs (the annotation operator's server). */
export type TaskPipelineEvent =
  | { type: 'annotation_server'; operator: string; url: string; pending: string[] }
  | { type: 'annotation_rated'; operator: string; id: string; remaining: number };

export interface TaskOperatorContext {
  /** The operator's name as configured and its position (1-based): errors and logs name it. */
  readonly name: string;
  readonly position: number;
  /** The taskset the output feeds (its format keys: the text an operator looks at is its prompt_key). */
  readonly taskset: TasksetConfig;
  /** The field holding a row's text (the taskset's prompt_key, default "prompt"). */
  readonly textKey: string;
  /** Where the pipeline writes its files (the output taskset's folder). */
  readonly workDir: string;
  readonly seed: number;
  /** Rows worked on at once where an operator waits on a model. */
  readonly numProcess: number;
  readonly signal?: AbortSignal;
  /** Module paths in YAML resolve against this folder (the config file's). */
  readonly baseDir: string;
  /** The current model; starts the engine on first use (an error where the stage has none). */
  model(): Promise<ModelSampler>;
  /** The run's auxiliary models (explorer.auxiliary_models); null where the run has none. */
  readonly auxiliaryModels: AuxiliaryModels | null;
  log(line: string): void;
  /** Progress of a long operator: `done` of `total` rows. */
  progress(done: number, total: number): void;
  /** Adds to a named count reported for this operator (e.g. parse_failures); kept and dropped are counted for it. */
  count(key: string, amount?: number): void;
  emit(event: TaskPipelineEvent): void;
}

/**
 * A task operator: its defaults (the arguments it takes, camelCase; YAML may write them snake_case) and one function
 * from rows to rows. A filter returns a subset, a mapper new rows; rows it does not change may be returned as they are.
 */
export interface TaskOperatorModule<Options extends object = Record<string, unknown>> {
  readonly defaults: Readonly<Options>;
  readonly description?: string;
  /** True when the output depends on the current model (the cache key then includes ModelSampler.model). */
  readonly usesModel?: boolean;
  run(rows: readonly TaskRow[], options: Options, context: TaskOperatorContext): Promise<TaskRow[]> | TaskRow[];
}

/** What one operator did: rows in and out, its own counts, its time. */
export interface OperatorReport {
  name: string;
  rowsIn: number;
  rowsOut: number;
  counts: Record<string, number>;
  seconds: number;
}
