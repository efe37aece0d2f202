// Mode serve (Trinity-RFT's explorer proxy): external agents call an OpenAI-compatible endpoint, their calls are
// recorded with exact token ids, and rewards arrive later by response id; a separate `train` process sharing the
// buffer and job folder trains on them online, and this process picks up its weights.
//
//   agent ── POST /v1/chat/completions ──▶ engine          (a follow-up call continues the conversation exactly)
//   agent ── POST /feedback {response_id, reward} ──▶ experience (the whole conversation up to that reply, action
//                                                     mask on generated tokens) ──▶ SQLite experience buffer
//   train process (mode train, same buffer) ──▶ sync/latest.json ──▶ this engine reloads the weights
//
// /feedback body: { response_id, reward, choice_index = 0, task_id = response_id, run_id = choice_index, metrics }.
// Choices of one response share a task id by default, so `n` samples with a reward each form a GRPO group; separate
// n=1 calls form one when their feedback names the same task_id (the trainer groups a batch's experiences by it).
//
// Lengths: a conversation (every turn, and the reply) fits model.max_model_len, the engine's context. A reply gets
// explorer.serve_max_tokens (default model.max_response_tokens) when the request gives no max_tokens, and at most
// that or what the context has left: a larger max_tokens is lowered, not refused (an agent written for a bigger model
// runs unchanged; finish_reason 'length' says where a reply was cut). Any `model` name is accepted: one model is served.
// GET /v1/trinity/status: model version, recorded turns, experiences written.
import { join } from 'node:path';
import {
  type ChatResult,
  ConversationTracker,
  type ConversationTurn,
  EmbeddedEnginePool,
  engineMetrics,
  languageConfigOf,
  type RolloutEngineStats,
  WorkerRolloutEngine,
} from '../engine/index.js';
import { z } from 'zod';
import {
  isLoopbackHost,
  type OpenAIBackend,
  OpenAIHttpError,
  OpenAIService,
  type OpenAIServer,
  parseRequest,
  startOpenAIServer,
  tokenizerVocabularyWarning,
} from '../openai/index.js';
import { openSharedBuffer, type SharedExperienceBuffer } from '../rft/buffer/index.js';
import type { StageHooks, StageResult, StageSettings } from '../rft/settings.js';
import { readSyncPointer } from '../rft/run/stage.js';
import { turnExperience } from '../rft/workflow/index.js';
import { checkChatTemplate, type Tokenizer } from '../tokenizer/index.js';

const finite = () => z.number().refine(Number.isFinite, 'must be a finite number');

/** POST /feedback's body (see the header). */
const FeedbackSchema = z.object({
  response_id: z.string().min(1),
  reward: finite(),
  choice_index: z.number().int().min(0).default(0),
  task_id: z.string().optional(),
  run_id: z.number().int().optional(),
  metrics: z.record(z.string(), finite()).optional(),
});

export interface ServeStage {
  server: OpenAIServer;
  /** Weights version served (0: the stage's starting model). */
  readonly modelVersion: number;
  stop(): Promise<void>;
}

/**
 * How long a reply can wait for its feedback: the replies (and conversation turns) remembered, oldest forgotten
 * first. Each keeps its conversation's token ids, so this bounds memory (10,000 × a 2k-token conversation ≈ 0.5 GB).
 */
const MAX_PENDING_RESPONSES = 10_000;
const WEIGHT_POLL_MS = 1000;

/** The served engine: what the OpenAI service calls, plus weight loading and closing. */
export type ServeEngine = OpenAIBackend &
  Pick<WorkerRolloutEngine, 'syncWeightsFromDir' | 'close'> & {
    /** The engine's counters (GET /metrics): one engine's, or each of a pool's. */
    stats(): Promise<RolloutEngineStats | RolloutEngineStats[]>;
  };

/** Starts the served engine from a model folder (default: startServeEngine; tests script an engine's replies). */
export type ServeEngineStarter = (
  servedDir: string,
  settings: StageSettings,
) => Promise<{ engine: ServeEngine; tokenizer: Tokenizer }>;

