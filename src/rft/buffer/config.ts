// The `buffer` section of the run config (Trinity's BufferConfig): batch sizes and step counts, and where the trainer
// reads — the experience buffer (a queue, an SQL table, a dataset file) with its replay, the SFT warm-up dataset and
// auxiliary datasets — the schemas with their defaults, the section resolved with its rules (Trinity's
// BufferConfigValidator), and the settings the buffer's readers take. The tasksets (explorer_input) are
// ./taskset-config.ts. Written in the config language of src/rft/config/.
import { join } from 'node:path';
import { z } from 'zod';
import { closestName } from '../../util/did-you-mean.js';
import type { ReportProblem } from '../config/errors.js';
import { omitNulls } from '../config/mapping.js';
import { describeValue } from '../config/source.js';
import {
  args,
  bool,
  intIn,
  MAX_EXPERIENCES_PER_STEP,
  MAX_STEPS,
  MAX_TASKS_PER_STEP,
  MAX_TIMEOUT_SECONDS,
  nonEmpty,
  numIn,
  str,
} from '../config/value-schemas.js';
import type { DatasetFormat } from './dataset.js';
import { SplitError, splitFiles } from './split.js';
import { tableNameProblem } from './sql-names.js';
import {
  type ExplorerInputConfig,
  ExplorerInputSchema,
  type FormatConfig,
  FormatSchema,
  resolveExplorerInput,
} from './taskset-config.js';

export const STORAGE_TYPES = ['queue', 'sql', 'file'] as const;
export type StorageType = (typeof STORAGE_TYPES)[number];

export const ReplayBufferSchema = z.strictObject({
  enable: bool().default(false),
  priority_fn: nonEmpty().default('linear_decay'),
  reuse_cooldown_time: numIn(0, MAX_TIMEOUT_SECONDS).nullable().default(null), // [0, 2147483] seconds; null: read once (Trinity: not re-added)
  priority_fn_args: args().default(() => ({ decay: 2.0 })),
});

/** Where the trainer reads experiences (Trinity's ExperienceBufferConfig). */
export const ExperienceBufferSchema = z.strictObject({
  name: nonEmpty().default('experience_buffer'),
  storage_type: z.enum(STORAGE_TYPES).default('queue'), // queue: in-process; sql: shared SQLite file or PostgreSQL (postgresql:// path); file: a dataset
  path: str().nullable().default(null), // derived for sql: <job dir>/buffer/<name>.db; postgresql://user:pass@host:port/db: PostgreSQL
  capacity: intIn(1, 16_777_216).default(10000), // [1, 2^24] experiences
  max_read_timeout: numIn(0, MAX_TIMEOUT_SECONDS, true).default(1800), // (0, 2147483] seconds
  replay_buffer: ReplayBufferSchema.prefault({}),
  split: nonEmpty().default('train'),
  subset_name: nonEmpty().nullable().default(null), // the subset (HF config name) of a dataset folder; null: its default
  format: FormatSchema.prefault({}),
});

/** A dataset the trainer reads (SFT warm-up data, auxiliary buffers for MIX/CHORD). */
export const DatasetSchema = z.strictObject({
  // Trinity's storage name (its Ray actor / table); an auxiliary buffer is looked up by the key it is listed under
  // (mix: sample_strategy_args.sft_dataset_name), which may differ. Derived: that key
  name: str().nullable().default(null),
  storage_type: z.enum(['file', 'sql']).default('file'),
  path: nonEmpty(), // required
  split: nonEmpty().default('train'),
  subset_name: nonEmpty().nullable().default(null), // the subset (HF config name) of a dataset folder; null: its default
  format: FormatSchema.prefault({}),
});

/** An auxiliary buffer (e.g. mix's expert data): a dataset, read epoch after epoch. */
export const AuxiliaryBufferSchema = DatasetSchema.extend({
  // passes over the rows the trainer reads at most (Trinity's reader stops there, and so does training); null:
  // cycled for as long as the run trains
  total_epochs: intIn(1, 1_000_000).nullable().default(null), // [1, 1e6]
});

