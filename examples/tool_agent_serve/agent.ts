// A tool-calling agent written with the official `openai` client, trained through mode serve. It answers questions
// like "Population of Krelqueth plus Gemotanth?" by calling its two tools (./tools.ts: lookup over a local document
// file, calc for the multi-digit arithmetic) through chat completions with `tools`, streaming or not:
//
//   messages = [user question]
//   up to max_turns:  reply = chat.completions.create({ messages, tools })      (stream: the deltas put together)
//                     no tool calls → reply.content is the answer; stop
//                     else messages ++ [reply as returned, {role: 'tool', tool_call_id, content} per call]
//   correct = the answer is the expected number (4,821 = 4821 = 4821.0)
//
// The same episode code runs in its evaluation loop and in its training rounds; all it knows of this project is a
// base URL, an API key, and POST /feedback, which its training rounds call with each episode's last reply id:
//
//   evaluate   held-out questions (examples/tool_agent/data/eval.jsonl) at temperature 0 (greedy) and sampled
//              (temperature 1, `samples` episodes per question, seeded): the share answered correctly
//   train      rounds of `questions` training questions × `group` episodes at `trainTemperature` (default 1; the
//              serving side records it and the trainer takes the log-probs at it); each episode's last
//              reply is rewarded 1 (correct) or 0 with task_id round<r>-q<i>, so the episodes of one question form a
//              GRPO group; the serving side turns the reply with its whole conversation into one experience (action
//              mask on the model's tool calls and answer, not on the tool results). After a round the agent waits
//              for the weights trained on it (GET /v1/trinity/status: one train step per round).
//
//   node --import tsx examples/tool_agent_serve/agent.ts [--base-url http://127.0.0.1:8010/v1] [--rounds 30]
//     [--questions 4] [--group 8] [--train-temperature 1] [--eval-limit 100] [--samples 4] [--seed 0] [--stream]
//     [--eval-only] [--eval-every N]   (N > 0: the held-out evaluation also after every N-th round)
//     [--wait-timeout S]   (default 900: how long a round waits for the weights trained on it)
//     [--documents FILE] [--eval-data FILE] [--train-data FILE]       (defaults: examples/tool_agent's data and the
//     document file src/rft/workflow/agents/tool-agent-documents.json, which its expert conversations looked up)
//   (the API key: $TRINITY_API_KEY) prints the evaluation before training, each round's mean reward, the evaluation
//   after training, and a last JSON line of the figures.
import { readFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import { type Documents, loadDocuments, NO_MATCH, runTool, TOOLS } from './tools.js';

type MessageParam = OpenAI.Chat.Completions.ChatCompletionMessageParam;
type AssistantMessage = OpenAI.Chat.Completions.ChatCompletionAssistantMessageParam;

export interface Question {
  prompt: string;
  /** The expected answer. */
  response: string;
}

/** Reads a JSONL file of {prompt, response}; errors name the file and the line. */
export function readQuestions(file: string): Question[] {
  const lines = readFileSync(file, 'utf8').split('\n');
  return lines.flatMap((line, i) => {
    if (line.trim() === '') return [];
    const row = JSON.parse(line) as Partial<Question>;
    if (typeof row.prompt !== 'string' || typeof row.response !== 'string')
      throw new Error(`${file}:${i + 1}: expected {"prompt": string, "response": string}`);
    return [{ prompt: row.prompt, response: row.response }];
  });
}

/** An answer compared as a number when it is one (commas, a trailing '.' and '.0' ignored), else as trimmed text. */
export function sameAnswer(answer: string, expected: string): boolean {
  const canonical = (text: string) => {
    const trimmed = text.trim().replace(/\.$/, '');
    const value = Number(trimmed.replace(/,/g, ''));
    return /\d/.test(trimmed) && Number.isFinite(value) ? String(value) : trimmed;
  };
  return canonical(answer) === canonical(expected);
}

export interface EpisodeOptions {
  documents: Documents;
  temperature: number;
  /** The seed of the call with this index; none: unseeded. */
  seed?: (turn: number) => number;
  stream?: boolean;
  maxTurns?: number;
}

export interface Episode {
  /** The final answer, or null when the turns ran out (or the conversation no longer fit the context). */
  answer: string | null;
  /** The id of the episode's last reply: its feedback rewards the whole conversation. */
  lastReplyId: string;
  turns: number;
  toolCalls: number;
  invalidToolCalls: number;
  /** lookup calls, and those that found a document. */
  lookups: number;
  lookupsFound: number;
  /** The conversation: the question, each reply as returned, the tool results. */
  messages: MessageParam[];
}

/** One model call; a streamed reply is put together from its deltas into the message the API would have returned. */
async function call(
  client: OpenAI,
  messages: MessageParam[],
  options: EpisodeOptions,
  turn: number,
): Promise<{ id: string; message: AssistantMessage }> {
  const request = {
    model: 'tool-agent', // any name: the serving side serves one model
    messages,
    tools: TOOLS,
    temperature: options.temperature,
    ...(options.seed ? { seed: options.seed(turn) } : {}),
  };
  if (!options.stream) {
    const completion = await client.chat.completions.create(request);
    const message = completion.choices[0]?.message;
    if (message === undefined) throw new Error('the server returned no choices');
    return { id: completion.id, message: message as AssistantMessage };
  }
  let id = '';
  let content = '';
  const calls: Array<{ id: string; name: string; arguments: string }> = [];
  for await (const chunk of await client.chat.completions.create({ ...request, stream: true })) {
    id = chunk.id;
    const delta = chunk.choices[0]?.delta;
    content += delta?.content ?? '';
    for (const part of delta?.tool_calls ?? []) {
      calls[part.index] ??= { id: '', name: '', arguments: '' };
      const into = calls[part.index] as { id: string; name: string; arguments: string };
      into.id += part.id ?? '';
      into.name += part.function?.name ?? '';
      into.arguments += part.function?.arguments ?? '';
    }
  }
  const toolCalls = calls.map((c) => ({
    id: c.id,
    type: 'function' as const,
    function: { name: c.name, arguments: c.arguments },
  }));
  return { id, message: { role: 'assistant', content, ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}) } };
}

