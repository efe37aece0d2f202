// The run configuration's schema: Trinity-RFT's key names (trinity/common/config.py) and defaults, written beside each
// key as `// default` with Trinity's value where ours differs or Trinity has none. Keys marked "derived" are filled in
// after validation (./validate.ts) from other keys, as Trinity's config validators do; a derived key may still be set.
//
// Every key is read by the run, or refused when set to a value this framework does not implement (./refusals.ts:
// the message says what to use instead); test/rft/config/coverage.test.ts walks this schema to keep it so.
//
// Conventions: every mapping is strict (an unknown key is an error with the closest known key); a key set to null or
// left empty takes its default; numbers and booleans written as strings ("8", "true", e.g. from ${ENV}) are accepted
// as OmegaConf does, and numbers where a string is expected become strings (`name: 7`).
import { z } from 'zod';

const NUMBER_TEXT = /^\s*[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?\s*$/i;
const coerceNumber = (v: unknown): unknown => (typeof v === 'string' && NUMBER_TEXT.test(v) ? Number(v) : v);
const coerceBoolean = (v: unknown): unknown => (v === 'true' ? true : v === 'false' ? false : v);
const coerceString = (v: unknown): unknown => (typeof v === 'number' || typeof v === 'boolean' ? String(v) : v);

/** A number schema that also accepts numeric text. */
const num = <T extends z.ZodType>(schema: T) => z.preprocess(coerceNumber, schema);
const bool = () => z.preprocess(coerceBoolean, z.boolean());
const str = () => z.preprocess(coerceString, z.string());
const nonEmpty = () => z.preprocess(coerceString, z.string().min(1));
const args = () => z.record(z.string(), z.unknown());

const posInt = () => num(z.int().min(1));
const nonNegInt = () => num(z.int().min(0));

export const MODES = ['both', 'explore', 'train', 'bench', 'serve'] as const;
export const STORAGE_TYPES = ['queue', 'sql', 'file'] as const;
export const SELECTOR_TYPES = ['sequential', 'shuffle', 'random', 'offline_easy2hard', 'difficulty_based'] as const;
export const SYNC_METHODS = ['memory', 'checkpoint'] as const;
export const SYNC_STYLES = ['fixed', 'trainer_driven', 'explorer_driven'] as const;
export const MONITOR_TYPES = ['tensorboard', 'wandb', 'mlflow', 'jsonl'] as const;
export const ENGINE_TYPES = ['embedded', 'openai'] as const;
export const DTYPES = ['float32', 'bfloat16'] as const;
export const LR_SCHEDULER_TYPES = ['constant', 'constant_with_warmup', 'linear', 'cosine'] as const;
export const PROMPT_TYPES = ['messages', 'plaintext'] as const;

export type Mode = (typeof MODES)[number];
export type StorageType = (typeof STORAGE_TYPES)[number];
export type SyncMethod = (typeof SYNC_METHODS)[number];
export type SyncStyle = (typeof SYNC_STYLES)[number];
export type MonitorType = (typeof MONITOR_TYPES)[number];

// --- model ------------------------------------------------------------------------------------------------------

/** A LoRA adapter on the policy (Trinity: model.lora_configs[0]; PEFT's names in adapter_config.json). */
export const LoraSchema = z.strictObject({
  // rank, alpha, target_modules null: Trinity's defaults (lora_rank 32, lora_alpha 32, all-linear) for a new
  // adapter; with `path`, the adapter's own (a value set here must match its adapter_config.json)
  rank: posInt().nullable().default(null),
  alpha: num(z.number().positive()).nullable().default(null),
  dropout: num(z.number().min(0).lt(1)).default(0), // PEFT lora_dropout 0
  target_modules: z
    .union([z.string().min(1), z.array(z.string().min(1)).min(1)])
    .nullable()
    .default(null),
  path: str().nullable().default(null), // an existing PEFT adapter folder; null: a new adapter
});

export const ModelSchema = z.strictObject({
  model_path: nonEmpty(), // required: a Hugging Face model folder
  critic_model_path: str().nullable().default(null), // null: the critic starts from the policy's weights
  max_prompt_tokens: posInt().nullable().default(null), // derived: max_model_len - max_response_tokens, or half of it
  max_response_tokens: posInt().nullable().default(null), // derived: max_model_len - max_prompt_tokens
  max_model_len: posInt().nullable().default(null), // derived: max_prompt_tokens + max_response_tokens
  dtype: z.enum(DTYPES).default('bfloat16'), // Trinity rollout_model.dtype bfloat16
  lora: LoraSchema.nullable().default(null), // null: full fine-tuning
});

// --- algorithm (names and module arguments are checked by src/rft/algorithm's resolveAlgorithm) -------------------

export const OptimizerSchema = z.strictObject({
  lr: num(z.number().positive()).default(1e-6),
  lr_warmup_steps: num(z.int().min(-1)).default(-1), // -1: use lr_warmup_steps_ratio
  lr_warmup_steps_ratio: num(z.number().min(0).max(1)).default(0),
  min_lr_ratio: num(z.number().min(0).max(1)).default(0.01),
  lr_scheduler_type: z.enum(LR_SCHEDULER_TYPES).default('constant'),
  optimizer_type: nonEmpty().default('adam'), // 'adam' and 'adamw' are AdamW (as Trinity's FSDP trainer); others refused
  betas: z.tuple([num(z.number().min(0).lt(1)), num(z.number().min(0).lt(1))]).default((): [number, number] => [0.9, 0.999]),
  weight_decay: num(z.number().min(0)).default(0.01),
  clip_grad: num(z.number().positive()).nullable().default(null), // derived: trainer.grad_clip, else 1.0
});

const moduleName = () => nonEmpty().optional();
const moduleArgs = () => args().optional();

/** Trinity's AlgorithmConfig keys; unset module keys are left to the preset of algorithm_type. */
export const AlgorithmSchema = z.strictObject({
  algorithm_type: nonEmpty().default('ppo'),
  repeat_times: posInt().optional(), // derived: 1 (Trinity's AlgorithmConfig), or the algorithm resolver's value
  optimizer: OptimizerSchema.prefault({}),
  sample_strategy: moduleName(),
  sample_strategy_args: moduleArgs(),
  advantage_fn: moduleName(),
  advantage_fn_args: moduleArgs(),
  policy_loss_fn: moduleName(),
  policy_loss_fn_args: moduleArgs(),
  kl_penalty_fn: moduleName(),
  kl_penalty_fn_args: moduleArgs(),
  kl_loss_fn: moduleName(),
  kl_loss_fn_args: moduleArgs(),
  entropy_loss_fn: moduleName(),
  entropy_loss_fn_args: moduleArgs(),
  loss_agg_mode: moduleName(),
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
  seed: num(z.int()).default(42),
  feature_keys: z.array(z.string()).default(() => []),
  kwargs: args().default(() => ({})),
});

/** Sampling of the rollouts of a taskset (Trinity's GenerationConfig; `n` comes from repeat_times). */
export const RolloutArgsSchema = z.strictObject({
  temperature: num(z.number().min(0)).default(1.0),
  top_p: num(z.number().gt(0).max(1)).default(1.0),
  top_k: num(z.int().min(-1)).default(-1), // -1: off
  min_p: num(z.number().min(0).max(1)).default(0),
  max_tokens: posInt().nullable().default(null), // derived: model.max_response_tokens
  seed: num(z.int()).nullable().default(null),
  stop: z
    .union([z.string(), z.array(z.string())])
    .nullable()
    .default(null),
  stop_token_ids: z
    .array(num(z.int().min(0)))
    .nullable()
    .default(null),
});

export const TasksetSchema = z.strictObject({
  name: str().nullable().default(null), // derived: taskset_<i> / eval_taskset_<i>
  storage_type: z.enum(['file', 'sql']).default('file'), // sql: an SQLite table named after the taskset (raw_task JSON)
  path: nonEmpty(), // required: a .jsonl/.json file, a folder of split files (src/rft/buffer/split.ts), or an SQLite file
  split: nonEmpty().default('train'), // which split of a folder to read
  format: FormatSchema.prefault({}),
  data_selector: TaskSelectorSchema.optional(), // Trinity >= 0.5.2's name
  task_selector: TaskSelectorSchema.optional(), // derived: data_selector, else sequential (the name before 0.5.2)
  rollout_args: RolloutArgsSchema.prefault({}),
  workflow_args: args().default(() => ({})),
  reward_fn_args: args().default(() => ({})),
  default_workflow_type: str().nullable().default(null), // derived: explorer_input.default_workflow_type
  default_reward_fn_type: str().nullable().default(null), // derived: explorer_input.default_reward_fn_type
  repeat_times: posInt().nullable().default(null), // derived: algorithm.repeat_times (training), 1 (eval)
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
  reuse_cooldown_time: num(z.number().min(0)).nullable().default(null), // seconds; null: reuse at once
  priority_fn_args: args().default(() => ({ decay: 2.0 })),
});

/** Where the trainer reads experiences (Trinity's ExperienceBufferConfig). */
export const ExperienceBufferSchema = z.strictObject({
  name: nonEmpty().default('experience_buffer'),
  storage_type: z.enum(STORAGE_TYPES).default('queue'), // queue: in-process; sql: shared SQLite file; file: a dataset
  path: str().nullable().default(null), // derived for sql: <job dir>/buffer/<name>.db
  capacity: posInt().default(10000),
  max_read_timeout: num(z.number().positive()).default(1800), // seconds
  replay_buffer: ReplayBufferSchema.prefault({}),
  split: nonEmpty().default('train'),
  format: FormatSchema.prefault({}),
});

/** A dataset the trainer reads (SFT warm-up data, auxiliary buffers for MIX/CHORD). */
export const DatasetSchema = z.strictObject({
  name: str().nullable().default(null), // derived: the key it is listed under
  storage_type: z.enum(['file', 'sql']).default('file'),
  path: nonEmpty(), // required
  split: nonEmpty().default('train'),
  format: FormatSchema.prefault({}),
});

export const TrainerInputSchema = z.strictObject({
  experience_buffer: ExperienceBufferSchema.optional(), // derived: a queue named experience_buffer
  sft_warmup_dataset: DatasetSchema.nullable().default(null),
  sft_warmup_steps: nonNegInt().default(0),
  auxiliary_buffers: z.record(z.string(), DatasetSchema).default(() => ({})),
});

export const BufferSchema = z.strictObject({
  batch_size: posInt().default(1), // tasks per explore step
  train_batch_size: posInt().nullable().default(null), // experiences per train step; derived: batch_size * repeat_times
  total_epochs: posInt().default(1),
  total_steps: posInt().nullable().default(null), // overrides total_epochs
  explorer_input: ExplorerInputSchema.prefault({}),
  trainer_input: TrainerInputSchema.prefault({}),
});

// --- explorer, trainer, synchronizer, monitor ----------------------------------------------------------------------

export const RolloutModelSchema = z.strictObject({
  engine_type: z.enum(ENGINE_TYPES).default('embedded'), // Trinity vllm; openai: an external OpenAI-compatible server
  engine_num: posInt().default(1),
  slots: posInt().default(8), // sequences decoded at once per engine (KV-cache slots)
  base_url: str().nullable().default(null), // openai only
  api_key: str().nullable().default(null), // openai only
  model_name: str().nullable().default(null), // openai only; null: model.model_path
});

export const ExplorerSchema = z.strictObject({
  runner_per_model: posInt().default(8), // concurrent workflow runs per engine
  max_timeout: num(z.number().positive()).default(1800), // seconds per attempt
  max_retry_times: nonNegInt().default(2),
  eval_interval: posInt().default(100), // explore steps
  eval_on_startup: bool().default(true),
  bench_on_latest_checkpoint: bool().default(false),
  rollout_model: RolloutModelSchema.prefault({}),
  // mode serve (Trinity's proxy): the OpenAI-compatible endpoint external agents call
  proxy_port: z.number().int().min(0).max(65535).default(8010),
  listen_address: str().default('127.0.0.1'), // Trinity 0.0.0.0; loopback unless asked
  api_key: str().nullable().default(null), // null: $TRINITY_API_KEY if set, else no key
  serve_max_tokens: posInt().default(4096), // largest max_tokens a request may ask
  serve_max_prompt_tokens: posInt().nullable().default(null), // null: the model's context
  serve_max_body_bytes: posInt().default(1024 * 1024),
  serve_max_n: posInt().default(16),
});

export const TrainerSchema = z.strictObject({
  save_interval: nonNegInt().default(0), // train steps; 0: only at the end
  max_checkpoints_to_keep: nonNegInt().default(0), // 0: keep all
  grad_clip: num(z.number().positive()).nullable().default(null), // max gradient norm; derived: algorithm.optimizer.clip_grad, else 1.0
  micro_batch_size: posInt().default(1), // Trinity/veRL ppo_micro_batch_size_per_gpu 1
  gradient_checkpointing: bool().default(true), // veRL enable_gradient_checkpointing true
  total_steps: posInt().nullable().default(null), // null: until the buffer runs out
});

export const SynchronizerSchema = z.strictObject({
  sync_method: z.enum(SYNC_METHODS).nullable().default(null), // Trinity nccl; derived: memory in mode both, else checkpoint
  sync_interval: posInt().default(1),
  sync_offset: nonNegInt().default(0), // 1: one-step off-policy
  sync_timeout: num(z.number().positive()).default(3600), // seconds
  sync_style: z.enum(SYNC_STYLES).default('fixed'),
  max_staleness: nonNegInt().nullable().default(null), // most model versions an experience may lag; null: no bound
});

export const MonitorSchema = z.strictObject({
  monitor_type: z
    .preprocess((v) => (typeof v === 'string' ? [v] : v), z.array(z.enum(MONITOR_TYPES)))
    .default((): MonitorType[] => ['tensorboard']), // JSONL metrics are always written
  monitor_args: args().default(() => ({})),
  detailed_stats: bool().default(false),
});

// --- the whole file -----------------------------------------------------------------------------------------------

/** The sections a stage may override (Trinity's StageConfig, plus synchronizer). */
export const STAGE_SECTIONS = ['mode', 'algorithm', 'buffer', 'explorer', 'trainer', 'synchronizer'] as const;

/** A stage as written: its name and overrides of the top level (checked in full once merged, see ./validate.ts). */
export const StageSchema = z.strictObject({
  stage_name: nonEmpty(),
  mode: z.enum(MODES).optional(),
  algorithm: args().optional(),
  buffer: args().optional(),
  explorer: args().optional(),
  trainer: args().optional(),
  synchronizer: args().optional(),
});

/** One run: everything except stages. */
export const RunSchema = z.strictObject({
  mode: z.enum(MODES).default('both'),
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
});

/** The whole file: a run, optionally split into stages. */
export const ConfigSchema = RunSchema.extend({ stages: z.array(StageSchema).default(() => []) });

export type RunInput = z.output<typeof RunSchema>;
export type StageInput = z.output<typeof StageSchema>;

// --- resolved types (after ./validate.ts fills in the derived keys) --------------------------------------------------

export type LoraConfig = z.output<typeof LoraSchema>;
export type OptimizerConfig = Omit<z.output<typeof OptimizerSchema>, 'clip_grad'> & { clip_grad: number };
export type FormatConfig = z.output<typeof FormatSchema>;
export type TaskSelectorConfig = z.output<typeof TaskSelectorSchema>;
export type ReplayBufferConfig = z.output<typeof ReplayBufferSchema>;
export type RolloutModelConfig = z.output<typeof RolloutModelSchema>;
export type ExplorerConfig = z.output<typeof ExplorerSchema>;
export type TrainerConfig = Omit<z.output<typeof TrainerSchema>, 'grad_clip'> & { grad_clip: number };
export type MonitorConfig = z.output<typeof MonitorSchema>;

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

export type AlgorithmConfig = Omit<z.output<typeof AlgorithmSchema>, 'repeat_times' | 'optimizer'> & {
  repeat_times: number;
  optimizer: OptimizerConfig;
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

export type SynchronizerConfig = Omit<z.output<typeof SynchronizerSchema>, 'sync_method'> & { sync_method: SyncMethod };

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
}

/** A stage of a multi-stage run: the top level with the stage's overrides, resolved; name = `<name>/<stage_name>`. */
export interface StageConfig extends RunConfig {
  stage_name: string;
}

/** A loaded config: the top level resolved, and its stages (empty for a single-stage run) each resolved in full. */
export interface Config extends RunConfig {
  stages: StageConfig[];
}

/** Keys that hold file paths, resolved against the config file's folder (`*`: any list index or mapping key). */
export const PATH_KEYS: readonly string[] = [
  'checkpoint_root_dir',
  'checkpoint_job_dir',
  'model.model_path',
  'model.critic_model_path',
  'model.lora.path',
  'buffer.explorer_input.taskset.path',
  'buffer.explorer_input.tasksets.*.path',
  'buffer.explorer_input.eval_tasksets.*.path',
  'buffer.trainer_input.experience_buffer.path',
  'buffer.trainer_input.sft_warmup_dataset.path',
  'buffer.trainer_input.auxiliary_buffers.*.path',
];
