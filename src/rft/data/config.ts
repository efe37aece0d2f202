// The `data_processor` section of the run config (Trinity's DataProcessorConfig): the task pipeline that curates a
// stage's training taskset before it explores (./task-pipeline) and the experience pipeline over each explore step's
// experiences (./experience-pipeline) — their schemas with defaults, the rules that tie them to the mode and the
// tasksets, and the settings each pipeline reads. Written in the config language of src/rft/config/.
import { join } from 'node:path';
import { z } from 'zod';
import type { ReportProblem } from '../config/errors.js';
import { args, bool, intIn, nonEmpty, num, str } from '../config/value-schemas.js';
import { DATA_JUICER_OPERATOR } from './data-juicer.js';
import type { ExperiencePipelineSettings } from './experience-pipeline/index.js';
import type { TaskPipelineSettings } from './task-pipeline/types.js';

/** One operator of a data pipeline: a registered name or a module path (`file.ts#export`), and its arguments. */
export const OperatorSchema = z.strictObject({
  name: nonEmpty(),
  args: args().default(() => ({})),
});

/**
 * Trinity's data_processor.task_pipeline: operators (src/rft/data/task-pipeline) run once over `inputs` before a
 * stage explores; the stage's taskset then reads `output`. A Data-Juicer recipe (config_path, or an operator
 * data_juicer) runs through the built-in counterparts of its operators (./data-juicer.ts); Data-Juicer's priority keys
 * are refused (src/rft/config/refusals.ts).
 */
export const TaskPipelineSchema = z.strictObject({
  operators: z.array(OperatorSchema).default(() => []),
  num_process: intIn(1, 1024).default(4), // [1, 1024] rows an operator works on at once (model calls)
  config_path: str().nullable().default(null), // a Data-Juicer recipe: its operators instead of `operators` (./data-juicer.ts)
  inputs: z.array(nonEmpty()).default(() => []), // Trinity: required; empty: the taskset's own files (its split)
  // Trinity: a taskset config (its path); null: <job dir>/task_pipeline/<taskset>.jsonl
  output: z
    .union([nonEmpty(), z.strictObject({ path: nonEmpty() })])
    .nullable()
    .default(null),
  target_fields: z.array(nonEmpty()).default(() => []), // the input fields kept; empty: all
  priority_weights: z.record(z.string(), num(z.number())).default(() => ({})), // Data-Juicer priority: refused
  top_k: num(z.int()).default(-1), // Data-Juicer priority selection: refused
});

/**
 * Trinity's data_processor.experience_pipeline: operators (src/rft/data/experience-pipeline) over every explore step's
 * experiences before the buffer; save_input keeps the raw ones in input_save_path (.jsonl, .db/.sqlite or sqlite:///).
 */
export const ExperiencePipelineSchema = z.strictObject({
  operators: z.array(OperatorSchema).default(() => []),
  save_input: bool().default(true), // Trinity true
  input_save_path: str().nullable().default(null), // derived: <job dir>/buffer/explorer_output.db (Trinity's)
});

export const DataProcessorSchema = z.strictObject({
  task_pipeline: TaskPipelineSchema.nullable().default(null),
  experience_pipeline: ExperiencePipelineSchema.nullable().default(null), // null: experiences go to the buffer as they come
});

export type TaskPipelineConfig = Omit<z.output<typeof TaskPipelineSchema>, 'output'> & { output: string | null };
export type ExperiencePipelineConfig = z.output<typeof ExperiencePipelineSchema>;
export type DataProcessorConfig = {
  task_pipeline: TaskPipelineConfig | null;
  experience_pipeline: ExperiencePipelineConfig | null;
};

/** What the data processor's rules read from the rest of the run. */
export interface DataProcessorContext {
  mode: string;
  /** A one-stage run that runs by itself: a pipeline its mode does not use is a mistake (stages that do not explore skip it). */
  singleStageRun: boolean;
  /** The training tasksets (a task pipeline writes one). */
  tasksets: readonly { storage_type: 'file' | 'sql' }[];
}

/** The section resolved (task_pipeline.output as a path) and checked against the mode and the tasksets. */
export function resolveDataProcessor(
  section: z.output<typeof DataProcessorSchema>,
  { mode, singleStageRun, tasksets }: DataProcessorContext,
  problem: ReportProblem,
): DataProcessorConfig {
  // data_processor.experience_pipeline runs on the explorer's experiences (src/rft/data/experience-pipeline); in a
  // multi-stage run the stages that explore run it and the others skip it
  const experiencePipeline = section.experience_pipeline;
  if (experiencePipeline !== null) {
    if (!experiencePipeline.save_input && experiencePipeline.input_save_path !== null)
      problem(
        'data_processor.experience_pipeline.input_save_path',
        'is where save_input writes, and save_input is false: remove one',
      );
    if (singleStageRun && mode !== 'both' && mode !== 'explore')
      problem('data_processor.experience_pipeline', `runs on explored experiences; mode ${mode} explores nothing: remove it`);
  }
  // data_processor.task_pipeline: its output becomes the one training taskset (src/rft/data/task-pipeline)
  const pipelineInput = section.task_pipeline;
  const taskPipeline =
    pipelineInput === null
      ? null
      : {
          ...pipelineInput,
          output:
            typeof pipelineInput.output === 'object' && pipelineInput.output !== null
              ? pipelineInput.output.path
              : pipelineInput.output,
        };
  if (taskPipeline !== null && taskPipeline.config_path !== null && taskPipeline.operators.length > 0)
    problem(
      'data_processor.task_pipeline.config_path',
      "names a Data-Juicer recipe, whose operators replace 'operators' (as in Trinity-RFT): keep one of the two",
    );
  if (taskPipeline !== null && (mode === 'both' || mode === 'explore')) {
    if (tasksets.length > 1) {
      problem('data_processor.task_pipeline', `writes one taskset; this run explores ${tasksets.length} (use one taskset)`);
    } else if (tasksets[0]?.storage_type === 'sql' && taskPipeline.inputs.length === 0) {
      problem('data_processor.task_pipeline.inputs', 'the taskset is an SQL table: name the input files (.jsonl or .json)');
    }
  }
  return { task_pipeline: taskPipeline, experience_pipeline: experiencePipeline };
}

/** data_processor.experience_pipeline; save_input without input_save_path: <job dir>/buffer/explorer_output.db (Trinity's). */
export function experiencePipelineSettings(
  pipeline: ExperiencePipelineConfig | null,
  jobDir: string,
): ExperiencePipelineSettings | null {
  if (pipeline === null) return null;
  return {
    operators: pipeline.operators.map((op) => ({ name: op.name, args: op.args })),
    inputSavePath: pipeline.save_input ? (pipeline.input_save_path ?? join(jobDir, 'buffer', 'explorer_output.db')) : null,
  };
}

/** data_processor.task_pipeline for the stages that explore (mode both, explore); null for the others. */
export function taskPipelineSettings(pipeline: TaskPipelineConfig | null, mode: string): TaskPipelineSettings | null {
  if (pipeline === null || (mode !== 'both' && mode !== 'explore')) return null;
  return {
    // config_path: the recipe as one data_juicer operator (expanded where the pipeline runs and in the pre-run checks)
    operators:
      pipeline.config_path !== null
        ? [{ name: DATA_JUICER_OPERATOR, args: { config_path: pipeline.config_path } }]
        : pipeline.operators.map((op) => ({ name: op.name, args: op.args })),
    inputs: pipeline.inputs,
    output: pipeline.output,
    targetFields: pipeline.target_fields,
    numProcess: pipeline.num_process,
  };
}
