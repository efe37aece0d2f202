// The run configuration's schema: Trinity-RFT's key names (trinity/common/config.py) and defaults, written beside each
// key as `// default` with Trinity's value where ours differs or Trinity has none. Keys marked "derived" are filled in
// after validation (./validate.ts) from other keys, as Trinity's config validators do; a derived key may still be set.
//
// Every key is read by the run, or refused when set to a value this framework does not implement (src/rft/config/refusals.ts:
// the message says what to use instead); test/rft/config/coverage.test.ts walks this schema to keep it so.
//
// Conventions: every mapping is strict (an unknown key is an error with the closest known key); a key set to null or
// left empty takes its default; numbers and booleans written as strings ("8", "true", e.g. from ${ENV}) are accepted
// as OmegaConf does, and numbers where a string is expected become strings (`name: 7`).
import { z } from 'zod';
import {
  args,
  bool,
  DTYPES,
  intIn,
  MAX_EXPERIENCES_PER_STEP,
  MAX_REPEAT_TIMES,
  MAX_STEPS,
  MAX_TASKS_PER_STEP,
  MAX_TIMEOUT_SECONDS,
  MAX_TOKENS,
  nonEmpty,
  num,
  numIn,
  str,
} from '../../config/value-schemas.js';
import { type MonitorConfig, MonitorSchema } from '../../monitor/config.js';
import { type SynchronizerConfig, SynchronizerSchema } from '../../sync/config.js';
import { type TrainerConfig, TrainerSchema } from '../../trainer/config.js';
import { type AlgorithmConfig, AlgorithmSchema } from '../../algorithm/config.js';
import { type DataProcessorConfig, DataProcessorSchema } from '../../data/config.js';
import { type ExplorerConfig, ExplorerSchema } from '../../explorer/config.js';

export {
  type AlgorithmConfig,
  AlgorithmSchema,
  LR_SCHEDULER_TYPES,
  type OptimizerConfig,
  OptimizerSchema,
} from '../../algorithm/config.js';
export { AuxiliaryModelSchema } from '../../auxiliary/config.js';
export {
  type ExplorerConfig,
  ExplorerSchema,
  type RolloutModelConfig,
  RolloutModelSchema,
} from '../../explorer/config.js';
export {
  type DataProcessorConfig,
  DataProcessorSchema,
  type ExperiencePipelineConfig,
  ExperiencePipelineSchema,
  OperatorSchema,
  type TaskPipelineConfig,
  TaskPipelineSchema,
} from '../../data/config.js';
export { StopWhenSchema, type TrainerConfig, TrainerSchema } from '../../trainer/config.js';
export { MONITOR_TYPES, type MonitorConfig, MonitorSchema, type MonitorType } from '../../monitor/config.js';
export {
  SYNC_METHODS,
  SYNC_STYLES,
  type SyncMethod,
  type SynchronizerConfig,
  SynchronizerSchema,
  type SyncStyle,
} from '../../sync/config.js';

export const MODES = ['both', 'explore', 'train', 'bench', 'serve'] as const;
/** The modes a config may name: MODES and Trinity's colocate (mode both on one GPU, weights synced in memory). */
export const CONFIG_MODES = [...MODES, 'colocate'] as const;
export const STORAGE_TYPES = ['queue', 'sql', 'file'] as const;
export const SELECTOR_TYPES = ['sequential', 'shuffle', 'random', 'offline_easy2hard', 'difficulty_based'] as const;
export const PROMPT_TYPES = ['messages', 'plaintext'] as const;

export type Mode = (typeof MODES)[number];
export type StorageType = (typeof STORAGE_TYPES)[number];

// --- model ------------------------------------------------------------------------------------------------------

/** A LoRA adapter on the policy (Trinity: model.lora_configs[0]; PEFT's names in adapter_config.json). */
export const LoraSchema = z.strictObject({
  // rank, alpha, target_modules null: Trinity's defaults (lora_rank 32, lora_alpha 32, all-linear) for a new
  // adapter; with `path`, the adapter's own (a value set here must match its adapter_config.json)
  rank: intIn(1, 4096).nullable().default(null), // [1, 4096]
  alpha: numIn(0, 1e6, true).nullable().default(null), // (0, 1e6]
  dropout: num(z.number().min(0).lt(1)).default(0), // [0, 1); PEFT lora_dropout 0
  target_modules: z
    .union([z.string().min(1), z.array(z.string().min(1)).min(1)])
    .nullable()
    .default(null),
  path: str().nullable().default(null), // an existing PEFT adapter folder; null: a new adapter
});

