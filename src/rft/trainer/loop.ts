// The trainer loop: per train step, the algorithm's sample strategy assembles a batch from the experience source
// (and auxiliary datasets), the trainer takes one step (its advantages per experience recorded beside the rollouts:
// ../monitor/advantage-record.ts), the weights are published per the sync style, and every save_interval steps a
// checkpoint records all run state (trainer: model, optimizer, critic, KL controller; run: the
// explorer's task scheduler, the buffer's read position, the sample strategy and the auxiliary datasets' positions).
// A run that cannot fill its train steps (every rollout failed, was rejected or filtered out) fails: ./empty-steps.ts.
import type { Experience } from '../experience.js';
import { appendAdvantages, type MonitorGroup, type ProgressReporter } from '../monitor/index.js';
import type { TrainerClient } from './trainer.js';
import type { StageSettings } from '../settings.js';
import type { WeightPublisher } from '../sync/weight-channel.js';
import { measureResidentPeak } from '../../util/index.js';
import { EmptyStepGuard, trainableExperiences, untrainableWhy } from './empty-steps.js';

/** What the trainer loop reads of the stage's settings. */
export type TrainerLoopSettings = Pick<StageSettings, 'stageName' | 'sync' | 'trainBatchSize' | 'trainer'>;

/** One step's batch, as the sample strategy assembled it. */
export interface StepBatch {
  experiences: Experience[];
  metrics: Record<string, number>;
  /** The source is finished and gave nothing more: the loop ends (the explorer or the dataset stopped early). */
  exhausted: boolean;
  /** Why fewer than a batch came (logged with the step). */
  shortBecause?: string;
}

export interface TrainerLoopParts {
  settings: TrainerLoopSettings;
  trainer: TrainerClient;
  weights: WeightPublication;
  /** Assembles the batch of train step `step` (the sample strategy over the step's source). */
  nextBatch: (step: number) => Promise<StepBatch>;
  /** Run state saved with a checkpoint at `step` besides the trainer's own. */
  checkpointState: (step: number) => Record<string, unknown>;
  /** After checkpoint `step` is written (the SQLite buffer commits its read position). */
  onCheckpoint: (step: number) => void | Promise<void>;
  /** Where each step's advantages per experience go (../monitor/advantage-record.ts); null: not recorded. */
  advantagesFile: string | null;
  /** The explorer's rollout metrics of step `step` (mode both), logged with the step's train metrics. */
  rolloutMetrics: (step: number) => Record<string, number>;
  /** The newest rollout failures the explorer reported (mode both), named when the stage has nothing to train on. */
  rolloutFailures?: () => readonly string[];
  monitors: MonitorGroup;
  progress: ProgressReporter;
  startStep: number;
  totalSteps: number;
  /**
   * After step `step`'s metrics are logged (mode train with trainer.stop_when: evaluates when due): true ends the
   * stage at this step, with a checkpoint; undefined when the stage was stopped meanwhile.
   */
  stopAfter?: (step: number) => Promise<boolean | undefined>;
  signal?: AbortSignal;
}

const mean = (values: readonly number[]) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : Number.NaN);

/**
 * How stale train step `step`'s batch is. The trainer's weights version during step s is s − 1 (the weights it starts
 * from); each experience carries the version that generated it (info.modelVersion):
 *   sample/model_version/{mean,min,max}  over the batch's versioned experiences (Trinity's names)
 *   trainer/staleness      = mean over the batch of (s − 1 − modelVersion)   (an unversioned experience counts 0)
 *   trainer/staleness/max  = s − 1 − min modelVersion
 */
export function stalenessMetrics(experiences: readonly Experience[], step: number): Record<string, number> {
  const trainerVersion = step - 1;
  const versions = experiences.flatMap((e) => (e.info.modelVersion === undefined ? [] : [e.info.modelVersion]));
  const metrics: Record<string, number> = {
    'trainer/staleness': mean(experiences.map((e) => trainerVersion - (e.info.modelVersion ?? trainerVersion))),
  };
  if (versions.length === 0) return metrics;
  const oldest = versions.reduce((a, b) => Math.min(a, b));
  return {
    ...metrics,
    'trainer/staleness/max': trainerVersion - oldest,
    'sample/model_version/mean': mean(versions),
    'sample/model_version/min': oldest,
    'sample/model_version/max': versions.reduce((a, b) => Math.max(a, b)),
  };
}

/**
 * The trainer's side of the weight channel with what it published last, and what its syncs cost, whatever the channel
 * (in memory, a folder the engine loads, a folder for explorer processes):
 *   sync/seconds     wall time of publishing (for an engine in this process, its load included)
 *   sync/peak_bytes  the most resident memory the process gained meanwhile (../../util/resident-peak.ts)
 */
export class WeightPublication {
  readonly channel: WeightPublisher;
  lastPublished: number;
  #syncSeconds = 0;
  #syncPeakBytes: number | null = null;
  #synced = false;

  constructor(channel: WeightPublisher, lastPublished: number) {
    this.channel = channel;
    this.lastPublished = lastPublished;
  }

  async publish(version: number): Promise<void> {
    const { seconds, peakBytes } = await measureResidentPeak(() => this.channel.publish(version));
    this.lastPublished = version;
    this.#synced = true;
    this.#syncSeconds += seconds;
    if (peakBytes !== null) this.#syncPeakBytes = Math.max(this.#syncPeakBytes ?? 0, peakBytes);
  }

