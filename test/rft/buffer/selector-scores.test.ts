// Selectors that read scores: difficulty_based and offline_easy2hard over the pass rates the task pipeline's
// difficulty_scorer writes (`pass_rate` column, read through feature_keys from YAML under both data_selector and
// task_selector), and difficulty_based learning online from pass_rate_calculator's feedback. Posterior means are
// computed by hand beside each assertion (α = 1 + m·p0 + Σr, β = 1 + m·(1 − p0) + Σ(1 − r), m = prior_strength = 2).
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { createSelector, loadTaskset } from '../../../src/rft/buffer/index.js';
import { ConfigError, parseConfig, resolveStages } from '../../../src/rft/run/config/index.js';
import { ExperiencePipeline } from '../../../src/rft/data/experience-pipeline/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { stageSettings } from '../../../src/rft/run/index.js';

const dir = mkdtempSync(join(tmpdir(), 'selector-scores-'));
// rows as difficulty_scorer leaves them: the task and its pass rate under k samples of the current model
const passRates = [0.9, 0.5, 0.1, 0.6];
writeFileSync(
  join(dir, 'scored.jsonl'),
  `${passRates.map((p, i) => JSON.stringify({ prompt: `q${i}`, response: String(i), pass_rate: p })).join('\n')}\n`,
);

const settingsOf = (selector: string) =>
  stageSettings(
    resolveStages(
      parseConfig(
        `model: {model_path: /m, max_model_len: 64}
buffer:
  batch_size: 2
  explorer_input:
    taskset: {path: ${join(dir, 'scored.jsonl')}, ${selector}}
`,
        { env: {}, cwd: dir },
      ),
    )[0] as Parameters<typeof stageSettings>[0],
    '/m',
  );

async function selectorFromYaml(selector: string) {
  const entry = settingsOf(selector).tasksets[0];
  assert.ok(entry);
  const { tasks } = await loadTaskset(entry.taskset);
  return { tasks, selector: createSelector(tasks, entry.selector) };
}

describe('selectors over task-pipeline scores', () => {
  test('difficulty_based: the pass_rate column is the prior, from data_selector and from task_selector', async () => {
    for (const key of ['data_selector', 'task_selector']) {
      const { tasks, selector } = await selectorFromYaml(
        `${key}: {selector_type: difficulty_based, feature_keys: [pass_rate], kwargs: {target_reward: 0.5, tau: 0}}`,
      );
      assert.deepEqual(
        tasks.map((t) => t.features?.pass_rate),
        passRates,
      );
      // means (1 + 2p)/4: 0.7, 0.5, 0.3, 0.55 → |0.5 − mean|: 0.2, 0, 0.2, 0.05 → tasks 1, 3 first
      assert.deepEqual(selector.next(2), [1, 3], key);
    }
  });

  test("difficulty_based learns online from pass_rate_calculator's feedback", async () => {
    const { tasks, selector } = await selectorFromYaml(
      'data_selector: {selector_type: difficulty_based, feature_keys: [pass_rate], kwargs: {target_reward: 0.5, tau: 0}}',
    );
    const pipeline = await ExperiencePipeline.create({
      operators: [{ name: 'pass_rate_calculator', args: {} }],
      inputSavePath: null,
    });
    const task1 = tasks[1]?.id as string;
    // task 1 (prior 0.5) turns out easy: four correct answers
    const experiences: Experience[] = [0, 1, 2, 3].map((i) => ({
      eid: `e${i}`,
      tokens: [1, 2],
      promptLength: 1,
      reward: 1,
      info: { taskId: task1, step: 1 },
    }));
    const { taskFeedback } = await pipeline.process(experiences, { step: 1, repeatTimes: 4 });
    selector.feedback(taskFeedback ?? new Map());
    // task 1: α = 1 + 1 + 4 = 6, β = 1 + 1 + 0 = 2 → mean 0.75, distance 0.25; now 3 (0.05), then 0 and 2 (0.2)
    assert.deepEqual(selector.next(4), [3, 0, 2, 1]);
  });

  test('offline_easy2hard: easy (high pass rate) first; descending false: hard first', async () => {
    const easy = await selectorFromYaml('data_selector: {selector_type: offline_easy2hard, feature_keys: [pass_rate]}');
    assert.deepEqual(easy.selector.next(4), [0, 3, 1, 2]); // 0.9, 0.6, 0.5, 0.1
    const hard = await selectorFromYaml(
      'task_selector: {selector_type: offline_easy2hard, feature_keys: [pass_rate], kwargs: {descending: false}}',
    );
    assert.deepEqual(hard.selector.next(4), [2, 1, 3, 0]);
  });

  test('feature_keys a selector cannot use are refused, naming the key', () => {
    const problems = (selector: string) => {
      try {
        settingsOf(selector);
      } catch (error) {
        assert.ok(error instanceof ConfigError, String(error));
        return error.problems.map((p) => `${p.path}: ${p.message}`);
      }
      return [];
    };
    assert.match(
      problems('data_selector: {selector_type: difficulty_based, feature_keys: [a, b, c]}').join('\n'),
      /data_selector\.feature_keys: difficulty_based takes one prior pass-rate column .* or two \(BOTS: .*got 3/,
    );
    assert.match(
      problems('task_selector: {selector_type: shuffle, feature_keys: [pass_rate]}').join('\n'),
      /task_selector\.feature_keys: selector_type shuffle does not read features: remove them/,
    );
    assert.throws(
      () =>
        createSelector([{ id: 'a', taskset: 't', index: 0, raw: {} }], {
          selectorType: 'difficulty_based',
          featureKeys: ['x', 'y', 'z'],
        }),
      /difficulty_based takes at most two feature_keys .*got 3 \(x, y, z\)/,
    );
  });
});
