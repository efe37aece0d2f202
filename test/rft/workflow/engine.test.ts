// The model handle and the single-turn workflows on a real RolloutEngine (fixture model qwen2-tied with the fixture
// character tokenizer) and a WorkerRolloutEngine: experiences hold exactly the engine's ids and log-probs, the
// model version of the call, and rewards from the verifier; seeded runs reproduce.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type RolloutEngine, WorkerRolloutEngine } from '../../../src/engine/index.js';
import type { CausalLM } from '../../../src/model/index.js';
import { validateExperience } from '../../../src/rft/experience.js';
import { REWARD_FUNCTIONS, scoreResponse } from '../../../src/rft/reward/index.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, WorkflowRunner } from '../../../src/rft/workflow/index.js';
import { fixtureEngine, fixtureModelWithTokenizer, maxDiff, referenceLogprobs } from '../../engine/helpers.js';

let model: CausalLM;
let engine: RolloutEngine;
let close: () => Promise<void>;

before(() => {
  ({ model, engine, close } = fixtureEngine({ maxLength: 64, slots: 4 }));
});
after(() => close());

describe('EngineModelHandle', () => {
  test('chat choices become experiences with the exact prompt/completion ids and the engine logprobs', async () => {
    const handle = new EngineModelHandle(engine, { modelVersion: 3 });
    const messages = [{ role: 'user' as const, content: '2+3=?' }];
    const result = await handle.chat(messages, { n: 3, temperature: 1, seed: 11, maxTokens: 6, ignoreEos: true });
    handle.modelVersion = 4; // a sync after the call: the experiences keep the version that produced them
    const tokenizer = handle.tokenizer;
    assert.ok(tokenizer);
    assert.deepEqual(result.promptIds, tokenizer.encodeChat(messages, { addGenerationPrompt: true }));
    for (const choice of result.choices) {
      const e = handle.toExperience(choice, { reward: 0.5 });
      assert.deepEqual(validateExperience(e), []);
      assert.deepEqual(e.tokens, [...result.promptIds, ...choice.completionIds]);
      assert.equal(e.promptLength, result.promptIds.length);
      assert.deepEqual(e.logprobs, choice.logprobs);
      assert.deepEqual(e.actionMask, [1, 1, 1, 1, 1, 1]);
      assert.equal(e.responseText, choice.message.content);
      assert.equal(e.truncateStatus, 'response_truncated');
      assert.deepEqual({ v: e.info.modelVersion, run: e.info.runId, reward: e.reward }, { v: 3, run: choice.index, reward: 0.5 });
      // The logprobs are the model's: a training forward over the same ids agrees.
      assert.ok(maxDiff(e.logprobs ?? [], referenceLogprobs(model, result.promptIds, choice.completionIds)) < 1e-3);
    }
    assert.equal(handle.toExperience(result).tokens.length, result.promptIds.length + 6, 'the ChatResult means choice 0');
    assert.throws(() => handle.toExperience({ ...result.choices[0] } as never), /did not come from this model handle/);
    assert.throws(() => {
      handle.modelVersion = -1;
    }, /non-negative integer/);
  });

  test('generate completions too; options override run id, task id and prompt ids', async () => {
    const handle = new EngineModelHandle(engine);
    const result = await handle.generate({ promptIds: [5, 17, 33], maxTokens: 4, temperature: 0, ignoreEos: true });
    const completion = result.completions[0];
    assert.ok(completion);
    const e = handle.toExperience(completion, { runId: 9, taskId: 'gsm:1', metrics: { accuracy: 1 } });
    assert.deepEqual(e.tokens, [5, 17, 33, ...completion.tokenIds]);
    assert.deepEqual(e.logprobs, completion.logprobs);
    assert.deepEqual(e.info, { modelVersion: 0, runId: 9, taskId: 'gsm:1' });
    assert.deepEqual(e.metrics, { accuracy: 1 });
    const copy = handle.toExperience({ ...completion }, { promptIds: [5, 17, 33] });
    assert.deepEqual(copy.tokens, e.tokens);
  });
});