/** True when the server refused a call because the conversation no longer fits the model's context. */
const contextFull = (error: unknown): boolean =>
  error instanceof OpenAI.APIError && error.status === 400 && error.code === 'context_length_exceeded';

/** Plays one episode (see the header). */
export async function playEpisode(client: OpenAI, question: string, options: EpisodeOptions): Promise<Episode> {
  const messages: MessageParam[] = [{ role: 'user', content: question }];
  const episode: Episode = {
    answer: null,
    lastReplyId: '',
    turns: 0,
    toolCalls: 0,
    invalidToolCalls: 0,
    lookups: 0,
    lookupsFound: 0,
    messages,
  };
  while (episode.turns < (options.maxTurns ?? 4)) {
    let reply: Awaited<ReturnType<typeof call>>;
    try {
      reply = await call(client, messages, options, episode.turns);
    } catch (error) {
      if (episode.turns > 0 && contextFull(error)) break;
      throw error;
    }
    episode.turns++;
    episode.lastReplyId = reply.id;
    messages.push(reply.message); // as returned: the next call continues this reply's exact tokens
    const calls = (reply.message.tool_calls ?? []).filter((c) => c.type === 'function');
    if (calls.length === 0) {
      episode.answer = typeof reply.message.content === 'string' ? reply.message.content : '';
      break;
    }
    for (const toolCall of calls) {
      const result = runTool(toolCall.function, options.documents);
      episode.toolCalls++;
      if (!result.valid) episode.invalidToolCalls++;
      if (toolCall.function.name === 'lookup' && result.valid) {
        episode.lookups++;
        if (result.content !== NO_MATCH) episode.lookupsFound++;
      }
      messages.push({ role: 'tool', tool_call_id: toolCall.id, content: result.content });
    }
  }
  return episode;
}

