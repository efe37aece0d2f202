// Mode both: the explorer loop (rollouts on the engine's worker thread) ─▶ the buffer ─▶ the trainer loop (the trainer
// worker), in one process; weights flow back through a LocalWeightChannel (sync_method memory: by reference;
// checkpoint: a folder). One loop failing stops the other; a resumed stage puts the checkpoint's in-memory buffer
// contents back before the explorer starts (./checkpoint-state.ts). A train step that waits for experiences while the
// explorer waits for its weights stops the run with an error naming the keys to change (./explorer-trainer-wait.ts).
import type { StageResult } from '../settings.js';
import { BufferClosedError } from '../buffer/index.js';
import type { Experience } from '../experience.js';
import { loraAdapterName } from '../explorer/engines.js';
import { type ExploredStep, runExplorerLoop } from '../explorer/loop.js';
import { stampExperienceIds } from '../explorer/share.js';
import { LocalWeightChannel } from '../sync/local-channel.js';
import { weightTransport } from '../sync/weight-channel.js';
import { WeightPublication } from '../trainer/loop.js';
import { memoryBufferState, restoreMemoryBuffer } from './checkpoint-state.js';
import { ExplorerTrainerWait } from './explorer-trainer-wait.js';
import type { StageParts } from './stage-parts.js';

export async function runBothStage(parts: StageParts): Promise<StageResult> {
  const { settings } = parts;
  const scheduler = await parts.scheduler();
  const totalSteps = parts.totalSteps(scheduler.totalSteps);
  const { monitors, progress } = parts.monitoring(totalSteps);
  const buffer = await parts.memoryBuffer();
  const trainer = await parts.trainer(totalSteps);
  const usesBaseWeights = settings.lora !== null || !parts.checkpoint?.modelDir;
  const explorer = await parts.explorer(usesBaseWeights ? settings.modelPath : (parts.checkpoint?.modelDir as string), progress);
  const channel = new LocalWeightChannel({
    trainer,
    transport: weightTransport(explorer.started, settings.jobDir, loraAdapterName(settings)),
    startVersion: parts.startStep,
    timeoutMs: settings.sync.timeoutMs,
    signal: parts.signal,
    onVersion: (v) => {
      explorer.handle.modelVersion = v;
    },
    swapGate: explorer.swapGate,
  });
  // A LoRA run (or a resume without a full model in the checkpoint) starts the engine from the base weights: the
  // trainer's (merged) weights go over first when they differ from those (a resume, or an adapter from lora.path)
  if (usesBaseWeights && (parts.startStep > 0 || settings.loraPath !== null)) await channel.publish(parts.startStep);
  if (parts.checkpoint) await restoreMemoryBuffer(buffer, parts.saved, parts.checkpoint.dir);

  const explored = new Map<number, ExploredStep>();
  // the newest explore step's rollout failures: a stage that cannot fill its train steps names them
  let lastFailures: readonly string[] = [];
  const publication = new WeightPublication(channel, parts.startStep);
  // train step s takes train_batch_size (T) experiences; explore steps give batch_size × repeat_times (P) each
  // when every rollout succeeds, so explore step ceil(s·T / P) is the last that feeds it: once that one is in the
  // buffer, waiting longer for a short step would wait for rollouts that never come
  let writtenThrough = parts.startStep;
  const perExploreStep = settings.batchSize * parts.algorithm.repeatTimes;
  // the trainer waiting for a batch while the explorer waits for that batch's weights is an error at once
  const mutualWait = new ExplorerTrainerWait(settings, parts.algorithm.repeatTimes);
  const source = parts.bufferSource(
    buffer,
    publication,
    (step) => writtenThrough >= Math.ceil((step * settings.trainBatchSize) / perExploreStep),
    (step) => mutualWait.explorerWaitsOn(step),
  );
  // an SQL buffer outlives the process: the steps a resumed run explores again (those after its checkpoint) write
  // the same ids as before the crash, which the buffer stores once (in-memory buffers start from the checkpoint)
  const stampIds = settings.buffer.storageType === 'sql';
  const explorerTask = runExplorerLoop({
    ...parts.explorerLoopBase(scheduler, explorer, buffer, channel, totalSteps),
    ...(stampIds
      ? {
          write: ({ step }: ExploredStep, experiences: Experience[]) =>
            buffer.write(stampExperienceIds(settings.stageName, step, experiences)),
        }
      : {}),
    onStep: (step) => {
      explored.set(step.step, step);
      if (step.failures.length > 0) lastFailures = step.failures;
    },
    onWritten: (step, count) => {
      writtenThrough = step;
      mutualWait.written(step, count);
    },
    onWaitingForWeights: (step) => mutualWait.waiting(step),
    onEval: (step, metrics) => monitors.log(step, metrics),
  });
  let trainerFinished = false;
  const trainerTask = parts
    .trainerLoop({
      trainer,
      publication,
      source,
      totalSteps,
      monitors,
      progress,
      rolloutMetrics: (step) => {
        for (const s of [...explored.keys()]) if (s < step) explored.delete(s);
        return explored.get(step)?.metrics ?? {};
      },
      rolloutFailures: () => lastFailures,
      explorerState: (step) => ({ scheduler: explored.get(step)?.schedulerState ?? scheduler.state(), step }),
      bufferState: (step) => memoryBufferState(buffer, step),
    })
    .then((lastStep) => {
      trainerFinished = true;
      return lastStep;
    })
    .finally(() => buffer.close());
  // one loop failing stops the other (its waits end on the stage's signal, a closed buffer), and both have ended
  // before the parts close under them; the first failure is the stage's
  const failFast = (error: unknown) => {
    parts.fail(error);
    throw error;
  };
  // with priority replay the trainer can finish on reused experiences before the explorer's last write: what the
  // explorer still had to write into the closed buffer is needed by no one
  const explorerDone = explorerTask.catch((error: unknown) =>
    trainerFinished && error instanceof BufferClosedError ? undefined : failFast(error),
  );
  const [exploring, trained] = await Promise.allSettled([explorerDone, trainerTask.catch(failFast)]);
  if (parts.failed) throw parts.failedReason;
  if (exploring.status === 'rejected') throw exploring.reason;
  if (trained.status === 'rejected') throw trained.reason;
  const lastStep = trained.value;
  progress.done();
  return { finalModelDir: await parts.saveFinalModel(trainer), steps: lastStep, stepsAsked: totalSteps };
}