export const ModelSchema = z.strictObject({
  model_path: nonEmpty(), // required: a Hugging Face model folder
  critic_model_path: str().nullable().default(null), // null: the critic starts from the policy's weights
  max_prompt_tokens: intIn(1, MAX_TOKENS).nullable().default(null), // [1, 2^20]; derived: max_model_len - max_response_tokens, or half of it
  max_response_tokens: intIn(1, MAX_TOKENS).nullable().default(null), // [1, 2^20]; derived: max_model_len - max_prompt_tokens
  max_model_len: intIn(1, MAX_TOKENS).nullable().default(null), // [1, 2^20]; derived: max_prompt_tokens + max_response_tokens
  dtype: z.enum(DTYPES).default('bfloat16'), // Trinity rollout_model.dtype bfloat16
  lora: LoraSchema.nullable().default(null), // null: full fine-tuning
});

// --- buffer -----------------------------------------------------------------------------------------------------

/** How the rows of a dataset become tasks or training samples (Trinity's FormatConfig). */
export const FormatSchema = z.strictObject({
  prompt_type: z.enum(PROMPT_TYPES).default('messages'),
  prompt_key: nonEmpty().default('prompt'),
  response_key: nonEmpty().default('response'),
  messages_key: nonEmpty().default('message'),
  tools_key: nonEmpty().default('tools'),
  system_prompt_key: str().nullable().default(null),
  system_prompt: str().nullable().default(null),
  reply_prefix: str().nullable().default(null), // assistant prefill, e.g. "<think>"
  workflow_key: str().nullable().default(null), // Trinity '' (none)
  reward_fn_key: str().nullable().default(null), // Trinity '' (none)
  chosen_key: nonEmpty().default('chosen'),
  rejected_key: nonEmpty().default('rejected'),
  enable_concatenated_multi_turn: bool().default(false), // SFT messages rows: train every assistant turn
});

/**
 * Trinity's data_selector (task_selector before v0.5.2, still accepted). kwargs: the selector's own arguments,
 * offline_easy2hard {descending}, difficulty_based {target_reward, tau, do_sample, prior_strength}
 * (src/rft/buffer/selector.ts); feature_keys: the numeric columns offline_easy2hard sorts by.
 */
export const TaskSelectorSchema = z.strictObject({
  selector_type: z.enum(SELECTOR_TYPES).default('sequential'),
  seed: num(z.int()).default(42), // any safe integer (|seed| <= 2^53 − 1)
  feature_keys: z.array(z.string()).default(() => []),
  kwargs: args().default(() => ({})),
});

/** Sampling of the rollouts of a taskset (Trinity's GenerationConfig; `n` comes from repeat_times). */
export const RolloutArgsSchema = z.strictObject({
  temperature: numIn(0, 100).default(1.0), // [0, 100]
  top_p: numIn(0, 1, true).default(1.0), // (0, 1]
  top_k: intIn(-1, MAX_TOKENS).default(-1), // [-1, 2^20]; -1: off
  min_p: numIn(0, 1).default(0), // [0, 1]
  max_tokens: intIn(1, MAX_TOKENS).nullable().default(null), // [1, 2^20]; derived: model.max_response_tokens
  seed: intIn(0, Number.MAX_SAFE_INTEGER).nullable().default(null), // [0, 2^53 − 1]
  stop: z
    .union([z.string(), z.array(z.string())])
    .nullable()
    .default(null),
  stop_token_ids: z
    .array(intIn(0, MAX_TOKENS - 1)) // token ids in [0, 2^20); below the model's vocab_size (checked before a run)
    .nullable()
    .default(null),
});

