// toolcall_workflow (Trinity-RFT's ToolCallWorkflow, after Tool-N1, arXiv 2505.00024; also registered as
// tool_call_workflow): one function-calling turn of a ToolACE row, rewarded 1 when the model's calls are the dataset's.
//
// A row (the grpo_toolcall example's get_toolace_data.py output; no prompt column):
//   {"raw_system": "...functions ... you can invoke:\n", "tools": "[{\"name\": ..., \"parameters\": ...}]",
//    "conversations": [{"from": "user", "value": "..."}, ...], "answer": "[{\"name\": ..., \"arguments\": {...}}]"}
//
// The prompt, built as Trinity builds it (the chat template renders it with no tool definitions of its own):
//   system    = raw_system + TOOL_PROMPT (the call format in this backend's words), whose <tools> block holds one
//               json.dumps({"type": "function", "function": tool}) per line (Python's JSON text: ../../util/python-json.ts)
//   then each turn: human/user → user, gpt/assistant → assistant, observation/tool → tool,
//               function_call → assistant whose content is json.dumps(value)
//
// The reward of a response (Trinity's compute_score_v0 with its two anti-hacking rules), 1 or 0:
//   calls = json.loads of the last <tool_call>…</tool_call>'s stripped text (a JSON string is read once more; one
//           object is a list of one)
//   1 iff calls were read, the text has exactly one <think> and one </think>, the first </think> comes before the
//        first <tool_call> (when there is one), every call is an object with "name" and "arguments", and the
//        multiset of (name, json.dumps(arguments, sort_keys=True)) equals the answer's (two empty lists are equal)
// Python keeps 1 and 1.0 apart, and so does the comparison here. A call list that is no list (a number, say) scores 0,
// where Trinity's check would raise and fail the run of the task.
import type { ChatMessage } from '../../tokenizer/index.js';
import { parsePythonJson, type PyValue, pythonJsonDumps, toPyValue } from '../../util/python-json.js';
import type { Task } from '../task.js';
import { sampleResponses } from './single-turn.js';
import type { WorkflowSpec } from './types.js';
import { WORKFLOWS } from './workflow-registry.js';

/**
 * The instructions after the row's system text (this backend's wording of Tool-N1's: the same tags and call format the
 * reward checks), with the tools in a <tools> block.
 */
export const TOOL_PROMPT = (tools: string): string => `# Tools

<tools>
${tools}
</tools>

Every reply MUST contain both of these, in this order:
1. Your reasoning, enclosed in <think> </think> tags.
2. The function calls as a JSON list inside <tool_call></tool_call> tags, each call an object with the function's name and its arguments: <tool_call>[{"name": <function-name>, "arguments": <args-json-object>}, ...]</tool_call>
For example: <think>The user wants the weather in Paris, so I call get_weather once.</think> <tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_call>
Give every argument the type its parameter declares.
`;

const ROLES: Readonly<Record<string, ChatMessage['role']>> = {
  human: 'user',
  user: 'user',
  gpt: 'assistant',
  assistant: 'assistant',
  observation: 'tool',
  tool: 'tool',
  function_call: 'assistant',
};

/** A column of a ToolACE row: its JSON text read as Python reads it, or the value itself when it is already data. */
function jsonColumn(task: Task, key: string): PyValue {
  const value = task.raw[key];
  if (value === undefined) throw new Error(`toolcall_workflow: task ${task.id} has no '${key}' column (ToolACE's rows)`);
  if (typeof value !== 'string') return toPyValue(value);
  try {
    return parsePythonJson(value);
  } catch (error) {
    throw new Error(`toolcall_workflow: task ${task.id} column '${key}' is not JSON: ${(error as Error).message}`);
  }
}

