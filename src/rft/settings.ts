// The settings of one stage: what src/rft/run/run.ts derives from a resolved config section and the stage's loops
// read. Plain data (no config key names): every field here is read by the stage; a config key that maps to none is
// refused by validation (src/rft/run/config/).
//
// Types only, in a file of its own at the top of src/rft (beside task.ts and experience.ts): it names types of
// buffer/, monitor/, auxiliary/ and data/ and is read by explorer/, trainer/ and run/, while src/rft/config/ (the
// config language every part's config section is written in) stays below all of them.
import type { RolloutEngineOptions } from '../engine/index.js';
import type { ModelDType } from '../model/index.js';
import type { AuxiliaryModelSettings } from './auxiliary/index.js';
import type { SelectorConfig, TasksetConfig } from './buffer/index.js';
import type { AuxiliaryDatasetSettings, ExperienceBufferSettings } from './buffer/config.js';
import type { MonitorArgs, MonitorType, ProgressReporter } from './monitor/index.js';
import type { TaskPipelineSettings } from './data/task-pipeline/types.js';
import type { ExperiencePipelineSettings } from './data/experience-pipeline/index.js';
import type { PromptLimit } from './workflow/prompt-truncation.js';

export type StageMode = 'both' | 'explore' | 'train' | 'bench' | 'serve';