export const TasksetSchema = z.strictObject({
  name: str().nullable().default(null), // derived: taskset_<i> / eval_taskset_<i>
  storage_type: z.enum(['file', 'sql']).default('file'), // sql: an SQLite table named after the taskset (raw_task JSON)
  path: nonEmpty(), // required: a .jsonl/.json/.parquet file, a dataset folder or cached hub id (src/rft/buffer/split.ts), or an SQLite file
  split: nonEmpty().default('train'), // which split of a folder to read
  subset_name: nonEmpty().nullable().default(null), // the subset (HF config name) of a dataset folder; null: its default
  format: FormatSchema.prefault({}),
  data_selector: TaskSelectorSchema.optional(), // Trinity >= 0.5.2's name
  task_selector: TaskSelectorSchema.optional(), // derived: data_selector, else sequential (the name before 0.5.2)
  rollout_args: RolloutArgsSchema.prefault({}),
  workflow_args: args().default(() => ({})),
  reward_fn_args: args().default(() => ({})),
  default_workflow_type: str().nullable().default(null), // derived: explorer_input.default_workflow_type
  default_reward_fn_type: str().nullable().default(null), // derived: explorer_input.default_reward_fn_type
  repeat_times: intIn(1, MAX_REPEAT_TIMES).nullable().default(null), // [1, 1024]; derived: algorithm.repeat_times (training), 1 (eval)
});

export const ExplorerInputSchema = z.strictObject({
  taskset: TasksetSchema.optional(), // one taskset, or:
  tasksets: z.array(TasksetSchema).default(() => []), // several, mixed in proportion to their sizes
  eval_tasksets: z.array(TasksetSchema).default(() => []),
  default_workflow_type: str().nullable().default(null),
  default_reward_fn_type: str().nullable().default(null),
});

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
  name: str().nullable().default(null), // derived: the key it is listed under
  storage_type: z.enum(['file', 'sql']).default('file'),
  path: nonEmpty(), // required
  split: nonEmpty().default('train'),
  subset_name: nonEmpty().nullable().default(null), // the subset (HF config name) of a dataset folder; null: its default
  format: FormatSchema.prefault({}),
});

export const TrainerInputSchema = z.strictObject({
  experience_buffer: ExperienceBufferSchema.optional(), // derived: a queue named experience_buffer
  sft_warmup_dataset: DatasetSchema.nullable().default(null),
  sft_warmup_steps: intIn(0, MAX_STEPS).default(0), // [0, 1e9]
  auxiliary_buffers: z.record(z.string(), DatasetSchema).default(() => ({})),
});

export const BufferSchema = z.strictObject({
  batch_size: intIn(1, MAX_TASKS_PER_STEP).default(1), // [1, 65536] tasks per explore step
  train_batch_size: intIn(1, MAX_EXPERIENCES_PER_STEP).nullable().default(null), // [1, 65536] experiences per train step; derived: batch_size * repeat_times
  total_epochs: intIn(1, 1_000_000).default(1), // [1, 1e6]
  total_steps: intIn(1, MAX_STEPS).nullable().default(null), // [1, 1e9]; overrides total_epochs
  explorer_input: ExplorerInputSchema.prefault({}),
  trainer_input: TrainerInputSchema.prefault({}),
});

// --- the whole file -----------------------------------------------------------------------------------------------

/** The sections a stage may override (Trinity's StageConfig, plus synchronizer). */
export const STAGE_SECTIONS = ['mode', 'algorithm', 'buffer', 'explorer', 'trainer', 'synchronizer'] as const;

/** A stage as written: its name and overrides of the top level (checked in full once merged, see ./validate.ts). */
export const StageSchema = z.strictObject({
  stage_name: nonEmpty(),
  mode: z.enum(CONFIG_MODES).optional(),
  algorithm: args().optional(),
  buffer: args().optional(),
  explorer: args().optional(),
  trainer: args().optional(),
  synchronizer: args().optional(),
});