export const TrainerInputSchema = z.strictObject({
  experience_buffer: ExperienceBufferSchema.optional(), // derived: a queue named experience_buffer
  sft_warmup_dataset: DatasetSchema.nullable().default(null),
  sft_warmup_steps: intIn(0, MAX_STEPS).default(0), // [0, 1e9]
  auxiliary_buffers: z.record(z.string(), AuxiliaryBufferSchema).default(() => ({})),
});

export const BufferSchema = z.strictObject({
  batch_size: intIn(1, MAX_TASKS_PER_STEP).default(1), // [1, 65536] tasks per explore step
  // [1, 65536] experiences per train step; null or 0 (Trinity's default): derived as batch_size * repeat_times
  train_batch_size: intIn(0, MAX_EXPERIENCES_PER_STEP).nullable().default(null),
  total_epochs: intIn(1, 1_000_000).default(1), // [1, 1e6]
  total_steps: intIn(1, MAX_STEPS).nullable().default(null), // [1, 1e9]; overrides total_epochs
  explorer_input: ExplorerInputSchema.prefault({}),
  trainer_input: TrainerInputSchema.prefault({}),
});

export type ReplayBufferConfig = z.output<typeof ReplayBufferSchema>;
export type ExperienceBufferConfig = z.output<typeof ExperienceBufferSchema>;
export type DatasetConfig = Omit<z.output<typeof DatasetSchema>, 'name'> & { name: string };
export type AuxiliaryBufferConfig = Omit<z.output<typeof AuxiliaryBufferSchema>, 'name'> & { name: string };

/** What the trainer reads of an auxiliary buffer (src/rft/buffer/source.ts AuxiliaryReader). */
export interface AuxiliaryDatasetSettings {
  /** Its name in messages (Trinity's storage name; the key it is listed under when none). */
  name: string;
  path: string;
  format: DatasetFormat;
  /** Passes over the rows read at most; null: cycled for as long as the run trains. */
  totalEpochs: number | null;
}

export interface TrainerInputConfig {
  experience_buffer: ExperienceBufferConfig;
  sft_warmup_dataset: DatasetConfig | null;
  sft_warmup_steps: number;
  auxiliary_buffers: Record<string, AuxiliaryBufferConfig>;
}

export type BufferConfig = Omit<z.output<typeof BufferSchema>, 'train_batch_size' | 'explorer_input' | 'trainer_input'> & {
  train_batch_size: number;
  explorer_input: ExplorerInputConfig;
  trainer_input: TrainerInputConfig;
};

/** priority_fn_args by priority function (Trinity's linear_decay and decay_limit_randomization). */
const PRIORITY_FN_ARGS: Readonly<Record<string, readonly string[]>> = {
  linear_decay: ['decay'],
  decay_limit_randomization: ['decay', 'use_count_limit', 'sigma'],
};

/** What the buffer section's resolution reads from other sections. */
export interface BufferContext {
  mode: string;
  /** algorithm.algorithm_type, and whether it trains offline (sft, dpo: no explore steps). */
  algorithmType: string;
  offline: boolean;
  /** algorithm.repeat_times. */
  repeatTimes: number;
  /** model.max_response_tokens: the tasksets' default max_tokens. */
  maxResponseTokens: number;
  /** The stage's job dir: an sql buffer's file is <jobDir>/buffer/<name>.db unless set. */
  jobDir: string;
  /** True for a stage of a multi-stage file (an SFT warm-up cannot be combined with stages). */
  inStage: boolean;
  /** False for the top level of a multi-stage file: each stage derives (or needs) its own train_batch_size. */
  runnable: boolean;
}

