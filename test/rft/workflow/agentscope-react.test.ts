// Trinity-RFT's AgentScope ReAct workflows ported (src/rft/workflow/agents/agentscope-react.ts, react-agent.ts,
// python-tool.ts), each played through the OpenAI client on a scripted backend: the v1 agent's structured answer
// (generate_response's `result`), its hints, a malformed finish call answered with the validation error, the v0
// agent's Python tool (the code really runs) and finish function, max_iters ending in a summary, one experience per
// model call with the episode's reward, and the refusals (a template that needs the email index, a missing interpreter).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Task } from '../../../src/rft/task.js';
import {
  EngineModelHandle,
  formatPythonRun,
  MATH_TOOLS_SYSTEM_PROMPT,
  MAX_STREAM_CHARS,
  runPython,
  WORKFLOWS,
  WorkflowRunner,
} from '../../../src/rft/workflow/index.js';
import type { Tokenizer } from '../../../src/tokenizer/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { SCRIPTED_LOGPROB, ScriptedBackend } from './scripted-backend.js';

const call = (name: string, args: Record<string, unknown>) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
const assistantTurns = (prompt: string) => prompt.split('<|im_start|>assistant\n').length - 2;

const STRUCTURED_HINT = /Structured output is required, go on to finish your task or call 'generate_response'/;
const TEXT_HINT = /<system-hint>Now generate a text response based on your current situation<\/system-hint>/;
const SUMMARIZE_HINT = /You have failed to generate response within the maximum iterations/;

