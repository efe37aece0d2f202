// A tool-using agent (issue #7): the model answers questions that need a lookup and arithmetic, calling two tools
// through the OpenAI client with function calling, as any OpenAI-API agent would:
//
//   calc(expression)  arithmetic with a small parser (calculator.ts; never eval)
//   lookup(query)     a small local document set (lookup.ts; built in: fictional places and their populations)
//
//   messages = [system?, user question]
//   repeat up to max_turns:  reply = client.chat.completions.create({ tools, messages })
//                            no tool_calls → reply.content is the final answer; stop
//                            else messages ++ [reply as returned, {role: 'tool', tool_call_id, content} per call]
//   reward  = 1 if the final answer equals the task's answer (numbers normalised: 4,821 = 4821 = 4821.0), else 0
//   metrics = correct, turns (model calls), tool_calls, invalid_tool_calls (unknown tool, bad arguments, a failed
//             calculation, or a <tool_call> block the server could not parse), truncated (no final answer)
//
// The client is the rollout model's (ModelHandle.openai()): each call continues the previous one's exact token ids,
// so the episode is one experience (model.recordedExperiences) whose action mask marks the generated tokens (the
// tool calls and the answer) and not the tool results between them. The server parses Hermes <tool_call> blocks in
// the generated text (src/engine/tool-calls.ts); the character tokenizer's template lists the tools as one system
// line ("tools: calc lookup").
//
// Workflow arguments (taskset workflow_args, overridden by the task row): max_turns (default 4), documents (a JSON
// document file, absolute or relative to the working directory; default the built-in set). The task's prompt is the
// question, its response the answer. Not repeatable: the runner plays repeat_times episodes concurrently.
import { resolve } from 'node:path';
import type OpenAI from 'openai';
import { mixSeed } from '../../buffer/random.js';
import type { WorkflowContext, WorkflowSpec } from '../types.js';
import { CalculatorError, evaluateExpression, formatNumber } from './calculator.js';
import { builtInDocuments, DocumentStore } from './lookup.js';
import { chatTurn, requestFields } from './openai-request.js';
import { WORKFLOWS } from '../workflow-registry.js';

type MessageParam = OpenAI.Chat.Completions.ChatCompletionMessageParam;
type RequestParams = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;

/** The tools as OpenAI function schemas. */
export const TOOL_AGENT_TOOLS: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'calc',
      description: 'Evaluate an arithmetic expression: numbers, + - * / % ^ and parentheses.',
      parameters: {
        type: 'object',
        properties: { expression: { type: 'string', description: 'e.g. 4821+310' } },
        required: ['expression'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'lookup',
      description: 'Look up a fact in the document set by name or keywords.',
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', description: 'a name, e.g. Varnia' } },
        required: ['query'],
      },
    },
  },
];

/** What a tool call returned, and whether it was a valid call. */
export interface ToolResult {
  content: string;
  valid: boolean;
}

/** Runs one tool call (name and JSON arguments as the OpenAI API gives them); never throws. */
export function runToolCall(call: { name: string; arguments: string }, documents: DocumentStore): ToolResult {
  let args: unknown;
  try {
    args = JSON.parse(call.arguments);
  } catch {
    return { content: 'error: arguments are not JSON', valid: false };
  }
  if (args === null || typeof args !== 'object' || Array.isArray(args))
    return { content: 'error: arguments must be an object', valid: false };
  const record = args as Record<string, unknown>;
  if (call.name === 'calc') {
    if (typeof record.expression !== 'string') return { content: 'error: calc needs a string expression', valid: false };
    try {
      return { content: formatNumber(evaluateExpression(record.expression)), valid: true };
    } catch (error) {
      if (error instanceof CalculatorError) return { content: `error: ${error.message}`, valid: false };
      throw error;
    }
  }
  if (call.name === 'lookup') {
    if (typeof record.query !== 'string') return { content: 'error: lookup needs a string query', valid: false };
    return { content: documents.lookup(record.query), valid: true };
  }
  return { content: `error: unknown tool '${call.name}'`, valid: false };
}

/** An answer in canonical form: numbers as formatNumber writes them (commas, '+', trailing '.' dropped), else trimmed text. */
export function normalizeAnswer(text: string): string {
  const trimmed = text.trim().replace(/\.$/, '');
  if (/^[-+]?(?:\d[\d,_]*)?(?:\.\d+)?$/.test(trimmed) && /\d/.test(trimmed)) {
    const value = Number(trimmed.replace(/[,_]/g, ''));
    if (Number.isFinite(value)) return formatNumber(value);
  }
  return trimmed.replace(/\s+/g, ' ');
}

export const answersMatch = (answer: string, expected: string): boolean => normalizeAnswer(answer) === normalizeAnswer(expected);

export interface ToolAgentEpisode {
  /** The final answer (a reply without tool calls), or null when the episode ended without one. */
  answer: string | null;
  /** Model calls made. */
  turns: number;
  toolCalls: number;
  invalidToolCalls: number;
  /** The conversation ran out of context (the server refused the next call); the episode ended there. */
  contextFull: boolean;
  /** The conversation as sent to the model, plus its last reply. */
  messages: MessageParam[];
}