describe('math_workflow through the runner', () => {
  const task: Task = {
    id: 'arith:0',
    taskset: 'arith',
    index: 0,
    raw: {},
    prompt: '2+3?',
    response: '5',
    systemPrompt: 'Hi',
    replyPrefix: '<think>',
    workflow: 'math_workflow',
    rolloutArgs: { temperature: 1, max_tokens: 8 },
  };

  test('n samples in one call, the reply prefix in the prompt, rewards from math_reward, reproducible', async () => {
    const handle = new EngineModelHandle(engine, { modelVersion: 2 });
    const runner = new WorkflowRunner({ models: handle, runnerPerModel: 2, seed: 5 });
    const first = await runner.runStep([task], { step: 1, repeatTimes: 3 });
    assert.deepEqual(
      first.statuses.map((s) => [s.ok, s.error]),
      [[true, undefined]],
    );
    assert.equal(first.experiences.length, 3);
    const tokenizer = handle.tokenizer;
    assert.ok(tokenizer);
    const promptIds = [
      ...tokenizer.encodeChat(
        [
          { role: 'system', content: 'Hi' },
          { role: 'user', content: '2+3?' },
        ],
        { addGenerationPrompt: true },
      ),
      ...tokenizer.encode('<think>'),
    ];
    for (const e of first.experiences) {
      assert.deepEqual(e.tokens.slice(0, e.promptLength), promptIds);
      assert.ok(e.responseText?.startsWith('<think>'));
      assert.deepEqual(e.info, { modelVersion: 2, runId: e.info.runId, taskId: 'arith:0', step: 1 });
      const expected = await scoreResponse(REWARD_FUNCTIONS.get('math_reward'), {
        response: e.responseText ?? '',
        task,
        args: {},
      });
      assert.equal(e.reward, expected.reward);
      assert.deepEqual(e.metrics, expected.metrics);
      assert.deepEqual(e.messages?.at(-1), { role: 'assistant', content: e.responseText });
    }
    assert.deepEqual(
      first.experiences.map((e) => e.info.runId),
      [0, 1, 2],
    );
    assert.ok(Number.isFinite(first.metrics['rollout/accuracy/mean']));
    const again = await runner.runStep([task], { step: 1, repeatTimes: 3 });
    assert.deepEqual(
      again.experiences.map((e) => e.tokens),
      first.experiences.map((e) => e.tokens),
      'same seed, step and task: same samples',
    );
  });

  test('a task without a reward function fails in simple_workflow with a precise error', async () => {
    const runner = new WorkflowRunner({ models: new EngineModelHandle(engine), maxRetryTimes: 0 });
    const { statuses } = await runner.runStep([{ ...task, workflow: 'simple_workflow' }], { step: 0, repeatTimes: 1 });
    assert.match(statuses[0]?.error ?? '', /simple_workflow: task arith:0 names no reward function/);
    const bad = await runner.runStep([{ ...task, rolloutArgs: { temprature: 1 } }], { step: 0, repeatTimes: 1 });
    assert.match(bad.statuses[0]?.error ?? '', /unknown rollout_args key 'temprature'/);
  });
});

test('EngineModelHandle over a WorkerRolloutEngine', async () => {
  const worker = await WorkerRolloutEngine.start(fixtureModelWithTokenizer('qwen2-tied'), {
    maxLength: 64,
    slots: 2,
    numThreads: 1,
  });
  try {
    const handle = new EngineModelHandle(worker, { modelVersion: 1 });
    const result = await handle.chat([{ role: 'user', content: 'hi' }], { n: 2, temperature: 1, seed: 3, maxTokens: 5 });
    for (const choice of result.choices) {
      const e = handle.toExperience(choice);
      assert.deepEqual(e.tokens, [...result.promptIds, ...choice.completionIds]);
      assert.deepEqual(e.logprobs, choice.logprobs);
      assert.equal(e.info.modelVersion, 1);
    }
  } finally {
    await worker.close();
  }
});
