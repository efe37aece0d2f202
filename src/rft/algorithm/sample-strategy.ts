// Sample strategies (`algorithm.sample_strategy`), Trinity-RFT `trinity/algorithm/sample_strategy`: how the trainer
// assembles one training batch from its experience buffer (and auxiliary buffers). A strategy reads through
// `ExperienceReader`s (a buffer, or `arrayReader` over an array) and returns the batch with metrics:
//   default            read batch_size experiences as they come (`warmup`: Trinity-RFT's deprecated alias)
//   staleness_control  drop experiences with info.modelVersion < modelVersion − max_staleness, read on to refill
//   mix                ⌈expert_data_ratio · batch_size⌉ expert experiences from auxiliary[sft_dataset_name]
//                      (info.isExpert = true) + the rest usual ones (info.isExpert = false)   (MIX, CHORD)
//   dynamic_sampling   DAPO (arXiv 2503.14476, §3.2): soft overlong penalty on the reward, then keep only groups
//                      (same info.taskId) whose reward std > std_threshold, reading on until batch_size experiences
//                      of such groups are collected (or max_read_rounds reads)
//   reward_filter      RAFT (Dong et al., arXiv 2304.06767): per group keep the best response (best_of_group) and
//                      drop responses with reward < min_reward; the rest is trained with SFT
// Strategies never mutate the experiences they read: changed ones are shallow copies.
import { type Experience, responseLength } from '../experience.js';
import type { AlgorithmModule } from './registry.js';
import { Registry } from './registry.js';

/** Returns up to `count` experiences; fewer (or none) when the source runs dry. */
export type ExperienceReader = (count: number) => Experience[];

export interface SampleInput {
  /** The experience buffer (trainer_input.experience_buffer). */
  read: ExperienceReader;
  /** Experiences per training step (buffer.train_batch_size). */
  batchSize: number;
  /** Auxiliary buffers by name (trainer_input.auxiliary_buffers), e.g. `sft_dataset` for mix. */
  auxiliary?: Readonly<Record<string, ExperienceReader>>;
  /** The trainer's current model version (staleness_control). */
  modelVersion?: number;
}

export interface SampleResult {
  experiences: Experience[];
  metrics: Record<string, number>;
}

export type SampleStrategyModule<Options extends object> = AlgorithmModule<SampleInput, Options, SampleResult>;

/** A reader over an array: each call hands out the next experiences in order. */
export function arrayReader(experiences: readonly Experience[]): ExperienceReader {
  let position = 0;
  return (count) => {
    const out = experiences.slice(position, position + Math.max(0, count));
    position += out.length;
    return out;
  };
}

function checkBatchSize(module: string, batchSize: number): void {
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new Error(`sample_strategy '${module}': batchSize must be a positive integer, got ${batchSize}`);
  }
}

// --- default ---------------------------------------------------------------------------------------------------

export type DefaultSampleOptions = Record<string, never>;

export function sampleDefault(input: SampleInput): SampleResult {
  checkBatchSize('default', input.batchSize);
  const experiences = input.read(input.batchSize);
  return { experiences, metrics: { 'sample/count': experiences.length } };
}

export const defaultSampleStrategy: SampleStrategyModule<DefaultSampleOptions> = {
  name: 'default',
  description: 'the batch as the experience buffer hands it out',
  defaults: {},
  run: sampleDefault,
};

export const warmupSampleStrategy: SampleStrategyModule<DefaultSampleOptions> = {
  ...defaultSampleStrategy,
  name: 'warmup',
  description: "deprecated alias of 'default' (Trinity-RFT)",
};

// --- staleness_control -------------------------------------------------------------------------------------------

export interface StalenessControlOptions {
  /** Oldest accepted version = modelVersion − maxStaleness (0: on-policy only). */
  maxStaleness: number;
  /** Reads (of the missing count) after the first before returning a short batch. */
  maxReadRounds: number;
}

export const STALENESS_CONTROL_DEFAULTS: Readonly<StalenessControlOptions> = { maxStaleness: 1, maxReadRounds: 8 };

export function sampleWithStalenessControl(input: SampleInput, options: Partial<StalenessControlOptions> = {}): SampleResult {
  const { maxStaleness, maxReadRounds } = { ...STALENESS_CONTROL_DEFAULTS, ...options };
  checkBatchSize('staleness_control', input.batchSize);
  if (!(Number.isInteger(maxStaleness) && maxStaleness >= 0)) {
    throw new Error(`sample_strategy 'staleness_control': max_staleness must be a non-negative integer, got ${maxStaleness}`);
  }
  if (input.modelVersion === undefined) {
    throw new Error(`sample_strategy 'staleness_control' needs the trainer's current modelVersion`);
  }
  const oldest = input.modelVersion - maxStaleness;
  const kept: Experience[] = [];
  let stale = 0;
  let unversioned = 0;
  for (let round = 0; round <= maxReadRounds && kept.length < input.batchSize; round++) {
    const chunk = input.read(input.batchSize - kept.length);
    if (chunk.length === 0) break;
    for (const e of chunk) {
      const version = e.info.modelVersion;
      if (version === undefined) unversioned++;
      if (version !== undefined && version < oldest) stale++;
      else kept.push(e);
    }
  }
  return {
    experiences: kept,
    metrics: { 'sample/count': kept.length, 'sample/stale_dropped': stale, 'sample/unversioned': unversioned },
  };
}

