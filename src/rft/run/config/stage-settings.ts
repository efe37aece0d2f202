// A stage's settings from its resolved config: each section's part maps its own keys (the *Settings functions of
// src/rft/<part>/config.ts and ./model.ts), and this assembles them into the plain StageSettings the loops read
// (src/rft/settings.ts), with what spans sections: devices resolved where their part runs, the cores split between
// explorer and trainer. The config coverage test walks every schema key through here.
import { availableParallelism } from 'node:os';
import { resolveDevice } from '../../../torch/index.js';
import { algorithmSettings } from '../../algorithm/config.js';
import { auxiliaryModelSettings } from '../../auxiliary/config.js';
import { auxiliaryDatasetSettings, experienceBufferSettings } from '../../buffer/config.js';
import { selectorSettings, type TasksetConfig, tasksetSettings } from '../../buffer/taskset-config.js';
import { firstNonNull } from '../../config/mapping.js';
import { experiencePipelineSettings, taskPipelineSettings } from '../../data/config.js';
import { explorerSettings, serveSettings } from '../../explorer/config.js';
import { monitorSettings } from '../../monitor/config.js';
import type { DistributedSettings, StageSettings } from '../../settings.js';
import { syncSettings, takesTurns } from '../../sync/config.js';
import { trainerSettings } from '../../trainer/config.js';
import { WORKFLOWS } from '../../workflow/registry.js';
import type { StageConfig } from './schema.js';
import { loraSettings } from './model.js';

/**
 * A taskset as the loader reads it, with whether its rows may lack the prompt column: they may when its default
 * workflow is a registered one that builds tasks from the rows' own fields (WorkflowSpec.readsPrompt false: FrozenLake
 * rows are {seed, size, p}).
 */
function tasksetLoading(t: TasksetConfig, isEval: boolean) {
  const settings = tasksetSettings(t, isEval);
  const workflow = settings.defaultWorkflowType;
  const promptFree = workflow !== undefined && WORKFLOWS.has(workflow) && WORKFLOWS.get(workflow).readsPrompt === false;
  return promptFree ? { ...settings, promptOptional: true } : settings;
}

/**
 * The threads a process of the run computes with: OMP_NUM_THREADS when set (per process, as PyTorch reads it), else
 * the cores it may run on (CPU affinity respected), shared by the ranks started on one machine. Mode both splits them
 * between explorer and trainer when those overlap.
 */
export function coreBudget(localWorldSize: number, env: NodeJS.ProcessEnv = process.env): number {
  const set = env.OMP_NUM_THREADS;
  if (set !== undefined && set.trim() !== '') {
    const n = Number(set);
    if (!Number.isInteger(n) || n < 1 || n > 4096)
      throw new Error(`OMP_NUM_THREADS must be a whole number of threads from 1 to 4096, got '${set}'`);
    return n;
  }
  return Math.max(1, Math.floor(availableParallelism() / localWorldSize));
}

/**
 * The settings of one stage from its resolved config section; `distributed`: this process's place among the ranks of
 * a data-parallel trainer (../distributed.ts), null for one process.
 */