export interface StageSettings {
  stageName: string;
  /** Where checkpoints, metrics and sync files of this stage go. */
  jobDir: string;
  mode: StageMode;
  project: string;
  name: string;
  modelPath: string;
  dtype: ModelDType;
  /** rank, alpha, targetModules null: the adapter folder's (loraPath); adapterName null: the run's name. */
  lora: {
    rank: number | null;
    alpha: number | null;
    dropout: number;
    targetModules: string[] | 'all-linear' | null;
    adapterName: string | null;
  } | null;
  /** An existing PEFT adapter folder to start the LoRA adapter from (model.lora.path); null: a new adapter. */
  loraPath: string | null;
  /** The critic's starting weights (model.critic_model_path); null: the stage's policy weights (modelPath). */
  criticModelPath: string | null;
  /** Trinity's algorithm section. */
  algorithm: Record<string, unknown>;
  /** Folder that module-path plug-ins (`path/to/file.ts#export`) resolve against: the config file's. */
  pluginBaseDir: string;
  /** Tasks per explore step (buffer.batch_size) and experiences per train step (buffer.train_batch_size). */
  batchSize: number;
  trainBatchSize: number;
  /** Steps of this stage; null: as many as the tasksets give (total_epochs). */
  totalSteps: number | null;
  totalEpochs: number;
  tasksets: { taskset: TasksetConfig; selector?: SelectorConfig; weight?: number }[];
  evalTasksets: TasksetConfig[];
  /** data_processor.task_pipeline: curates the (one) training taskset before the stage explores; null: none. */
  taskPipeline: TaskPipelineSettings | null;
  /** Samples per task of each eval taskset (its repeat_times, same order): mean@n and pass@k use them. */
  evalRepeatTimes: number[];
  evalInterval: number;
  evalOnStartup: boolean;
  /** Mode bench: evaluate only the latest checkpoint (explorer.bench_on_latest_checkpoint), else every one. */
  bench: { onLatestCheckpoint: boolean };
  explorer: {
    /**
     * explorer.name: mode explore's explorer among the processes sharing the buffer: the owner of its claimed explore
     * steps (./explorer/task-claims.ts) and its metrics folder (<jobDir>/<name>).
     */
    name: string;
    runnerPerModel: number;
    maxTimeout: number;
    maxRetryTimes: number;
    /** explorer.workflow_max_heap_mb: each module-path workflow thread's heap limit (src/rft/workflow/isolation/pool.ts). */
    workflowMaxHeapMb: number;
    slots: number;
    maxLength: number;
    /**
     * model.max_prompt_tokens, max_model_len and enable_prompt_truncation: what a rollout does with a prompt over
     * max_prompt_tokens (./workflow/prompt-truncation.ts).
     */
    promptLimit: PromptLimit;
    /** Variables every render of the rollout model's chat template gets (explorer.rollout_model.enable_thinking). */
    chatTemplateVariables: Readonly<Record<string, unknown>>;
    defaultWorkflow: string;
    /** The embedded engine's device, resolved ('cpu' or 'cuda:N'; explorer.rollout_model.device). */
    device: string;
    /**
     * embedded: our engine on a worker thread; in mode both the trainer hands it weights by reference (memory) or
     * through a folder (checkpoint) — synchronizer.sync_method. openai: an external OpenAI-compatible server
     * (src/openai), which can only load weights from a folder, so it has no such choice.
     */
    engine:
      | {
          type: 'embedded';
          weightSync: 'memory' | 'checkpoint';
          /** explorer.rollout_model.engine_num: engines, sharing the explorer's threads (src/engine/engine-pool.ts). */
          engineNum: number;
          /** explorer.rollout_model.engine_process: each engine in a process of its own (weightSync checkpoint). */
          engineProcess: boolean;
          /** explorer.rollout_model.enable_prefix_caching: a paged KV cache with a prefix cache (src/engine). */
          prefixCaching: boolean;
          /**
           * explorer.rollout_model.enable_chunked_prefill and max_num_batched_tokens (unset: the engine's default), as
           * the engine's options.
           */
          prefill: Pick<RolloutEngineOptions, 'chunkedPrefill' | 'maxPrefillTokens'>;
          /** explorer.rollout_model.weight_sync_buffer_size in bytes: a folder is loaded in buckets of at most this. */
          weightSyncBufferBytes: number;
        }
      | {
          type: 'openai';
          /** One server, or a list: a pool with health checks and failover (src/openai/remote-pool.ts). */
          baseUrl: string | readonly string[];
          apiKey: string | null;
          modelName: string;
        };
  };
  /** explorer.auxiliary_models, resolved (src/rft/auxiliary): started beside the explorer's engine. */
  auxiliaryModels: AuxiliaryModelSettings[];
  /** Mode serve: the OpenAI-compatible endpoint (src/serve/serve-stage.ts). */
  serve: {
    host: string;
    port: number;
    apiKey: string | null;
    /** A reply's max_tokens when a request gives none, and its cap when it asks more. */
    maxTokens: number;
    /** The key maxTokens came from (said at start). */
    maxTokensKey: 'explorer.serve_max_tokens' | 'model.max_response_tokens';
    /** model.max_model_len (the context, explorer.maxLength) = max_prompt_tokens + max_response_tokens (said at start). */
    contextIsPromptPlusResponse: boolean;
    maxPromptTokens: number | null;
    maxBodyBytes: number;
    maxN: number;
  };
  trainer: {
    saveInterval: number;
    maxCheckpointsToKeep: number;
    microBatchSize: number | null;
    /** trainer.use_dynamic_bsz: micro-batches of at most this many computed positions (max_token_len_per_gpu); null: by rows. */
    microBatchTokens: number | null;
    gradientCheckpointing: boolean;
    /** trainer.use_remove_padding: training forwards run their rows packed without pads (null: when that saves a fifth). */
    removePadding: boolean | null;
    /** Forward/backward dtype (trainer.param_dtype) and the dtype of the weights the optimizer updates (master_dtype). */
    paramDtype: ModelDType;
    masterDtype: ModelDType;
    /** The trainer's device, resolved ('cpu' or 'cuda:N'; trainer.device, a rank's own GPU by LOCAL_RANK). */
    device: string;
    /** The longest a data-parallel rank waits for the others in the rendezvous or a collective (ms). */
    distributedTimeoutMs: number;
    /** trainer.zero_stage: 1 shards the policy's AdamW state over the data-parallel ranks (ZeRO-1). */
    zeroStage: 0 | 1;
    /**
     * trainer.bitwise_on_policy: the rollout engine and the trainer run the batch-invariant forward
     * (../model/batch-invariant.ts), so the trainer's log-probs equal the sampler's bit for bit.
     */
    bitwiseOnPolicy: boolean;
    /** trainer.trainer_strategy: 'fsdp' (fsdp, fsdp2) shards the policy over the data-parallel ranks; 'ddp' replicates it. */
    strategy: 'ddp' | 'fsdp';
    /** trainer.stop_when (mode train over a dataset): evaluate every evalInterval steps, end once the metric reaches
     * the bound; null: train total_steps without evaluating. */
    stopWhen: StopRule | null;
  };
  /** maxStaleness: experiences older than (trainer step - 1 - maxStaleness) weights are dropped; null: none. */
  sync: {
    /** fixed: the explorer waits for the version it needs; trainer_driven: it takes what the trainer published, never
     * waiting; explorer_driven: it asks for weights every `interval` explore steps and the trainer syncs when asked;
     * fully_async: it never waits and swaps each published version in at once, mid-step (../workflow/weight-swap-gate.ts). */
    style: 'fixed' | 'trainer_driven' | 'explorer_driven' | 'fully_async';
    interval: number;
    offset: number;
    timeoutMs: number;
    maxStaleness: number | null;
  };
  /** Experience buffer: in memory (mode both), a shared SQLite file (explore/train), or a dataset file (train: SFT). */
  buffer: ExperienceBufferSettings;
  monitorTypes: MonitorType[];
  /** The backends' arguments (monitor.monitor_args): W&B base_url/api_key, MLflow uri/username/password. */
  monitorArgs: MonitorArgs;
  /** Auxiliary datasets by name (trainer_input.auxiliary_buffers), e.g. mix's expert data. */
  auxiliaryDatasets: Record<string, AuxiliaryDatasetSettings>;
  /**
   * data_processor.experience_pipeline: operators over each explore step's experiences before the buffer, and where
   * the raw experiences are saved (null: not saved); absent or null: no pipeline. Stages that do not explore skip it.
   */
  experiencePipeline?: ExperiencePipelineSettings | null;
  seed: number;
  threads: { explorer: number; trainer: number };
  /** Data-parallel training over c10d (the torchrun environment; ./run/distributed.ts); null: one trainer process. */
  distributed: DistributedSettings | null;
}

