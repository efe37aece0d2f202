// Views of auxiliary models: by name (NamedModels), and one workflow attempt's view (meteredModel): every call through
// its openai() clients and logprobs() counted into a usage sink and aborted with the attempt. No engine imports here:
// workflow worker threads use it without loading libtorch.
import type { OpenAI } from 'openai';
import type { AuxiliaryModel, AuxiliaryModels } from './types.js';
import { type AuxiliaryCall, meteredFetch } from './usage.js';

/** A started auxiliary model: the contract plus what other threads need and a way to stop it. */
export interface ServedAuxiliaryModel extends AuxiliaryModel {
  /** Base URL and key, for clients made elsewhere (a workflow worker thread). */
  endpoint(): Promise<{ baseURL: string; apiKey: string | null }>;
  close(): Promise<void>;
}

/** Where counted calls go: an AuxiliaryUsage, or (in a workflow worker thread) a message to the main thread. */
export interface AuxiliaryUsageSink {
  record(name: string, call: AuxiliaryCall): void;
}

/** What a workflow attempt's view adds: its calls are counted into `usage` and aborted with `signal`. */
export interface AttemptAuxiliaryOptions {
  signal?: AbortSignal;
  usage: AuxiliaryUsageSink;
}

/** A list of models by name; get() names the known ones when asked for another. */
export class NamedModels<M extends AuxiliaryModel> implements AuxiliaryModels {
  readonly list: readonly M[];

  constructor(list: readonly M[]) {
    const seen = new Set<string>();
    for (const m of list) {
      if (seen.has(m.name)) throw new Error(`auxiliary models: the name '${m.name}' is used twice`);
      seen.add(m.name);
    }
    this.list = list;
  }

  get(name: string): M {
    const found = this.list.find((m) => m.name === name);
    if (found !== undefined) return found;
    throw new Error(
      this.list.length === 0
        ? `no auxiliary model '${name}': the run has none (explorer.auxiliary_models)`
        : `no auxiliary model '${name}'; the run has: ${this.list.map((m) => m.name).join(', ')} (explorer.auxiliary_models)`,
    );
  }
}

/** Any model, with its calls counted into `usage` and aborted with `signal`. */
export function meteredModel(
  model: AuxiliaryModel & Pick<ServedAuxiliaryModel, 'endpoint'>,
  options: AttemptAuxiliaryOptions,
): AuxiliaryModel {
  const record = (call: AuxiliaryCall) => options.usage.record(model.name, call);
  return {
    name: model.name,
    modelName: model.modelName,
    tokenizer: model.tokenizer,
    ...(model.contextLength !== undefined ? { contextLength: model.contextLength } : {}),
    baseUrl: () => model.baseUrl(),
    openai: async (): Promise<OpenAI> => {
      const { OpenAI } = await import('openai');
      const { baseURL, apiKey } = await model.endpoint();
      return new OpenAI({
        baseURL,
        apiKey: apiKey ?? 'none',
        timeout: 30 * 60 * 1000,
        fetch: meteredFetch(record, options.signal),
      });
    },
    logprobs: async (promptIds, completionIds, scoreOptions = {}) => {
      const started = performance.now();
      const signals = [scoreOptions.signal, options.signal].filter((s): s is AbortSignal => s !== undefined);
      const tokens = promptIds.length + completionIds.length;
      try {
        const values = await model.logprobs(promptIds, completionIds, {
          ...scoreOptions,
          ...(signals.length > 0 ? { signal: AbortSignal.any(signals) } : {}),
        });
        record({ tokens, seconds: (performance.now() - started) / 1000, failed: false });
        return values;
      } catch (error) {
        record({ tokens: 0, seconds: (performance.now() - started) / 1000, failed: true });
        throw error;
      }
    },
  };
}
