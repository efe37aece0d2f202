// math_eval_workflow / async_math_eval_workflow (Trinity-RFT's MathEvalWorkflow): the Qwen2.5-Math prompt, Trinity's
// fixed evaluation sampling, one response per run, and accuracy from Qwen2.5-Math's grader as the reward and metric —
// with a scripted model, as Trinity's test_math_eval_workflow mocks model.chat.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { GenerateRequest, GenerateResult } from '../../../src/engine/index.js';
import { NO_AUXILIARY_MODELS } from '../../../src/rft/auxiliary/index.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, WORKFLOWS } from '../../../src/rft/workflow/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { ScriptedBackend } from './scripted-backend.js';

/** A scripted backend that also keeps each request's sampling settings. */
class RecordingBackend extends ScriptedBackend {
  requests: GenerateRequest[] = [];
  override async generate(request: GenerateRequest): Promise<GenerateResult> {
    this.requests.push(request);
    return super.generate(request);
  }
}

const TASK: Task = {
  id: 'math:0',
  taskset: 'math',
  index: 0,
  raw: {},
  prompt: 'What is 6 times 6?',
  response: '36',
  systemPrompt: 'ignored system prompt',
  rolloutArgs: { temperature: 1, top_p: 1, max_tokens: 64 },
  isEval: true,
};

async function runOnce(name: string, reply: string, task: Task = TASK) {
  const backend = new RecordingBackend(fixtureTokenizer(), () => reply);
  const workflow = await WORKFLOWS.resolve(name);
  const experiences = await workflow.run({
    task,
    model: new EngineModelHandle(backend),
    repeatTimes: 1,
    runIdBase: 0,
    seed: 1,
    signal: new AbortController().signal,
    isEval: true,
    auxiliaryModels: NO_AUXILIARY_MODELS,
  });
  return { backend, experiences, workflow };
}

describe('math_eval_workflow', () => {
  test("Trinity's replies score accuracy 1, 1, 0, 0, as reward and as the accuracy metric", async () => {
    // Trinity's test writes "\boxed" in plain Python strings, a backspace then "oxed"; so does this
    const replies = [
      'My step-by-step reasoning leads to the answer \boxed{36}',
      'Here is the answer of \boxed{36.0}',
      'I made a mistake, the answer is \boxed{42}',
      'The answer is 36, but I forgot the box.',
    ];
    const scores = [];
    for (const reply of replies) {
      const { experiences } = await runOnce('math_eval_workflow', reply);
      assert.equal(experiences.length, 1);
      scores.push([experiences[0]?.reward, experiences[0]?.metrics]);
    }
    assert.deepEqual(scores, [
      [1, { accuracy: 1 }],
      [1, { accuracy: 1 }],
      [0, { accuracy: 0 }],
      [0, { accuracy: 0 }],
    ]);
  });

  test("the Qwen2.5-Math prompt (the task's system prompt unused) and Trinity's sampling, max_tokens from the taskset", async () => {
    const { backend, experiences } = await runOnce('math_eval_workflow', 'so \\boxed{\\frac{72}{2}}');
    assert.equal(
      backend.prompts[0],
      '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 6 times 6?\n' +
        'Please reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n',
    );
    const request = backend.requests[0];
    assert.equal(request?.temperature, 0.6);
    assert.equal(request?.topP, 0.8);
    assert.equal(request?.maxTokens, 64);
    assert.equal(request?.n, 1);
    assert.equal(experiences[0]?.reward, 1, '\\frac{72}{2} = 36');
  });

  test('runs once per response: the runner repeats it (Trinity: can_repeat False)', () => {
    assert.equal(WORKFLOWS.get('math_eval_workflow').repeatable, false);
  });

  test('async_math_eval_workflow is the same workflow', async () => {
    assert.equal((await WORKFLOWS.resolve('async_math_eval_workflow')).run, WORKFLOWS.get('math_eval_workflow').run);
  });

  test('a task without a question or a reference answer is an error naming the format key', async () => {
    const { prompt: _prompt, ...noPrompt } = TASK;
    await assert.rejects(
      runOnce('math_eval_workflow', '1', noPrompt),
      /task math:0 has no question \(the taskset's format.prompt_key/,
    );
    const { response: _response, ...noAnswer } = TASK;
    await assert.rejects(
      runOnce('math_eval_workflow', '1', noAnswer),
      /task math:0 has no reference answer \(the taskset's format.response_key/,
    );
  });
});