/** The chat messages of a ToolACE row (see the header). */
export function toolcallMessages(task: Task): ChatMessage[] {
  const tools = jsonColumn(task, 'tools');
  if (!Array.isArray(tools)) throw new Error(`toolcall_workflow: task ${task.id} column 'tools' must be a list of tools`);
  const rendered = tools
    .map((tool) =>
      pythonJsonDumps(
        new Map([
          ['type', 'function'],
          ['function', tool],
        ]),
      ),
    )
    .join('\n');
  const system = task.raw.raw_system ?? '';
  if (typeof system !== 'string') throw new Error(`toolcall_workflow: task ${task.id} column 'raw_system' must be text`);
  const messages: ChatMessage[] = [{ role: 'system', content: system + TOOL_PROMPT(rendered) }];
  const turns = task.raw.conversations;
  if (!Array.isArray(turns)) throw new Error(`toolcall_workflow: task ${task.id} column 'conversations' must be a list`);
  for (const [i, turn] of turns.entries()) {
    const { from, value } = (turn ?? {}) as { from?: unknown; value?: unknown };
    const role = typeof from === 'string' ? ROLES[from] : undefined;
    if (role === undefined) continue; // Trinity skips a turn from anyone else
    if (from === 'function_call') messages.push({ role, content: pythonJsonDumps(toPyValue(value)) });
    else if (typeof value === 'string') messages.push({ role, content: value });
    else throw new Error(`toolcall_workflow: task ${task.id} conversations[${i}].value must be text`);
  }
  return messages;
}

/** The calls of the last <tool_call> block, as Trinity reads them; null when there is none or it is not JSON. */
function lastToolCalls(response: string): PyValue | null | undefined {
  const blocks = [...response.matchAll(/<tool_call>([\s\S]*?)<\/tool_call>/g)];
  const last = blocks.at(-1);
  if (last === undefined) return null;
  let calls: PyValue;
  try {
    calls = parsePythonJson((last[1] as string).trim());
    if (typeof calls === 'string') calls = parsePythonJson(calls);
  } catch {
    return null;
  }
  return calls instanceof Map ? [calls] : calls;
}

const count = (text: string, part: string): number => text.split(part).length - 1;

/** (name, canonical arguments) of each call, or null when a name cannot be a key (a list or an object). */
function callKeys(calls: readonly PyValue[]): string[] | null {
  const keys: string[] = [];
  for (const call of calls) {
    const name = (call as Map<string, PyValue>).get('name') as PyValue;
    if (Array.isArray(name) || name instanceof Map) return null;
    keys.push(
      `${pythonJsonDumps(name)}\u0000${pythonJsonDumps((call as Map<string, PyValue>).get('arguments') as PyValue, { sortKeys: true })}`,
    );
  }
  return keys.sort();
}

/** The reward of one response against the row's answer (see the header): 1 or 0. */
export function toolcallReward(response: string, answer: PyValue): number {
  const calls = lastToolCalls(response);
  if (calls === null || calls === undefined) return 0;
  if (count(response, '<think>') !== 1 || count(response, '</think>') !== 1) return 0;
  const toolCallAt = response.indexOf('<tool_call>');
  if (toolCallAt !== -1 && response.indexOf('</think>') > toolCallAt) return 0;
  if (!Array.isArray(calls)) return 0;
  if (!calls.every((c) => c instanceof Map && c.has('name') && c.has('arguments'))) return 0;
  const expected = typeof answer === 'string' ? parsePythonJson(answer) : answer;
  if (!Array.isArray(expected)) return 0;
  if (calls.length === 0 || expected.length === 0) return calls.length === expected.length ? 1 : 0;
  if (!expected.every((c) => c instanceof Map)) return 0;
  const got = callKeys(calls);
  const want = callKeys(expected);
  return got !== null && want !== null && got.join('\u0001') === want.join('\u0001') ? 1 : 0;
}

export const toolcallWorkflow: WorkflowSpec = {
  repeatable: true,
  readsPrompt: false,
  workflowArgs: [],
  description: "ToolACE's function calling (Tool-N1's prompt and reward): 1 when the calls match the row's answer",
  run: async (context) => {
    const { task, model } = context;
    const messages = toolcallMessages(task);
    const answer = jsonColumn(task, 'answer');
    const { completions, responses } = await sampleResponses(context, messages, 'toolcall_workflow');
    return completions.map((completion, i) => {
      const response = responses[i] as string;
      const reward = toolcallReward(response, answer);
      return model.toExperience(completion, {
        reward,
        metrics: { accuracy: reward },
        responseText: response,
        messages: [...messages.map((m) => ({ ...m })), { role: 'assistant', content: response }],
      });
    });
  },
};

WORKFLOWS.register('toolcall_workflow', toolcallWorkflow);
WORKFLOWS.register('tool_call_workflow', toolcallWorkflow, "Trinity-RFT's other name of toolcall_workflow (the same workflow)");
