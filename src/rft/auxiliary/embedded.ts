// An auxiliary model in this process: engine_num WorkerRolloutEngines (each on its own thread with its own KV-cache
// slots) over one model folder, behind one OpenAI-compatible endpoint on 127.0.0.1 (started on first use). Requests
// go to the engine with the fewest in flight. Scoring (logprobs) is one cache-free forward (RolloutEngine.score).
//
//   const judge = await EmbeddedAuxiliaryModel.start({ name: 'judge', modelPath, engineNum: 1, slots: 4, ... });
//   const client = await judge.openai();                    // chat.completions / completions, any model name
//   const teacher = await judge.logprobs(promptIds, completionIds);
import { randomBytes } from 'node:crypto';
import type { OpenAI } from 'openai';
import {
  type ChatOptions,
  type ChatResult,
  chat,
  type GenerateRequest,
  type GenerateResult,
  type ScoreOptions,
  type ScoreResult,
  WorkerRolloutEngine,
} from '../../engine/index.js';
import type { ModelDType } from '../../model/index.js';
import type { OpenAIBackend, OpenAIServer } from '../../openai/index.js';
import type { ChatMessage, Tokenizer } from '../../tokenizer/index.js';
import type { AuxiliaryModel, AuxiliaryScoreOptions } from './types.js';

export interface EmbeddedAuxiliarySettings {
  name: string;
  /** A Hugging Face model folder (explorer.auxiliary_models[i].model_path). */
  modelPath: string;
  engineNum: number;
  slots: number;
  /** Context length per sequence (max_model_len); undefined: min(max_position_embeddings, 2048). */
  maxLength: number | undefined;
  dtype: ModelDType;
  /** Resolved device: 'cpu' or 'cuda:N'. */
  device: string;
  /** Intra-op threads of each engine. */
  numThreads: number;
  /** Variables every render of its chat template gets (explorer.auxiliary_models[i].enable_thinking); none: {}. */
  chatTemplateVariables?: Readonly<Record<string, unknown>>;
}

/** engine_num engines as one backend: each call goes to the engine with the fewest calls in flight. */
class EnginePool implements OpenAIBackend {
  readonly #engines: readonly WorkerRolloutEngine[];
  readonly #busy: number[];

  constructor(engines: readonly WorkerRolloutEngine[]) {
    this.#engines = engines;
    this.#busy = engines.map(() => 0);
  }