/**
 * This process's place among the data-parallel trainer ranks. Rank 0 runs the stage (explorer, buffer, checkpoints,
 * metrics, weight publishing) and sends each step's batch to the others; ranks > 0 only train (./run/follower.ts).
 */
export interface DistributedSettings {
  rank: number;
  worldSize: number;
  /** The rank's index on its machine (LOCAL_RANK): which GPU it would use. */
  localRank: number;
  /** Ranks on this machine (LOCAL_WORLD_SIZE, else 1): they share its cores. */
  localWorldSize: number;
  /** Where rank 0 serves the rendezvous store (MASTER_ADDR, MASTER_PORT). */
  masterAddr: string;
  masterPort: number;
}

export interface StageResult {
  /** The stage's final weights as a Hugging Face folder (null for explore/bench). */
  finalModelDir: string | null;
  steps: number;
  /** The train steps the stage was asked for (modes both and train; `steps` is the last one it reached). */
  stepsAsked?: number;
  /**
   * The stage has no end step (online training: mode train over a shared buffer without total_steps) and stopped
   * because the processes writing its buffer finished: it is not done, the same command trains on when they write again.
   */
  openEnded?: boolean;
}

/** What a finished stage leaves in its done.json (a rerun skips the stage and starts the next from its model). */
export interface StageRecord {
  finalModelDir: string | null;
  steps: number;
}

export interface StageHooks {
  log?: (line: string) => void;
  progress?: ProgressReporter;
  signal?: AbortSignal;
}

/** trainer.stop_when: the stage ends at the first evaluation where `metric` >= atLeast (or <= atMost). */
export interface StopRule {
  metric: string;
  atLeast: number | null;
  atMost: number | null;
}