/** The section resolved: train_batch_size, the tasksets, the experience buffer and datasets, with their rules. */
export function resolveBuffer(
  buffer: z.output<typeof BufferSchema>,
  { mode, algorithmType, offline, repeatTimes, maxResponseTokens, jobDir, inStage, runnable }: BufferContext,
  problem: ReportProblem,
): BufferConfig {
  // an SFT warm-up's stage trains with the top level's train_batch_size, so the top level needs it then
  const { sft_warmup_dataset: warmupDataset, sft_warmup_steps: warmupSteps } = buffer.trainer_input;
  const trainsHere = runnable || (warmupDataset !== null && warmupSteps > 0);
  const sizeContext = { mode, algorithmType, offline, repeatTimes, required: trainsHere };
  const trainBatchSize = deriveTrainBatchSize(buffer, sizeContext, problem);
  // an explore step holds all its experiences at once (each key alone is bounded by the schema, their product here)
  const explored = buffer.batch_size * repeatTimes;
  if ((mode === 'both' || mode === 'explore') && !offline && explored > MAX_EXPERIENCES_PER_STEP) {
    problem(
      'buffer.batch_size',
      `× algorithm.repeat_times (${buffer.batch_size} × ${repeatTimes} = ${explored}) experiences per explore step ` +
        `exceeds ${MAX_EXPERIENCES_PER_STEP}: lower one of them`,
    );
  }

  const explorerInput = resolveExplorerInput(buffer.explorer_input, { repeatTimes, maxResponseTokens }, problem);

  const trainerInput = resolveTrainerInput(buffer.trainer_input, { jobDir, inStage }, problem);

  return {
    batch_size: buffer.batch_size,
    train_batch_size: trainBatchSize,
    total_epochs: buffer.total_epochs,
    total_steps: buffer.total_steps,
    explorer_input: explorerInput,
    trainer_input: trainerInput,
  };
}

/**
 * train_batch_size as Trinity's BufferConfigValidator derives it: unset (null, or 0, Trinity's default) it is
 *   train_batch_size = batch_size × repeat_times   (every experience of an explore step, trained in one step)
 * With no explore steps to count from — mode train (reading an sql buffer or a dataset) or algorithm_type sft/dpo
 * (rows of a dataset) — it must be written (`required`: the level that trains with it). A multi-stage file's top level
 * is not run: each stage derives it from its own keys; an SFT warm-up's stage takes the top level's
 * (src/rft/run/config/validate.ts).
 */
function deriveTrainBatchSize(
  buffer: z.output<typeof BufferSchema>,
  context: { mode: string; algorithmType: string; offline: boolean; repeatTimes: number; required: boolean },
  problem: ReportProblem,
): number {
  const { mode, algorithmType, offline, repeatTimes, required } = context;
  if (buffer.train_batch_size !== null && buffer.train_batch_size > 0) return buffer.train_batch_size;
  if (required && (mode === 'train' || offline)) {
    const why = mode === 'train' ? "mode is 'train'" : `algorithm_type is '${algorithmType}'`;
    problem('buffer.train_batch_size', `is required when ${why} (there are no explore steps to derive it from)`);
  }
  return buffer.batch_size * repeatTimes;
}

