// The whole config file's schema, composed: each section's schema is declared in its part, with Trinity-RFT's key
// names (trinity/common/config.py) and defaults, written beside each key as `// default` with Trinity's value where
// ours differs or Trinity has none (src/rft/<part>/config.ts; the model's in ./model.ts). Keys marked "derived" are
// filled in by resolveRun (./resolve-run.ts) from other keys, as Trinity's config validators do; a derived key may
// still be set. The section names and types are re-exported here, so the config's public names stay in one place.
//
// Every key is read by the run, or refused when set to a value this framework does not implement (src/rft/config/refusals.ts:
// the message says what to use instead); test/rft/config/coverage.test.ts walks this schema to keep it so.
//
// Conventions: every mapping is strict (an unknown key is an error with the closest known key); a key set to null or
// left empty takes its default; numbers and booleans written as strings ("8", "true", e.g. from ${ENV}) are accepted
// as OmegaConf does, and numbers where a string is expected become strings (`name: 7`).
import { z } from 'zod';
import { type AlgorithmConfig, AlgorithmSchema } from '../../algorithm/config.js';
import { type BufferConfig, BufferSchema } from '../../buffer/config.js';
import { args, bool, nonEmpty, str } from '../../config/value-schemas.js';
import { type DataProcessorConfig, DataProcessorSchema } from '../../data/config.js';
import { type ExplorerConfig, ExplorerSchema } from '../../explorer/config.js';
import { type MonitorConfig, MonitorSchema } from '../../monitor/config.js';
import { type SynchronizerConfig, SynchronizerSchema } from '../../sync/config.js';
import { type TrainerConfig, TrainerSchema } from '../../trainer/config.js';
import { type ModelConfig, ModelSchema } from './model.js';
import type { TrinityKeys } from './trinity-mappings.js';

export {
  type AlgorithmConfig,
  AlgorithmSchema,
  LR_SCHEDULER_TYPES,
  type OptimizerConfig,
  OptimizerSchema,
} from '../../algorithm/config.js';
export { AuxiliaryModelSchema } from '../../auxiliary/config.js';
export { type LoraConfig, LoraSchema, type ModelConfig, ModelSchema } from './model.js';
export {
  type BufferConfig,
  BufferSchema,
  type DatasetConfig,
  DatasetSchema,
  type ExperienceBufferConfig,
  ExperienceBufferSchema,
  type ReplayBufferConfig,
  ReplayBufferSchema,
  STORAGE_TYPES,
  type StorageType,
  type TrainerInputConfig,
  TrainerInputSchema,
} from '../../buffer/config.js';
export {
  type ExplorerInputConfig,
  ExplorerInputSchema,
  type FormatConfig,
  FormatSchema,
  PROMPT_TYPES,
  type RolloutArgs,
  RolloutArgsSchema,
  SELECTOR_TYPES,
  type TaskSelectorConfig,
  TaskSelectorSchema,
  type TasksetConfig,
  TasksetSchema,
} from '../../buffer/taskset-config.js';
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

export type Mode = (typeof MODES)[number];

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
  /** The Trinity-RFT keys the file carried that this backend ignores or maps (./trinity-mappings.ts), printed once. */
  trinity_keys: TrinityKeys;
}