/** One run: everything except stages. */
export const RunSchema = z.strictObject({
  mode: z.enum(CONFIG_MODES).default('both'),
  project: nonEmpty().default('Trinity-RFT'),
  name: nonEmpty().default('rft'),
  checkpoint_root_dir: str().nullable().default(null), // derived: ./checkpoints of the working directory (Trinity: '')
  checkpoint_job_dir: str().nullable().default(null), // derived: checkpoint_root_dir/project/name
  continue_from_checkpoint: bool().default(true),
  model: ModelSchema,
  algorithm: AlgorithmSchema.prefault({}),
  buffer: BufferSchema.prefault({}),
  explorer: ExplorerSchema.prefault({}),
  trainer: TrainerSchema.prefault({}),
  synchronizer: SynchronizerSchema.prefault({}),
  monitor: MonitorSchema.prefault({}),
  data_processor: DataProcessorSchema.prefault({}),
});

/** The whole file: a run, optionally split into stages. */
export const ConfigSchema = RunSchema.extend({ stages: z.array(StageSchema).default(() => []) });

export type RunInput = z.output<typeof RunSchema>;
export type StageInput = z.output<typeof StageSchema>;

// --- resolved types (after ./validate.ts fills in the derived keys) --------------------------------------------------

export type LoraConfig = z.output<typeof LoraSchema>;
export type FormatConfig = z.output<typeof FormatSchema>;
export type TaskSelectorConfig = z.output<typeof TaskSelectorSchema>;
export type ReplayBufferConfig = z.output<typeof ReplayBufferSchema>;
export type ModelConfig = Omit<
  z.output<typeof ModelSchema>,
  'critic_model_path' | 'max_prompt_tokens' | 'max_response_tokens' | 'max_model_len'
> & {
  /** null: the critic starts from the stage's policy weights (Trinity: critic_model_path defaults to model_path). */
  critic_model_path: string | null;
  max_prompt_tokens: number;
  max_response_tokens: number;
  max_model_len: number;
};

export type RolloutArgs = Omit<z.output<typeof RolloutArgsSchema>, 'max_tokens'> & { max_tokens: number };

export type TasksetConfig = Omit<
  z.output<typeof TasksetSchema>,
  'name' | 'repeat_times' | 'rollout_args' | 'data_selector' | 'task_selector'
> & {
  name: string;
  /** data_selector, or task_selector (its name before Trinity 0.5.2). */
  task_selector: TaskSelectorConfig;
  repeat_times: number;
  rollout_args: RolloutArgs;
};

export interface ExplorerInputConfig {
  /** Training tasksets (`taskset` is moved here as the only item); eval tasksets are those in eval_tasksets. */
  tasksets: TasksetConfig[];
  eval_tasksets: TasksetConfig[];
  default_workflow_type: string | null;
  default_reward_fn_type: string | null;
}

export type ExperienceBufferConfig = z.output<typeof ExperienceBufferSchema>;
export type DatasetConfig = Omit<z.output<typeof DatasetSchema>, 'name'> & { name: string };

export interface TrainerInputConfig {
  experience_buffer: ExperienceBufferConfig;
  sft_warmup_dataset: DatasetConfig | null;
  sft_warmup_steps: number;
  auxiliary_buffers: Record<string, DatasetConfig>;
}

export type BufferConfig = Omit<z.output<typeof BufferSchema>, 'train_batch_size' | 'explorer_input' | 'trainer_input'> & {
  train_batch_size: number;
  explorer_input: ExplorerInputConfig;
  trainer_input: TrainerInputConfig;
};

/** One fully resolved run. */
export interface RunConfig {
  mode: Mode;
  project: string;
  name: string;
  checkpoint_root_dir: string;
  checkpoint_job_dir: string;
  continue_from_checkpoint: boolean;
  model: ModelConfig;
  algorithm: AlgorithmConfig;
  buffer: BufferConfig;
  explorer: ExplorerConfig;
  trainer: TrainerConfig;
  synchronizer: SynchronizerConfig;
  monitor: MonitorConfig;
  data_processor: DataProcessorConfig;
}

/** A stage of a multi-stage run: the top level with the stage's overrides, resolved; name = `<name>/<stage_name>`. */
export interface StageConfig extends RunConfig {
  stage_name: string;
}

/** A loaded config: the top level resolved, and its stages (empty for a single-stage run) each resolved in full. */
export interface Config extends RunConfig {
  stages: StageConfig[];
}