  /** The syncs' metrics since the last call (seconds summed, the largest peak); {} when nothing was published. */
  takeSyncMetrics(): Record<string, number> {
    if (!this.#synced) return {};
    const metrics: Record<string, number> = { 'sync/seconds': this.#syncSeconds };
    if (this.#syncPeakBytes !== null) metrics['sync/peak_bytes'] = this.#syncPeakBytes;
    this.#synced = false;
    this.#syncSeconds = 0;
    this.#syncPeakBytes = null;
    return metrics;
  }

  /** explorer_driven: a pending request gets the newest trained weights (or just an answer when none are newer). */
  async answerPending(trained: number): Promise<boolean> {
    if (!this.channel.requestPending()) return false;
    if (trained > this.lastPublished) await this.publish(trained);
    this.channel.answerRequest();
    return true;
  }

  /** Publishes after train step `step` when the sync style says so (takeSyncMetrics tells whether it did). */
  async afterStep(settings: Pick<StageSettings, 'sync'>, step: number, totalSteps: number): Promise<void> {
    if (settings.sync.style === 'explorer_driven') {
      if (!(await this.answerPending(step)) && step !== totalSteps) return;
      if (this.lastPublished < step) await this.publish(step);
      return;
    }
    if (step % settings.sync.interval !== 0 && step !== totalSteps) return;
    await this.publish(step);
  }
}

/** Writes the checkpoint of `step` (trainer and run state) and commits what it records. */
async function save(parts: TrainerLoopParts, step: number): Promise<void> {
  const { settings } = parts;
  const dir = await parts.trainer.save(step, parts.checkpointState(step), settings.trainer.maxCheckpointsToKeep);
  await parts.onCheckpoint(step);
  parts.progress.log(`[${settings.stageName}] checkpoint step ${step} saved (${dir})`);
}

/** Runs the train steps; returns the last step trained. */
export async function runTrainerLoop(parts: TrainerLoopParts): Promise<number> {
  const { settings, trainer, weights } = parts;
  let lastStep = parts.startStep;
  const emptySteps = new EmptyStepGuard(settings.stageName, {
    ...(parts.rolloutFailures ? { lastFailures: parts.rolloutFailures } : {}),
  });
  try {
    let lastSaved = parts.startStep;
    for (let step = parts.startStep + 1; step <= parts.totalSteps; step++) {
      if (parts.signal?.aborted) break;
      const batch = await parts.nextBatch(step);
      // stopped while the batch was read (the explorer dropped its cut-short step): not trained, not checkpointed
      if (parts.signal?.aborted) break;
      if (batch.exhausted && batch.experiences.length === 0) {
        emptySteps.sourceEnded(step, batch.shortBecause);
        if (batch.shortBecause)
          parts.progress.log(`[${settings.stageName}] train step ${step}: ${batch.shortBecause}; training ends`);
        break;
      }
      // too many steps in a row with nothing to train on fail the stage here, before the step is logged or saved
      const trainable = trainableExperiences(batch.experiences);
      emptySteps.step(
        step,
        trainable,
        trainable === 0 && batch.experiences.length > 0 ? untrainableWhy(batch.experiences) : batch.shortBecause,
      );
      if (batch.shortBecause)
        parts.progress.log(
          `[${settings.stageName}] train step ${step}: ${batch.experiences.length} of ${settings.trainBatchSize} ` +
            `experiences: ${batch.shortBecause}`,
        );
      const started = Date.now();
      // nothing to train on (every rollout failed, was rejected or was too stale): no update; its metrics say so
      const trainMetrics = batch.experiences.length > 0 ? await trainer.step(batch.experiences) : {};
      const trainSeconds = (Date.now() - started) / 1000;
      if (parts.advantagesFile !== null && batch.experiences.length > 0)
        appendAdvantages(parts.advantagesFile, step, await trainer.lastAdvantages());
      const metrics: Record<string, number> = {
        ...parts.rolloutMetrics(step),
        ...Object.fromEntries(Object.entries(trainMetrics).map(([k, v]) => [k.startsWith('actor/') ? k : `actor/${k}`, v])),
        'time/train_s': trainSeconds,
        'perf/train_tokens_per_s': (trainMetrics.tokens ?? 0) / Math.max(1e-9, trainSeconds),
        ...stalenessMetrics(batch.experiences, step),
        ...batch.metrics,
      };
      await weights.afterStep(settings, step, parts.totalSteps);
      Object.assign(metrics, weights.takeSyncMetrics()); // sync/seconds, sync/peak_bytes when it published
      // the step's metrics are on disk before its checkpoint: a run killed after the checkpoint lost none of them
      parts.monitors.log(step, metrics);
      const stopping = parts.stopAfter ? await parts.stopAfter(step) : false;
      if (stopping === undefined) break; // stopped (Ctrl-C) during the evaluation: the step is checkpointed later
      if (step % settings.trainer.saveInterval === 0 || step === parts.totalSteps || stopping) {
        await save(parts, step);
        lastSaved = step;
      }
      lastStep = step;
      // what the step has: an SFT step has no reward, a step with nothing to train on no loss
      const shown: Record<string, number> = {};
      for (const [field, key] of [
        ['reward', 'rollout/reward/mean'],
        ['loss', 'actor/loss'],
      ] as const)
        if (metrics[key] !== undefined) shown[field] = metrics[key];
      parts.progress.update(step, shown);
      if (stopping) break;
    }
    // ended on its own, not stopped (Ctrl-C, a failed part): a loop that trained nothing fails the stage
    if (!parts.signal?.aborted) emptySteps.finished();
    // no end step (online training): it ends when the writers finish or it is stopped, and resumes from that step
    if (!Number.isFinite(parts.totalSteps) && lastStep > lastSaved) await save(parts, lastStep);
  } finally {
    weights.channel.finish(lastStep);
  }
  return lastStep;
}
