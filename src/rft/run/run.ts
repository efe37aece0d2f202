// `trinity run --config FILE`: the stages of a run in order. Each stage starts from the previous stage's final
// weights; a stage that finished (its done.json exists) is skipped when the same command runs again, and an
// unfinished one resumes from its latest checkpoint (see ./stage.ts). With continue_from_checkpoint false and the job
// folder already there, the run starts afresh in <job dir>_<timestamp> (as Trinity-RFT renames the experiment), and
// the earlier folder is left as it is.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, hostname } from 'node:os';
import { join, relative } from 'node:path';
import type { Config, FormatConfig, LoraConfig, StageConfig, TasksetConfig as TasksetSection } from '../config/index.js';
import { resolveStages } from '../config/index.js';
import { checkBeforeRun } from '../config/preflight.js';
import type { DatasetFormat, SelectorConfig, TasksetConfig } from '../buffer/index.js';
import { type MonitorArgs, ProgressReporter } from '../monitor/index.js';
import { describeRank, distributedLaunchFromEnv } from './distributed.js';
import { runFollower } from './follower.js';
import type { DistributedSettings, StageHooks, StageRecord, StageResult, StageSettings } from './settings.js';
import { runStage } from './stage.js';

type NonNullFields<T> = { [K in keyof T]?: Exclude<T[K], null> };
const omitNulls = <T extends Record<string, unknown>>(o: T): NonNullFields<T> =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null && v !== undefined)) as NonNullFields<T>;

function tasksetSettings(t: TasksetSection, isEval: boolean): TasksetConfig {
  const f = t.format;
  // the selector's feature columns are read into task.features (eval tasksets have no selector)
  const featureKeys = isEval ? [] : t.task_selector.feature_keys;
  return {
    name: t.name,
    path: t.path,
    split: t.split,
    storageType: t.storage_type,
    format: omitNulls({
      promptKey: f.prompt_key,
      responseKey: f.response_key,
      ...(f.prompt_type === 'messages' && f.messages_key !== 'message' ? { messagesKey: f.messages_key } : {}),
      systemPromptKey: f.system_prompt_key,
      systemPrompt: f.system_prompt,
      replyPrefix: f.reply_prefix,
      workflowKey: f.workflow_key,
      rewardFnKey: f.reward_fn_key,
      toolsKey: f.tools_key,
      ...(featureKeys.length > 0 ? { featureKeys } : {}),
    }),
    ...(t.default_workflow_type ? { defaultWorkflowType: t.default_workflow_type } : {}),
    ...(t.default_reward_fn_type ? { defaultRewardFnType: t.default_reward_fn_type } : {}),
    workflowArgs: t.workflow_args,
    rewardFnArgs: t.reward_fn_args,
    rolloutArgs: omitNulls({ ...t.rollout_args, top_k: t.rollout_args.top_k < 0 ? null : t.rollout_args.top_k }),
    isEval,
  };
}

/** data_selector.kwargs (snake_case, checked by the config's validation) as SelectorConfig fields. */
const SELECTOR_KWARGS: Readonly<Record<string, keyof SelectorConfig>> = {
  descending: 'descending',
  target_reward: 'targetReward',
  tau: 'tau',
  do_sample: 'doSample',
  prior_strength: 'priorStrength',
};

function selectorSettings(t: TasksetSection): SelectorConfig {
  const selector = t.task_selector;
  const kwargs = Object.fromEntries(
    Object.entries(selector.kwargs).map(([key, value]) => [SELECTOR_KWARGS[key] ?? key, value]),
  ) as Partial<SelectorConfig>;
  return {
    selectorType: selector.selector_type,
    seed: selector.seed,
    ...(selector.feature_keys.length ? { featureKeys: selector.feature_keys } : {}),
    ...kwargs,
  };
}

/** LoRA settings: unset rank/alpha/target_modules are Trinity's defaults for a new adapter, the adapter's own with a path. */
function loraSettings(lora: LoraConfig): NonNullable<StageSettings['lora']> {
  const fresh = lora.path === null;
  const targets = lora.target_modules ?? (fresh ? 'all-linear' : null);
  return {
    rank: lora.rank ?? (fresh ? 32 : null),
    alpha: lora.alpha ?? (fresh ? 32 : null),
    dropout: lora.dropout,
    targetModules: targets === null || Array.isArray(targets) ? targets : targets === 'all-linear' ? 'all-linear' : [targets],
  };
}

