// `trinity serve --model DIR`: a Hugging Face model folder behind the OpenAI-compatible API, on the embedded engine
// (continuous batching on its own thread). Nothing is recorded; see ./serve-stage.ts for training from agents.
//
//   const served = await serveModel({ modelDir: 'runs/quickstart/model', port: 8000, apiKey: 'secret' });
//   // new OpenAI({ baseURL: served.server.baseURL, apiKey: 'secret' })
//   await served.close();
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { basename, isAbsolute, join, relative, resolve } from 'node:path';
import { loadModelConfig, type ModelDType } from '../model/index.js';
import { WorkerRolloutEngine } from '../engine/index.js';
import { OpenAIService, type OpenAIServer, startOpenAIServer } from '../openai/index.js';

export interface ServeModelOptions {
  modelDir: string;
  /** The id clients name (default: the folder's name). */
  modelName?: string;
  host?: string;
  port?: number;
  apiKey?: string | null;
  dtype?: ModelDType;
  /** Sequences decoded at once (default 16). */
  slots?: number;
  /** Context per sequence (default: the model's, at most 2048). */
  maxLength?: number;
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

export async function serveModel(options: ServeModelOptions): Promise<ServedModel> {
  const modelDir = resolve(options.modelDir);
  const modelName = options.modelName ?? basename(modelDir);
  const engine = await WorkerRolloutEngine.start(modelDir, {
    slots: options.slots ?? 16,
    ...(options.maxLength !== undefined ? { maxLength: options.maxLength } : {}),
    ...(options.dtype ? { dtype: options.dtype } : {}),
    ...(options.numThreads ? { numThreads: options.numThreads } : {}),
  });
  const tokenizer = engine.tokenizer;
  if (tokenizer === null) {
    await engine.close();
    throw new Error(`${modelDir}: no tokenizer.json (the OpenAI API needs a tokenizer)`);
  }
  const service = new OpenAIService({
    modelName,
    backend: engine,
    vocabSize: loadModelConfig(modelDir).vocabSize, // token ids in requests are checked against the model's own
    ...(options.maxTokens !== undefined ? { maxTokens: options.maxTokens } : {}),
    ...(options.maxPromptTokens !== undefined ? { maxPromptTokens: options.maxPromptTokens } : {}),
    ...(options.maxN !== undefined ? { maxN: options.maxN } : {}),
  });
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
                const copied = await engine.syncWeightsFromDir(resolveReloadFolder(options.reloadRoot as string, dir));
                // one line per reload: a run's operator (and the engine-pool test) counts them per server
                options.log?.(`reloaded weights from ${dir} (${copied} tensors)`);
                return copied;
              },
            },
          }
        : {}),
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
    },
  };
}

/**
 * The real folder a weight reload may read: `dir` and each weight file in it (model.safetensors, or the shard index
 * and the shards its weight_map names) must resolve, symlinks followed, inside the real `root`; else an error naming
 * the path and where it leads. The reload then reads the returned real path, not the link.
 */
export function resolveReloadFolder(root: string, dir: string): string {
  const realRoot = realpathSync(root);
  const real = (path: string): string => {
    let target: string;
    try {
      target = realpathSync(path);
    } catch (error) {
      throw new Error(
        `${path}: ${(error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file or folder' : (error as Error).message}`,
      );
    }
    const inside = relative(realRoot, target);
    if (inside.startsWith('..') || isAbsolute(inside))
      throw new Error(`${path} resolves to ${target}, outside the reload root ${realRoot} (symlinks are followed)`);
    return target;
  };
  const folder = real(dir);
  const index = join(folder, 'model.safetensors.index.json');
  if (!existsSync(index)) {
    const single = join(folder, 'model.safetensors');
    if (existsSync(single)) real(single);
    return folder; // nothing to read: the load says so
  }
  real(index);
  let weightMap: unknown;
  try {
    weightMap = (JSON.parse(readFileSync(index, 'utf8')) as { weight_map?: unknown }).weight_map;
  } catch {
    return folder; // unreadable: the load names the error
  }
  if (typeof weightMap === 'object' && weightMap !== null) {
    for (const shard of new Set(Object.values(weightMap))) {
      if (typeof shard === 'string' && existsSync(join(folder, shard))) real(join(folder, shard));
    }
  }
  return folder;
}
