// Mode train: the trainer loop alone, over the shared buffer explorer processes fill (weights published for them
// through the process weight channel) or over a dataset (SFT, DPO: one batch per step, nothing published); with
// trainer.stop_when, an evaluator on an engine of the stage's own ends the stage at the first evaluation that meets
// the rule (../trainer/train-eval.ts).
import type { StageResult } from '../settings.js';
import { sourceFromArray } from '../buffer/index.js';
import type { MonitorGroup, ProgressReporter } from '../monitor/index.js';
import { startExplorerEngine } from '../explorer/engines.js';
import { NO_PUBLISHER } from '../sync/sync-folder.js';
import { WeightPublication } from '../trainer/loop.js';
import type { TrainerSource } from '../trainer/step-batches.js';
import { describeStopRule, TrainStageEvaluator } from '../trainer/train-eval.js';
import type { TrainerClient } from '../trainer/trainer.js';
import type { RunState } from './checkpoint-state.js';
import { loadTrainDataset } from './stage-plan.js';
import type { StageParts } from './stage-parts.js';

export async function runTrainStage(parts: StageParts): Promise<StageResult> {
  const input = await trainInput(parts);
  const totalSteps = parts.totalSteps(input.stepsFromData); // Infinity: online (./stage-plan.ts trainsOnline)
  if (!Number.isFinite(totalSteps))
    parts.log(
      `[${parts.settings.stageName}] training online (no buffer.total_steps): a step per ${parts.settings.trainBatchSize} ` +
        'experiences as they come, until the processes writing the buffer finish or this one is stopped',
    );
  const stepsAsked = Number.isFinite(totalSteps) ? { stepsAsked: totalSteps } : { openEnded: true };
  const { monitors, progress } = parts.monitoring(totalSteps);
  const trainer = await parts.trainer(totalSteps);
  const stop = await stopRule(parts, trainer, monitors, progress);
  if (stop.endedAt !== null) {
    progress.done();
    return { finalModelDir: await parts.saveFinalModel(trainer), steps: stop.endedAt, ...stepsAsked };
  }
  const lastStep = await parts.trainerLoop({
    trainer,
    ...input.connect(trainer),
    totalSteps,
    monitors,
    progress,
    rolloutMetrics: () => ({}),
    explorerState: () => null,
    ...(stop.after ? { stopAfter: stop.after, stopState: stop.state } : {}),
  });
  progress.done();
  return { finalModelDir: await parts.saveFinalModel(trainer), steps: lastStep, ...stepsAsked };
}

/**
 * trainer.stop_when (mode train over a dataset): an evaluator on a rollout engine of the stage's own
 * (../trainer/train-eval.ts), asked after every train step. `endedAt`: the step the stage already ended at — a resumed run
 * whose checkpoint recorded the rule met, or the evaluation at startup meeting it.
 */
async function stopRule(
  parts: StageParts,
  trainer: TrainerClient,
  monitors: MonitorGroup,
  progress: ProgressReporter,
): Promise<{
  endedAt: number | null;
  after?: (step: number) => Promise<boolean | undefined>;
  state?: (step: number) => Pick<RunState, 'stoppedAt'>;
}> {
  const { settings } = parts;
  const rule = settings.trainer.stopWhen;
  if (rule === null) {
    if (settings.evalTasksets.length > 0 && settings.buffer.storageType === 'file')
      parts.log(
        `[${settings.stageName}] eval_tasksets (${settings.evalTasksets.map((t) => t.name).join(', ')}) are not evaluated ` +
          'in this stage: a mode-train stage evaluates only to decide trainer.stop_when (a mode bench stage measures a checkpoint)',
      );
    return { endedAt: null };
  }
  const saved = parts.saved.stoppedAt;
  if (saved !== undefined) {
    parts.log(`[${settings.stageName}] ${describeStopRule(rule)} was met at step ${saved} (checkpoint): the stage ended there`);
    return { endedAt: saved };
  }
  const started = await startExplorerEngine(settings, parts.checkpoint?.modelDir ?? settings.modelPath, (line) =>
    progress.log(line),
  );
  const evaluator = new TrainStageEvaluator({
    settings,
    rule,
    trainer,
    started,
    monitors,
    metricsDir: parts.metricsDir,
    log: parts.log,
    signal: parts.signal,
  });
  parts.onClose(() => evaluator.close());
  let metAt: number | null = null;
  if (parts.startStep === 0 && evaluator.due(0) && (await evaluator.evaluate(0))) return { endedAt: 0 };
  return {
    endedAt: null,
    after: async (step) => {
      if (!evaluator.due(step)) return false;
      const met = await evaluator.evaluate(step);
      if (met) metAt = step;
      return met;
    },
    // a checkpoint at the step the rule was met says so: a resumed run does not train on past it
    state: (step) => (metAt === step ? { stoppedAt: step } : {}),
  };
}

/**
 * What a mode-train stage learns from: the shared buffer explorer processes fill (weights published for them through
 * the process weight channel), or a dataset (SFT, DPO: one batch per step, nothing published).
 */
async function trainInput(parts: StageParts): Promise<{
  stepsFromData: number | null;
  connect: (trainer: TrainerClient) => { publication: WeightPublication; source: TrainerSource };
}> {
  const { settings } = parts;
  if (settings.buffer.storageType === 'sql') {
    const buffer = await parts.sharedBuffer('reader');
    const channel = await parts.processWeightChannel(buffer);
    return {
      stepsFromData: null,
      connect: (trainer) => {
        const publication = new WeightPublication(channel.publisher(trainer), parts.startStep);
        return { publication, source: parts.bufferSource(buffer, publication) };
      },
    };
  }
  if (settings.buffer.storageType !== 'file')
    throw new Error(`stage '${settings.stageName}': mode train reads a shared buffer (storage_type sql) or a dataset (file)`);
  const dataset = await loadTrainDataset(settings, parts.algorithm);
  return {
    stepsFromData: dataset.stepsFor(settings.totalEpochs),
    connect: () => ({
      publication: new WeightPublication(NO_PUBLISHER, parts.startStep),
      source: (step) => sourceFromArray(dataset.batch(step)),
    }),
  };
}
