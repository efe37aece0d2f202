// AgentScope's ReAct agent loop, as Trinity-RFT's AgentScope workflows drive it (./agentscope-react.ts), over an
// OpenAI client with native function calling. Two generations of the agent, each as its library wrote it:
//
// 'v1' (agentscope >= 1.0 ReActAgent, reply(msg, structured_model)): the finish function generate_response takes the
// structured answer's fields as its arguments. Without an answer schema (reply(msg) with no structured model) no
// finish function is offered, and a reply without tool calls is the answer (its text).
//   memory = [user query]; tools = toolkit ++ generate_response(answer schema)
//   repeat max_iters (default 10):
//     reply = model([system, ...memory, hint?], tools); memory ++ reply; the hint is used once
//     each tool call → a tool message in memory (generate_response validates its arguments against the schema:
//                      "Successfully generated response." or "Arguments Validation Error: ...")
//     structured answer still wanted:
//       generate_response succeeded → the answer; the reply's text, if any, is the final text (done), else
//                                      hint "now write a text reply" and one more call without tools
//       no tool call                → hint "structured output is required, call generate_response"
//     else no tool call → done (the reply's text)
//   not done → summarize: model([system, ...memory, "you have failed ... summarize"]) without tools; memory ++ it
//
// 'v0' (agentscope 0.x ReActAgentV2, reply(msg) without a structured model): generate_response(response: string)
// ends the reply with that string, and a reply without tool calls ends it with its own text.
//   repeat max_iters: reply = model([system, ...memory], tools ++ generate_response); memory ++ reply
//                     no tool call → done (its text); each call → a tool message ("Success" or the error);
//                     a valid generate_response → done (its response)
//   not done → summarize: model([...memory, "you have failed ... summarize"]) (v0 leaves the system prompt out)
//
// Where this differs from the libraries: they force a tool call (tool_choice 'required' / the finish function) after
// a reply without one; this backend's server does not force tool calls (src/openai/protocol.ts), so the hint alone
// asks for it. v1's meta tool reset_equipped_tools (enable_meta_tool: it equips tool groups, and the workflows
// register none) is not offered. A call block the server could not parse (`<tool_call>` left in the text) counts as
// an invalid tool call and, having no tool calls, takes the no-tool-call branch.
//
// An agent that replies more than once (AgentScope's agent object keeps its memory between reply() calls, as the
// gomoku example's does) passes its memory in `memory`: the query and the replies go on after what is there.
import type OpenAI from 'openai';
import { chatTurn } from './openai-request.js';

type MessageParam = OpenAI.Chat.Completions.ChatCompletionMessageParam;
type RequestParams = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;
type Tool = OpenAI.Chat.Completions.ChatCompletionTool;

export const FINISH_FUNCTION = 'generate_response';

/** A tool the agent may call: its OpenAI schema and what runs it (a thrown ToolCallError is the model's mistake). */
export interface ReActTool {
  schema: Tool & { type: 'function' };
  run(args: Record<string, unknown>, signal?: AbortSignal): Promise<string>;
}

/** A tool call the model got wrong (bad arguments): its message goes back to the model as the tool's result. */
export class ToolCallError extends Error {}

/** The structured answer v1's generate_response carries: string fields, each required, with descriptions. */
export interface AnswerSchema {
  fields: Readonly<Record<string, string>>;
}

export interface ReActAgentOptions {
  style: 'v0' | 'v1';
  systemPrompt: string;
  query: string;
  tools: readonly ReActTool[];
  /** v1: the structured answer generate_response takes (v0's takes one `response` string); none: no finish function. */
  answerSchema?: AnswerSchema;
  /** The agent's memory from its earlier replies, continued in place (default: a new, empty memory). */
  memory?: MessageParam[];
  maxIters: number;
  /** Extra request fields (temperature, max_tokens, ...). */
  request?: Partial<RequestParams>;
  /** Seed of the model call with this index. */
  seed?: (call: number) => number;
  signal?: AbortSignal;
}