/** trainer_input resolved: the experience buffer (a queue unless set; an sql buffer's path derived), the datasets named. */
function resolveTrainerInput(
  trainerInput: z.output<typeof TrainerInputSchema>,
  { jobDir, inStage }: { jobDir: string; inStage: boolean },
  problem: ReportProblem,
): TrainerInputConfig {
  const experienceBuffer = trainerInput.experience_buffer ?? ExperienceBufferSchema.parse({});
  const bufferPath = 'buffer.trainer_input.experience_buffer';
  // an sql buffer's tables are named after it (src/rft/buffer/sql-names.ts)
  if (experienceBuffer.storage_type === 'sql') {
    const nameProblem = tableNameProblem(experienceBuffer.name);
    if (nameProblem !== null) problem(`${bufferPath}.name`, `${nameProblem} (storage_type sql names its tables after it)`);
  }
  if (experienceBuffer.path === null) {
    if (experienceBuffer.storage_type === 'sql') experienceBuffer.path = join(jobDir, 'buffer', `${experienceBuffer.name}.db`);
    if (experienceBuffer.storage_type === 'file')
      problem(`${bufferPath}.path`, 'storage_type file reads a dataset: set its path');
  }
  const sftDataset: DatasetConfig | null =
    trainerInput.sft_warmup_dataset === null
      ? null
      : { ...trainerInput.sft_warmup_dataset, name: trainerInput.sft_warmup_dataset.name ?? 'sft_warmup_dataset' };
  if (trainerInput.sft_warmup_steps > 0 && inStage) {
    problem(
      'buffer.trainer_input.sft_warmup_dataset',
      'cannot be combined with stages: write the SFT warm-up as the first stage (mode: train, algorithm_type: sft, ' +
        'its dataset as buffer.trainer_input.experience_buffer with storage_type file, buffer.total_steps)',
    );
  }
  if (trainerInput.sft_warmup_steps > 0 && sftDataset === null) {
    problem('buffer.trainer_input.sft_warmup_steps', 'is > 0 but buffer.trainer_input.sft_warmup_dataset is not set');
  }
  if (sftDataset !== null && trainerInput.sft_warmup_steps === 0) {
    problem('buffer.trainer_input.sft_warmup_dataset', 'is set but sft_warmup_steps is 0, so it would never be read');
  }
  const auxiliaryBuffers = Object.fromEntries(
    Object.entries(trainerInput.auxiliary_buffers).map(([key, d]) => [key, { ...d, name: d.name ?? key }]),
  );
  // split and subset_name pick files of a dataset folder: a queue or an sql table has neither
  if (experienceBuffer.storage_type !== 'file') {
    if (experienceBuffer.split !== 'train')
      problem(
        `${bufferPath}.split`,
        `applies to a dataset (storage_type file), not to ${experienceBuffer.storage_type}: remove it`,
      );
    if (experienceBuffer.subset_name !== null)
      problem(
        `${bufferPath}.subset_name`,
        `applies to a dataset (storage_type file), not to ${experienceBuffer.storage_type}: remove it`,
      );
  }
  checkReplay(experienceBuffer.replay_buffer, `${bufferPath}.replay_buffer`, problem);
  return {
    experience_buffer: experienceBuffer,
    sft_warmup_dataset: sftDataset,
    sft_warmup_steps: trainerInput.sft_warmup_steps,
    auxiliary_buffers: auxiliaryBuffers,
  };
}

/** Priority replay: the function and its arguments (src/rft/buffer/priority.ts). */
function checkReplay(replay: ReplayBufferConfig, replayPath: string, problem: ReportProblem): void {
  const priorityArgs = PRIORITY_FN_ARGS[replay.priority_fn];
  if (priorityArgs === undefined) {
    const known = Object.keys(PRIORITY_FN_ARGS);
    const best = closestName(replay.priority_fn, known);
    problem(
      `${replayPath}.priority_fn`,
      `unknown priority function '${replay.priority_fn}'; ${best !== null ? `did you mean '${best}'?` : `expected one of: ${known.join(', ')}`}`,
    );
  } else {
    for (const [key, value] of Object.entries(replay.priority_fn_args)) {
      if (!priorityArgs.includes(key)) {
        problem(
          `${replayPath}.priority_fn_args.${key}`,
          `is not an argument of ${replay.priority_fn}; expected one of: ${priorityArgs.join(', ')}`,
        );
      } else if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
        problem(`${replayPath}.priority_fn_args.${key}`, `expected a number >= 0, got ${describeValue(value)}`);
      }
    }
  }
}

/** Experience buffer: in memory (mode both), a shared SQLite file (explore/train), or a dataset file (train: SFT). */
export interface ExperienceBufferSettings {
  storageType: 'queue' | 'sql' | 'file';
  /** experience_buffer.name: the buffer's table (storage_type sql, SQLite or PostgreSQL) and its name in messages. */
  name: string;
  path: string | null;
  capacity: number;
  /** The longest a trainer read waits for a batch (experience_buffer.max_read_timeout). */
  maxReadTimeoutMs: number;
  format?: DatasetFormat;
  /** Priority replay instead of FIFO (experience_buffer.replay_buffer): in memory (queue) or in the sql buffer's tables. */
  replay?: {
    priorityFn: string;
    decay: number;
    /** decay_limit_randomization: uses after which an experience leaves, and the priority noise (priority_fn_args). */
    useCountLimit?: number;
    sigma?: number;
    reuseCooldownMs: number | null;
  } | null;
}

