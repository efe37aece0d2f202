// The trainer loop's batches: per train step the algorithm's sample strategy reads the step's source (the shared
// buffer through BufferExperienceSource, or a dataset's batch) and the auxiliary datasets. The strategy's state and
// the auxiliary datasets' read positions are run state: they go into checkpoints and come back on resume.
import type { SampleStrategy } from '../algorithm/sample-strategy.js';
import type { AuxiliaryReader, ExperienceSource } from '../buffer/index.js';
import { canonicalExperienceOrder } from './canonical-order.js';
import { BufferExperienceSource } from './experience-source.js';
import type { StageSettings } from '../settings.js';
import type { StepBatch } from './loop.js';

/**
 * What the step batches read of the stage's settings: experiences per step, the longest wait for them, and
 * trainer.bitwise_on_policy (rows in canonical order, ./canonical-order.ts).
 */
export type StepBatchSettings = Pick<StageSettings, 'trainBatchSize' | 'buffer'> & {
  trainer?: Pick<StageSettings['trainer'], 'bitwiseOnPolicy'>;
};

/** The trainer's experiences: the shared buffer, or a dataset's batch per step. */
export type TrainerSource = BufferExperienceSource | ((step: number) => ExperienceSource);

/** What a checkpoint keeps of the batching. */
export interface StepBatchesState {
  sampleStrategy: unknown;
  auxiliary: Record<string, unknown>;
  /** The SQLite buffer's read position (the shared buffer of modes train/explore). */
  buffer: { cursor: number } | null;
}

export class StepBatches {
  readonly #settings: StepBatchSettings;
  readonly #repeatTimes: number;
  readonly #strategy: SampleStrategy;
  readonly #auxiliary: Record<string, AuxiliaryReader>;
  readonly #source: TrainerSource;

  constructor(options: {
    settings: StepBatchSettings;
    repeatTimes: number;
    strategy: SampleStrategy;
    auxiliary: Record<string, AuxiliaryReader>;
    source: TrainerSource;
  }) {
    this.#settings = options.settings;
    this.#repeatTimes = options.repeatTimes;
    this.#strategy = options.strategy;
    this.#auxiliary = options.auxiliary;
    this.#source = options.source;
  }

  /** Train step `step`'s batch as the sample strategy assembles it. */
  async next(step: number): Promise<StepBatch> {
    const buffer = this.#source instanceof BufferExperienceSource ? this.#source : null;
    let read = 0;
    let source: ExperienceSource;
    if (buffer) {
      buffer.startStep(step - 1);
      source = buffer;
    } else {
      const inner = (this.#source as (step: number) => ExperienceSource)(step);
      source = {
        read: async (count, options) => {
          const out = await inner.read(count, options);
          read += out.length;
          return out;
        },
      };
    }
    const sampled = await this.#strategy.sample({
      source,
      batchSize: this.#settings.trainBatchSize,
      modelVersion: step - 1,
      repeatTimes: this.#repeatTimes,
      auxiliary: this.#auxiliary,
      timeoutMs: this.#settings.buffer.maxReadTimeoutMs,
      // after max_read_timeout a short batch is trained (Trinity-RFT); none at all is a BufferTimeoutError
      minCount: 1,
    });
    if (buffer) {
      read = buffer.delivered;
      sampled.metrics['trainer/stale_dropped'] = buffer.staleDropped;
      // fewer than a batch came (rollouts failed, were rejected or filtered out, or the explorer stopped): trained on what came
      sampled.metrics['trainer/short_batch'] = buffer.shortBecause === null ? 0 : 1;
    }
    // a strategy that can make no more batches (sampled.ended) ends training as a drained source does
    const shortBecause = sampled.ended ?? buffer?.shortBecause ?? null;
    return {
      experiences: this.#settings.trainer?.bitwiseOnPolicy ? canonicalExperienceOrder(sampled.experiences) : sampled.experiences,
      metrics: sampled.metrics,
      exhausted: sampled.ended !== undefined || (read === 0 && !(buffer?.shortStep ?? false)),
      ...(shortBecause !== null ? { shortBecause } : {}),
    };
  }

  state(): StepBatchesState {
    const cursor = this.#source instanceof BufferExperienceSource ? this.#source.cursor : null;
    return {
      sampleStrategy: this.#strategy.state(),
      auxiliary: Object.fromEntries(Object.entries(this.#auxiliary).map(([name, reader]) => [name, reader.state()])),
      buffer: cursor === null ? null : { cursor },
    };
  }

  /** Restores a checkpoint's state (the buffer's cursor is restored where the buffer opens). */
  loadState(saved: Partial<StepBatchesState>): void {
    if (saved.sampleStrategy !== undefined) this.#strategy.loadState(saved.sampleStrategy);
    for (const [name, reader] of Object.entries(this.#auxiliary)) {
      const position = saved.auxiliary?.[name];
      if (position !== undefined) reader.loadState(position);
    }
  }

  /** A checkpoint was written: the shared buffer commits its read position. */
  async committed(): Promise<void> {
    if (this.#source instanceof BufferExperienceSource) await this.#source.commit();
  }
}