export interface ToolAgentEpisodeOptions {
  /** [system?, user question]. */
  messages: readonly MessageParam[];
  documents: DocumentStore;
  maxTurns: number;
  /** Any name: the rollout endpoint serves its one model under every name. */
  model?: string;
  /** Extra request fields (temperature, top_p, max_tokens, ...). */
  request?: Partial<RequestParams>;
  /** Seed of the call with this index (default: none). */
  seed?: (turn: number) => number;
  signal?: AbortSignal;
}

/** Plays one episode through an OpenAI client (see the header). */
export async function runToolAgentEpisode(client: OpenAI, options: ToolAgentEpisodeOptions): Promise<ToolAgentEpisode> {
  const messages: MessageParam[] = [...options.messages];
  const episode: ToolAgentEpisode = {
    answer: null,
    turns: 0,
    toolCalls: 0,
    invalidToolCalls: 0,
    contextFull: false,
    messages,
  };
  while (episode.turns < options.maxTurns) {
    const reply = await chatTurn(
      client,
      {
        ...options.request,
        model: options.model ?? 'tool-agent',
        messages,
        tools: TOOL_AGENT_TOOLS,
        ...(options.seed ? { seed: options.seed(episode.turns) } : {}),
      },
      { who: 'tool agent', mayBeFull: episode.turns > 0, signal: options.signal },
    );
    if (reply === null) {
      episode.contextFull = true;
      break;
    }
    episode.turns++;
    messages.push(reply as MessageParam); // the assistant message as returned: the next call continues its exact ids
    const calls = (reply.tool_calls ?? []).filter((call) => call.type === 'function');
    if (calls.length === 0) {
      const content = reply.content ?? '';
      if (content.includes('<tool_call>')) episode.invalidToolCalls++; // a call block the server could not parse
      episode.answer = content;
      break;
    }
    for (const call of calls) {
      episode.toolCalls++;
      const result = runToolCall(call.function, options.documents);
      if (!result.valid) episode.invalidToolCalls++;
      messages.push({ role: 'tool', tool_call_id: call.id, content: result.content });
    }
  }
  return episode;
}

const documentStores = new Map<string, DocumentStore>();

/** The task's documents: workflow_args.documents (a file, cached) or the built-in set. */
function taskDocuments(args: Readonly<Record<string, unknown>>): DocumentStore {
  const file = args.documents;
  if (file === undefined || file === null) return builtInDocuments();
  if (typeof file !== 'string')
    throw new Error(`tool_agent_workflow: documents must be a file path, got ${JSON.stringify(file)}`);
  const path = resolve(file);
  let store = documentStores.get(path);
  if (store === undefined) {
    store = DocumentStore.load(path);
    documentStores.set(path, store);
  }
  return store;
}

function maxTurnsArg(args: Readonly<Record<string, unknown>>): number {
  const maxTurns = args.max_turns ?? 4;
  if (typeof maxTurns !== 'number' || !Number.isInteger(maxTurns) || maxTurns < 1)
    throw new Error(`tool_agent_workflow: max_turns must be a positive integer, got ${JSON.stringify(maxTurns)}`);
  return maxTurns;
}

export const toolAgentWorkflow: WorkflowSpec = {
  repeatable: false,
  workflowArgs: ['max_turns', 'documents'],
  description: 'tool_agent: calc + lookup through the OpenAI client with function calling (max_turns, documents)',
  run: async ({ task, model, runIdBase, seed, signal }: WorkflowContext) => {
    const args = { ...task.workflowArgs, ...task.raw };
    if (typeof task.prompt !== 'string') throw new Error(`tool_agent_workflow: task ${task.id} has no prompt (the question)`);
    if (typeof task.response !== 'string') throw new Error(`tool_agent_workflow: task ${task.id} has no response (the answer)`);
    const episode = await runToolAgentEpisode(await model.openai(), {
      messages: [
        ...(task.systemPrompt !== undefined ? [{ role: 'system' as const, content: task.systemPrompt }] : []),
        { role: 'user', content: task.prompt },
      ],
      documents: taskDocuments(args),
      maxTurns: maxTurnsArg(args),
      request: requestFields(task, 'tool_agent_workflow'),
      seed: (turn) => mixSeed(seed, turn),
      signal,
    });
    const correct = episode.answer !== null && answersMatch(episode.answer, task.response) ? 1 : 0;
    return model.recordedExperiences({
      reward: correct,
      runId: runIdBase,
      metrics: {
        correct,
        turns: episode.turns,
        tool_calls: episode.toolCalls,
        invalid_tool_calls: episode.invalidToolCalls,
        truncated: episode.answer === null ? 1 : 0,
      },
    });
  },
};

WORKFLOWS.register('tool_agent_workflow', toolAgentWorkflow);