export function stageSettings(
  stage: StageConfig,
  modelPath: string,
  pluginBaseDir: string = process.cwd(),
  distributed: DistributedSettings | null = null,
): StageSettings {
  const input = stage.buffer.explorer_input;
  const experienceBuffer = stage.buffer.trainer_input.experience_buffer;
  const cores = coreBudget(distributed?.localWorldSize ?? 1);
  const lora = stage.model.lora;
  const firstTaskset = input.tasksets[0];
  // devices are resolved where their part runs: an embedded engine on rank 0 of a mode with an explorer (an external
  // server's device is its own; validation refuses one set for it), a trainer in modes both and train
  const rolloutSetting = stage.explorer.rollout_model.device;
  const rolloutDevice =
    stage.explorer.rollout_model.engine_type === 'embedded' &&
    (distributed?.rank ?? 0) === 0 &&
    (stage.mode !== 'train' || stage.trainer.stop_when !== null)
      ? resolveDevice(rolloutSetting, { key: 'explorer.rollout_model.device' })
      : 'cpu';
  const trainerSetting = stage.trainer.device;
  const trainerDevice =
    stage.mode === 'both' || stage.mode === 'train'
      ? resolveDevice(trainerSetting, { key: 'trainer.device', localRank: distributed?.localRank ?? 0 })
      : 'cpu';
  // Mode both: when the loops can overlap they share the cores (half each, at least one); strictly on-policy
  // (fixed sync every step, no offset) they take turns, so each gets every core (measured: bench/README.md, the GRPO stage bench).
  // Auxiliary engines run inside explore steps: they take the explorer's share.
  const threads =
    stage.mode === 'both' && !takesTurns(stage.synchronizer)
      ? { explorer: Math.max(1, Math.floor(cores / 2)), trainer: Math.max(1, Math.ceil(cores / 2)) }
      : { explorer: cores, trainer: cores };
  return {
    stageName: stage.stage_name || 'run',
    jobDir: stage.checkpoint_job_dir,
    mode: stage.mode,
    project: stage.project,
    name: stage.name,
    modelPath,
    dtype: stage.model.dtype,
    lora: lora ? loraSettings(lora) : null,
    loraPath: lora?.path ?? null,
    criticModelPath: stage.model.critic_model_path,
    algorithm: algorithmSettings(stage.algorithm),
    pluginBaseDir,
    batchSize: stage.buffer.batch_size,
    trainBatchSize: stage.buffer.train_batch_size,
    // buffer.total_steps (Trinity: the explorer's) bounds the stage; trainer.total_steps when it is not set
    totalSteps: firstNonNull(stage.buffer.total_steps, stage.trainer.total_steps),
    totalEpochs: stage.buffer.total_epochs,
    tasksets: input.tasksets.map((t) => ({ taskset: tasksetLoading(t, false), selector: selectorSettings(t) })),
    evalTasksets: input.eval_tasksets.map((t) => tasksetLoading(t, true)),
    taskPipeline: taskPipelineSettings(stage.data_processor.task_pipeline, stage.mode),
    evalRepeatTimes: input.eval_tasksets.map((t) => t.repeat_times ?? 1),
    evalInterval: stage.explorer.eval_interval,
    evalOnStartup: stage.explorer.eval_on_startup,
    bench: { onLatestCheckpoint: stage.explorer.bench_on_latest_checkpoint },
    explorer: explorerSettings(stage.explorer, {
      modelPath,
      maxLength: stage.model.max_model_len,
      promptLimit: {
        maxPromptTokens: stage.model.max_prompt_tokens,
        maxModelLen: stage.model.max_model_len,
        truncate: stage.model.enable_prompt_truncation,
      },
      defaultWorkflowType: input.default_workflow_type,
      weightSync: stage.synchronizer.sync_method,
      device: rolloutDevice,
    }),
    auxiliaryModels: auxiliaryModelSettings(stage.explorer.auxiliary_models, {
      dtype: stage.model.dtype,
      numThreads: threads.explorer,
      explores: (distributed?.rank ?? 0) === 0 && stage.mode !== 'train',
    }),
    serve: serveSettings(stage.explorer, stage.model),
    trainer: trainerSettings(stage.trainer, trainerDevice),
    sync: syncSettings(stage.synchronizer),
    buffer: experienceBufferSettings(experienceBuffer),
    ...monitorSettings(stage.monitor),
    auxiliaryDatasets: auxiliaryDatasetSettings(stage.buffer.trainer_input.auxiliary_buffers),
    experiencePipeline: experiencePipelineSettings(stage.data_processor.experience_pipeline, stage.checkpoint_job_dir),
    seed: stage.explorer.rollout_model.seed ?? firstTaskset?.task_selector.seed ?? 42,
    threads,
    distributed,
  };
}
