// toolcall_workflow (Trinity-RFT's ToolCallWorkflow over ToolACE rows): the prompt built from a row's raw_system,
// tools and conversation, and the reward's rules, each case checked against what Trinity's compute_score_v0 returns
// for it (the rule that decides is named beside each).
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { NO_AUXILIARY_MODELS } from '../../../src/rft/auxiliary/index.js';
import { loadTaskset } from '../../../src/rft/buffer/index.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, WORKFLOWS } from '../../../src/rft/workflow/index.js';
import { TOOL_PROMPT, toolcallMessages, toolcallReward } from '../../../src/rft/workflow/toolcall.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { ScriptedBackend } from './scripted-backend.js';

const TOOLS = [
  {
    name: 'get_weather',
    description: 'Weather of a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } } },
  },
  {
    name: 'convert',
    description: 'Convert °C to °F.',
    parameters: { type: 'object', properties: { celsius: { type: 'number' } } },
  },
];
const ROW = {
  raw_system: 'You are an expert in composing functions.\n',
  tools: JSON.stringify(TOOLS),
  conversations: [
    { from: 'user', value: 'Weather in Paris, and 20.0 C in F?' },
    { from: 'function_call', value: '[{"name": "get_weather", "arguments": {"city": "Paris"}}]' },
    { from: 'observation', value: '{"temp": 20}' },
  ],
  answer: JSON.stringify([{ name: 'convert', arguments: { celsius: 20.5 } }]),
};

async function toolaceTask(): Promise<Task> {
  const file = join(mkdtempSync(join(tmpdir(), 'toolace-')), 'toolace.json');
  writeFileSync(file, JSON.stringify([ROW]));
  const { tasks } = await loadTaskset({
    name: 'toolace',
    path: file,
    defaultWorkflowType: 'toolcall_workflow',
    promptOptional: true,
  });
  return tasks[0] as Task;
}

const CALL = '<tool_call>[{"name": "convert", "arguments": {"celsius": 20.5}}]</tool_call>';

describe('toolcall_workflow', () => {
  test("the prompt: raw_system + the tool instructions with json.dumps'd tools, then the turns by role", async () => {
    const messages = toolcallMessages(await toolaceTask());
    const tools =
      '{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}\n' +
      '{"type": "function", "function": {"name": "convert", "description": "Convert \\u00b0C to \\u00b0F.", "parameters": {"type": "object", "properties": {"celsius": {"type": "number"}}}}}';
    assert.deepEqual(messages, [
      { role: 'system', content: `You are an expert in composing functions.\n${TOOL_PROMPT(tools)}` },
      { role: 'user', content: 'Weather in Paris, and 20.0 C in F?' },
      // function_call: json.dumps of the value, a string → the string quoted
      { role: 'assistant', content: '"[{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Paris\\"}}]"' },
      { role: 'tool', content: '{"temp": 20}' },
    ]);
  });

  test("the reward: 1 only for the answer's calls after one <think> block", () => {
    const answer = ROW.answer;
    assert.equal(toolcallReward(`<think>convert it</think>${CALL}`, answer), 1);
    // one object instead of a list: a list of one
    assert.equal(
      toolcallReward('<think>x</think><tool_call>{"name": "convert", "arguments": {"celsius": 20.5}}</tool_call>', answer),
      1,
    );
    // a JSON string holding the list is read once more
    assert.equal(toolcallReward(`<think>x</think><tool_call>${JSON.stringify(CALL.slice(11, -12))}</tool_call>`, answer), 1);
    // the last block counts
    assert.equal(toolcallReward(`<think>x</think><tool_call>[]</tool_call> ${CALL}`, answer), 1);
    assert.equal(toolcallReward(`<think>x</think>${CALL} <tool_call>[]</tool_call>`, answer), 0);
    // no <think> block; two of them (rule 1); </think> after <tool_call> (rule 2)
    assert.equal(toolcallReward(CALL, answer), 0);
    assert.equal(toolcallReward(`<think>a</think><think>b</think>${CALL}`, answer), 0);
    assert.equal(toolcallReward(`<think>a ${CALL} </think>`, answer), 0);
    // arguments differ: a value, its type (20 is an int, the answer's 20.5 a float), a missing "arguments" key
    assert.equal(toolcallReward(`<think>x</think>${CALL.replace('20.5', '21.5')}`, answer), 0);
    assert.equal(
      toolcallReward(
        '<think>x</think><tool_call>[{"name": "convert", "arguments": {"celsius": 20}}]</tool_call>',
        '[{"name": "convert", "arguments": {"celsius": 20.0}}]',
      ),
      0,
    );
    assert.equal(
      toolcallReward(
        '<think>x</think><tool_call>[{"name": "convert", "arguments": {"celsius": 20.0}}]</tool_call>',
        '[{"name": "convert", "arguments": {"celsius": 20.0}}]',
      ),
      1,
    );
    assert.equal(toolcallReward('<think>x</think><tool_call>[{"name": "convert"}]</tool_call>', answer), 0);
    // key order inside arguments does not matter (sort_keys); the multiset of calls does
    const two = '[{"name": "f", "arguments": {"a": 1, "b": 2}}, {"name": "g", "arguments": {}}]';
    assert.equal(
      toolcallReward(
        '<think>x</think><tool_call>[{"name": "g", "arguments": {}}, {"name": "f", "arguments": {"b": 2, "a": 1}}]</tool_call>',
        two,
      ),
      1,
    );
    assert.equal(toolcallReward('<think>x</think><tool_call>[{"name": "f", "arguments": {"a": 1, "b": 2}}]</tool_call>', two), 0);
    // not JSON, no block, no call at all where none was wanted
    assert.equal(toolcallReward('<think>x</think><tool_call>[{"name": </tool_call>', answer), 0);
    assert.equal(toolcallReward('<think>x</think> nothing to call', answer), 0);
    assert.equal(toolcallReward('<think>x</think><tool_call>[]</tool_call>', '[]'), 1);
    assert.equal(toolcallReward('<think>x</think><tool_call>5</tool_call>', answer), 0);
  });

  test('a run chats with the built prompt and rewards each response', async () => {
    const task = await toolaceTask();
    const replies = [`<think>convert</think>${CALL}`, 'no idea'];
    const scripted = new ScriptedBackend(fixtureTokenizer(), () => replies.shift() ?? '');
    const workflow = await WORKFLOWS.resolve(task.workflow as string);
    const run = (n: number) =>
      workflow.run({
        task,
        model: new EngineModelHandle(scripted),
        repeatTimes: n,
        runIdBase: 0,
        seed: 1,
        signal: new AbortController().signal,
        isEval: false,
        auxiliaryModels: NO_AUXILIARY_MODELS,
      });
    const [right] = await run(1);
    const [wrong] = await run(1);
    assert.deepEqual([right?.reward, wrong?.reward], [1, 0]);
    assert.match(scripted.prompts[0] as string, /^<\|im_start\|>system\nYou are an expert in composing functions\.\n# Tools\n/);
    assert.match(scripted.prompts[0] as string, /<\|im_start\|>tool\n\{"temp": 20\}<\|im_end\|>\n<\|im_start\|>assistant\n$/);
    assert.equal((await WORKFLOWS.resolve('tool_call_workflow')).run, workflow.run, "Trinity's other name");
  });
});