/** How a dataset's rows become SFT samples (the format keys and split of an experience or auxiliary buffer). */
function datasetFormat(format: FormatConfig, split: string): DatasetFormat {
  return omitNulls({
    split,
    promptKey: format.prompt_key,
    responseKey: format.response_key,
    ...(format.prompt_type === 'messages' && format.messages_key !== 'message' ? { messagesKey: format.messages_key } : {}),
    systemPromptKey: format.system_prompt_key,
    systemPrompt: format.system_prompt,
    toolsKey: format.tools_key,
    enableConcatenatedMultiTurn: format.enable_concatenated_multi_turn,
  });
}

const firstNonNull = <T>(...values: (T | null)[]): T | null => values.find((v) => v !== null) ?? null;

/** monitor.monitor_args (validated: string values of the chosen backends' keys) in the monitors' names. */
function monitorArgs(args: Readonly<Record<string, unknown>>): MonitorArgs {
  const text = (key: string): string | undefined => (typeof args[key] === 'string' ? args[key] : undefined);
  return omitNulls({
    baseUrl: text('base_url') ?? null,
    apiKey: text('api_key') ?? null,
    uri: text('uri') ?? null,
    username: text('username') ?? null,
    password: text('password') ?? null,
  });
}

/**
 * True when the explorer and the trainer of a mode-both stage never run at once: explore step s waits for the
 * weights of train step s − 1, which waits for the experiences of explore step s − 1.
 */
function takesTurns(stage: StageConfig): boolean {
  const sync = stage.synchronizer;
  return sync.sync_style === 'fixed' && sync.sync_interval === 1 && sync.sync_offset === 0;
}

/**
 * The settings of one stage from its resolved config section; `distributed`: this process's place among the ranks of
 * a data-parallel trainer (./distributed.ts), null for one process.
 */
