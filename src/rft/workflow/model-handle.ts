// The rollout model behind the Workflow API: EngineModelHandle over a RolloutEngine, a WorkerRolloutEngine or
// anything else that generates with exact token ids, and the one place rollouts become Experience records.
//
//   const model = new EngineModelHandle(engine);                  // the synchronizer sets model.modelVersion
//   const result = await model.chat(messages, { n: 4, seed: 1 });
//   const experiences = result.choices.map((c) => model.toExperience(c, { reward: score(c.message.content) }));
//
// An experience is built from the ids the engine returned, never from text:
//   tokens = promptIds ++ completionIds, promptLength = |promptIds|, logprobs = the engine's, actionMask = 1 …,
//   temperature = the τ the engine's logprobs are taken at: the request's temperature (greedy 0 and unset: 1; top-k,
//                 top-p, min-p do not change logprobs, ../../engine/sampling.ts), so the trainer recomputes them at τ
// The handle remembers which call produced each choice/completion object (prompt ids, model version and temperature
// of the call), so toExperience(choice) needs nothing else. Recorded conversation turns keep the temperature in
// turn.meta.temperature; a conversation experience needs one temperature for all its replies. A chat choice that continued a conversation (see
// ../../engine/conversation.ts) becomes one experience of the whole conversation, action mask 0 between the replies.
//
// Agents that speak the OpenAI API: the handle starts (once, on 127.0.0.1) an OpenAI-compatible endpoint over the
// engine (../../openai/), and each workflow attempt gets its own scope /s/<id>/v1 recording into the attempt's
// conversation history:
//   const client = await model.openai();                          // an `openai` npm client; any model name
//   ... the agent's own calls ...
//   return model.recordedExperiences({ reward });                 // one experience per conversation
//
// Prompts over model.max_prompt_tokens (the handle's promptLimit): each attempt's handle makes them placeholder
// samples that are never generated and train nothing (./prompt-truncation.ts).
import { randomBytes, randomUUID } from 'node:crypto';
// Values from the engine's leaf modules and the OpenAI server imported when first served: a workflow worker thread
// (./isolation/) runs this handle without loading libtorch.
import type { ChatChoice, ChatOptions, ChatResult, GenerateRequest, GenerateResult, ImagePrompts } from '../../engine/index.js';
import { chatResult } from '../../engine/chat.js';
import { hasImageParts, imageDataUrls } from '../../engine/vision-chat.js';
import { ConversationTracker, type ConversationTurn, conversationTokens } from '../../engine/conversation.js';
import type { OpenAIServer, RequestScope } from '../../openai/index.js';
import type { ChatInputMessage, Tokenizer } from '../../tokenizer/index.js';
import type { ChatTurn, Experience } from '../experience.js';
import { encodeRoutedExperts } from '../routed-experts.js';
import {
  limitedPromptIds,
  overPromptLimit,
  PROMPT_TRUNCATED_TEXT,
  type PromptLimit,
  placeholderResult,
} from './prompt-truncation.js';
import type {
  ModelHandle,
  RecordedExperienceOptions,
  RolloutOutput,
  ServedScope,
  ServeScopeOptions,
  ToExperienceOptions,
} from './types.js';

/** The model name the rollout endpoint reports (it accepts any name a client sends). */
export const ROLLOUT_MODEL_NAME = 'rollout-model';

/** What EngineModelHandle needs of an engine (RolloutEngine and WorkerRolloutEngine both fit). */
export interface RolloutBackend {
  readonly tokenizer: Tokenizer | null;
  /**
   * The model's vocabulary (config.json's vocab_size), when the engine knows it: the rollout endpoint checks token ids
   * against it (OpenAIService's default bound), not against the tokenizer's, which can be smaller.
   */
  readonly vocabSize?: number;
  /** A vision-language model's image token and processor (chat with image parts; src/engine/vision-chat.ts). */
  readonly vision?: ImagePrompts | null;
  generate(request: GenerateRequest): Promise<GenerateResult>;
  chat(messages: readonly ChatInputMessage[], options?: ChatOptions): Promise<ChatResult>;
}

