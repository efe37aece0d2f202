// bots_math_boxed_workflow and bots_math_boxed_reward (Trinity-RFT's BOTS example): the row's own conversation is the
// prompt (no system prompt added), the answer is read where BOTS' rows keep it, and the reward finds the final answer
// in a \boxed{} or after "answer is", with_think's format penalty as math_boxed_reward's.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { NO_AUXILIARY_MODELS } from '../../../src/rft/auxiliary/index.js';
import { loadTaskset } from '../../../src/rft/buffer/index.js';
import { REWARD_FUNCTIONS, scoreResponses } from '../../../src/rft/reward/registry.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, WORKFLOWS } from '../../../src/rft/workflow/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { ScriptedBackend } from './scripted-backend.js';

async function botsTask(): Promise<Task> {
  const file = join(mkdtempSync(join(tmpdir(), 'bots-')), 'math.jsonl');
  const row = { prompt: [{ role: 'user', content: 'What is 6*7? Box it.' }], reward_model: { ground_truth: '42' } };
  writeFileSync(file, `${JSON.stringify(row)}\n`);
  const { tasks } = await loadTaskset({
    name: 'math-train',
    path: file,
    format: { promptKey: 'prompt', responseKey: 'reward_model.ground_truth' },
    defaultWorkflowType: 'bots_math_boxed_workflow',
  });
  return tasks[0] as Task;
}

const TASK: Task = { id: 't', taskset: 't', index: 0, raw: {}, response: '42' };

const score = async (response: string, args: Record<string, unknown> = {}, reward = 'bots_math_boxed_reward') => {
  const [scored] = await scoreResponses(REWARD_FUNCTIONS.get(reward), { responses: [response], task: TASK, args });
  assert.ok(scored);
  return scored;
};

describe('bots_math_boxed_workflow', () => {
  test("renders the row's conversation with no system prompt and scores the reply against the nested answer", async () => {
    const task = await botsTask();
    const scripted = new ScriptedBackend(fixtureTokenizer(), () => 'so \\boxed{42}');
    const workflow = await WORKFLOWS.resolve(task.workflow as string);
    const [experience] = await workflow.run({
      task: { ...task, workflowArgs: { with_think: true, format_score_coef: 0.2 } },
      model: new EngineModelHandle(scripted),
      repeatTimes: 1,
      runIdBase: 0,
      seed: 1,
      signal: new AbortController().signal,
      isEval: false,
      auxiliaryModels: NO_AUXILIARY_MODELS,
    });
    assert.equal(scripted.prompts[0], '<|im_start|>user\nWhat is 6*7? Box it.<|im_end|>\n<|im_start|>assistant\n');
    // accuracy 1, with_think and no <think> block: format_score −0.2
    assert.equal(experience?.reward, 0.8);
    assert.deepEqual(experience?.metrics, { accuracy: 1, format_score: -0.2 });
  });

  test("the example's Python class path (bots/random.yaml) is the same workflow", async () => {
    const byClassPath = await WORKFLOWS.resolve('examples.bots.workflow.bots_math_boxed_workflow.BOTSMathBoxedWorkflow');
    assert.equal(byClassPath.run, WORKFLOWS.get('bots_math_boxed_workflow').run);
  });
});

describe('bots_math_boxed_reward', () => {
  test('the final answer from \\boxed{} or "answer is"; with_think penalises a missing <think> block', async () => {
    assert.deepEqual(await score('\\boxed{42}'), { reward: 1, metrics: { accuracy: 1, format_score: 0 } });
    assert.equal((await score('so the answer is 42.')).reward, 1, 'no box: "answer is" (math_boxed_reward reads boxes only)');
    assert.equal((await score('so the answer is 42.', {}, 'math_boxed_reward')).reward, 0);
    assert.equal((await score('\\boxed{41}')).reward, 0);
    assert.deepEqual(await score('<think>6*7</think> \\boxed{42}', { with_think: true }), {
      reward: 1,
      metrics: { accuracy: 1, format_score: 0 },
    });
    assert.equal((await score('\\boxed{42}', { with_think: true })).reward, 0.9);
  });
});
