// email_search_workflow: Trinity-RFT's email search agent (examples/grpo_email_search; OpenPipe ART's art-e). The
// model answers a question about one user's Enron mailbox by calling three tools through the OpenAI client:
//
//   search_emails(inbox_address, query_date, keywords[])  emails of that inbox holding every keyword, sent before
//                                                         query_date + 1 day, newest first, at most 10: JSON
//                                                         [{"message_id": ..., "snippet": ...}] (./email-db.ts)
//   read_email(message_id)                                the email as JSON {message_id, date, subject,
//                                                         from_address, to/cc/bcc_addresses, body, file_name}
//   generate_response(answer, sources[])                  the final answer and the message ids it comes from
//
//   messages = [system (max_turns, inbox, date), user question]
//   repeat up to max_turns: reply = chat.completions.create({ tools, messages })   (one turn = one model call)
//     generate_response with valid arguments → the answer; stop
//     other tool calls → messages ++ [reply, one tool result per call] (an error text for a bad call)
//     no tool call → messages ++ [reply, a user hint to call generate_response]
//
// Reward = accuracy + format (upstream's rubric; right = the row's message_ids[0]):
//   no answer (max_turns reached, context full)    accuracy 0, format −1
//   reward_fn_args.llm_as_a_judge false            accuracy = 1 if lower(answer) ⊆ lower(reference) else 0, format 0
//   otherwise the judge (explorer.auxiliary_models) says whether the answer is right; partial = 0.1·[right found in
//   a search] + 0.1·[read_email asked for right] + 0.1·[right ∈ sources]
//     answer ≠ '' and wrong                        accuracy −1, format partial
//     answer = "I don't know" (and judged right)   accuracy 0, format partial
//     right                                        accuracy 1, format 1 + 0.3·[right ∈ sources] + 0.1/|sources|
//                                                  (0 without sources) + 0.1·(1 − turns / max_turns)
//     '' judged wrong                              0, 0
// The judge's verdict is the word true or false in its answer; an answer with neither or both is a judge failure
// (judge_failure = 1, counted as wrong) where upstream looked for "true" anywhere. An unreachable judge fails the
// attempt (../../reward/judge-call.ts).
//
// One experience per episode (the conversation, action mask on the generated tokens) where upstream made one per
// model call with the same reward; metrics accuracy, format, actual_turns, tool_calls, invalid_tool_calls,
// found_right_email, read_right_email, sources_correct, judge_failure.
//
// Workflow arguments: max_turns (default 10), tool_obs_char_limit (checked and, as upstream, not applied),
// email_db_path (this backend's, relative to the config's folder; default the environment variable
// DEFAULT_EMAIL_DB_PATH, upstream's, relative to the working directory; neither set is refused by the pre-run check).
// Reward arguments: llm_as_a_judge (default true), judge_model (an auxiliary model's name; '' the first), max_tokens
// (default 128), temperature (default 0).
import { resolve } from 'node:path';
import type OpenAI from 'openai';
import { pythonJsonDumps, toPyValue } from '../../../util/python-json.js';
import { mixSeed } from '../../buffer/random.js';
import { askJudge, checkJudgeArgs, judgeMessages, judgeModel } from '../../reward/judge-call.js';
import type { Task } from '../../task.js';
import type { WorkflowContext, WorkflowSpec } from '../types.js';
import { WORKFLOWS } from '../workflow-registry.js';
import { type EmailDatabase, EmailSearchError, emailDatabase } from './email-db.js';
import { chatTurn, requestFields } from './openai-request.js';
import type { ToolResult } from './tool-agent.js';

const NAME = 'email_search_workflow';
type MessageParam = OpenAI.Chat.Completions.ChatCompletionMessageParam;
type RequestParams = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;

const stringProperty = (description: string) => ({ type: 'string', description });
const stringList = (description: string) => ({ type: 'array', items: { type: 'string' }, description });