/** Where an output came from. */
interface Provenance {
  promptIds: readonly number[];
  modelVersion: number;
  /** τ of its logprobs. */
  temperature: number;
  /** A vision-language prompt's images (data URLs, in placeholder order): the experience keeps them. */
  images?: readonly string[];
}

/** The τ an engine's logprobs are taken at for a request's `temperature` (greedy records τ = 1; the default is 1). */
export function logprobTemperature(temperature: number | undefined): number {
  return temperature === undefined || temperature === 0 ? 1 : temperature;
}

export class EngineModelHandle implements ModelHandle {
  readonly engine: RolloutBackend;
  #modelVersion: number;
  readonly #provenance = new WeakMap<object, Provenance>();
  /** The stage's prompt rule, applied by each attempt's handle (attemptModelHandle); null: none. */
  promptLimit: PromptLimit | null;

  constructor(engine: RolloutBackend, options: { modelVersion?: number; promptLimit?: PromptLimit | null } = {}) {
    this.engine = engine;
    this.#modelVersion = 0;
    this.modelVersion = options.modelVersion ?? 0;
    this.promptLimit = options.promptLimit ?? null;
  }

  get tokenizer(): Tokenizer | null {
    return this.engine.tokenizer;
  }

  get vision(): ImagePrompts | null {
    return this.engine.vision ?? null;
  }

  /** Weights version served: the synchronizer sets it after each weight sync. */
  get modelVersion(): number {
    return this.#modelVersion;
  }

  set modelVersion(version: number) {
    if (!Number.isInteger(version) || version < 0)
      throw new RangeError(`EngineModelHandle: modelVersion must be a non-negative integer, got ${String(version)}`);
    this.#modelVersion = version;
  }

  async generate(request: GenerateRequest): Promise<GenerateResult> {
    const temperature = logprobTemperature(request.temperature);
    // a vision-language request's images, which its experiences keep as data URLs
    const images = request.images?.length ? { images: await imageDataUrls(request.images) } : {};
    const result = await this.engine.generate(request);
    // read once the call returned: weights swapped mid-step (./weight-swap-gate.ts) never change under a call, and
    // the version now is the one that served it
    const modelVersion = this.#modelVersion;
    for (const completion of result.completions)
      this.#provenance.set(completion, { promptIds: result.promptIds, modelVersion, temperature, ...images });
    return result;
  }

  async chat(messages: readonly ChatInputMessage[], options: ChatOptions = {}): Promise<ChatResult> {
    const temperature = logprobTemperature(options.temperature);
    const turnMeta: Record<string, unknown> | undefined = options.conversation
      ? { ...options.turnMeta, temperature }
      : options.turnMeta;
    const result = await this.engine.chat(messages, { ...options, ...(turnMeta ? { turnMeta } : {}) });
    // as in generate(): the version that served the call; the recorded turn keeps this meta object
    const modelVersion = this.#modelVersion;
    if (options.conversation && turnMeta) turnMeta.modelVersion = modelVersion;
    const provenance = {
      promptIds: result.promptIds,
      modelVersion,
      temperature,
      ...(result.images ? { images: result.images } : {}),
    };
    this.#provenance.set(result, provenance);
    for (const choice of result.choices) this.#provenance.set(choice, provenance);
    return result;
  }

  /** The handle's own conversation history (calls made on the handle itself, outside workflow attempts). */
  #conversation: ConversationTracker | null = null;
  #served: Promise<{ server: OpenAIServer; scopes: Map<string, RequestScope>; keyScopes: Map<string, RequestScope> }> | null =
    null;
  #ownScope: Promise<ServedScope> | null = null;