export async function startServeStage(
  settings: StageSettings,
  hooks: StageHooks = {},
  startEngine: ServeEngineStarter = startServeEngine,
): Promise<ServeStage> {
  const log = hooks.log ?? ((line: string) => console.log(line));
  const { apiKey, host } = settings.serve;
  checkServeAccess(apiKey, host, settings.stageName, log);
  const pointer = readSyncPointer(settings.jobDir);
  let version = pointer?.version ?? 0;
  const servedDir = pointer?.dir ?? settings.modelPath;
  const { engine, tokenizer } = await startEngine(servedDir, settings);
  const { vocabSize } = languageConfigOf(servedDir); // a vision-language folder: its text_config's
  const vocabularyWarning = tokenizerVocabularyWarning(tokenizer, vocabSize, servedDir);
  if (vocabularyWarning !== null) log(`[${settings.stageName}] ${vocabularyWarning}`);
  const bufferPath = settings.buffer.path ?? join(settings.jobDir, 'buffer.db');
  const buffer = await openSharedBuffer({ path: bufferPath, name: settings.buffer.name });
  const conversation = new ConversationTracker(tokenizer, { maxTurns: MAX_PENDING_RESPONSES });
  const feedback = feedbackRoute(buffer);

  const service = new OpenAIService({
    // /v1/models lists the run's name; one model is served, so any `model` a request names is this one (an agent's
    // hard-coded name, or the model path agents written for Trinity-RFT send)
    modelName: settings.name || 'trinity',
    acceptAnyModel: true,
    vocabSize,
    backend: engine,
    // a reply's default and cap (see the header): a larger max_tokens is lowered, not refused
    maxTokens: settings.serve.maxTokens,
    capMaxTokens: true,
    maxN: settings.serve.maxN,
    ...(settings.serve.maxPromptTokens !== null ? { maxPromptTokens: settings.serve.maxPromptTokens } : {}),
  });
  let server: OpenAIServer;
  try {
    server = await startOpenAIServer({
      service,
      host,
      port: settings.serve.port,
      apiKey,
      maxBodyBytes: settings.serve.maxBodyBytes,
      defaultScope: { conversation, onChatResult: feedback.onChatResult, modelVersion: () => version },
      routes: [
        { method: 'POST', path: '/feedback', handle: feedback.handle },
        {
          method: 'GET',
          path: '/v1/trinity/status',
          handle: () => ({ model_version: version, recorded_turns: conversation.size, experiences_written: feedback.written }),
        },
        { method: 'GET', path: '/metrics', handle: async () => engineMetrics(await engineStats(engine)) },
      ],
      onError: (error, request) => {
        if ((error as OpenAIHttpError).status >= 500) log(`[serve] ${request.method} ${request.url}: ${error.message}`);
      },
    });
  } catch (error) {
    await engine.close();
    await buffer.close();
    throw error;
  }
  log(
    `[${settings.stageName}] serving ${settings.modelPath} (version ${version}) at ${server.baseURL}` +
      `${settings.serve.apiKey ? ' (API key required)' : ''}; experiences → ${bufferPath}`,
  );
  log(`[${settings.stageName}] ${describeServeLengths(settings)}`);
  const poll = pollPublishedWeights(engine, settings, log, {
    current: () => version,
    loaded: (next) => {
      version = next;
    },
  });

  let stopped = false;
  return {
    server,
    get modelVersion() {
      return version;
    },
    stop: async () => {
      if (stopped) return;
      stopped = true;
      clearInterval(poll);
      await server.close();
      await engine.close();
      await buffer.finishWriting();
      await buffer.close();
    },
  };
}

/** The lengths a conversation and a reply get (said at start: the context may be a derived one). */
export function describeServeLengths(settings: Pick<StageSettings, 'explorer' | 'serve'>): string {
  const { maxTokens, maxTokensKey, contextIsPromptPlusResponse } = settings.serve;
  const context = settings.explorer.maxLength;
  return (
    `a conversation's context (all its turns and the reply): ${context} tokens (model.max_model_len` +
    (contextIsPromptPlusResponse
      ? ', here max_prompt_tokens + max_response_tokens: the value Trinity-RFT derives when max_model_len is unset; ' +
        'set it for longer conversations)'
      : ')') +
    `; a reply: ${maxTokens} tokens when a request gives no max_tokens, and at most that (${maxTokensKey}) or ` +
    'what the context has left'
  );
}

/** An empty key is refused (it would let everyone in); no key on a non-loopback address is warned about. */
function checkServeAccess(apiKey: string | null, host: string, stageName: string, log: (line: string) => void): void {
  if (apiKey === '')
    throw new Error(
      'mode serve: explorer.api_key (or $TRINITY_API_KEY) is an empty string; give a key, or leave it unset for none',
    );
  if (apiKey === null && !isLoopbackHost(host))
    log(
      `[${stageName}] WARNING: serving on ${host} without an API key: anyone who can reach this address can ` +
        'generate and write rewards into the training buffer (set explorer.api_key or $TRINITY_API_KEY)',
    );
}

/** The counters of the served engine, or of each engine of its pool. */
async function engineStats(engine: ServeEngine): Promise<RolloutEngineStats[]> {
  const stats = await engine.stats();
  return Array.isArray(stats) ? stats : [stats];
}

