// The pre-run checks of data_processor (./preflight.ts runs them for `trinity config check` and before a run): what
// the pipelines would otherwise refuse only once the stage starts them.
//
//   recipes   every Data-Juicer recipe (task_pipeline.config_path, an operator data_juicer in either pipeline) reads,
//             and each of its operators has a counterpart here with arguments it takes (src/rft/data/data-juicer.ts)
//   inputs    the task pipeline's input files exist; without inputs it reads the taskset's own files, which must exist
//             (a taskset path that only the pipeline was meant to write is named with what to do instead)
import { existsSync } from 'node:fs';
import { splitFiles } from '../../buffer/split.js';
import type { ReportProblem } from '../../config/errors.js';
import { dataJuicerProblems, DataJuicerRecipeError, readDataJuicerRecipe } from '../../data/data-juicer.js';
import type { StageSettings } from '../../settings.js';
import type { StageConfig } from './schema.js';

/** Reports the problems of the stage's pipelines that explore (task pipeline: only when `explores`). */
export function dataProcessorProblems(
  stage: StageConfig,
  settings: Pick<StageSettings, 'taskPipeline' | 'tasksets'>,
  explores: boolean,
  add: ReportProblem,
): void {
  const section = stage.data_processor;
  const experience = section.experience_pipeline;
  if (experience !== null && explores) dataJuicerProblems(experience.operators, 'experience', add);
  const task = section.task_pipeline;
  if (task === null || settings.taskPipeline === null) return;
  if (task.config_path !== null) {
    try {
      readDataJuicerRecipe(task.config_path);
    } catch (error) {
      if (!(error instanceof DataJuicerRecipeError)) throw error;
      add('data_processor.task_pipeline.config_path', error.message);
    }
  } else dataJuicerProblems(task.operators, 'task', add);

  task.inputs.forEach((file, i) => {
    if (!existsSync(file))
      add(`data_processor.task_pipeline.inputs.${i}`, `input file ${file} does not exist (the pipeline reads it first)`);
  });
  const taskset = settings.tasksets[0]?.taskset;
  if (task.inputs.length > 0 || taskset === undefined || taskset.storageType === 'sql') return;
  try {
    splitFiles(taskset.path, taskset.split ?? 'train', taskset.subset ?? null);
  } catch (error) {
    add(
      'data_processor.task_pipeline.inputs',
      `is empty, so the pipeline reads the taskset's own files, and those cannot be read: ${(error as Error).message}. ` +
        'The pipeline writes its output elsewhere (output, default <job dir>/task_pipeline/<taskset>.jsonl) and the ' +
        'stage explores that: name the raw files in data_processor.task_pipeline.inputs',
    );
  }
}