  #history(): ConversationTracker {
    if (this.tokenizer === null) throw new Error('the rollout model has no tokenizer: chat recording needs one');
    this.#conversation ??= new ConversationTracker(this.tokenizer);
    return this.#conversation;
  }

  /**
   * Starts (once) the rollout endpoint on 127.0.0.1 and opens a scope recording into `conversation`: under a path of
   * its own (/s/<id>/v1), or (byApiKey) under a fresh per-run API key on the plain /v1 (other keys get 401).
   */
  async serveScope(scope: ServeScopeOptions): Promise<ServedScope> {
    this.#served ??= (async () => {
      const { OpenAIService, startOpenAIServer } = await import('../../openai/index.js');
      const scopes = new Map<string, RequestScope>();
      const keyScopes = new Map<string, RequestScope>();
      const service = new OpenAIService({ modelName: ROLLOUT_MODEL_NAME, backend: this.engine, acceptAnyModel: true });
      const server = await startOpenAIServer({ service, scopes, keyScopes });
      server.server.unref(); // the endpoint never keeps the process alive
      return { server, scopes, keyScopes };
    })();
    const { server, scopes, keyScopes } = await this.#served;
    const requestScope: RequestScope = {
      conversation: scope.conversation,
      ...(scope.signal ? { signal: scope.signal } : {}),
      modelVersion: () => this.#modelVersion,
    };
    const id = randomBytes(16).toString('hex');
    const table = scope.byApiKey ? keyScopes : scopes;
    const key = scope.byApiKey ? `sk-run-${id}` : id;
    table.set(key, requestScope);
    const release = () => void table.delete(key);
    scope.signal?.addEventListener('abort', release, { once: true });
    if (scope.signal?.aborted) release();
    return scope.byApiKey
      ? { baseURL: server.baseURL, apiKey: key, modelName: ROLLOUT_MODEL_NAME, release }
      : { baseURL: `${server.url}/s/${id}/v1`, modelName: ROLLOUT_MODEL_NAME, release };
  }

  async openaiBaseUrl(): Promise<string> {
    this.#ownScope ??= this.serveScope({ conversation: this.#history() });
    return (await this.#ownScope).baseURL;
  }

  async openai(): Promise<import('openai').OpenAI> {
    return openaiClient(await this.openaiBaseUrl());
  }

  recordedExperiences(options: RecordedExperienceOptions = {}): Experience[] {
    return this.#conversation ? experiencesFromConversation(this.#conversation, options) : [];
  }

  /** Stops the rollout endpoint (if started). The engine is the caller's to close. */
  async close(): Promise<void> {
    const served = this.#served;
    this.#served = null;
    this.#ownScope = null;
    if (served) await (await served).server.close();
  }

  toExperience(output: RolloutOutput, options: ToExperienceOptions = {}): Experience {
    const provenance = this.#provenance.get(output);
    const promptIds = options.promptIds ?? provenance?.promptIds ?? (output as Partial<ChatResult>).promptIds;
    if (promptIds === undefined) {
      throw new Error(
        'toExperience: this output did not come from this model handle (a copy?); pass options.promptIds with the prompt ids it continues',
      );
    }
    return buildExperience(output, {
      ...options,
      promptIds,
      modelVersion: options.modelVersion ?? provenance?.modelVersion ?? this.#modelVersion,
      ...(provenance ? { temperature: provenance.temperature } : {}),
      ...(provenance?.images ? { images: provenance.images } : {}),
    });
  }
}

/**
 * The τ of the logprobs of `turn` and, for the whole conversation ('conversation' scope), of the replies before it:
 * from turn.meta.temperature (undefined when no turn recorded one). Replies at different temperatures cannot share
 * one experience.
 */
function conversationTemperature(turn: ConversationTurn, wholeConversation: boolean): number | undefined {
  const seen = new Set<number>();
  for (let t: ConversationTurn | null = turn; t !== null; t = wholeConversation ? t.prompt.parent : null) {
    const value = t.meta.temperature;
    if (typeof value === 'number') seen.add(value);
  }
  if (seen.size > 1) {
    throw new Error(
      `toExperience: the conversation's replies were sampled at different temperatures (${[...seen].join(', ')}), ` +
        `and an experience has one; record it with scope: 'turn' (one experience per reply)`,
    );
  }
  return seen.values().next().value;
}