/** The served engine on worker threads, and its tokenizer (the chat API needs one: without it the engine is closed). */
async function startServeEngine(
  servedDir: string,
  settings: StageSettings,
): Promise<{ engine: ServeEngine; tokenizer: Tokenizer }> {
  const engineSpec = settings.explorer.engine;
  const engineOptions = {
    dtype: settings.dtype,
    slots: settings.explorer.slots,
    maxLength: settings.explorer.maxLength,
    ...(engineSpec.type === 'embedded' && engineSpec.prefixCaching ? { enablePrefixCaching: true } : {}),
    ...(engineSpec.type === 'embedded' ? engineSpec.prefill : {}),
  };
  // engine_num > 1: a pool on threads (a conversation's follow-up calls go to the engine that decoded it)
  const engine =
    engineSpec.type === 'embedded' && engineSpec.engineNum > 1
      ? await EmbeddedEnginePool.start(servedDir, {
          ...engineOptions,
          engineNum: engineSpec.engineNum,
          numThreads: settings.threads.explorer,
        })
      : await WorkerRolloutEngine.start(servedDir, { ...engineOptions, numThreads: settings.threads.explorer });
  const tokenizer = engine.tokenizer;
  if (tokenizer === null) {
    await engine.close();
    throw new Error(`mode serve: ${settings.modelPath} has no tokenizer.json (the chat API needs one)`);
  }
  tokenizer.templateDefaults = settings.explorer.chatTemplateVariables; // explorer.rollout_model.enable_thinking
  try {
    checkChatTemplate(tokenizer, servedDir); // a template that cannot render a one-message chat is the model's error, here
  } catch (error) {
    await engine.close();
    throw error;
  }
  return { engine, tokenizer };
}

/**
 * POST /feedback (see the header): the chat replies remembered by response id (the newest MAX_PENDING_RESPONSES),
 * each choice rewarded once into an experience written to the buffer.
 */
function feedbackRoute(buffer: Pick<SharedExperienceBuffer, 'write'>) {
  const responses = new Map<string, { turns: ConversationTurn[]; rewarded: Set<number> }>();
  let written = 0;

  const onChatResult = (result: ChatResult, responseId: string) => {
    const turns = result.choices.flatMap((c) => (c.turn ? [c.turn] : []));
    responses.set(responseId, { turns, rewarded: new Set() });
    while (responses.size > MAX_PENDING_RESPONSES) responses.delete(responses.keys().next().value as string);
  };

  const handle = async (body: unknown) => {
    const b = parseRequest(FeedbackSchema, body);
    const choiceIndex = b.choice_index;
    const metrics = b.metrics;
    const response = responses.get(b.response_id);
    if (response === undefined)
      throw new OpenAIHttpError(404, `no recorded chat completion '${b.response_id}' (unknown, or forgotten)`, {
        param: 'response_id',
      });
    const turn = response.turns[choiceIndex];
    if (turn === undefined)
      throw new OpenAIHttpError(400, `response '${b.response_id}' has ${response.turns.length} choice(s)`, {
        param: 'choice_index',
      });
    if (response.rewarded.has(choiceIndex))
      throw new OpenAIHttpError(409, `response '${b.response_id}' choice ${choiceIndex} already has its reward`, {
        param: 'response_id',
      });
    const experience = turnExperience(turn, {
      reward: b.reward,
      taskId: b.task_id ?? b.response_id,
      runId: b.run_id ?? choiceIndex,
      ...(metrics ? { metrics } : {}),
    });
    response.rewarded.add(choiceIndex);
    await buffer.write([experience]);
    written++;
    return { status: 'ok', eid: experience.eid, tokens: experience.tokens.length };
  };

  return {
    onChatResult,
    handle,
    /** Experiences written so far. */
    get written() {
      return written;
    },
  };
}

/**
 * Weights the train process publishes (sync/latest.json in the shared job folder) are loaded between requests: a
 * version newer than the one served is synced into the engine, one sync at a time. Returns the poll's interval.
 */
function pollPublishedWeights(
  engine: Pick<WorkerRolloutEngine, 'syncWeightsFromDir'>,
  settings: StageSettings,
  log: (line: string) => void,
  version: { current: () => number; loaded: (version: number) => void },
): NodeJS.Timeout {
  let syncing = false;
  const poll = setInterval(() => {
    if (syncing) return;
    const next = readSyncPointer(settings.jobDir);
    if (!next || next.version <= version.current()) return;
    syncing = true;
    engine
      .syncWeightsFromDir(next.dir, { timeoutMs: settings.sync.timeoutMs })
      .then(() => {
        version.loaded(next.version);
        log(`[${settings.stageName}] now serving weights version ${next.version} (${next.dir})`);
      })
      .catch((error: unknown) => log(`[${settings.stageName}] weight sync from ${next.dir} failed: ${(error as Error).message}`))
      .finally(() => {
        syncing = false;
      });
  }, WEIGHT_POLL_MS);
  poll.unref();
  return poll;
}

/** Runs a serve stage until hooks.signal aborts (Ctrl-C); the stage never finishes on its own. */
export async function runServeStage(settings: StageSettings, hooks: StageHooks = {}): Promise<StageResult> {
  const stage = await startServeStage(settings, hooks);
  await new Promise<void>((resolve) => {
    if (hooks.signal?.aborted) resolve();
    hooks.signal?.addEventListener('abort', () => resolve(), { once: true });
  });
  await stage.stop();
  return { finalModelDir: null, steps: stage.modelVersion };
}
