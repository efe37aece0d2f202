// An auxiliary model on an external OpenAI-compatible server (vLLM, SGLang, another `trinity serve`): its own
// endpoint for openai(), and scoring by /v1/completions with echo (OpenAIRemoteEngine.score: the prompt's log-probs,
// as vLLM clients ask for them), so the teacher of a distillation can run anywhere.
import type { OpenAI } from 'openai';
import { OpenAIRemoteEngine } from '../../openai/index.js';
import type { Tokenizer } from '../../tokenizer/index.js';
import { checkScoreInput } from './embedded.js';
import type { AuxiliaryModel, AuxiliaryScoreOptions } from './types.js';

export interface RemoteAuxiliarySettings {
  name: string;
  /** …/v1 */
  baseUrl: string;
  apiKey: string | null;
  /** The model id the server serves (checked against its /v1/models when connecting). */
  modelName: string;
  /** Its tokenizer when the model folder is known (model_path), else null. */
  tokenizer: Tokenizer | null;
}

export class RemoteAuxiliaryModel implements AuxiliaryModel {
  readonly name: string;
  readonly modelName: string;
  readonly tokenizer: Tokenizer | null;
  readonly #engine: OpenAIRemoteEngine;
  readonly #apiKey: string | null;

  private constructor(settings: RemoteAuxiliarySettings, engine: OpenAIRemoteEngine) {
    this.name = settings.name;
    this.modelName = settings.modelName;
    this.tokenizer = settings.tokenizer;
    this.#engine = engine;
    this.#apiKey = settings.apiKey;
  }

  /** Connects: the server must answer /v1/models and serve `modelName`. */
  static async connect(settings: RemoteAuxiliarySettings): Promise<RemoteAuxiliaryModel> {
    try {
      const engine = await OpenAIRemoteEngine.connect({
        baseURL: settings.baseUrl,
        model: settings.modelName,
        apiKey: settings.apiKey,
        tokenizer: settings.tokenizer,
      });
      return new RemoteAuxiliaryModel(settings, engine);
    } catch (error) {
      throw new Error(`auxiliary model '${settings.name}': ${error instanceof Error ? error.message : String(error)}`);
    }
  }

  async endpoint(): Promise<{ baseURL: string; apiKey: string | null }> {
    return { baseURL: this.#engine.baseURL, apiKey: this.#apiKey };
  }

  async baseUrl(): Promise<string> {
    return this.#engine.baseURL;
  }

  async openai(): Promise<OpenAI> {
    const { OpenAI } = await import('openai');
    return new OpenAI({ baseURL: this.#engine.baseURL, apiKey: this.#apiKey ?? 'none', timeout: 30 * 60 * 1000 });
  }

  async logprobs(
    promptIds: readonly number[],
    completionIds: readonly number[],
    options: AuxiliaryScoreOptions = {},
  ): Promise<number[]> {
    checkScoreInput(this.name, promptIds, completionIds);
    if (completionIds.length === 0) return [];
    const scored = await this.#engine.score([...promptIds, ...completionIds], {
      ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    return scored.logprobs.slice(promptIds.length) as number[];
  }

  /** Nothing to free: the server is not ours. */
  async close(): Promise<void> {}
}
