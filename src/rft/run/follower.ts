// A rank > 0 of a data-parallel trainer (./distributed.ts). It walks the run's stages in the order rank 0 runs them,
// skipping the finished ones as rank 0 does (their done.json), and for each stage with a trainer (mode both or
// train) starts the same trainer as rank 0 and takes the steps rank 0 sends (TrainerClient.follow) until rank 0 ends
// the stage. When rank 0's stage fails, its trainer says so: follow() rejects with a RankZeroFailedError carrying
// rank 0's error, and this rank fails with it rather than going on to the next stage. It explores nothing and writes
// no metrics, checkpoints or weights: rank 0 owns the job folder. Stages without a trainer (explore, bench, serve)
// are rank 0's alone.
import { join } from 'node:path';
import { loadAlgorithmPlugins } from '../algorithm/plugins.js';
import { resolveAlgorithm } from '../algorithm/presets.js';
import { TrainerClient } from '../trainer/trainer.js';
import { describePlacement } from './distributed.js';
import type { StageRecord, StageSettings } from '../settings.js';
import { STAGE_DONE_FILE, finishedStage } from './stage-done.js';
import { countTrainSteps, finalModelDir, trainerInit } from './stage-plan.js';

export interface FollowerOptions {
  log: (line: string) => void;
  /**
   * SIGINT/SIGTERM: the stage being followed goes on until rank 0 (stopped by the same signal) ends it, so no
   * collective is left half done; then no further stage starts.
   */
  signal?: AbortSignal;
}

/**
 * Follows rank 0 through the stages. `settingsOf(index, modelPath)` gives stage `index`'s settings when it starts
 * from `modelPath` (the previous trainer stage's final model, as on rank 0).
 */
export async function runFollower(
  stageCount: number,
  firstModelPath: string,
  settingsOf: (index: number, modelPath: string) => StageSettings,
  options: FollowerOptions,
): Promise<{ finalModelDir: null; stages: StageRecord[] }> {
  const { log } = options;
  const records: StageRecord[] = [];
  let modelPath = firstModelPath;
  for (let index = 0; index < stageCount; index++) {
    const settings = settingsOf(index, modelPath);
    const rank = settings.distributed?.rank;
    if (rank === undefined || rank === 0) throw new Error(`stage '${settings.stageName}': runFollower is for ranks > 0`);
    const prefix = `[${settings.stageName}] rank ${rank}`;
    const earlier = finishedStage(settings.jobDir, settings.mode);
    if (earlier !== null) {
      log(`${prefix}: finished earlier (${join(settings.jobDir, STAGE_DONE_FILE)}): skipped`);
      records.push(earlier);
      if (earlier.finalModelDir) modelPath = earlier.finalModelDir;
      continue;
    }
    if (settings.mode !== 'both' && settings.mode !== 'train') {
      log(`${prefix}: mode ${settings.mode} has no trainer: nothing to do on this rank (rank 0 runs it)`);
      records.push({ finalModelDir: null, steps: 0 });
      continue;
    }
    await loadAlgorithmPlugins(settings.algorithm, settings.pluginBaseDir);
    const totalSteps = await countTrainSteps(settings, resolveAlgorithm(settings.algorithm));
    log(`${prefix}: following rank 0's trainer (stage of ${totalSteps} steps, model ${modelPath})`);
    log(`${prefix}: ${describePlacement(settings)}`);
    const { trainer, start } = await TrainerClient.start(trainerInit(settings, totalSteps));
    let steps: number;
    try {
      ({ steps } = await trainer.follow());
    } finally {
      await trainer.close();
    }
    log(`${prefix}: rank 0 ended the stage; trained ${steps} steps from step ${start.step}`);
    if (options.signal?.aborted) {
      log(`${prefix}: stopped; run the same command to resume`);
      return { finalModelDir: null, stages: records };
    }
    // rank 0 saves the stage's final model there before it ends the stage; the next stage starts from it
    const record: StageRecord = { finalModelDir: finalModelDir(settings.jobDir), steps: start.step + steps };
    records.push(record);
    modelPath = record.finalModelDir as string;
  }
  return { finalModelDir: null, stages: records };
}