export const EMAIL_SEARCH_TOOLS: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'search_emails',
      description: "Search the user's mailbox for emails that contain all the keywords (subject or body).",
      parameters: {
        type: 'object',
        properties: {
          inbox_address: stringProperty("The user's email address."),
          query_date: stringProperty("Today's date, 'YYYY-MM-DD': only emails sent up to that day are searched."),
          keywords: stringList('Keywords that must all appear in the email.'),
        },
        required: ['inbox_address', 'query_date', 'keywords'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'read_email',
      description: 'Read one email: its sender, recipients, date, subject and body.',
      parameters: {
        type: 'object',
        properties: { message_id: stringProperty('The message id a search returned.') },
        required: ['message_id'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'generate_response',
      description: 'Finish with the answer and its sources. If the answer was not found, answer "I don\'t know" with no sources.',
      parameters: {
        type: 'object',
        properties: {
          answer: stringProperty('The answer to the question.'),
          sources: stringList('The message ids of the emails the answer comes from; usually one.'),
        },
        required: ['answer', 'sources'],
      },
    },
  },
];

/** The system prompt: what the agent does, its turn budget, the inbox and the date (this backend's wording). */
export function emailSearchSystemPrompt(maxTurns: number, inboxAddress: string, queryDate: string): string {
  return (
    "You are an email search agent. You answer the user's question by searching their mailbox with the tools you are " +
    `given. You have up to ${maxTurns} turns: if a search finds nothing useful, search again with other keywords.\n` +
    'Before each action, say what you found and what you will do next. Once you have found the answer, call ' +
    'generate_response with it and the message ids of the emails it comes from; call it only then, with nothing ' +
    `left to do.\n\nThe user's email address is ${inboxAddress}\nToday's date is ${queryDate}\n`
  );
}

export const GENERATE_RESPONSE_HINT = 'Call generate_response with the answer and its sources to finish.';

/** What the agent did in the mailbox, for the reward. */
export interface MailboxTrace {
  /** Message ids every search returned. */
  found: Set<string>;
  /** Message ids read_email was asked for (found or not). */
  read: Set<string>;
}

/** The next day of 'YYYY-MM-DD' (UTC calendar), or null when `day` is not such a date. */
function nextDay(day: string): string | null {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) return null;
  const date = new Date(`${day}T00:00:00Z`);
  if (Number.isNaN(date.getTime()) || date.toISOString().slice(0, 10) !== day) return null;
  return new Date(date.getTime() + 86_400_000).toISOString().slice(0, 10);
}

const isStringList = (value: unknown): value is string[] => Array.isArray(value) && value.every((v) => typeof v === 'string');

/** Runs search_emails or read_email (JSON arguments as the OpenAI API gives them); never throws for bad input. */
export function runEmailTool(call: { name: string; arguments: string }, db: EmailDatabase, trace: MailboxTrace): ToolResult {
  let args: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(call.arguments);
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error();
    args = parsed as Record<string, unknown>;
  } catch {
    return { content: `Error: the arguments of ${call.name} must be a JSON object`, valid: false };
  }
  if (call.name === 'search_emails') {
    const { inbox_address: inbox, query_date: date, keywords } = args;
    const before = typeof date === 'string' ? nextDay(date) : null;
    let problem: string | null = null;
    if (typeof inbox !== 'string') problem = 'inbox_address must be a string';
    else if (before === null) problem = `query_date must be a date 'YYYY-MM-DD', got ${JSON.stringify(date)}`;
    else if (!isStringList(keywords)) problem = 'keywords must be a list of strings';
    if (problem !== null) return { content: `Error: Failed to search emails.\nError message: ${problem}`, valid: false };
    try {
      const results = db.search({ inbox: inbox as string, keywords: keywords as string[], sentBefore: before as string });
      for (const result of results) trace.found.add(result.message_id);
      return { content: pythonJsonDumps(toPyValue(results)), valid: true };
    } catch (error) {
      if (!(error instanceof EmailSearchError)) throw error;
      return { content: `Error: Failed to search emails.\nError message: ${error.message}`, valid: false };
    }
  }
  if (call.name === 'read_email') {
    const id = args.message_id;
    if (typeof id !== 'string') return { content: 'Error: read_email needs a string message_id', valid: false };
    trace.read.add(id);
    const email = db.read(id);
    if (email === null) return { content: `Error: Email (message_id = ${id}) not found.`, valid: true };
    return { content: pythonJsonDumps(toPyValue(email)), valid: true };
  }
  return { content: `Error: unknown tool '${call.name}'`, valid: false };
}