describe('AgentScope ReAct workflows', () => {
  let tokenizer: Tokenizer;
  let handle: EngineModelHandle | undefined;
  let backend: ScriptedBackend;

  before(() => {
    tokenizer = fixtureTokenizer();
  });
  after(async () => {
    await handle?.close();
  });

  /** One task (GSM8K's "#### 18" answer) played once; the statuses' errors, or 'ok'. */
  async function play(workflow: string, policy: (prompt: string) => string, task: Partial<Task> = {}) {
    await handle?.close();
    backend = new ScriptedBackend(tokenizer, policy);
    handle = new EngineModelHandle(backend, { modelVersion: 1 });
    const runner = new WorkflowRunner({ models: handle, maxRetryTimes: 0, maxTimeout: 60, workflows: WORKFLOWS });
    const full: Task = {
      id: 'q1',
      taskset: 'test',
      index: 0,
      raw: {},
      workflow,
      prompt: 'Tom has 6 boxes of 3 apples. How many apples?',
      response: '6 * 3 = 18\n#### 18',
      rolloutArgs: { temperature: 1, max_tokens: 300 },
      ...task,
    };
    const result = await runner.runStep([full], { step: 1, repeatTimes: 1 });
    return { experiences: result.experiences, errors: result.statuses.map((s) => s.error ?? 'ok') };
  }

  test('as_react_workflow: hints, a malformed finish call, the structured answer, one experience per call', async () => {
    const replies = [
      'Let me think about it.', // no tool call: the structured-output hint follows, once
      call('generate_response', { answer: '18' }), // no `result`: answered with the validation error
      call('generate_response', { result: 'So \\boxed{18}' }), // the answer; no text, so one text-only call follows
      'The answer is 18.',
    ];
    const { experiences, errors } = await play('as_react_workflow', (prompt) => replies[assistantTurns(prompt)] ?? 'oops');
    assert.deepEqual(errors, ['ok']);
    assert.equal(experiences.length, 4, 'one experience per model call');
    for (const experience of experiences) {
      assert.equal(experience.reward, 1);
      assert.deepEqual(experience.metrics, {
        accuracy: 1,
        format_score: 0,
        react_memory_length: 7, // the query, 4 replies, 2 tool results
        model_calls: 4,
        tool_calls: 2,
        invalid_tool_calls: 1,
        summarized: 0,
      });
      assert.equal(experience.info.taskId, 'q1');
      const generated = (experience.logprobs as number[]).slice(experience.promptLength);
      assert.ok(generated.every((logprob) => logprob === SCRIPTED_LOGPROB));
    }
    // each experience is one call: its prompt as sent (ids), its reply the generated tokens
    const promptLengths = experiences.map((e) => e.promptLength);
    assert.deepEqual(
      promptLengths,
      backend.prompts.map((p) => tokenizer.encode(p).length),
    );
    const prompts = backend.prompts;
    assert.equal(prompts.length, 4);
    assert.ok((prompts[0] as string).includes(MATH_TOOLS_SYSTEM_PROMPT), prompts[0]);
    assert.match(prompts[0] as string, /generate_response/); // the finish function is offered as a tool
    assert.match(prompts[1] as string, STRUCTURED_HINT);
    assert.doesNotMatch(prompts[2] as string, STRUCTURED_HINT, 'a hint is used once');
    assert.match(prompts[2] as string, /Arguments Validation Error: result: field required/);
    assert.match(prompts[3] as string, /Successfully generated response\./);
    assert.match(prompts[3] as string, TEXT_HINT);
  });

  test('as_react_workflow: a wrong boxed answer scores 0; the reply text is not the answer', async () => {
    const replies = [`Eighteen is \\boxed{18}. ${call('generate_response', { result: '\\boxed{17}' })}`];
    const { experiences } = await play('as_react_workflow', (prompt) => replies[assistantTurns(prompt)] ?? 'oops');
    assert.equal(experiences.length, 1, 'the finish call came with text: the reply ends the episode');
    assert.equal(experiences[0]?.reward, 0);
    assert.equal(experiences[0]?.metrics?.accuracy, 0);
  });

  test('agentscope_reactv2_math_workflow: the Python tool runs the code; generate_response(response) ends it', async () => {
    const replies = [
      call('execute_python_code', { script: 'print(1)' }), // bad arguments
      call('search', { query: 'apples' }), // no such tool
      call('execute_python_code', { code: 'print(6 * 3)' }),
      call('generate_response', { response: 'There are \\boxed{18} apples.' }),
    ];
    const { experiences, errors } = await play('agentscope_reactv2_math_workflow', (p) => replies[assistantTurns(p)] ?? '');
    assert.deepEqual(errors, ['ok']);
    assert.equal(experiences.length, 4);
    for (const experience of experiences) {
      assert.equal(experience.reward, 1);
      assert.deepEqual(experience.metrics, {
        agent_turns: 9, // the query, 4 replies, 4 tool results
        model_calls: 4,
        tool_calls: 4,
        invalid_tool_calls: 2,
        summarized: 0,
      });
    }
    const last = backend.prompts.at(-1) as string;
    assert.match(last, /Error: execute_python_code needs a string `code`/);
    assert.match(last, /FunctionNotFoundError: Cannot find the function named search\./);
    assert.ok(last.includes('<returncode>0</returncode><stdout>18\n</stdout><stderr></stderr>'), last);
  });

  test('v0: a reply without tool calls is the answer; max_iters ends in a summary without the system prompt', async () => {
    const direct = await play('agentscope_reactv2_gsm8k_workflow', () => 'It is \\boxed{18}.');
    assert.equal(direct.experiences.length, 1);
    assert.equal(direct.experiences[0]?.reward, 1);
    const broken = await play('agentscope_reactv2_gsm8k_workflow', () => '<tool_call>\n{"name": execute}\n</tool_call>');
    assert.equal(broken.experiences.length, 1, 'a call block the server cannot parse is a reply without tool calls');
    assert.equal(broken.experiences[0]?.reward, 0);
    assert.equal(broken.experiences[0]?.metrics?.invalid_tool_calls, 1);

    const forever = call('execute_python_code', { code: 'print(2)' });
    const looping = await play('agentscopev0_react_math_workflow', (p) => (SUMMARIZE_HINT.test(p) ? '\\boxed{18}' : forever), {
      workflowArgs: { max_iters: 2 },
    });
    assert.deepEqual(looping.errors, ['ok']);
    assert.equal(looping.experiences.length, 3, 'two iterations and the summary');
    for (const experience of looping.experiences) {
      assert.equal(experience.reward, 1, 'the summary text is the answer');
      assert.equal(experience.metrics?.summarized, 1);
      assert.equal(experience.metrics?.agent_turns, 5); // v0 does not keep the summary in memory
    }
    const summary = backend.prompts.at(-1) as string;
    assert.match(summary, SUMMARIZE_HINT);
    assert.ok(!summary.includes(MATH_TOOLS_SYSTEM_PROMPT), 'v0 summarizes without its system prompt');
  });

  test('agentscope_react_math_workflow (v1): max_iters runs out; the summary text is read when no result came', async () => {
    const forever = call('execute_python_code', { code: 'print(2)' });
    const { experiences } = await play(
      'agentscope_react_math_workflow',
      (p) => (SUMMARIZE_HINT.test(p) ? '\\boxed{18}' : forever),
      {
        workflowArgs: { max_iters: 1 },
      },
    );
    assert.equal(experiences.length, 2);
    assert.equal(experiences[0]?.reward, 1);
    assert.equal(experiences[0]?.metrics?.react_memory_length, 4); // query, reply, tool result, summary
    assert.ok((backend.prompts.at(-1) as string).includes(MATH_TOOLS_SYSTEM_PROMPT), 'v1 keeps its system prompt');
  });

  test('refusals: the email_search template, bad workflow_args, a missing interpreter', async () => {
    const spec = WORKFLOWS.get('as_react_workflow');
    assert.throws(
      () => spec.checkArgs?.({ type: 'email_search' }),
      /type email_search needs the Enron email index.*email_search_workflow/,
    );
    assert.throws(
      () => spec.checkArgs?.({ type: 'alfworld' }),
      /unsupported workflow_args.type "alfworld" \(templates here: gsm8k\)/,
    );
    assert.throws(
      () => spec.checkArgs?.({ max_iters: 0 }),
      /as_react_workflow: workflow_args.max_iters must be a positive integer, got 0/,
    );
    assert.deepEqual(spec.workflowArgs, ['type', 'max_iters']);
    const missing = await play('agentscope_reactv2_math_workflow', () => call('execute_python_code', { code: 'print(1)' }), {
      workflowArgs: { python_executable: 'no-such-python-here' },
    });
    assert.match(missing.errors[0] as string, /cannot start the Python interpreter 'no-such-python-here' \(ENOENT\)/);
    // what still needs an outside service stays refused, naming it
    assert.throws(() => WORKFLOWS.get('agentopia_workflow'), /environment service \(taskset storage_type env_service\)/);
    assert.throws(() => WORKFLOWS.get('agentscope_workflow_adapter_v1'), /Python AgentScope workflow function/);
  });

  test('execute_python_code: return code, output streams and a timeout', async () => {
    const failed = await runPython('import sys\nprint("out")\nsys.exit("bad")', { python: 'python3', timeoutSeconds: 30 });
    assert.equal(formatPythonRun(failed), '<returncode>1</returncode><stdout>out\n</stdout><stderr>bad\n</stderr>');
    const loud = await runPython(`print("x" * ${MAX_STREAM_CHARS + 10})`, { python: 'python3', timeoutSeconds: 30 });
    assert.equal(loud.stdout, `${'x'.repeat(MAX_STREAM_CHARS)}\n[output cut at ${MAX_STREAM_CHARS} characters]`);
    const slow = await runPython('import time\ntime.sleep(30)', { python: 'python3', timeoutSeconds: 0.5 });
    assert.equal(slow.returnCode, -1);
    assert.match(slow.stderr, /TimeoutError: The code execution exceeded the timeout of 0.5 seconds\./);
  });
});
