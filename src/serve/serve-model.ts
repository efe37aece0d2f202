// `trinity serve --model DIR`: a Hugging Face model folder behind the OpenAI-compatible API, on the embedded engine
// (continuous batching on its own thread). Nothing is recorded; see ./serve-stage.ts for training from agents.
//
//   const served = await serveModel({ modelDir: 'runs/quickstart/model', port: 8000, apiKey: 'secret' });
//   // new OpenAI({ baseURL: served.server.baseURL, apiKey: 'secret' })
//   await served.close();
import { basename, resolve } from 'node:path';
import type { ModelDType } from '../model/index.js';
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
        ? { reloadWeights: { root: resolve(options.reloadRoot), load: (dir: string) => engine.syncWeightsFromDir(dir) } }
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