/** generate_response's arguments as the final answer, or why they are not one. */
function finalAnswer(argumentsText: string): { answer: string; sources: string[] } | string {
  try {
    const args = JSON.parse(argumentsText) as { answer?: unknown; sources?: unknown };
    if (typeof args?.answer !== 'string') return 'answer must be a string';
    if (!isStringList(args.sources)) return 'sources must be a list of message ids';
    return { answer: args.answer, sources: args.sources };
  } catch {
    return 'the arguments must be a JSON object';
  }
}

export interface EmailSearchEpisode extends MailboxTrace {
  /** generate_response's answer and sources, or null when the episode ended without one. */
  final: { answer: string; sources: string[] } | null;
  /** Model calls made. */
  turns: number;
  toolCalls: number;
  invalidToolCalls: number;
  messages: MessageParam[];
}

export interface EmailSearchEpisodeOptions {
  messages: readonly MessageParam[];
  db: EmailDatabase;
  maxTurns: number;
  request?: Partial<RequestParams>;
  seed?: (turn: number) => number;
  signal?: AbortSignal;
}

/** Plays one episode through an OpenAI client (see the header). */
export async function runEmailSearchEpisode(client: OpenAI, options: EmailSearchEpisodeOptions): Promise<EmailSearchEpisode> {
  const messages: MessageParam[] = [...options.messages];
  const episode: EmailSearchEpisode = {
    final: null,
    turns: 0,
    toolCalls: 0,
    invalidToolCalls: 0,
    messages,
    found: new Set(),
    read: new Set(),
  };
  while (episode.turns < options.maxTurns && episode.final === null) {
    const reply = await chatTurn(
      client,
      {
        ...options.request,
        model: 'email-search',
        messages,
        tools: EMAIL_SEARCH_TOOLS,
        ...(options.seed ? { seed: options.seed(episode.turns) } : {}),
      },
      { who: NAME, mayBeFull: episode.turns > 0, signal: options.signal },
    );
    if (reply === null) break;
    episode.turns++;
    messages.push(reply as MessageParam); // as returned: the next call continues its exact ids
    const calls = (reply.tool_calls ?? []).filter((call) => call.type === 'function');
    if (calls.length === 0) {
      if ((reply.content ?? '').includes('<tool_call>')) episode.invalidToolCalls++; // a block the server could not parse
      messages.push({ role: 'user', content: GENERATE_RESPONSE_HINT });
      continue;
    }
    for (const call of calls) {
      episode.toolCalls++;
      let result: ToolResult;
      if (call.function.name === 'generate_response') {
        const final = finalAnswer(call.function.arguments);
        if (typeof final !== 'string' && episode.final === null) episode.final = final;
        result =
          typeof final === 'string'
            ? { content: `Error: generate_response: ${final}`, valid: false }
            : { content: 'Done.', valid: true };
      } else {
        result = runEmailTool(call.function, options.db, episode);
      }
      if (!result.valid) episode.invalidToolCalls++;
      messages.push({ role: 'tool', tool_call_id: call.id, content: result.content });
    }
  }
  return episode;
}

export interface EmailRewardInputs {
  episode: Pick<EmailSearchEpisode, 'final' | 'turns' | 'found' | 'read'>;
  maxTurns: number;
  /** The row's message_ids: the first is the email holding the answer. */
  messageIds: readonly string[];
  reference: string;
  llmAsAJudge: boolean;
  /** The judge's verdict on the answer (asked only when the rubric needs it); null: a judge failure. */
  judge: (answer: string) => Promise<boolean | null>;
}