/** Runs `work` over `items` with at most `limit` in flight; results in item order. */
async function inParallel<T, R>(items: readonly T[], limit: number, work: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await work(items[i] as T, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

/** A seed per (stream, question, episode, turn): reproducible sampled episodes. */
const seedOf =
  (...parts: number[]) =>
  (turn: number) =>
    [...parts, turn].reduce((seed, part) => (Math.imul(seed ^ part, 0x9e3779b1) >>> 0) % 2_147_483_647, 17);

export interface Evaluation {
  /** Share of episodes answered correctly. */
  accuracy: number;
  episodes: number;
  meanToolCalls: number;
  /** Share of the valid lookup calls that found a document: any place, not necessarily one the question names (a
   * model that has memorised place names finds places without copying the question's). */
  lookupsFound: number;
}

/** The evaluation loop: `samples` episodes per question at `temperature` (seeded when sampled). */
export async function evaluate(
  client: OpenAI,
  questions: readonly Question[],
  options: { documents: Documents; temperature: number; samples: number; seed: number; stream?: boolean; concurrency?: number },
): Promise<Evaluation> {
  const runs = questions.flatMap((question, q) => Array.from({ length: options.samples }, (_, k) => ({ question, q, k })));
  const episodes = await inParallel(runs, options.concurrency ?? 16, ({ question, q, k }) =>
    playEpisode(client, question.prompt, {
      documents: options.documents,
      temperature: options.temperature,
      stream: options.stream ?? false,
      ...(options.temperature > 0 ? { seed: seedOf(1, options.seed, q, k) } : {}),
    }).then((episode) => ({ episode, correct: episode.answer !== null && sameAnswer(episode.answer, question.response) })),
  );
  return {
    accuracy: episodes.filter((e) => e.correct).length / episodes.length,
    episodes: episodes.length,
    meanToolCalls: episodes.reduce((sum, e) => sum + e.episode.toolCalls, 0) / episodes.length,
    lookupsFound:
      episodes.reduce((sum, e) => sum + e.episode.lookupsFound, 0) /
      Math.max(
        1,
        episodes.reduce((sum, e) => sum + e.episode.lookups, 0),
      ),
  };
}

/** The serving side's routes beyond the OpenAI API: the served weights version, and rewards. */
export function servingSide(baseURL: string, apiKey: string) {
  const server = baseURL.replace(/\/v1\/?$/, '');
  const headers = { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' };
  const modelVersion = async () =>
    ((await (await fetch(`${server}/v1/trinity/status`, { headers })).json()) as { model_version: number }).model_version;
  return {
    modelVersion,
    feedback: async (body: {
      response_id: string;
      reward: number;
      task_id: string;
      run_id: number;
      metrics?: Record<string, number>;
    }) => {
      const res = await fetch(`${server}/feedback`, { method: 'POST', headers, body: JSON.stringify(body) });
      if (!res.ok) throw new Error(`POST /feedback: HTTP ${res.status} ${await res.text()}`);
    },
    /** Resolves once the served weights are version `version` or later (asked every half second: there is no push);
     * throws after `timeoutMs` (the train side stopped, or never started). */
    waitForVersion: async (version: number, timeoutMs = 900_000) => {
      const deadline = Date.now() + timeoutMs;
      let served = await modelVersion();
      while (served < version) {
        if (Date.now() > deadline)
          throw new Error(
            `waited ${timeoutMs / 1000} s for weights version ${version} at ${server}, still serving version ${served}: ` +
              'is the train side (train.yaml) running?',
          );
        await new Promise((resolve) => setTimeout(resolve, 500));
        served = await modelVersion();
      }
    },
  };
}

export interface RoundResult {
  round: number;
  modelVersion: number;
  meanReward: number;
}

/** The training rounds (see the header): questions are taken in file order, round after round. */
export async function trainRounds(
  client: OpenAI,
  serving: ReturnType<typeof servingSide>,
  questions: readonly Question[],
  options: {
    documents: Documents;
    rounds: number;
    questions: number;
    group: number;
    /** The sampling temperature of the training episodes (default 1); the evaluation's sampled episodes stay at 1. */
    temperature?: number;
    seed: number;
    stream?: boolean;
    log?: (line: string) => void;
    /** Called after each round once the weights trained on it are served (the evaluation loop's hook). */
    afterRound?: (round: number) => Promise<void>;
    /** Milliseconds a round waits for the weights trained on it (servingSide's default when absent). */
    waitTimeoutMs?: number;
  },
): Promise<RoundResult[]> {
  const results: RoundResult[] = [];
  const startVersion = await serving.modelVersion();
  for (let round = 1; round <= options.rounds; round++) {
    const modelVersion = await serving.modelVersion();
    const picked = Array.from(
      { length: options.questions },
      (_, i) => questions[((round - 1) * options.questions + i) % questions.length] as Question,
    );
    const runs = picked.flatMap((question, q) => Array.from({ length: options.group }, (_, k) => ({ question, q, k })));
    const rewards = await inParallel(runs, runs.length, async ({ question, q, k }) => {
      const episode = await playEpisode(client, question.prompt, {
        documents: options.documents,
        temperature: options.temperature ?? 1,
        stream: options.stream ?? false,
        seed: seedOf(2, options.seed, round, q, k),
      });
      const reward: number = episode.answer !== null && sameAnswer(episode.answer, question.response) ? 1 : 0;
      const metrics = { turns: episode.turns, tool_calls: episode.toolCalls, invalid_tool_calls: episode.invalidToolCalls };
      await serving.feedback({ response_id: episode.lastReplyId, reward, task_id: `round${round}-q${q}`, run_id: k, metrics });
      return reward;
    });
    const meanReward = rewards.reduce((a, b) => a + b, 0) / rewards.length;
    results.push({ round, modelVersion, meanReward });
    options.log?.(`round ${round}: weights version ${modelVersion}, mean reward ${meanReward.toFixed(3)}`);
    await serving.waitForVersion(startVersion + round, options.waitTimeoutMs); // one train step per round (train_batch_size = a round)
    await options.afterRound?.(round);
  }
  return results;
}

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'base-url': { type: 'string', default: 'http://127.0.0.1:8010/v1' },
      rounds: { type: 'string', default: '30' },
      questions: { type: 'string', default: '4' },
      group: { type: 'string', default: '8' },
      'train-temperature': { type: 'string', default: '1' },
      'eval-limit': { type: 'string', default: '100' },
      samples: { type: 'string', default: '4' },
      seed: { type: 'string', default: '0' },
      stream: { type: 'boolean', default: false },
      'eval-only': { type: 'boolean', default: false },
      'eval-every': { type: 'string', default: '0' },
      'wait-timeout': { type: 'string', default: '900' },
      documents: { type: 'string', default: here('../../src/rft/workflow/agents/tool-agent-documents.json') },
      'eval-data': { type: 'string', default: here('../tool_agent/data/eval.jsonl') },
      'train-data': { type: 'string', default: here('../tool_agent/data/train.jsonl') },
    },
  });
  const whole = (name: 'rounds' | 'questions' | 'group' | 'eval-limit' | 'samples' | 'seed' | 'eval-every' | 'wait-timeout') => {
    const n = Number(values[name]);
    if (!Number.isInteger(n) || n < (name === 'seed' || name === 'eval-every' ? 0 : 1))
      throw new Error(`--${name}: expected a whole number, got ${values[name]}`);
    return n;
  };
  const trainTemperature = Number(values['train-temperature']);
  if (!(trainTemperature > 0 && trainTemperature <= 2))
    throw new Error(`--train-temperature: expected a number in (0, 2], got ${values['train-temperature']}`);
  const baseURL = values['base-url'] as string;
  const apiKey = process.env.TRINITY_API_KEY ?? 'none';
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 600_000 });
  const documents = loadDocuments(values.documents as string);
  const heldOut = readQuestions(values['eval-data'] as string).slice(0, whole('eval-limit'));
  const seed = whole('seed');
  const rounds = whole('rounds');
  const samples = whole('samples');
  const perRound = { questions: whole('questions'), group: whole('group') };
  const evalEvery = whole('eval-every');
  const waitTimeoutMs = 1000 * whole('wait-timeout');
  const stream = values.stream as boolean;
  const trainQuestions = values['eval-only'] ? [] : readQuestions(values['train-data'] as string);
  const evaluation = async (when: string) => {
    const greedy = await evaluate(client, heldOut, { documents, temperature: 0, samples: 1, seed, stream });
    const sampled = await evaluate(client, heldOut, { documents, temperature: 1, samples, seed, stream });
    console.log(
      `${when}: greedy ${(100 * greedy.accuracy).toFixed(1)}% (${greedy.episodes} questions), sampled ` +
        `${(100 * sampled.accuracy).toFixed(1)}% (${sampled.episodes} episodes at temperature 1), ` +
        `${greedy.meanToolCalls.toFixed(2)} tool calls per greedy episode; lookups that found a place: ` +
        `${(100 * greedy.lookupsFound).toFixed(1)}% greedy, ${(100 * sampled.lookupsFound).toFixed(1)}% sampled`,
    );
    return {
      greedy: greedy.accuracy,
      sampled: sampled.accuracy,
      lookupsFound: { greedy: greedy.lookupsFound, sampled: sampled.lookupsFound },
    };
  };
  const before = await evaluation('before training');
  if (values['eval-only']) return console.log(JSON.stringify({ before }));
  const serving = servingSide(baseURL, apiKey);
  const during: Array<{ round: number; greedy: number; sampled: number }> = [];
  const results = await trainRounds(client, serving, trainQuestions, {
    documents,
    rounds,
    ...perRound,
    temperature: trainTemperature,
    seed,
    stream,
    log: (line) => console.log(line),
    waitTimeoutMs,
    afterRound: async (round) => {
      if (evalEvery === 0 || round % evalEvery !== 0 || round === rounds) return;
      const { greedy, sampled } = await evaluation(`after round ${round}`);
      during.push({ round, greedy, sampled });
    },
  });
  const after = await evaluation('after training');
  console.log(JSON.stringify({ before, during, after, rounds: results.map((r) => Number(r.meanReward.toFixed(3))) }));
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