/** An Experience from one output and the prompt ids it continues; see the header. */
export function buildExperience(
  output: RolloutOutput,
  options: ToExperienceOptions & {
    promptIds: readonly number[];
    modelVersion: number;
    temperature?: number;
    images?: readonly string[];
  },
): Experience {
  const completionIds = isChatChoice(output) ? output.completionIds : output.tokenIds;
  if (output.logprobs.length !== completionIds.length) {
    throw new Error(`toExperience: the output has ${completionIds.length} completion ids but ${output.logprobs.length} logprobs`);
  }
  const text = isChatChoice(output) ? output.message.content : (output.text ?? undefined);
  const turn = isChatChoice(output) && options.scope !== 'turn' ? output.turn : undefined;
  const tokens = turn
    ? conversationTokens(turn)
    : {
        tokens: [...options.promptIds, ...completionIds],
        promptLength: options.promptIds.length,
        logprobs: [...output.logprobs],
        actionMask: completionIds.map(() => 1),
      };
  const recorded = isChatChoice(output) && output.turn ? conversationTemperature(output.turn, turn !== undefined) : undefined;
  const temperature = recorded ?? options.temperature ?? 1;
  const experience: Experience = {
    eid: options.eid ?? randomUUID(),
    ...tokens,
    temperature,
    info: {
      ...options.info,
      modelVersion: options.modelVersion,
      runId: options.runId ?? output.index,
      ...(options.taskId !== undefined ? { taskId: options.taskId } : {}),
    },
  };
  if (options.reward !== undefined) experience.reward = options.reward;
  if (options.metrics !== undefined) experience.metrics = { ...options.metrics };
  const responseText = options.responseText ?? text;
  if (responseText !== undefined) experience.responseText = responseText;
  if (options.promptText !== undefined) experience.promptText = options.promptText;
  if (options.messages !== undefined) experience.messages = options.messages;
  if (output.finishReason === 'length') experience.truncateStatus = 'response_truncated';
  // the prompt's images (a conversation's: the whole conversation's), for the trainer's vision tower
  const images = turn ? turn.prompt.images : options.images;
  if (images !== undefined && images.length > 0) experience.images = [...images];
  // router replay: the engine's record covers every token it fed, all but the last (a conversation whose tokens are
  // not this call's prompt ++ completion keeps none: its tokens then route themselves in training)
  const routed = output.routedExperts;
  if (routed !== undefined && routed.ids.length === (experience.tokens.length - 1) * routed.layers.length * routed.k)
    experience.routedExperts = encodeRoutedExperts(routed.ids, routed.layers, routed.k);
  return experience;
}

/** An `openai` client for an endpoint of ours: no retries (a retried call would be recorded twice). */
async function openaiClient(baseURL: string): Promise<import('openai').OpenAI> {
  const { OpenAI } = await import('openai');
  return new OpenAI({ baseURL, apiKey: 'trinity-rollout', maxRetries: 0, timeout: 30 * 60 * 1000 });
}

/** Experiences of a conversation history: its conversations' last turns, or every turn ('turn' scope). */
export function experiencesFromConversation(
  conversation: ConversationTracker,
  options: RecordedExperienceOptions & { taskId?: string } = {},
): Experience[] {
  const scope = options.scope ?? 'conversation';
  const turns = scope === 'turn' ? conversation.turns() : conversation.leaves();
  return turns.map((turn) => turnExperience(turn, { ...options, scope }));
}