/** accuracy + format (see the header), with the rubric's flags as metrics. */
export async function emailSearchReward(inputs: EmailRewardInputs): Promise<Record<string, number>> {
  const { final, turns, found, read } = inputs.episode;
  if (final === null) return { accuracy: 0, format: -1 };
  const { answer, sources } = final;
  if (!inputs.llmAsAJudge) return { accuracy: inputs.reference.toLowerCase().includes(answer.toLowerCase()) ? 1 : 0, format: 0 };
  const right = inputs.messageIds[0];
  const flags = {
    found_right_email: right !== undefined && found.has(right) ? 1 : 0,
    read_right_email: right !== undefined && read.has(right) ? 1 : 0,
    sources_correct: right !== undefined && sources.includes(right) ? 1 : 0,
  };
  const verdict = await inputs.judge(answer);
  const correct = verdict === true;
  const metrics = { ...flags, judge_failure: verdict === null ? 1 : 0 };
  const partial = 0.1 * (flags.found_right_email + flags.read_right_email + flags.sources_correct);
  if (answer !== '' && !correct) return { accuracy: -1, format: partial, ...metrics };
  if (answer === "I don't know") return { accuracy: 0, format: partial, ...metrics };
  if (correct) {
    const format =
      1 + 0.3 * flags.sources_correct + (sources.length > 0 ? 0.1 / sources.length : 0) + 0.1 * (1 - turns / inputs.maxTurns);
    return { accuracy: 1, format, ...metrics };
  }
  return { accuracy: 0, format: 0, ...metrics };
}

export const EMAIL_JUDGE_SYSTEM_PROMPT =
  'You are given a question, its reference answer (**Reference answer**) and an answer written by an AI assistant ' +
  '(**AI answer**). Decide whether to accept the AI answer:\n' +
  '1. Find exactly what the question asks for (who, what, when, where, why, how, how many, ...).\n' +
  '2. Take from the reference answer only the facts needed to answer that; the rest is context.\n' +
  '3. Check that each of those facts is in the AI answer with the same meaning. Other wording, another order and ' +
  'extra details that do not conflict are fine.\n' +
  '4. If one of them is missing or contradicted, do not accept; otherwise accept.\n' +
  'Do not hold it against the AI answer that it leaves out facts the question does not ask for.\n\n' +
  'Answer with one word: true to accept, false to reject. Write nothing else.';

/** The judge's verdict: true / false when its answer holds that word (and not the other), else null. */
export function parseAcceptVerdict(answer: string): boolean | null {
  const words = new Set((answer.toLowerCase().match(/\b(?:true|false)\b/g) ?? []) as string[]);
  return words.size === 1 ? words.has('true') : null;
}

interface EmailJudgeOptions {
  llmAsAJudge: boolean;
  judgeModel: string;
  maxTokens: number;
  temperature: number;
}

const REWARD_ARGS = ['llm_as_a_judge', 'judge_model', 'max_tokens', 'temperature'];

/** The task's reward_fn_args; an unknown key or a bad value is an error naming it. */
export function emailJudgeOptions(args: Readonly<Record<string, unknown>>): EmailJudgeOptions {
  const where = `${NAME}: reward_fn_args`;
  for (const key of Object.keys(args))
    if (!REWARD_ARGS.includes(key)) throw new Error(`${where}: unknown key '${key}' (known: ${REWARD_ARGS.join(', ')})`);
  const typed = <T>(key: string, type: string, fallback: T): T => {
    const value = args[key] ?? fallback;
    if (typeof value !== type) throw new Error(`${where}.${key} must be a ${type}, got ${JSON.stringify(value)}`);
    return value as T;
  };
  const options = {
    llmAsAJudge: typed('llm_as_a_judge', 'boolean', true),
    judgeModel: typed('judge_model', 'string', ''),
    maxTokens: typed('max_tokens', 'number', 128),
    temperature: typed('temperature', 'number', 0),
  };
  checkJudgeArgs({ ...options, fallbackReward: 0 }, where);
  return options;
}

/** The row's fields the agent and the reward read (upstream's QueryModel); errors name the task and the column. */
function emailQuery(task: Task): { inboxAddress: string; queryDate: string; messageIds: string[] } {
  const where = `${NAME}: task ${task.id}`;
  const { inbox_address: inbox, query_date: date, message_ids: ids } = task.raw;
  if (typeof inbox !== 'string' || inbox === '') throw new Error(`${where}: column 'inbox_address' must be an email address`);
  const day = typeof date === 'string' ? /^\d{4}-\d{2}-\d{2}/.exec(date)?.[0] : undefined;
  if (day === undefined)
    throw new Error(`${where}: column 'query_date' must be a date 'YYYY-MM-DD', got ${JSON.stringify(date)}`);
  if (!isStringList(ids)) throw new Error(`${where}: column 'message_ids' must be a list of message ids`);
  return { inboxAddress: inbox, queryDate: day, messageIds: ids };
}