export function stageSettings(
  stage: StageConfig,
  modelPath: string,
  pluginBaseDir: string = process.cwd(),
  distributed: DistributedSettings | null = null,
): StageSettings {
  const input = stage.buffer.explorer_input;
  const experienceBuffer = stage.buffer.trainer_input.experience_buffer;
  // ranks started on one machine share its cores
  const cores = Math.max(1, Math.floor(availableParallelism() / (distributed?.localWorldSize ?? 1)));
  const lora = stage.model.lora;
  const firstTaskset = input.tasksets[0];
  // memory or checkpoint; validation allows only checkpoint for an external server (it loads folders)
  const weightSync = stage.synchronizer.sync_method;
  return {
    stageName: stage.stage_name || 'run',
    jobDir: stage.checkpoint_job_dir,
    mode: stage.mode,
    project: stage.project,
    name: stage.name,
    modelPath,
    dtype: stage.model.dtype,
    lora: lora ? loraSettings(lora) : null,
    loraPath: lora?.path ?? null,
    criticModelPath: stage.model.critic_model_path,
    algorithm: Object.fromEntries(Object.entries(stage.algorithm).filter(([, v]) => v !== null && v !== undefined)),
    pluginBaseDir,
    batchSize: stage.buffer.batch_size,
    trainBatchSize: stage.buffer.train_batch_size,
    // buffer.total_steps (Trinity: the explorer's) bounds the stage; trainer.total_steps when it is not set
    totalSteps: firstNonNull(stage.buffer.total_steps, stage.trainer.total_steps),
    totalEpochs: stage.buffer.total_epochs,
    tasksets: input.tasksets.map((t) => ({ taskset: tasksetSettings(t, false), selector: selectorSettings(t) })),
    evalTasksets: input.eval_tasksets.map((t) => tasksetSettings(t, true)),
    evalRepeatTimes: input.eval_tasksets.map((t) => t.repeat_times ?? 1),
    evalInterval: stage.explorer.eval_interval,
    evalOnStartup: stage.explorer.eval_on_startup,
    bench: { onLatestCheckpoint: stage.explorer.bench_on_latest_checkpoint },
    explorer: {
      runnerPerModel: stage.explorer.runner_per_model,
      maxTimeout: stage.explorer.max_timeout,
      maxRetryTimes: stage.explorer.max_retry_times,
      slots: stage.explorer.rollout_model.slots,
      maxLength: stage.model.max_model_len,
      defaultWorkflow: input.default_workflow_type ?? 'simple_workflow',
      engine:
        stage.explorer.rollout_model.engine_type === 'openai'
          ? {
              type: 'openai',
              baseUrl: stage.explorer.rollout_model.base_url as string,
              apiKey: stage.explorer.rollout_model.api_key ?? process.env.OPENAI_API_KEY ?? null,
              modelName: stage.explorer.rollout_model.model_name ?? modelPath,
            }
          : { type: 'embedded', weightSync },
    },
    serve: {
      host: stage.explorer.listen_address,
      port: stage.explorer.proxy_port,
      apiKey: stage.explorer.api_key ?? process.env.TRINITY_API_KEY ?? null,
      maxTokens: stage.explorer.serve_max_tokens,
      maxPromptTokens: stage.explorer.serve_max_prompt_tokens,
      maxBodyBytes: stage.explorer.serve_max_body_bytes,
      maxN: stage.explorer.serve_max_n,
    },
    trainer: {
      saveInterval: stage.trainer.save_interval > 0 ? stage.trainer.save_interval : Number.MAX_SAFE_INTEGER,
      maxCheckpointsToKeep: stage.trainer.max_checkpoints_to_keep,
      microBatchSize: stage.trainer.micro_batch_size,
      gradientCheckpointing: stage.trainer.gradient_checkpointing,
      distributedTimeoutMs: stage.trainer.distributed_timeout * 1000,
    },
    sync: {
      style: stage.synchronizer.sync_style,
      interval: stage.synchronizer.sync_interval,
      offset: stage.synchronizer.sync_offset,
      timeoutMs: stage.synchronizer.sync_timeout * 1000,
      maxStaleness: stage.synchronizer.max_staleness,
    },
    buffer: {
      storageType: experienceBuffer.storage_type,
      name: experienceBuffer.name,
      replay: experienceBuffer.replay_buffer.enable
        ? {
            priorityFn: experienceBuffer.replay_buffer.priority_fn,
            decay: Number(experienceBuffer.replay_buffer.priority_fn_args.decay ?? 2),
            ...omitNulls({
              useCountLimit: (experienceBuffer.replay_buffer.priority_fn_args.use_count_limit as number | undefined) ?? null,
              sigma: (experienceBuffer.replay_buffer.priority_fn_args.sigma as number | undefined) ?? null,
            }),
            reuseCooldownMs:
              experienceBuffer.replay_buffer.reuse_cooldown_time === null
                ? null
                : experienceBuffer.replay_buffer.reuse_cooldown_time * 1000,
          }
        : null,
      path: experienceBuffer.path,
      capacity: experienceBuffer.capacity,
      maxReadTimeoutMs: experienceBuffer.max_read_timeout * 1000,
      format: {
        ...datasetFormat(experienceBuffer.format, experienceBuffer.split),
        ...omitNulls({ chosenKey: experienceBuffer.format.chosen_key, rejectedKey: experienceBuffer.format.rejected_key }),
      },
    },
    monitorTypes: stage.monitor.monitor_type,
    monitorArgs: monitorArgs(stage.monitor.monitor_args),
    auxiliaryDatasets: Object.fromEntries(
      Object.values(stage.buffer.trainer_input.auxiliary_buffers).map((d) => [
        d.name, // the key it is listed under (validated)
        {
          path: d.path,
          format: datasetFormat(d.format, d.split),
        },
      ]),
    ),
    seed: firstTaskset?.task_selector.seed ?? 42,
    // Mode both: when the loops can overlap they share the cores (half each, at least one); strictly on-policy
    // (fixed sync every step, no offset) they take turns, so each gets every core (measured: bench/README.md, the GRPO stage bench).
    threads:
      stage.mode === 'both' && !takesTurns(stage)
        ? { explorer: Math.max(1, Math.floor(cores / 2)), trainer: Math.max(1, Math.ceil(cores / 2)) }
        : { explorer: cores, trainer: cores },
    distributed,
  };
}

export interface RunOptions {
  log?: (line: string) => void;
  /** Where module-path plug-ins resolve (default: the working directory; the CLI passes the config file's folder). */
  baseDir?: string;
  signal?: AbortSignal;
  /** Runs a mode-serve stage (the CLI passes src/serve's runServeStage; the rft layer has no HTTP server of its own). */
  serveStage?: (settings: StageSettings, hooks: StageHooks) => Promise<StageResult>;
  /** This process's place among data-parallel trainer ranks (default: the torchrun environment; null: one process). */
  distributed?: DistributedSettings | null;
}