export interface ReActAgentResult {
  /** v1: the structured answer from a successful generate_response, else null. */
  structured: Record<string, string> | null;
  /** The final reply's text (v0: generate_response's response, or the reply without tool calls, or the summary). */
  text: string;
  /** Messages in the agent's memory at the end (the query, replies, tool results; hints are never kept). */
  memoryLength: number;
  modelCalls: number;
  toolCalls: number;
  invalidToolCalls: number;
  /** The loop ran out of iterations and the agent summarized. */
  summarized: boolean;
  /** The conversation no longer fit the model's context: the episode ended there. */
  contextFull: boolean;
}

const TEXT_REPLY_HINT = '<system-hint>Now generate a text response based on your current situation</system-hint>';
const STRUCTURED_HINT =
  `<system-hint>Structured output is required, go on to finish your task or call '${FINISH_FUNCTION}' to generate ` +
  'the required structured output.</system-hint>';
const SUMMARIZE_HINT =
  'You have failed to generate response within the maximum iterations. Now respond directly by summarizing the ' +
  'current situation.';

/** The finish function's schema: v1's takes the answer's fields, v0's one response string. */
export function finishTool(style: 'v0' | 'v1', answer?: AnswerSchema): Tool {
  if (style === 'v0') {
    return functionTool(
      FINISH_FUNCTION,
      'Generate a response. You must call this function to interact with others (e.g., users).',
      { response: 'The response to the user.' },
    );
  }
  if (answer === undefined) throw new Error('ReAct agent v1: an answer schema is needed for generate_response');
  return functionTool(FINISH_FUNCTION, 'Generate required structured output by this function and return it', answer.fields);
}

/** A function tool whose parameters are required strings with these descriptions. */
export function functionTool(name: string, description: string, fields: Readonly<Record<string, string>>): Tool {
  const properties = Object.fromEntries(
    Object.entries(fields).map(([key, text]) => [key, { type: 'string', description: text }]),
  );
  return {
    type: 'function',
    function: { name, description, parameters: { type: 'object', properties, required: Object.keys(fields) } },
  };
}

/** The arguments of a call as an object, or a ToolCallError saying why not. */
export function parseArguments(text: string): Record<string, unknown> {
  let args: unknown;
  try {
    args = JSON.parse(text);
  } catch {
    throw new ToolCallError(`the arguments are not JSON: ${text}`);
  }
  if (args === null || typeof args !== 'object' || Array.isArray(args))
    throw new ToolCallError(`the arguments must be a JSON object, got ${text}`);
  return args as Record<string, unknown>;
}

/** The answer's fields from generate_response's arguments (extra keys dropped, as pydantic's model_validate does). */
function validateAnswer(args: Record<string, unknown>, fields: readonly string[]): Record<string, string> {
  const problems = fields.flatMap((field) =>
    typeof args[field] === 'string' ? [] : [`${field}: ${field in args ? 'must be a string' : 'field required'}`],
  );
  if (problems.length > 0) throw new ToolCallError(problems.join('; '));
  return Object.fromEntries(fields.map((field) => [field, args[field] as string]));
}

interface CallOutcome {
  content: string;
  /** generate_response succeeded: v1's structured answer, v0's { response }. */
  finished?: Record<string, string>;
  valid: boolean;
}

async function runCall(
  call: { name: string; arguments: string },
  options: ReActAgentOptions,
  signal?: AbortSignal,
): Promise<CallOutcome> {
  try {
    const args = parseArguments(call.arguments);
    if (call.name === FINISH_FUNCTION) {
      const fields = options.style === 'v0' ? ['response'] : Object.keys(options.answerSchema?.fields ?? {});
      const finished = validateAnswer(args, fields);
      return { content: options.style === 'v0' ? 'Success' : 'Successfully generated response.', finished, valid: true };
    }
    const tool = options.tools.find((t) => t.schema.function.name === call.name);
    if (tool === undefined)
      return { content: `FunctionNotFoundError: Cannot find the function named ${call.name}.`, valid: false };
    return { content: await tool.run(args, signal), valid: true };
  } catch (error) {
    if (!(error instanceof ToolCallError)) throw error;
    const prefix = call.name === FINISH_FUNCTION && options.style === 'v1' ? 'Arguments Validation Error' : 'Error';
    return { content: `${prefix}: ${error.message}`, valid: false };
  }
}

