// What every rank of a data-parallel trainer must agree on with rank 0 (./follower.ts runs the same functions): the
// stage's step count (the learning-rate schedule depends on it), its task scheduler at the start, its train dataset,
// what its trainer starts with, and where its final weights go.
import { join } from 'node:path';
import { Tokenizer } from '../../tokenizer/index.js';
import type { ResolvedAlgorithm } from '../algorithm/presets.js';
import { EXPERIENCE_SCHEMAS } from '../algorithm/schemas.js';
import { DatasetReader, loadTaskset, TasksetScheduler } from '../buffer/index.js';
import type { StageSettings } from '../settings.js';
import type { TrainerInit } from '../trainer/trainer.js';

/**
 * The stage's steps: buffer.total_steps, else what the data gives (`fromData`); none is an error, but for a stage that
 * trains online (trainsOnline): Infinity.
 */
export function stageSteps(settings: StageSettings, fromData: number | null): number {
  if (trainsOnline(settings)) return Number.POSITIVE_INFINITY;
  const total = settings.totalSteps ?? fromData ?? 0;
  if (total <= 0) throw new Error(`stage '${settings.stageName}': no steps to run (set buffer.total_steps or give tasks)`);
  return total;
}

/**
 * Mode train over a shared buffer with no buffer.total_steps (nor trainer.total_steps) trains online: a step each
 * time a batch of experiences has come, until the writers finish (the serve or explore processes filling the buffer
 * ended: the rest is drained) or the stage is stopped (Ctrl-C: a checkpoint to resume from). Its learning rate cannot
 * decay towards an end step (../trainer/trainer-worker-main.ts says so at start).
 */
export function trainsOnline(settings: Pick<StageSettings, 'mode' | 'buffer' | 'totalSteps'>): boolean {
  return settings.mode === 'train' && settings.buffer.storageType === 'sql' && settings.totalSteps === null;
}

/** The task scheduler over the stage's tasksets, at its start (a resumed stage loads its saved position into it). */
export async function createScheduler(settings: StageSettings): Promise<TasksetScheduler> {
  const tasksets = await Promise.all(settings.tasksets.map((t) => loadTaskset(t.taskset)));
  return new TasksetScheduler({
    tasksets: settings.tasksets.map((t, i) => ({
      taskset: tasksets[i] as Awaited<ReturnType<typeof loadTaskset>>,
      ...(t.selector ? { selector: t.selector } : {}),
      ...(t.weight !== undefined ? { weight: t.weight } : {}),
    })),
    batchSize: settings.batchSize,
    totalEpochs: settings.totalEpochs,
    ...(settings.totalSteps !== null ? { totalSteps: settings.totalSteps } : {}),
  });
}

/** Mode train from a dataset file (SFT, DPO): one batch of its rows per step. */
export async function loadTrainDataset(settings: StageSettings, algorithm: ResolvedAlgorithm): Promise<DatasetReader> {
  if (!settings.buffer.path) throw new Error(`stage '${settings.stageName}': the file experience buffer needs a path`);
  const load = EXPERIENCE_SCHEMAS[algorithm.schema].readDataset;
  const format = { ...settings.buffer.format, modelDir: settings.modelPath }; // the images' processor (format.image_key)
  const rows = await load(settings.buffer.path, Tokenizer.load(settings.modelPath), format);
  return new DatasetReader(rows, settings.trainBatchSize);
}

/**
 * The train steps of a stage of mode both or train, counted as rank 0's stage counts them (the learning-rate schedule
 * depends on it): buffer.total_steps, else the tasksets' (mode both) or the dataset's (mode train, file) steps.
 */
export async function countTrainSteps(settings: StageSettings, algorithm: ResolvedAlgorithm): Promise<number> {
  // rank 0 counts the task pipeline's output, which the other ranks cannot wait for before the rendezvous
  if (settings.mode === 'both' && settings.taskPipeline !== null && settings.totalSteps === null)
    throw new Error(
      `stage '${settings.stageName}': a data-parallel trainer with data_processor.task_pipeline needs buffer.total_steps ` +
        '(the other ranks cannot count the steps of a taskset rank 0 is still writing)',
    );
  if (settings.mode === 'both') return stageSteps(settings, (await createScheduler(settings)).totalSteps);
  if (settings.mode === 'train' && settings.buffer.storageType === 'file')
    return stageSteps(settings, (await loadTrainDataset(settings, algorithm)).stepsFor(settings.totalEpochs));
  return stageSteps(settings, null);
}

/** What the stage's trainer starts with; every rank of a data-parallel trainer starts with the same. */
export function trainerInit(settings: StageSettings, totalSteps: number): TrainerInit {
  const d = settings.distributed;
  return {
    jobDir: settings.jobDir,
    resume: true,
    modelPath: settings.modelPath,
    dtype: settings.trainer.paramDtype,
    masterDtype: settings.trainer.masterDtype,
    device: settings.trainer.device,
    algorithm: settings.algorithm,
    pluginBaseDir: settings.pluginBaseDir,
    lora: settings.lora,
    loraPath: settings.loraPath,
    criticModelPath: settings.criticModelPath,
    totalSteps,
    microBatchSize: settings.trainer.microBatchSize,
    microBatchTokens: settings.trainer.microBatchTokens,
    gradientCheckpointing: settings.trainer.gradientCheckpointing,
    bitwiseOnPolicy: settings.trainer.bitwiseOnPolicy,
    removePadding: settings.trainer.removePadding,
    padTokenId: 0,
    seed: settings.seed,
    numThreads: settings.threads.trainer,
    distributed: d
      ? {
          rank: d.rank,
          worldSize: d.worldSize,
          masterAddr: d.masterAddr,
          masterPort: d.masterPort,
          timeoutMs: settings.trainer.distributedTimeoutMs,
          stage: settings.stageName,
          zeroStage: settings.trainer.zeroStage,
          strategy: settings.trainer.strategy,
        }
      : null,
  };
}

/** Where a stage of mode both or train leaves its final weights (a Hugging Face folder, the next stage's start). */
export function finalModelDir(jobDir: string): string {
  return join(jobDir, 'final_model');
}