/** The experience of one recorded turn: its whole conversation up to it ('conversation') or the turn alone. */
export function turnExperience(
  turn: ConversationTurn,
  options: RecordedExperienceOptions & { taskId?: string } = {},
): Experience {
  const scope = options.scope ?? 'conversation';
  let depth = 0;
  for (let t = turn.prompt.parent; t !== null; t = t.prompt.parent) depth++;
  const choice: ChatChoice = {
    index: 0,
    message: {
      role: 'assistant',
      content: turn.reply.content,
      ...(turn.reply.tool_calls ? { tool_calls: turn.reply.tool_calls } : {}),
    },
    completionIds: [...turn.completionIds],
    logprobs: [...turn.completionLogprobs],
    finishReason: turn.finishReason,
    stopReason: null,
    turn,
  };
  const messages: ChatTurn[] = [...turn.prompt.messages, turn.reply].map((m) => ({ ...m }) as ChatTurn);
  return buildExperience(choice, {
    promptIds: turn.prompt.promptIds,
    ...(turn.prompt.images ? { images: turn.prompt.images } : {}),
    modelVersion: typeof turn.meta.modelVersion === 'number' ? turn.meta.modelVersion : 0,
    scope,
    runId: options.runId ?? 0,
    messages,
    info: { ...options.info, ...(scope === 'turn' ? { stepIndex: depth } : {}) },
    ...(options.reward !== undefined ? { reward: options.reward } : {}),
    ...(options.metrics !== undefined ? { metrics: options.metrics } : {}),
    ...(options.taskId !== undefined ? { taskId: options.taskId } : {}),
  });
}

function isChatChoice(output: RolloutOutput): output is ChatChoice {
  return 'completionIds' in output;
}

/**
 * The handle one workflow attempt sees: every model call also carries `signal` (so a timeout aborts generations
 * the workflow started, and calls after the attempt ended fail at once), toExperience() defaults the task id, and
 * prompts over the base handle's promptLimit become placeholder samples (./prompt-truncation.ts).
 */
export function attemptModelHandle(base: ModelHandle, attempt: { signal: AbortSignal; taskId: string }): ModelHandle {
  const withSignal = <T extends { signal?: AbortSignal }>(options: T): T => ({
    ...options,
    signal: options.signal ? AbortSignal.any([options.signal, attempt.signal]) : attempt.signal,
  });
  // The attempt's own conversation history: follow-up chat calls continue earlier ones exactly.
  let conversation: ConversationTracker | null = null;
  const tracker = () => {
    if (conversation === null && base.tokenizer !== null) conversation = new ConversationTracker(base.tokenizer);
    return conversation;
  };
  let served: Promise<ServedScope> | null = null;
  const baseUrl = async () => {
    const history = tracker();
    if (history === null) throw new Error('the rollout model has no tokenizer: the OpenAI endpoint needs one');
    served ??= base.serveScope({ conversation: history, signal: attempt.signal });
    return (await served).baseURL;
  };
  const limit = base.promptLimit ?? null;
  const rule = limit !== null && base.tokenizer !== null ? new PromptRule(limit, base.tokenizer) : null;
  return {
    get tokenizer() {
      return base.tokenizer;
    },
    get vision() {
      return base.vision ?? null;
    },
    get modelVersion() {
      return base.modelVersion;
    },
    promptLimit: limit,
    generate: async (request) => {
      const checked = rule ? rule.generate(request) : request;
      return 'completions' in checked ? checked : base.generate(withSignal(checked));
    },
    chat: async (messages, options = {}) => {
      const history = options.conversation ?? tracker();
      const placeholder = rule?.chat(messages, options, history) ?? null;
      if (placeholder !== null) return placeholder;
      return base.chat(messages, withSignal(history ? { ...options, conversation: history } : options));
    },
    toExperience: (output, options = {}) => {
      const promptIds = rule?.promptIdsOf(output);
      if (promptIds === undefined) return base.toExperience(output, { taskId: attempt.taskId, ...options });
      return placeholderExperience(output, {
        taskId: attempt.taskId,
        ...options,
        promptIds,
        modelVersion: options.modelVersion ?? base.modelVersion,
      });
    },
    openaiBaseUrl: baseUrl,
    openai: async () => openaiClient(await baseUrl()),
    recordedExperiences: (options = {}) =>
      conversation ? experiencesFromConversation(conversation, { taskId: attempt.taskId, ...options }) : [],
    serveScope: (scope) =>
      base.serveScope({ ...scope, signal: scope.signal ? AbortSignal.any([scope.signal, attempt.signal]) : attempt.signal }),
  };
}

