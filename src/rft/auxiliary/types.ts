// What an auxiliary model is (Trinity-RFT's `explorer.auxiliary_models`): a judge, reward model or teacher that runs
// next to the rollout model. Workflows, rewards and data operators reach it as an OpenAI client (chat/completions)
// and as a scoring API (per-token log-probs of given ids). Its calls are never recorded as experiences; their time
// and token counts are metrics. This file holds only the contract, so rewards and workflows depend on it without
// depending on how the model is served (an embedded engine or an external OpenAI-compatible endpoint).
import type { OpenAI } from 'openai';
import type { Tokenizer } from '../../tokenizer/index.js';

export interface AuxiliaryScoreOptions {
  /** Aborts the call (a task timeout or the run stopping). */
  signal?: AbortSignal;
  /**
   * τ of the scored distribution, log_softmax(logits / τ) (default 1). An external endpoint scores at 1 only (vLLM's
   * prompt log-probs are raw); another τ is refused there.
   */
  temperature?: number;
}

export interface AuxiliaryModel {
  /** `name` from the config (default: `auxiliary_<index>`). */
  readonly name: string;
  /** The model name its endpoint expects in requests. */
  readonly modelName: string;
  /** Its tokenizer when the model is embedded or its folder is known; null for a remote endpoint without one. */
  readonly tokenizer: Tokenizer | null;
  /**
   * Positions per sequence (prompt + completion) when known: an embedded model's max_model_len. Undefined for a
   * remote endpoint. A judge bounds its max_tokens by what the prompt leaves of it (src/rft/reward/judge-call.ts).
   */
  readonly contextLength?: number;
  /** An official `openai` client on this model (chat.completions, completions). */
  openai(): Promise<OpenAI>;
  /** The same endpoint as a base URL (…/v1) for other SDKs. */
  baseUrl(): Promise<string>;
  /**
   * log p(completionIds[i] | promptIds ++ completionIds[..i]) for every completion token, in nats, computed by this
   * model (teacher log-probs for distillation, a reward model's token probability).
   */
  logprobs(promptIds: readonly number[], completionIds: readonly number[], options?: AuxiliaryScoreOptions): Promise<number[]>;
}

/** The auxiliary models of a run, in config order, by name. */
export interface AuxiliaryModels {
  readonly list: readonly AuxiliaryModel[];
  /** The model named `name`; an Error naming the known ones when there is none. */
  get(name: string): AuxiliaryModel;
}