export const stalenessControlSampleStrategy: SampleStrategyModule<StalenessControlOptions> = {
  name: 'staleness_control',
  description: 'drops experiences older than model_version - max_staleness and reads on to refill',
  defaults: STALENESS_CONTROL_DEFAULTS,
  run: sampleWithStalenessControl,
};

// --- mix ---------------------------------------------------------------------------------------------------------

export interface MixSampleOptions {
  /** Share of the batch taken from the expert (SFT) buffer. */
  expertDataRatio: number;
  /** The auxiliary buffer that holds the expert experiences. */
  sftDatasetName: string;
}

export const MIX_SAMPLE_DEFAULTS: Readonly<MixSampleOptions> = { expertDataRatio: 0.5, sftDatasetName: 'sft_dataset' };

export function sampleMix(input: SampleInput, options: Partial<MixSampleOptions> = {}): SampleResult {
  const { expertDataRatio, sftDatasetName } = { ...MIX_SAMPLE_DEFAULTS, ...options };
  checkBatchSize('mix', input.batchSize);
  if (!(expertDataRatio >= 0 && expertDataRatio <= 1)) {
    throw new Error(`sample_strategy 'mix': expert_data_ratio must be in [0, 1], got ${expertDataRatio}`);
  }
  const readExpert = input.auxiliary?.[sftDatasetName];
  if (readExpert === undefined) {
    const given = Object.keys(input.auxiliary ?? {});
    throw new Error(
      `sample_strategy 'mix': no auxiliary buffer '${sftDatasetName}' (sft_dataset_name); given: ${given.join(', ') || '(none)'}`,
    );
  }
  const expertCount = Math.ceil(expertDataRatio * input.batchSize);
  const usual = input.read(input.batchSize - expertCount).map((e) => ({ ...e, info: { ...e.info, isExpert: false } }));
  const expert = readExpert(expertCount).map((e) => ({ ...e, info: { ...e.info, isExpert: true } }));
  return {
    experiences: [...usual, ...expert],
    metrics: {
      'sample/count': usual.length + expert.length,
      'sample/usual_count': usual.length,
      'sample/expert_count': expert.length,
    },
  };
}

export const mixSampleStrategy: SampleStrategyModule<MixSampleOptions> = {
  name: 'mix',
  description: 'usual experiences plus expert (SFT) experiences at expert_data_ratio (MIX / CHORD)',
  defaults: MIX_SAMPLE_DEFAULTS,
  run: sampleMix,
};

// --- dynamic_sampling (DAPO) -------------------------------------------------------------------------------------

export interface OverlongPenaltyOptions {
  /** L_max: the rollout's response-token limit; null turns the penalty off. */
  maxResponseLength: number | null;
  /** L_cache: the soft zone before L_max where the penalty ramps from 0 to −penalty_factor. */
  overlongBufferLen: number;
  overlongPenaltyFactor: number;
}

export interface DynamicSamplingOptions extends OverlongPenaltyOptions {
  /** Groups with reward std ≤ this carry no signal and are dropped. */
  stdThreshold: number;
  maxReadRounds: number;
}

export const DYNAMIC_SAMPLING_DEFAULTS: Readonly<DynamicSamplingOptions> = {
  stdThreshold: 0,
  maxReadRounds: 8,
  maxResponseLength: null,
  overlongBufferLen: 4096,
  overlongPenaltyFactor: 1.0,
};

/**
 * DAPO's soft overlong punishment added to each reward, with L = response length:
 *   0                                   L ≤ L_max − L_cache
 *   ((L_max − L_cache) − L) / L_cache   L_max − L_cache < L ≤ L_max      (× penalty_factor)
 *   −1                                  L > L_max                          (× penalty_factor)
 */
export function overlongPenalty(length: number, options: OverlongPenaltyOptions): number {
  const { maxResponseLength: max, overlongBufferLen: buffer, overlongPenaltyFactor: factor } = options;
  if (max === null) return 0;
  const expected = max - buffer;
  if (length <= expected) return 0;
  if (length > max) return -factor;
  return ((expected - length) / buffer) * factor;
}

function rewardOf(module: string, e: Experience): number {
  if (typeof e.reward !== 'number') throw new Error(`sample_strategy '${module}': experience '${e.eid}' has no reward`);
  return e.reward;
}

