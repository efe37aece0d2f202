// A judge whose fixed prompt (its template without the task's text and the responses) cannot fit its context with
// room for its verdict is an error when the run starts (src/rft/reward/registry.ts checkRewardModels), naming the
// judge, its context and the prompt's size, for every judge reward (rubric_judge_reward, ruler_reward,
// rm_yes_no_reward); a judge whose sizes are unknown (remote, no tokenizer) is not checked; and a run with such a
// judge stops before its first rollout instead of failing every call.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import type { AuxiliaryModel, AuxiliaryModels } from '../../../src/rft/auxiliary/types.js';
import {
  checkRewardModels,
  judgeMessages,
  RULER_RUBRIC,
  RULER_SYSTEM_PROMPT,
  RULER_TEMPLATE,
  fillTemplate,
} from '../../../src/rft/reward/index.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import type { Tokenizer } from '../../../src/tokenizer/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { makeJob } from '../run/helpers.js';

const tokenizer = fixtureTokenizer(); // one token per character

/** A judge of the given context; never called (the check only measures). */
function judge(contextLength: number | undefined, withTokenizer: Tokenizer | null = tokenizer): AuxiliaryModels {
  const model: AuxiliaryModel = {
    name: 'judge',
    modelName: 'judge-model',
    tokenizer: withTokenizer,
    ...(contextLength !== undefined ? { contextLength } : {}),
    openai: async () => assert.fail('the start-up check calls no judge'),
    baseUrl: async () => assert.fail('the start-up check calls no judge'),
    logprobs: async () => assert.fail('the start-up check calls no judge'),
  };
  return { list: [model], get: () => model };
}

const taskset = (defaultRewardFnType: string, rewardFnArgs: Record<string, unknown> = {}) => ({
  name: 'geo',
  defaultRewardFnType,
  rewardFnArgs,
});

test("ruler_reward: a fixed prompt plus its verdict over the judge's context is an error naming both sizes", () => {
  // the fixed prompt as the judge would see it with no task text and no responses, and the shortest verdict
  const fixed = fillTemplate(RULER_TEMPLATE, {
    question: '',
    reference: '',
    rubric: RULER_RUBRIC,
    responses: '',
    count: '1',
    min_score: '0',
    max_score: '1',
  });
  const promptTokens = tokenizer.encodeChat(judgeMessages(RULER_SYSTEM_PROMPT, fixed), { addGenerationPrompt: true }).length;
  const verdictTokens = tokenizer.encode('Scores: [1]').length;
  assert.equal(verdictTokens, 11);
  // exactly enough room passes; one position less fails, naming the taskset, the judge, its context and the prompt
  checkRewardModels([taskset('ruler_reward')], judge(promptTokens + verdictTokens));
  assert.throws(
    () => checkRewardModels([taskset('ruler_reward')], judge(promptTokens + verdictTokens - 1)),
    new RegExp(
      `^Error: taskset 'geo': reward function 'ruler_reward': judge 'judge' has a context of ${promptTokens + 10} tokens \\(max_model_len\\), ` +
        `and its prompt without the task's text and the responses is already ${promptTokens} tokens: no room for its reply ` +
        `\\("Scores: \\[1\\]" alone is 11\\), so every call would fail`,
    ),
  );
  // a shorter rubric makes room
  checkRewardModels([taskset('ruler_reward', { rubric: 'Be fair.' })], judge(promptTokens));
});

test('rubric_judge_reward and rm_yes_no_reward are checked the same way; unknown sizes are not checked', () => {
  for (const name of ['rubric_judge_reward', 'rm_yes_no_reward']) {
    assert.throws(
      () => checkRewardModels([taskset(name, { rubric: 'x' })], judge(40)),
      new RegExp(`reward function '${name}': judge 'judge' has a context of 40 tokens`),
    );
    checkRewardModels([taskset(name, { rubric: 'x' })], judge(100_000));
    checkRewardModels([taskset(name, { rubric: 'x' })], judge(undefined)); // a remote judge: its context is unknown
    checkRewardModels([taskset(name, { rubric: 'x' })], judge(40, null)); // no tokenizer: its prompt size is unknown
  }
  // a reward without a judge, and a taskset without a reward, need no check
  checkRewardModels([taskset('math_reward'), { name: 'plain' }], judge(1));
  // every taskset that cannot work is named, each reward once
  assert.throws(
    () =>
      checkRewardModels(
        [
          taskset('ruler_reward'),
          { ...taskset('ruler_reward'), name: 'copy' },
          { ...taskset('rubric_judge_reward', { rubric: 'x' }), name: 'eval' },
        ],
        judge(40),
      ),
    (error: Error) => {
      assert.deepEqual(
        error.message.split('\n').map((line) => line.split(':')[0]),
        ["taskset 'geo'", "taskset 'eval'"],
      );
      return true;
    },
  );
});

test('a run whose judge cannot fit its fixed prompt stops when it starts, before any rollout', async () => {
  const { root, configFile, jobDir } = makeJob({ totalSteps: 2, saveInterval: 10 });
  const config = loadConfig(configFile, {
    resolveAlgorithm,
    overrides: [
      'buffer.explorer_input.default_reward_fn_type=ruler_reward',
      `explorer.auxiliary_models=[{name: judge, model_path: ${join(root, 'model')}, max_model_len: 64, slots: 1}]`,
    ],
  });
  await assert.rejects(
    runConfig(config, { log: () => {} }),
    /taskset '[^']*': reward function 'ruler_reward': judge 'judge' has a context of 64 tokens \(max_model_len\), and its prompt without the task's text and the responses is already \d+ tokens: no room for its reply/,
  );
  assert.equal(existsSync(`${jobDir}/metrics.jsonl`), false, 'no step was explored');
});
