// `trinity serve --model DIR`: a Hugging Face model folder behind the OpenAI-compatible API, on the embedded engine
// (continuous batching on its own thread). Nothing is recorded; see ./serve-stage.ts for training from agents.
//
//   const served = await serveModel({ modelDir: 'runs/quickstart/model', port: 8000, apiKey: 'secret' });
//   // new OpenAI({ baseURL: served.server.baseURL, apiKey: 'secret' })
//   await served.close();
import { realpathSync } from 'node:fs';
import { basename, isAbsolute, join, relative, resolve } from 'node:path';
import { engineMetrics, WorkerRolloutEngine } from '../engine/index.js';
import { syncModelWeightsFromDir } from '../engine/weight-sync.js';
import { CausalLM, LoraModel, type ModelDType } from '../model/index.js';
import {
  OpenAIHttpError,
  OpenAIService,
  type OpenAIServer,
  startOpenAIServer,
  tokenizerVocabularyWarning,
} from '../openai/index.js';
import { checkChatTemplate } from '../tokenizer/index.js';
import { readRegularFile } from '../util/index.js';
import * as torch from '../torch/index.js';
import { ConfinedPathError, isInside, pathPresent, resolveExistingInside } from '../util/confined-path.js';

export interface ServeModelOptions {
  modelDir: string;
  /** The id /v1/models lists (default: the folder's name); requests may name any model unless reloadRoot is set. */
  modelName?: string;
  host?: string;
  port?: number;
  apiKey?: string | null;
  dtype?: ModelDType;
  /** Sequences decoded at once (default 16). */
  slots?: number;
  /** Context per sequence (default: the model's, at most 2048). */
  maxLength?: number;
  /** A paged KV cache whose full blocks are reused by requests with the same prefix (the engine's enablePrefixCaching). */
  enablePrefixCaching?: boolean;
  /** Prefill a long prompt in chunks between decode steps (the engine's chunkedPrefill). */
  chunkedPrefill?: boolean;
  /** Tokens of one engine step (vLLM's max_num_batched_tokens; the engine's maxPrefillTokens). Default 8192. */
  maxNumBatchedTokens?: number;
  maxTokens?: number;
  maxPromptTokens?: number;
  maxBodyBytes?: number;
  maxN?: number;
  numThreads?: number;
  /** Enables POST /update_weights_from_disk for folders inside this one. */
  reloadRoot?: string | null;
  log?: (line: string) => void;
}

export interface ServedModel {
  server: OpenAIServer;
  engine: WorkerRolloutEngine;
  modelName: string;
  close(): Promise<void>;
}

/**
 * The engine on its worker thread, with a tokenizer whose chat template renders a one-message chat (the OpenAI API
 * needs both): else the engine is closed and the error names the folder.
 */
async function startServedEngine(
  modelDir: string,
  engineOptions: Parameters<typeof WorkerRolloutEngine.start>[1],
): Promise<WorkerRolloutEngine> {
  const engine = await WorkerRolloutEngine.start(modelDir, engineOptions);
  try {
    if (engine.tokenizer === null) throw new Error(`${modelDir}: no tokenizer.json (the OpenAI API needs a tokenizer)`);
    checkChatTemplate(engine.tokenizer, modelDir);
    return engine;
  } catch (error) {
    await engine.close();
    throw error;
  }
}

/** The served engine's options (trinity serve's flags). */
function servedEngineOptions(options: ServeModelOptions) {
  return {
    slots: options.slots ?? 16,
    ...(options.maxLength !== undefined ? { maxLength: options.maxLength } : {}),
    ...(options.enablePrefixCaching ? { enablePrefixCaching: true } : {}),
    ...(options.chunkedPrefill ? { chunkedPrefill: true } : {}),
    ...(options.maxNumBatchedTokens !== undefined ? { maxPrefillTokens: options.maxNumBatchedTokens } : {}),
    ...(options.dtype ? { dtype: options.dtype } : {}),
    ...(options.numThreads ? { numThreads: options.numThreads } : {}),
  };
}