/** Runs the agent on one query (see the header). */
export async function runReActAgent(client: OpenAI, options: ReActAgentOptions): Promise<ReActAgentResult> {
  const system: MessageParam = { role: 'system', content: options.systemPrompt };
  const memory: MessageParam[] = options.memory ?? [];
  // a conversation that has grown past the context (not a first prompt too long to start) ends the episode
  const continued = memory.length > 0;
  memory.push({ role: 'user', content: options.query });
  const wantsFinishCall = options.style === 'v0' || options.answerSchema !== undefined;
  const tools = [
    ...options.tools.map((t) => t.schema),
    ...(wantsFinishCall ? [finishTool(options.style, options.answerSchema)] : []),
  ];
  const result: ReActAgentResult = {
    structured: null,
    text: '',
    memoryLength: 0,
    modelCalls: 0,
    toolCalls: 0,
    invalidToolCalls: 0,
    summarized: false,
    contextFull: false,
  };
  const call = async (messages: MessageParam[], withTools: boolean, toolChoice?: 'none') => {
    const request: RequestParams = {
      ...options.request,
      model: 'react-agent', // any name: the rollout endpoint serves its one model under every name
      messages,
      ...(withTools && tools.length > 0 ? { tools } : {}),
      ...(toolChoice ? { tool_choice: toolChoice } : {}),
      ...(options.seed ? { seed: options.seed(result.modelCalls) } : {}),
    };
    const mayBeFull = continued || result.modelCalls > 0;
    const reply = await chatTurn(client, request, { who: 'ReAct agent', mayBeFull, signal: options.signal });
    if (reply === null) {
      result.contextFull = true;
      return null;
    }
    result.modelCalls++;
    // a block the server could not parse (with tools offered and not turned off)
    if (withTools && tools.length > 0 && toolChoice !== 'none' && (reply.content ?? '').includes('<tool_call>'))
      result.invalidToolCalls++;
    return reply;
  };

  let wantStructured = options.style === 'v1' && wantsFinishCall;
  let hint: string | null = null;
  let textOnly = false;
  let done = false;
  for (let iter = 0; iter < options.maxIters && !done; iter++) {
    const messages = [system, ...memory, ...(hint !== null ? [{ role: 'user' as const, content: hint }] : [])];
    hint = null;
    const reply = await call(messages, true, textOnly ? 'none' : undefined);
    if (reply === null) break;
    memory.push(reply as MessageParam); // as returned: the next call continues its exact ids
    const calls = (reply.tool_calls ?? []).filter((c) => c.type === 'function');
    const text = reply.content ?? '';
    let finished: Record<string, string> | undefined;
    for (const toolCall of calls) {
      result.toolCalls++;
      const outcome = await runCall(toolCall.function, options, options.signal);
      if (!outcome.valid) result.invalidToolCalls++;
      memory.push({ role: 'tool', tool_call_id: toolCall.id, content: outcome.content });
      finished = outcome.finished ?? finished;
    }
    if (options.style === 'v0') {
      if (calls.length === 0 || finished !== undefined) {
        result.text = finished?.response ?? text;
        done = true;
      }
    } else if (wantStructured) {
      if (finished !== undefined) {
        result.structured = finished;
        wantStructured = false;
        if (text.trim() !== '') {
          result.text = text;
          done = true;
        } else {
          hint = TEXT_REPLY_HINT;
          textOnly = true;
        }
      } else if (calls.length === 0) hint = STRUCTURED_HINT;
    } else if (calls.length === 0) {
      result.text = text;
      done = true;
    }
  }
  if (!done && !result.contextFull) {
    result.summarized = true;
    const hintMessage: MessageParam = { role: 'user', content: SUMMARIZE_HINT };
    const messages = options.style === 'v0' ? [...memory, hintMessage] : [system, ...memory, hintMessage];
    const reply = await call(messages, false);
    if (reply !== null) {
      result.text = reply.content ?? '';
      if (options.style === 'v1') memory.push(reply as MessageParam);
    }
  }
  result.memoryLength = memory.length;
  return result;
}
