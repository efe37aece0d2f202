// The explorer's rollout engine, started from the stage's settings: our embedded engine on a worker thread (one, a
// pool of engine_num on threads, or engine_process children behind a loopback OpenAI API), or external
// OpenAI-compatible servers (one base_url, or a list: a pool with health checks and failover). Modes both, explore,
// bench, the trainer's evaluator (trainer.stop_when) and the task pipeline's model operators all start theirs here.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { EmbeddedEnginePool, engineMetrics, imagePromptsOf, WorkerRolloutEngine } from '../../engine/index.js';
import { OpenAIRemoteEngine, RemoteEnginePool, startEngineProcesses } from '../../openai/index.js';
import { Tokenizer } from '../../tokenizer/index.js';
import type { StageSettings } from '../settings.js';
import type { StartedEngine } from '../sync/weight-channel.js';

/** What starting the explorer's engine reads of the stage's settings. */
export type EngineSettings = Pick<StageSettings, 'modelPath' | 'dtype' | 'jobDir' | 'explorer' | 'threads' | 'sync'> &
  Partial<Pick<StageSettings, 'algorithm' | 'trainer'>>;

/**
 * The explorer's engine: the embedded one on its own thread with `weightsDir`'s weights (engine_num > 1: a pool of
 * them, on threads or in processes of their own), or external servers (engine_type openai; a list of base_url: a
 * pool), told to load `weightsDir` when that is not the model they started with.
 */
export async function startExplorerEngine(
  settings: EngineSettings,
  weightsDir: string,
  log: (line: string) => void = () => {},
): Promise<StartedEngine> {
  const started = await startEngine(settings, weightsDir, log);
  // every chat render of the rollout model (workflows, its OpenAI endpoint) starts from the run's template variables
  const tokenizer = started.engine.tokenizer;
  if (tokenizer !== null) tokenizer.templateDefaults = settings.explorer.chatTemplateVariables;
  return started;
}

async function startEngine(settings: EngineSettings, weightsDir: string, log: (line: string) => void): Promise<StartedEngine> {
  const spec = settings.explorer.engine;
  const tokenizer = () => (existsSync(join(settings.modelPath, 'tokenizer.json')) ? Tokenizer.load(settings.modelPath) : null);
  // router replay: the engine records each token's experts for the trainer (they travel in-process only)
  const recordRoutedExperts = settings.algorithm?.enable_router_replay === true;
  if (recordRoutedExperts && (spec.type !== 'embedded' || spec.engineProcess))
    throw new Error(
      'algorithm.enable_router_replay: the routed experts are recorded by the embedded engine on threads; ' +
        `explorer.rollout_model ${spec.type === 'embedded' ? 'engine_process' : `engine_type ${spec.type}`} cannot return them`,
    );
  if (spec.type === 'embedded') {
    const engineOptions = {
      dtype: settings.dtype,
      device: settings.explorer.device,
      slots: settings.explorer.slots,
      maxLength: settings.explorer.maxLength,
      ...(spec.prefixCaching ? { enablePrefixCaching: true } : {}),
      ...spec.prefill,
      weightSyncBufferBytes: spec.weightSyncBufferBytes,
      ...(recordRoutedExperts ? { recordRoutedExperts } : {}),
      // trainer.bitwise_on_policy: the sampler's half (the trainer's: ../trainer/trainer-worker-main.ts)
      ...(settings.trainer?.bitwiseOnPolicy ? { batchInvariant: true } : {}),
    };
    if (spec.engineProcess) {
      const engine = await startEngineProcesses({
        modelDir: weightsDir,
        engineNum: spec.engineNum,
        numThreads: settings.threads.explorer,
        reloadRoot: settings.jobDir,
        tokenizer: existsSync(join(weightsDir, 'tokenizer.json')) ? Tokenizer.load(weightsDir) : tokenizer(),
        engine: engineOptions,
        downGraceMs: Math.min(60_000, settings.explorer.maxTimeout * 1000),
        log,
      });
      return { type: 'openai', engine };
    }
    if (spec.engineNum > 1) {
      const engine = await EmbeddedEnginePool.start(weightsDir, {
        ...engineOptions,
        engineNum: spec.engineNum,
        numThreads: settings.threads.explorer,
      });
      return { type: 'embedded', engine, weightSync: spec.weightSync };
    }
    const engine = await WorkerRolloutEngine.start(weightsDir, { ...engineOptions, numThreads: settings.threads.explorer });
    return { type: 'embedded', engine, weightSync: spec.weightSync };
  }
  // a vision-language model folder: its image token and processor render image prompts for the servers
  const connection = {
    model: spec.modelName,
    apiKey: spec.apiKey,
    tokenizer: tokenizer(),
    vision: imagePromptsOf(settings.modelPath),
  };
  const engine =
    typeof spec.baseUrl === 'string'
      ? await OpenAIRemoteEngine.connect({ ...connection, baseURL: spec.baseUrl })
      : await RemoteEnginePool.connect({
          ...connection,
          baseURLs: spec.baseUrl,
          reloadTimeoutMs: settings.sync.timeoutMs,
          // no server for as long as a workflow attempt may take (at most a minute): the run cannot go on
          downGraceMs: Math.min(60_000, settings.explorer.maxTimeout * 1000),
          log,
        });
  if (weightsDir !== settings.modelPath) await engine.syncWeightsFromDir(weightsDir, { timeoutMs: settings.sync.timeoutMs });
  return { type: 'openai', engine };
}

/**
 * The name a LoRA run's adapter is served under on an external pool of servers (requests ask for it as their model):
 * model.lora.name (Trinity's lora_configs[0].name) or else the run's name, unless that is the served base model's name
 * (vLLM refuses an adapter named like its model). Null without LoRA, and for embedded engines (engine_process
 * children take merged weights: they have no adapter API).
 */
export function loraAdapterName(settings: Pick<StageSettings, 'lora' | 'name' | 'explorer'>): string | null {
  const spec = settings.explorer.engine;
  if (settings.lora === null || spec.type !== 'openai') return null;
  const name = settings.lora.adapterName ?? settings.name;
  return name === spec.modelName ? `${name}-lora` : name;
}

/**
 * The embedded engine's counters (../../engine/engine-metrics.ts: prefill tokens, preemptions, prefix-cache hits,
 * misses and evictions), read between explore steps; null for external servers (they keep their own).
 */
export function engineCounters(started: StartedEngine): (() => Promise<Record<string, number>>) | null {
  if (started.type !== 'embedded') return null;
  const engine = started.engine;
  return async () => engineMetrics(engine instanceof EmbeddedEnginePool ? await engine.stats() : [await engine.stats()]);
}