export async function serveModel(options: ServeModelOptions): Promise<ServedModel> {
  const modelDir = resolve(options.modelDir);
  const modelName = options.modelName ?? basename(modelDir);
  const engineOptions = servedEngineOptions(options);
  const engine = await startServedEngine(modelDir, engineOptions);
  const vocabSize = engine.vocabSize; // config.json's vocab_size (a vision-language folder: its text_config's)
  const vocabularyWarning = tokenizerVocabularyWarning(engine.tokenizer, vocabSize, modelDir);
  if (vocabularyWarning !== null) options.log?.(vocabularyWarning);
  const serviceLimits = {
    vocabSize, // token ids in requests are checked against the model's own
    ...(options.maxTokens !== undefined ? { maxTokens: options.maxTokens } : {}),
    ...(options.maxPromptTokens !== undefined ? { maxPromptTokens: options.maxPromptTokens } : {}),
    ...(options.maxN !== undefined ? { maxN: options.maxN } : {}),
  };
  // one model served: any name answers (an agent's hard-coded one). With the LoRA API on, names are exact: a pool
  // asking for an adapter a server has lost must get a 404, not the base model (../openai/server.ts names them all)
  const service = new OpenAIService({ modelName, acceptAnyModel: !options.reloadRoot, backend: engine, ...serviceLimits });
  // The base weights now served (a reload replaces them): a LoRA adapter is merged into these.
  let baseWeightsDir: string | null = null;
  const adapters = new Map<string, { engine: WorkerRolloutEngine; service: OpenAIService }>();
  const loraAdapters = options.reloadRoot
    ? {
        names: () => [...adapters.keys()],
        serviceFor: (model: string) => adapters.get(model)?.service,
        load: async (name: string, path: string) => {
          if (name === modelName || adapters.has(name))
            throw new OpenAIHttpError(400, `The lora adapter '${name}' has already been loaded.`, { param: 'lora_name' });
          let folder: string;
          try {
            folder = resolveReloadFolder(options.reloadRoot as string, resolve(options.reloadRoot as string, path));
          } catch (error) {
            throw new OpenAIHttpError(403, (error as Error).message, { param: 'lora_path' });
          }
          const engine = await WorkerRolloutEngine.start(modelDir, engineOptions);
          try {
            const weights = mergedAdapterWeights(modelDir, baseWeightsDir, folder);
            try {
              await engine.syncWeights(weights);
            } finally {
              for (const t of weights.values()) t.dispose();
            }
          } catch (error) {
            await engine.close();
            throw new OpenAIHttpError(400, `cannot load LoRA adapter '${name}' from ${folder}: ${(error as Error).message}`, {
              param: 'lora_path',
            });
          }
          adapters.set(name, { engine, service: new OpenAIService({ modelName: name, backend: engine, ...serviceLimits }) });
          options.log?.(`loaded LoRA adapter '${name}' from ${folder}`);
        },
        unload: async (name: string) => {
          const adapter = adapters.get(name);
          if (adapter === undefined)
            throw new OpenAIHttpError(404, `The lora adapter '${name}' cannot be found.`, { param: 'lora_name' });
          adapters.delete(name);
          await adapter.engine.close(`LoRA adapter '${name}' was unloaded`);
          options.log?.(`unloaded LoRA adapter '${name}'`);
        },
      }
    : undefined;
  let server: OpenAIServer;
  try {
    server = await startOpenAIServer({
      service,
      host: options.host ?? '127.0.0.1',
      port: options.port ?? 8000,
      apiKey: options.apiKey ?? null,
      ...(options.maxBodyBytes !== undefined ? { maxBodyBytes: options.maxBodyBytes } : {}),
      ...(options.reloadRoot
        ? {
            reloadWeights: {
              root: resolve(options.reloadRoot),
              load: async (dir: string) => {
                const folder = resolveReloadFolder(options.reloadRoot as string, dir);
                const copied = await engine.syncWeightsFromDir(folder);
                baseWeightsDir = folder;
                // one line per reload: a run's operator (and the engine-pool test) counts them per server
                options.log?.(`reloaded weights from ${dir} (${copied} tensors)`);
                return copied;
              },
            },
          }
        : {}),
      ...(loraAdapters ? { loraAdapters } : {}),
      // the engine's counters: requests, prefill tokens, preemptions, prefix-cache hits/misses/evictions, KV blocks
      routes: [{ method: 'GET', path: '/metrics', handle: async () => engineMetrics([await engine.stats()]) }],
      onError: (error, request) => {
        if ((error as { status?: number }).status === 500) options.log?.(`${request.method} ${request.url}: ${error.message}`);
      },
    });
  } catch (error) {
    await engine.close();
    throw error;
  }
  return {
    server,
    engine,
    modelName,
    close: async () => {
      await server.close();
      await engine.close();
      for (const adapter of adapters.values()) await adapter.engine.close();
      adapters.clear();
    },
  };
}