/** How a dataset's rows become SFT samples (the format keys, split and subset of an experience or auxiliary buffer). */
export function datasetFormat(format: FormatConfig, split: string, subset: string | null): DatasetFormat {
  return omitNulls({
    split,
    subset,
    promptKey: format.prompt_key,
    responseKey: format.response_key,
    ...(format.prompt_type === 'messages' && format.messages_key !== 'message' ? { messagesKey: format.messages_key } : {}),
    systemPromptKey: format.system_prompt_key,
    systemPrompt: format.system_prompt,
    toolsKey: format.tools_key,
    enableConcatenatedMultiTurn: format.enable_concatenated_multi_turn,
    imageKey: format.image_key,
  });
}

/** The stage's experience buffer settings (seconds become milliseconds). */
export function experienceBufferSettings(experienceBuffer: ExperienceBufferConfig): ExperienceBufferSettings {
  const replay = experienceBuffer.replay_buffer;
  return {
    storageType: experienceBuffer.storage_type,
    name: experienceBuffer.name,
    replay: replay.enable
      ? {
          priorityFn: replay.priority_fn,
          decay: Number(replay.priority_fn_args.decay ?? 2),
          ...omitNulls({
            useCountLimit: (replay.priority_fn_args.use_count_limit as number | undefined) ?? null,
            sigma: (replay.priority_fn_args.sigma as number | undefined) ?? null,
          }),
          reuseCooldownMs: replay.reuse_cooldown_time === null ? null : replay.reuse_cooldown_time * 1000,
        }
      : null,
    path: experienceBuffer.path,
    capacity: experienceBuffer.capacity,
    maxReadTimeoutMs: experienceBuffer.max_read_timeout * 1000,
    format: {
      ...datasetFormat(experienceBuffer.format, experienceBuffer.split, experienceBuffer.subset_name),
      ...omitNulls({ chosenKey: experienceBuffer.format.chosen_key, rejectedKey: experienceBuffer.format.rejected_key }),
    },
  };
}

/** Auxiliary datasets by the key they are listed under (trainer_input.auxiliary_buffers), e.g. mix's expert data. */
export function auxiliaryDatasetSettings(
  buffers: Readonly<Record<string, AuxiliaryBufferConfig>>,
): Record<string, AuxiliaryDatasetSettings> {
  return Object.fromEntries(
    Object.entries(buffers).map(([key, d]) => [
      key, // what a strategy looks it up by (mix: sft_dataset_name); its name may differ (Trinity's storage name)
      {
        name: d.name,
        path: d.path,
        format: datasetFormat(d.format, d.split, d.subset_name),
        totalEpochs: d.total_epochs,
      },
    ]),
  );
}

/**
 * The files of the datasets a stage's trainer reads, checked before it runs: a file experience buffer (modes train
 * and both), the SFT warm-up data and the auxiliary buffers — each file or split exists (./split.ts).
 */
export function checkDatasetFiles(buffer: BufferConfig, mode: string, report: ReportProblem): void {
  const experienceBuffer = buffer.trainer_input.experience_buffer;
  const bufferPath = 'buffer.trainer_input.experience_buffer';
  const datasets: { path: string; file: string; split: string; subset: string | null }[] = [];
  if ((mode === 'train' || mode === 'both') && experienceBuffer.storage_type === 'file' && experienceBuffer.path !== null) {
    datasets.push({
      path: `${bufferPath}.path`,
      file: experienceBuffer.path,
      split: experienceBuffer.split,
      subset: experienceBuffer.subset_name,
    });
  }
  const warmup = buffer.trainer_input.sft_warmup_dataset;
  if (warmup !== null)
    datasets.push({
      path: 'buffer.trainer_input.sft_warmup_dataset.path',
      file: warmup.path,
      split: warmup.split,
      subset: warmup.subset_name,
    });
  for (const [key, d] of Object.entries(buffer.trainer_input.auxiliary_buffers)) {
    datasets.push({
      path: `buffer.trainer_input.auxiliary_buffers.${key}.path`,
      file: d.path,
      split: d.split,
      subset: d.subset_name,
    });
  }
  for (const d of datasets) {
    try {
      splitFiles(d.file, d.split, d.subset);
    } catch (error) {
      if (!(error instanceof SplitError)) throw error;
      report(d.path, error.message);
    }
  }
}