  get tokenizer(): Tokenizer | null {
    return (this.#engines[0] as WorkerRolloutEngine).tokenizer;
  }

  get maxLength(): number {
    return (this.#engines[0] as WorkerRolloutEngine).maxLength;
  }

  get vocabSize(): number {
    return (this.#engines[0] as WorkerRolloutEngine).vocabSize;
  }

  async #on<T>(fn: (engine: WorkerRolloutEngine) => Promise<T>): Promise<T> {
    let best = 0;
    for (let i = 1; i < this.#busy.length; i++) if ((this.#busy[i] as number) < (this.#busy[best] as number)) best = i;
    (this.#busy[best] as number)++;
    try {
      return await fn(this.#engines[best] as WorkerRolloutEngine);
    } finally {
      (this.#busy[best] as number)--;
    }
  }

  generate(request: GenerateRequest): Promise<GenerateResult> {
    return this.#on((engine) => engine.generate(request));
  }

  chat(messages: readonly ChatMessage[], options: ChatOptions = {}): Promise<ChatResult> {
    return chat(this, messages, options);
  }

  score(tokenIds: readonly number[], options: ScoreOptions = {}): Promise<ScoreResult> {
    return this.#on((engine) => engine.score(tokenIds, options));
  }

  async close(): Promise<void> {
    await Promise.all(this.#engines.map((engine) => engine.close('the auxiliary model was closed')));
  }
}

export class EmbeddedAuxiliaryModel implements AuxiliaryModel {
  readonly name: string;
  /** The endpoint accepts any model name; this is the one /v1/models lists. */
  readonly modelName: string;
  readonly #pool: EnginePool;
  /** A key of its own: the endpoint listens on loopback, and only this process's clients know it. */
  readonly #apiKey = randomBytes(16).toString('hex');
  #server: Promise<OpenAIServer> | null = null;

  private constructor(name: string, pool: EnginePool) {
    this.name = name;
    this.modelName = name;
    this.#pool = pool;
  }

  /** Starts engine_num engines on the model folder (all or none: a failed start closes the ones that started). */
  static async start(settings: EmbeddedAuxiliarySettings): Promise<EmbeddedAuxiliaryModel> {
    const started = await Promise.allSettled(
      Array.from({ length: settings.engineNum }, () =>
        WorkerRolloutEngine.start(settings.modelPath, {
          dtype: settings.dtype,
          device: settings.device,
          slots: settings.slots,
          ...(settings.maxLength !== undefined ? { maxLength: settings.maxLength } : {}),
          numThreads: settings.numThreads,
        }),
      ),
    );
    const engines = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed !== undefined) {
      await Promise.all(engines.map((e) => e.close()));
      const reason = failed.reason instanceof Error ? failed.reason.message : String(failed.reason);
      throw new Error(`auxiliary model '${settings.name}': loading ${settings.modelPath} failed: ${reason}`);
    }
    // every render of its chat template (a judge's prompts, over its endpoint or not) starts from these variables
    for (const engine of engines) {
      if (engine.tokenizer !== null) engine.tokenizer.templateDefaults = settings.chatTemplateVariables ?? {};
    }
    return new EmbeddedAuxiliaryModel(settings.name, new EnginePool(engines));
  }

  get tokenizer(): Tokenizer | null {
    return this.#pool.tokenizer;
  }

  get contextLength(): number {
    return this.#pool.maxLength;
  }

  /** Its endpoint and key (workflow worker threads make their own clients from them). */
  async endpoint(): Promise<{ baseURL: string; apiKey: string | null }> {
    this.#server ??= (async () => {
      const { OpenAIService, startOpenAIServer } = await import('../../openai/index.js');
      const service = new OpenAIService({ modelName: this.modelName, backend: this.#pool, acceptAnyModel: true });
      const server = await startOpenAIServer({ service, apiKey: this.#apiKey });
      server.server.unref(); // the endpoint never keeps the process alive
      return server;
    })();
    return { baseURL: (await this.#server).baseURL, apiKey: this.#apiKey };
  }

  async baseUrl(): Promise<string> {
    return (await this.endpoint()).baseURL;
  }

  async openai(): Promise<OpenAI> {
    const { OpenAI } = await import('openai');
    const { baseURL, apiKey } = await this.endpoint();
    return new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30 * 60 * 1000 });
  }

  async logprobs(
    promptIds: readonly number[],
    completionIds: readonly number[],
    options: AuxiliaryScoreOptions = {},
  ): Promise<number[]> {
    checkScoreInput(this.name, promptIds, completionIds);
    if (completionIds.length === 0) return [];
    const scored = await this.#pool.score([...promptIds, ...completionIds], {
      ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    return scored.logprobs.slice(promptIds.length) as number[];
  }

  async close(): Promise<void> {
    const server = this.#server;
    this.#server = null;
    if (server) await (await server).close();
    await this.#pool.close();
  }
}

/** A scoring request needs a prompt (the first token has no log-prob). */
export function checkScoreInput(name: string, promptIds: readonly number[], completionIds: readonly number[]): void {
  if (promptIds.length === 0)
    throw new RangeError(`auxiliary model '${name}': logprobs needs at least one prompt id (the first token has no log-prob)`);
  for (const [what, ids] of [
    ['promptIds', promptIds],
    ['completionIds', completionIds],
  ] as const) {
    const bad = ids.findIndex((id) => !Number.isInteger(id) || id < 0);
    if (bad !== -1) throw new RangeError(`auxiliary model '${name}': ${what}[${bad}] = ${String(ids[bad])} is not a token id`);
  }
}