function groupsByTask(module: string, experiences: readonly Experience[]): Experience[][] {
  const groups = new Map<string, Experience[]>();
  for (const e of experiences) {
    const task = e.info.taskId;
    if (task === undefined) throw new Error(`sample_strategy '${module}': experience '${e.eid}' has no info.taskId to group by`);
    const group = groups.get(task) ?? [];
    groups.set(task, group);
    group.push(e);
  }
  return [...groups.values()];
}

function standardDeviation(values: readonly number[]): number {
  if (values.length < 2) return 0;
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return Math.sqrt(values.reduce((a, b) => a + (b - mean) ** 2, 0) / (values.length - 1));
}

export function sampleDynamic(input: SampleInput, options: Partial<DynamicSamplingOptions> = {}): SampleResult {
  const o = { ...DYNAMIC_SAMPLING_DEFAULTS, ...options };
  checkBatchSize('dynamic_sampling', input.batchSize);
  if (o.maxResponseLength !== null && !(o.overlongBufferLen > 0 && o.overlongBufferLen <= o.maxResponseLength)) {
    throw new Error(`sample_strategy 'dynamic_sampling': overlong_buffer_len must be in (0, max_response_length]`);
  }
  const kept: Experience[] = [];
  let read = 0;
  let droppedGroups = 0;
  let droppedExperiences = 0;
  let penalised = 0;
  let rounds = 0;
  for (; rounds <= o.maxReadRounds && kept.length < input.batchSize; rounds++) {
    const chunk = input.read(input.batchSize);
    if (chunk.length === 0) break;
    read += chunk.length;
    const shaped = chunk.map((e) => {
      const penalty = overlongPenalty(responseLength(e), o);
      if (penalty === 0) return e;
      penalised++;
      return { ...e, reward: rewardOf('dynamic_sampling', e) + penalty, info: { ...e.info, overlongPenalty: penalty } };
    });
    for (const group of groupsByTask('dynamic_sampling', shaped)) {
      const informative = standardDeviation(group.map((e) => rewardOf('dynamic_sampling', e))) > o.stdThreshold;
      if (!informative || kept.length + group.length > input.batchSize) {
        droppedGroups++;
        droppedExperiences += group.length;
      } else kept.push(...group);
    }
  }
  return {
    experiences: kept,
    metrics: {
      'sample/count': kept.length,
      'sample/read': read,
      'sample/read_rounds': rounds,
      'sample/dropped_groups': droppedGroups,
      'sample/dropped_experiences': droppedExperiences,
      'sample/overlong_penalised': penalised,
    },
  };
}

export const dynamicSamplingStrategy: SampleStrategyModule<DynamicSamplingOptions> = {
  name: 'dynamic_sampling',
  description: 'overlong reward shaping, then only groups with reward variance, refilled by reading on (DAPO)',
  defaults: DYNAMIC_SAMPLING_DEFAULTS,
  run: sampleDynamic,
};

// --- reward_filter (RAFT) ----------------------------------------------------------------------------------------

export interface RewardFilterOptions {
  /** Drop responses whose reward is below this; null keeps any reward. */
  minReward: number | null;
  /** Keep only the first best-rewarded response of each group (info.taskId). */
  bestOfGroup: boolean;
}

export const REWARD_FILTER_DEFAULTS: Readonly<RewardFilterOptions> = { minReward: null, bestOfGroup: true };

export function sampleRewardFiltered(input: SampleInput, options: Partial<RewardFilterOptions> = {}): SampleResult {
  const { minReward, bestOfGroup } = { ...REWARD_FILTER_DEFAULTS, ...options };
  checkBatchSize('reward_filter', input.batchSize);
  const batch = input.read(input.batchSize);
  let candidates = batch;
  if (bestOfGroup) {
    candidates = groupsByTask('reward_filter', batch).map((group) =>
      group.reduce((best, e) => (rewardOf('reward_filter', e) > rewardOf('reward_filter', best) ? e : best)),
    );
  }
  const experiences = candidates.filter((e) => minReward === null || rewardOf('reward_filter', e) >= minReward);
  return {
    experiences,
    metrics: {
      'sample/count': experiences.length,
      'sample/read': batch.length,
      'sample/filtered': batch.length - experiences.length,
    },
  };
}

export const rewardFilterSampleStrategy: SampleStrategyModule<RewardFilterOptions> = {
  name: 'reward_filter',
  description: 'best response of each group above min_reward, for SFT on rollouts (RAFT, arXiv 2304.06767)',
  defaults: REWARD_FILTER_DEFAULTS,
  run: sampleRewardFiltered,
};

export const SAMPLE_STRATEGY = new Registry<SampleInput, SampleResult>('sample_strategy')
  .register(defaultSampleStrategy)
  .register(warmupSampleStrategy)
  .register(stalenessControlSampleStrategy)
  .register(mixSampleStrategy)
  .register(dynamicSamplingStrategy)
  .register(rewardFilterSampleStrategy);