/**
 * The weights of the model in `modelDir` (with the weights of `baseWeightsDir` when a reload replaced them) with the
 * PEFT adapter in `adapterDir` merged in (W + scale·B·A, ../model/lora.ts), computed on this thread.
 */
function mergedAdapterWeights(modelDir: string, baseWeightsDir: string | null, adapterDir: string): Map<string, torch.Tensor> {
  const model = CausalLM.load(modelDir);
  try {
    if (baseWeightsDir !== null) syncModelWeightsFromDir(model, baseWeightsDir);
    LoraModel.load(model, adapterDir, { trainable: false }).mergeAndUnload();
    return new Map([...model.parameters()].map(([name, t]) => [name, torch.keep(t.detach().clone())]));
  } finally {
    model.dispose();
  }
}

/**
 * The real folder a weight reload may read: `dir` and each weight file in it (model.safetensors, or the shard index
 * and the shards its weight_map names) must lie inside the real `root`, walked without leaving it
 * (src/util/confined-path.ts: a symbolic link that leads outside is refused whether or not its target exists);
 * else an error naming the path and where it leads. The reload then reads the returned real path, not the link.
 */
export function resolveReloadFolder(root: string, dir: string): string {
  const realRoot = realpathSync(root);
  const rootName = `the reload root ${realRoot}`;
  const real = (path: string): string => {
    // `path` is below the root as given (a request's folder) or below its real path (a file of the folder found)
    const inside = relative(isInside(realRoot, resolve(path)) ? realRoot : resolve(root), resolve(path));
    if (inside.startsWith('..') || isAbsolute(inside)) throw new Error(`${path} is outside ${rootName}`);
    try {
      return resolveExistingInside(realRoot, inside, path, rootName);
    } catch (error) {
      if (error instanceof ConfinedPathError && error.problem === 'missing') throw new Error(`${path}: no such file or folder`);
      throw error;
    }
  };
  const folder = real(dir);
  const index = join(folder, 'model.safetensors.index.json');
  if (!pathPresent(index)) {
    const single = join(folder, 'model.safetensors');
    if (pathPresent(single)) real(single);
    return folder; // nothing to read: the load says so
  }
  const realIndex = real(index);
  let weightMap: unknown;
  try {
    weightMap = (JSON.parse(readRegularFile(realIndex, 'utf8')) as { weight_map?: unknown }).weight_map;
  } catch {
    return folder; // unreadable: the load names the error
  }
  if (typeof weightMap === 'object' && weightMap !== null) {
    for (const shard of new Set(Object.values(weightMap))) {
      if (typeof shard === 'string' && pathPresent(join(folder, shard))) real(join(folder, shard));
    }
  }
  return folder;
}