/** Runs every stage of the config in order; returns the last stage's final model folder. */
export async function runConfig(
  config: Config,
  options: RunOptions = {},
): Promise<{ finalModelDir: string | null; stages: StageRecord[] }> {
  const log = options.log ?? ((line: string) => console.log(line));
  const distributed = options.distributed === undefined ? distributedLaunchFromEnv() : options.distributed;
  // what every stage needs from the disk and the registries, before anything is made or run (as `config check`)
  await checkBeforeRun(config, options.baseDir !== undefined ? { baseDir: options.baseDir } : {});
  const configured = config.checkpoint_job_dir;
  let jobDir = configured;
  let stages = resolveStages(config);
  if (distributed !== null) {
    log(`data-parallel trainer: ${describeRank(distributed)}, host ${hostname()}, pid ${process.pid}`);
    if (distributed.rank > 0)
      return runFollower(
        stages.length,
        config.model.model_path,
        (index, modelPath) => stageSettings(stages[index] as StageConfig, modelPath, options.baseDir, distributed),
        { log, ...(options.signal ? { signal: options.signal } : {}) },
      );
    // the other ranks could not learn the name of a renamed folder: they follow the stages of the configured one
    if (!config.continue_from_checkpoint && existsSync(configured))
      throw new Error(
        `continue_from_checkpoint is false and ${configured} exists: a data-parallel run cannot start afresh in a ` +
          'renamed folder (ranks > 0 would not know its name); move the folder away, or set continue_from_checkpoint: true',
      );
  }
  if (!config.continue_from_checkpoint && existsSync(configured)) {
    jobDir = `${configured}_${new Date().toISOString().replace(/[-:]/g, '').replace(/\..*$/, '')}`;
    const fresh = jobDir;
    stages = stages.map((s) => ({ ...s, checkpoint_job_dir: fresh + s.checkpoint_job_dir.slice(configured.length) }));
    log(`continue_from_checkpoint is false and ${configured} exists: this run starts afresh in ${fresh}`);
  }
  const records: StageRecord[] = [];
  let modelPath = config.model.model_path;
  const progress = new ProgressReporter({ label: 'run', total: 1 });
  // the stage folders in run order (the report reads it)
  mkdirSync(jobDir, { recursive: true });
  writeFileSync(
    join(jobDir, 'stages.json'),
    `${JSON.stringify(stages.map((s) => relative(jobDir, s.checkpoint_job_dir) || '.'))}\n`,
  );
  for (const [index, stage] of stages.entries()) {
    const settings = stageSettings(stage, modelPath, options.baseDir, distributed);
    const doneFile = join(settings.jobDir, 'done.json');
    if (existsSync(doneFile)) {
      const record = JSON.parse(readFileSync(doneFile, 'utf8')) as StageRecord;
      log(`[${settings.stageName}] finished earlier (${doneFile}): skipped`);
      records.push(record);
      if (record.finalModelDir) modelPath = record.finalModelDir;
      continue;
    }
    log(
      `[${settings.stageName}] stage ${index + 1}/${stages.length}: mode ${settings.mode}, model ${modelPath}, job ${settings.jobDir}`,
    );
    const hooks: StageHooks = {
      log: (line) => progress.log(line),
      progress,
      ...(options.signal ? { signal: options.signal } : {}),
    };
    let result: StageResult;
    if (settings.mode === 'serve') {
      if (!options.serveStage)
        throw new Error(`stage '${settings.stageName}': mode serve needs the serving layer (run it with the trinity CLI)`);
      result = await options.serveStage(settings, hooks);
    } else result = await runStage(settings, hooks);
    if (options.signal?.aborted) {
      log(`[${settings.stageName}] stopped; run the same command to resume`);
      return { finalModelDir: null, stages: records };
    }
    const record: StageRecord = { finalModelDir: result.finalModelDir, steps: result.steps };
    mkdirSync(settings.jobDir, { recursive: true });
    writeFileSync(doneFile, `${JSON.stringify(record, null, 2)}\n`);
    records.push(record);
    if (record.finalModelDir) modelPath = record.finalModelDir;
  }
  return { finalModelDir: records.at(-1)?.finalModelDir ?? null, stages: records };
}