/**
 * An attempt's calls under model.max_prompt_tokens (./prompt-truncation.ts): a text prompt is tokenized within the
 * bound, a prompt over the limit is answered with placeholder samples (remembered here, for toExperience), a chat
 * call that continues a recorded conversation is left to the engine's max_model_len.
 */
class PromptRule {
  readonly #limit: PromptLimit;
  readonly #tokenizer: Tokenizer;
  /** Placeholder outputs (results, choices, completions) → the prompt ids they stand after. */
  readonly #placeholders = new WeakMap<object, readonly number[]>();

  constructor(limit: PromptLimit, tokenizer: Tokenizer) {
    this.#limit = limit;
    this.#tokenizer = tokenizer;
  }

  /** The request to send (a text prompt as its ids), or the placeholder result of a prompt over the limit. */
  generate(request: GenerateRequest): GenerateRequest | GenerateResult {
    if (request.promptIds !== undefined && request.prompt !== undefined) return request; // the engine says why not
    let ids = request.promptIds;
    if (ids === undefined && request.prompt !== undefined) ids = limitedPromptIds(this.#tokenizer, request.prompt, this.#limit);
    if (ids === undefined) return request;
    if (this.#limit.truncate && overPromptLimit(ids, this.#limit)) return this.#placeholder(ids, request.n ?? 1);
    if (request.promptIds !== undefined) return request;
    const { prompt: _text, ...rest } = request;
    return { ...rest, promptIds: ids };
  }

  /** The placeholder result of a chat call whose (fresh) prompt is over the limit, else null: the call goes ahead. */
  chat(messages: readonly ChatInputMessage[], options: ChatOptions, history: ConversationTracker | null): ChatResult | null {
    if (messages.length === 0 || !this.#tokenizer.hasChatTemplate) return null; // the engine says why not
    // images: their placeholders are sized only when decoded (../../engine/vision-chat.ts), so the prompt is left to
    // the engine's max_model_len, as a continued conversation is (./prompt-truncation.ts)
    if (hasImageParts(messages)) return null;
    const { tools, templateVariables } = options;
    const template = { ...(tools ? { tools } : {}), ...(templateVariables ? { templateVariables } : {}) };
    if (history?.continues(messages, template)) return null;
    const text = this.#tokenizer.applyChatTemplate(messages, {
      addGenerationPrompt: true,
      ...(tools ? { tools } : {}),
      ...(templateVariables ? { variables: templateVariables } : {}),
    });
    const ids = limitedPromptIds(this.#tokenizer, text, this.#limit);
    if (!(this.#limit.truncate && overPromptLimit(ids, this.#limit))) return null;
    const result = chatResult(this.#placeholder(ids, options.n ?? 1), { promptIds: ids, conversation: null });
    for (const output of [result, ...result.choices]) this.#placeholders.set(output, result.promptIds);
    return result;
  }

  promptIdsOf(output: RolloutOutput): readonly number[] | undefined {
    return this.#placeholders.get(output);
  }

  #placeholder(promptIds: readonly number[], n: number): GenerateResult {
    const result = placeholderResult(promptIds, this.#limit, n);
    for (const completion of result.completions) this.#placeholders.set(completion, result.promptIds);
    return result;
  }
}

/** The experience of a placeholder sample: the prompt's head and one masked token (./prompt-truncation.ts). */
function placeholderExperience(
  output: RolloutOutput,
  options: ToExperienceOptions & { promptIds: readonly number[]; modelVersion: number },
): Experience {
  const experience = buildExperience(output, { ...options, scope: 'turn' });
  experience.actionMask = [0];
  experience.truncateStatus = 'prompt_truncated';
  experience.responseText = PROMPT_TRUNCATED_TEXT;
  return experience;
}
