// The pre-run checks of data_processor (./preflight.ts runs them for `trinity config check` and before a run): what
// the pipelines would otherwise refuse only once the stage starts them.
//
//   recipes   every Data-Juicer recipe (task_pipeline.config_path, an operator data_juicer in either pipeline) reads,
//             and each of its operators has a counterpart here with arguments it takes (src/rft/data/data-juicer.ts)
//   models    an LLM operator's auxiliary_model (in a recipe too) is one of explorer.auxiliary_models
//   inputs    the task pipeline's input files exist; without inputs it reads the taskset's own files, which must exist
//             (a taskset path that only the pipeline was meant to write is named with what to do instead)
import { existsSync, statSync } from 'node:fs';
import { splitFiles } from '../../buffer/split.js';
import type { ReportProblem } from '../../config/errors.js';
import { DataJuicerRecipeError, type PipelineRecipes, pipelineRecipes, readDataJuicerRecipe } from '../../data/data-juicer.js';
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
  const task = section.task_pipeline;
  const runsTask = task !== null && settings.taskPipeline !== null;
  const operators: { path: string; name: string; auxiliaryModel: unknown }[] = [];
  const recipes = (found: PipelineRecipes) => {
    for (const { path, message } of found.problems) add(path, message);
    for (const { path, operators: ops } of found.recipes)
      for (const op of ops) operators.push({ path, name: op.where, auxiliaryModel: op.options.auxiliaryModel });
  };
  if (section.experience_pipeline !== null && explores)
    recipes(pipelineRecipes(section.experience_pipeline.operators, 'experience'));
  if (task !== null && runsTask) {
    if (task.config_path !== null) {
      try {
        const ops = readDataJuicerRecipe(task.config_path);
        for (const op of ops)
          operators.push({
            path: 'data_processor.task_pipeline.config_path',
            name: op.where,
            auxiliaryModel: op.options.auxiliaryModel,
          });
      } catch (error) {
        if (!(error instanceof DataJuicerRecipeError)) throw error;
        add('data_processor.task_pipeline.config_path', error.message);
      }
    } else {
      recipes(pipelineRecipes(task.operators, 'task'));
      for (const [i, op] of task.operators.entries())
        operators.push({
          path: `data_processor.task_pipeline.operators.${i}.args.auxiliary_model`,
          name: `data_processor.task_pipeline.operators[${i}] (${op.name})`,
          auxiliaryModel: op.args.auxiliary_model ?? op.args.auxiliaryModel,
        });
    }
  }
  // an LLM operator's auxiliary_model must be one of explorer.auxiliary_models (else its first call fails the stage)
  const names = stage.explorer.auxiliary_models.map((model, i) => model.name ?? `auxiliary_${i}`);
  for (const { path, name, auxiliaryModel } of operators) {
    if (typeof auxiliaryModel !== 'string' || auxiliaryModel === '' || names.includes(auxiliaryModel)) continue;
    add(
      path,
      `${name} names auxiliary_model '${auxiliaryModel}', which explorer.auxiliary_models does not have ` +
        `(${names.length > 0 ? names.join(', ') : 'it has none'})`,
    );
  }
  if (task !== null && runsTask) taskPipelineInputProblems(task, settings, add);
}

/** The task pipeline's input files exist; without inputs, the taskset's own files (see the header). */
function taskPipelineInputProblems(
  task: NonNullable<StageConfig['data_processor']['task_pipeline']>,
  settings: Pick<StageSettings, 'tasksets'>,
  add: ReportProblem,
): void {
  task.inputs.forEach((file, i) => {
    if (!existsSync(file))
      add(`data_processor.task_pipeline.inputs.${i}`, `input file ${file} does not exist (the pipeline reads it first)`);
    else if (!statSync(file).isFile())
      add(`data_processor.task_pipeline.inputs.${i}`, `${file} is not a file (an input is a .jsonl, .json or .parquet file)`);
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
