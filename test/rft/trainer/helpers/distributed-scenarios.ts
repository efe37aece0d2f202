// The data-parallel trainer scenarios shared by test/rft/trainer/distributed.test.ts (which runs each in one process)
// and ./distributed-trainer-rank.ts (one rank of each): the same TrainerInit but for `distributed`.
import type { Experience } from '../../../../src/rft/experience.js';
import type { TrainerInit } from '../../../../src/rft/trainer/trainer.js';

export interface Scenario {
  name: string;
  algorithm: Record<string, unknown>;
  lora: TrainerInit['lora'];
  microBatchSize: number | null;
  /** Micro-batches by this token budget instead (trainer.use_dynamic_bsz). */
  microBatchTokens?: number;
  /** Rows packed without pads (trainer.use_remove_padding); the one-process reference runs them padded. */
  removePadding?: boolean;
  /** The batch of each step (the same global batch on every rank and in the one process). */
  batches: Experience[][];
}

/** What a rank process is told (in a JSON file named by $SCENARIOS). */
export interface RankPlan {
  modelDir: string;
  jobDir: string;
  scenarios: (Scenario & { port: number })[];
}

export function scenarioInit(
  scenario: Scenario,
  modelDir: string,
  jobDir: string,
  distributed: TrainerInit['distributed'] = null,
): TrainerInit {
  return {
    jobDir,
    resume: false,
    modelPath: modelDir,
    dtype: 'float32',
    algorithm: scenario.algorithm,
    pluginBaseDir: modelDir,
    lora: scenario.lora,
    loraPath: null,
    criticModelPath: null,
    totalSteps: 8,
    microBatchSize: scenario.microBatchSize,
    microBatchTokens: scenario.microBatchTokens ?? null,
    gradientCheckpointing: false,
    removePadding: scenario.removePadding ?? false,
    padTokenId: 0,
    seed: 7,
    numThreads: 1,
    distributed,
  };
}

/** Gradient bucket size of the ranks: a few KiB, so the tiny model's gradients fill several buckets. */
export const SMALL_BUCKET_BYTES = 4096;

/** Generous and finite: collectives complete as soon as every rank arrives; this only bounds a broken run. */
export const RANK_TIMEOUT_MS = 120_000;