function positiveInteger(args: Readonly<Record<string, unknown>>, key: string, fallback: number): number {
  const value = args[key] ?? fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1)
    throw new Error(`${NAME}: workflow_args.${key} must be a positive integer, got ${JSON.stringify(value)}`);
  return value;
}

/**
 * workflow_args.email_db_path (relative: to `baseDir`, the config's folder), else $DEFAULT_EMAIL_DB_PATH (upstream's;
 * relative: to the working directory, as upstream opens it).
 */
export function emailDatabasePath(args: Readonly<Record<string, unknown>>, baseDir: string | undefined): string {
  if (args.email_db_path === undefined) {
    const fromEnvironment = process.env.DEFAULT_EMAIL_DB_PATH;
    if (fromEnvironment !== undefined && fromEnvironment !== '') return resolve(fromEnvironment);
  }
  const path = args.email_db_path;
  if (path === undefined || path === '')
    throw new Error(
      `${NAME} needs the email database: set DEFAULT_EMAIL_DB_PATH (as upstream) or workflow_args.email_db_path to ` +
        'the file `trinity email-db` (or upstream prepare_data.py) wrote',
    );
  if (typeof path !== 'string')
    throw new Error(`${NAME}: workflow_args.email_db_path must be a path, got ${JSON.stringify(path)}`);
  return resolve(baseDir ?? '.', path);
}

/** The arguments' values, and that a database is named (before the first task: else every attempt would fail). */
function checkWorkflowArgs(args: Readonly<Record<string, unknown>>): void {
  positiveInteger(args, 'max_turns', 10);
  positiveInteger(args, 'tool_obs_char_limit', 2000);
  emailDatabasePath(args, undefined);
}

export const emailSearchWorkflow: WorkflowSpec = {
  repeatable: false,
  workflowArgs: ['max_turns', 'tool_obs_char_limit', 'email_db_path'],
  checkArgs: checkWorkflowArgs,
  description: 'email_search: search_emails / read_email / generate_response over the Enron email database, LLM-judged',
  run: async ({ task, model, runIdBase, seed, signal, auxiliaryModels, baseDir }: WorkflowContext) => {
    const args = { ...task.workflowArgs };
    checkWorkflowArgs(args);
    const maxTurns = positiveInteger(args, 'max_turns', 10);
    const judging = emailJudgeOptions(task.rewardFnArgs ?? {});
    if (typeof task.prompt !== 'string') throw new Error(`${NAME}: task ${task.id} has no prompt (the question)`);
    if (typeof task.response !== 'string') throw new Error(`${NAME}: task ${task.id} has no response (the answer)`);
    const query = emailQuery(task);
    const db = emailDatabase(emailDatabasePath(args, baseDir));
    const judge = judging.llmAsAJudge ? judgeModel(auxiliaryModels, judging.judgeModel, NAME) : null;
    const episode = await runEmailSearchEpisode(await model.openai(), {
      messages: [
        { role: 'system', content: emailSearchSystemPrompt(maxTurns, query.inboxAddress, query.queryDate) },
        { role: 'user', content: task.prompt },
      ],
      db,
      maxTurns,
      request: requestFields(task, NAME),
      seed: (turn) => mixSeed(seed, turn),
      signal,
    });
    const question = task.prompt;
    const reference = task.response;
    const scores = await emailSearchReward({
      episode,
      maxTurns,
      messageIds: query.messageIds,
      reference,
      llmAsAJudge: judging.llmAsAJudge,
      judge: async (answer) => {
        if (judge === null) return null;
        const prompt = `Question: ${question}\nReference answer: ${reference}\nAI answer: ${answer}`;
        const reply = await askJudge(judge, judgeMessages(EMAIL_JUDGE_SYSTEM_PROMPT, prompt), { ...judging, signal }, NAME);
        return parseAcceptVerdict(reply);
      },
    });
    return model.recordedExperiences({
      reward: (scores.accuracy ?? 0) + (scores.format ?? 0),
      runId: runIdBase,
      metrics: {
        ...scores,
        actual_turns: episode.turns,
        tool_calls: episode.toolCalls,
        invalid_tool_calls: episode.invalidToolCalls,
      },
    });
  },
};

WORKFLOWS.register(NAME, emailSearchWorkflow);
