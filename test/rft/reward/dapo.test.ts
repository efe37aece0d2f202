// math_dapo_reward (src/rft/reward/dapo.ts): DAPO's overlong penalty from the response's token count, by hand-computed
// values; the answer read after </think>; the token counts scoreResponses passes per response; the errors for an
// incomplete penalty setting or a caller without token counts; and math_boxed_workflow giving the reward the
// generated token count and, with workflow_args.use_base, prompting in Trinity's plain-text form.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { NO_AUXILIARY_MODELS } from '../../../src/rft/auxiliary/index.js';
import { dapoAnswer, overlongPenalty } from '../../../src/rft/reward/dapo.js';
import { REWARD_FUNCTIONS, scoreResponses } from '../../../src/rft/reward/registry.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle } from '../../../src/rft/workflow/index.js';
import { basePrompt, mathBoxedWorkflow } from '../../../src/rft/workflow/single-turn.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { ScriptedBackend } from '../workflow/scripted-backend.js';

const task = (over: Partial<Task> = {}): Task => ({ id: 't0', prompt: 'What is 6*7?', response: '42', ...over }) as Task;
const PENALTY = { enable_overlong_penalty: true, penalty_factor: 2, max_response_length: 20, cache_length: 8 };

describe('math_dapo_reward', () => {
  test('the overlong penalty: 0 below L − C, linear to −penalty_factor at L, −penalty_factor beyond', () => {
    // L = 20, C = 8, expected = 12, factor 2
    assert.equal(overlongPenalty(11, 20, 8, 2), 0);
    assert.equal(overlongPenalty(12, 20, 8, 2), 0); // (12 − 12) / 8 · 2
    assert.equal(overlongPenalty(16, 20, 8, 2), -1); // (12 − 16) / 8 · 2
    assert.equal(overlongPenalty(20, 20, 8, 2), -2); // (12 − 20) / 8 · 2
    assert.equal(overlongPenalty(21, 20, 8, 2), -2);
    assert.equal(overlongPenalty(18432, 20480, 4096, 1), -0.5); // the dapo_math example's setting
  });

  test('the answer is the last \\boxed{} after </think>, else the text after it', () => {
    assert.equal(dapoAnswer('<think>maybe \\boxed{7}</think> so \\boxed{42}.'), '42');
    assert.equal(dapoAnswer('<think>\\boxed{7}</think> 42 '), '42');
    assert.equal(dapoAnswer('no think: \\boxed{\\frac{1}{2}}'), '\\frac{1}{2}');
  });

  test('reward = accuracy + format_score, each response with its own token count', async () => {
    const fn = await REWARD_FUNCTIONS.resolve('math_dapo_reward');
    const scored = await scoreResponses(fn, {
      responses: ['\\boxed{42}', '\\boxed{42}', '<think>\\boxed{42}</think> \\boxed{41}', '\\boxed{42}'],
      responseTokens: [5, 16, 5, 30],
      task: task(),
      args: PENALTY,
    });
    assert.deepEqual(
      scored.map((s) => [s.reward, s.metrics.accuracy, s.metrics.format_score]),
      [
        [1, 1, 0],
        [0, 1, -1],
        [0, 0, 0],
        [-1, 1, -2],
      ],
    );
    // penalty off (the default): accuracy only, token counts not needed
    const plain = await scoreResponses(fn, { responses: ['\\boxed{42}'], task: task(), args: {} });
    assert.deepEqual(plain[0], { reward: 1, metrics: { accuracy: 1, format_score: 0 } });
  });

  test('an incomplete penalty setting, or no token count, is an error naming what is missing', async () => {
    const fn = await REWARD_FUNCTIONS.resolve('math_dapo_reward');
    await assert.rejects(
      scoreResponses(fn, { responses: ['x'], responseTokens: [1], task: task(), args: { enable_overlong_penalty: true } }),
      /enable_overlong_penalty needs numbers for max_response_length, cache_length, penalty_factor/,
    );
    await assert.rejects(
      scoreResponses(fn, { responses: ['x'], responseTokens: [1], task: task(), args: { ...PENALTY, cache_length: 20 } }),
      /max_response_length \(20\) must be greater than cache_length \(20\)/,
    );
    await assert.rejects(
      scoreResponses(fn, { responses: ['x'], task: task(), args: PENALTY }),
      /needs the response's token count, which this workflow does not pass \(task t0\)/,
    );
  });
});

describe('math_boxed_workflow', () => {
  const run = async (workflowArgs: Record<string, unknown>, reply: string) => {
    const scripted = new ScriptedBackend(fixtureTokenizer(), () => reply);
    const experiences = await mathBoxedWorkflow.run({
      task: task({
        systemPrompt: 'Answer in a box.',
        rewardFn: 'math_dapo_reward',
        rewardFnArgs: PENALTY,
        workflowArgs,
      }),
      model: new EngineModelHandle(scripted),
      repeatTimes: 1,
      runIdBase: 0,
      seed: 1,
      signal: new AbortController().signal,
      isEval: false,
      auxiliaryModels: NO_AUXILIARY_MODELS,
    });
    return { prompt: scripted.prompts[0] as string, experience: experiences[0] };
  };

  test('passes the generated token count to the reward (the character tokenizer: one per character, + eos)', async () => {
    // '\boxed{42}' is 10 characters + eos = 11 tokens: no penalty; 15 characters + eos = 16 tokens: (12 − 16) / 8 · 2
    assert.equal((await run({}, '\\boxed{42}')).experience?.reward, 1);
    assert.equal((await run({}, 'ok, \\boxed{42}.')).experience?.reward, 0);
  });

  test('use_base: the plain-text prompt of a base model instead of the chat template', async () => {
    const base = await run({ use_base: true }, '\\boxed{42}');
    assert.equal(base.prompt, 'System:Answer in a box.\nUser:\nWhat is 6*7?\nAssistant:\n');
    const chat = await run({ use_base: false }, '\\boxed{42}');
    assert.match(chat.prompt, /<\|im_start\|>system\nAnswer in a box\./);
    assert.equal(
      basePrompt([{ role: 'user', content: 'q' }], 'w'),
      'User:\nq\nAssistant:\n',
      'no system prompt: the user part only',
    );
  });
});
