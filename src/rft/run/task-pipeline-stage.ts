// The task pipeline's pre-stage (data_processor.task_pipeline): before a stage explores, the pipeline's operators
// curate its one training taskset into a file, and the stage explores that file instead.
import type { StageHooks, StageSettings } from '../settings.js';
import { startAuxiliaryModels } from '../auxiliary/index.js';
import { expandDataJuicer } from '../data/data-juicer.js';
import { runTaskPipeline, type TaskPipelineSettings, workflowSampler } from '../data/task-pipeline/index.js';
import { startExplorerEngine } from '../explorer/engines.js';
import { stageWorkflowRunner } from '../explorer/evaluation.js';
import type { StartedEngine } from '../sync/weight-channel.js';
import { EngineModelHandle, type WorkflowRunner } from '../workflow/index.js';

/**
 * data_processor.task_pipeline (src/rft/data/task-pipeline): its operators run over the taskset's rows (or its
 * inputs) before the stage explores, and the stage explores the output instead. An operator that samples the model
 * gets the stage's engine and workflow runner, started for it and closed before the stage starts its own.
 */
export async function withTaskPipeline(
  settings: StageSettings,
  pipeline: TaskPipelineSettings,
  hooks: StageHooks,
  log: (line: string) => void,
): Promise<StageSettings> {
  const [first, ...rest] = settings.tasksets;
  if (first === undefined || rest.length > 0)
    throw new Error(
      `stage '${settings.stageName}': data_processor.task_pipeline writes one taskset; this stage has ${settings.tasksets.length}`,
    );
  const started: { engine: StartedEngine; runner: WorkflowRunner }[] = [];
  // explorer.auxiliary_models, started only when an operator names one (llm_*: auxiliary_model; in a recipe too)
  const namesAuxiliary = expandDataJuicer(pipeline.operators, 'data_processor.task_pipeline').some((op) =>
    [op.args.auxiliary_model, op.args.auxiliaryModel].some((name) => typeof name === 'string' && name !== ''),
  );
  const auxiliary =
    namesAuxiliary && settings.auxiliaryModels.length > 0 ? await startAuxiliaryModels(settings.auxiliaryModels) : null;
  try {
    const result = await runTaskPipeline({
      settings: pipeline,
      taskset: first.taskset,
      jobDir: settings.jobDir,
      baseDir: settings.pluginBaseDir,
      seed: settings.seed,
      modelId: settings.modelPath,
      model: async () => {
        const engine = await startExplorerEngine(settings, settings.modelPath);
        const runner = stageWorkflowRunner(settings, new EngineModelHandle(engine.engine, { modelVersion: 0 }), log);
        started.push({ engine, runner });
        return workflowSampler(runner, settings.modelPath);
      },
      auxiliaryModels: auxiliary,
      ...(hooks.signal ? { signal: hooks.signal } : {}),
      log: (line) => log(`[${settings.stageName}] ${line}`),
      ...(hooks.progress ? { progress: hooks.progress } : {}),
    });
    const taskset = { ...first.taskset, path: result.outputPath, split: 'train', subset: null, storageType: 'file' as const };
    return { ...settings, tasksets: [{ ...first, taskset }] };
  } finally {
    for (const { engine, runner } of started) {
      runner.close();
      await engine.engine.close();
    }
    await auxiliary?.close();
  }
}
