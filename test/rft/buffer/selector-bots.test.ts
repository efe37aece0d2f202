// difficulty_based in BOTS' form (two feature_keys: a weaker and a stronger reference model's pass rates; kwargs m,
// lamb, rho, adaptive_rho), as upstream's bots.yaml writes it: the estimator's update computed by hand beside each
// assertion (formulas in src/rft/buffer/pass-rate-estimators.ts), the selection that follows, resume, and the
// config's refusals of BOTS' arguments in the wrong form.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { createSelector, loadTaskset } from '../../../src/rft/buffer/index.js';
import { ConfigError, parseConfig, resolveStages } from '../../../src/rft/run/config/index.js';
import { stageSettings } from '../../../src/rft/run/index.js';

const dir = mkdtempSync(join(tmpdir(), 'selector-bots-'));
// (f0, f1) per task: the weaker and the stronger reference model's pass rates
const features = [
  [0.2, 0.6],
  [0.4, 0.8],
  [0.0, 1.0],
];
writeFileSync(
  join(dir, 'tasks.jsonl'),
  `${features.map(([weak, strong], i) => JSON.stringify({ prompt: `q${i}`, response: String(i), weak, strong })).join('\n')}\n`,
);

const settingsOf = (kwargs: string, featureKeys = '[weak, strong]') =>
  stageSettings(
    resolveStages(
      parseConfig(
        `model: {model_path: /m, max_model_len: 64}
buffer:
  batch_size: 2
  explorer_input:
    taskset:
      name: tasks
      path: ${join(dir, 'tasks.jsonl')}
      task_selector: {selector_type: difficulty_based, feature_keys: ${featureKeys}, kwargs: ${kwargs}}
`,
        { env: {}, cwd: dir },
      ),
    )[0] as Parameters<typeof stageSettings>[0],
    '/m',
  );

async function botsSelector(kwargs: string) {
  const entry = settingsOf(kwargs).tasksets[0];
  assert.ok(entry);
  const { tasks } = await loadTaskset(entry.taskset);
  return { tasks, selector: createSelector(tasks, entry.selector) };
}

const near = (actual: readonly number[], expected: readonly number[], what: string): void => {
  assert.equal(actual.length, expected.length, what);
  for (const [i, a] of actual.entries()) {
    assert.ok(Math.abs(a - (expected[i] as number)) < 1e-5, `${what}[${i}]: ${a} vs ${expected[i]}`);
  }
};

type Inspectable = { state(): { alpha?: number[]; beta?: number[]; capCoef?: number | null; rho?: number } };

describe('difficulty_based, BOTS form', () => {
  const kwargs = '{m: 4, lamb: 0.5, rho: 0.25, target_reward: 0.5, tau: 0, do_sample: false}';

  test('the interpolation update, by hand, and the selection it gives', async () => {
    const { selector } = await botsSelector(kwargs);
    // before any feedback α = β = 1 for all: means 0.5, a tie broken by index
    assert.deepEqual(selector.next(2), [0, 1]);
    // step 1: task 0 passes 2 of 4, task 1 all 4 → s = (0.5, 1.0)
    selector.feedback(
      new Map([
        ['tasks:0', [1, 0, 1, 0]],
        ['tasks:1', [1, 1, 1, 1]],
      ]),
    );
    // c = (0.75 − 0.3) / (0.7 − 0.3 + 1e-6) = 1.1249972; p̃_2 = clip(0 + 1·c) = 1; p̃_0, p̃_1 = s
    // α_i = 0.5·1 + 0.5 + 0.75·4·s_i[seen] + 0.25·4·p̃_i:  task 0: 1 + 1.5 + 0.5 = 3, task 1: 1 + 3 + 1 = 5, task 2: 1 + 1 = 2
    // β_i = 0.5·1 + 0.5 + 0.75·4·(1 − s_i)[seen] + 0.25·4·(1 − p̃_i): task 0: 1 + 1.5 + 0.5 = 3, task 1: 1, task 2: 1
    let state = (selector as unknown as Inspectable).state();
    near(state.alpha ?? [], [3, 5, 2], 'alpha after step 1');
    near(state.beta ?? [], [3, 1, 1], 'beta after step 1');
    near([state.capCoef ?? Number.NaN], [0.45 / 0.400001], 'capCoef after step 1');
    // means 0.5, 5/6, 2/3 → distance to 0.5: 0, 1/3, 1/6 → tasks 0, 2, 1
    assert.deepEqual(selector.next(3), [0, 2, 1]);

    // step 2: task 2 fails all → s_2 = 0; c = (0 − 0) / (1 − 0 + 1e-6) = 0; c_t = 0.9·1.1249972 = 1.01249747
    // p̃_0 = 0.2 + 0.4·c_t = 0.60499899, p̃_1 = 0.4 + 0.4·c_t = 0.80499899, p̃_2 = 0
    selector.feedback(new Map([['tasks:2', [0, 0, 0, 0]]]));
    state = (selector as unknown as Inspectable).state();
    const c = 0.9 * (0.45 / 0.400001);
    const p0 = 0.2 + 0.4 * c;
    const p1 = 0.4 + 0.4 * c;
    // α: 0.5·3 + 0.5 + p̃_0 = 2.60499899, 0.5·5 + 0.5 + p̃_1 = 3.80499899, 0.5·2 + 0.5 + 0 = 1.5
    near(state.alpha ?? [], [2 + p0, 3 + p1, 1.5], 'alpha after step 2');
    // β: 0.5·3 + 0.5 + (1 − p̃_0) = 2.39500101, 0.5·1 + 0.5 + (1 − p̃_1) = 1.19500101, 0.5 + 0.5 + 0.75·4 + 0.25·4 = 5
    near(state.beta ?? [], [3 - p0, 2 - p1, 5], 'beta after step 2');
    near([state.capCoef ?? Number.NaN], [c], 'capCoef after step 2');
    near([state.rho ?? Number.NaN], [0.25], 'rho is kept without adaptive_rho');
  });

  test('adaptive_rho halves rho when the interpolation misses by 0.25 or more', async () => {
    const { selector } = await botsSelector(`{m: 4, lamb: 0.5, rho: 0.25, adaptive_rho: true, do_sample: false}`);
    // step 1 misses by |0.65 − 0.5| and |0.85 − 1| → mean 0.15: rho stays
    selector.feedback(
      new Map([
        ['tasks:0', [1, 0]],
        ['tasks:1', [1, 1]],
      ]),
    );
    assert.equal((selector as unknown as Inspectable).state().rho, 0.25);
    // step 2: task 2 was interpolated to clip(1.0125) = 1 and scored 0 → miss 1: rho halves before the update
    selector.feedback(new Map([['tasks:2', [0]]]));
    const { rho, beta } = (selector as unknown as Inspectable).state();
    assert.equal(rho, 0.125);
    // β_2 = 0.5·1 + 0.5 + 0.875·4·1 + 0.125·4·1 = 5
    near([beta?.[2] ?? Number.NaN], [5], 'beta_2 with the halved rho');
  });

  test('a resumed selector continues exactly (capCoef and rho are in its state)', async () => {
    const a = (await botsSelector('{m: 16, lamb: 0.1, rho: 0.1, adaptive_rho: true, do_sample: true}')).selector;
    a.next(2);
    a.feedback(new Map([['tasks:0', [1, 0, 1]]]));
    const b = (await botsSelector('{m: 16, lamb: 0.1, rho: 0.1, adaptive_rho: true, do_sample: true}')).selector;
    b.loadState(JSON.parse(JSON.stringify(a.state())));
    for (const s of [a, b]) s.feedback(new Map([['tasks:2', [0, 0]]]));
    assert.deepEqual(b.state(), a.state());
    assert.deepEqual(b.next(3), a.next(3));
  });

  test("BOTS' arguments in the wrong form are refused, naming the key", () => {
    const problems = (kw: string, featureKeys?: string) => {
      try {
        settingsOf(kw, featureKeys);
      } catch (error) {
        assert.ok(error instanceof ConfigError, String(error));
        return error.problems.map((p) => `${p.path}: ${p.message}`).join('\n');
      }
      return '';
    };
    const at = 'buffer.explorer_input.taskset.task_selector';
    assert.match(
      problems('{m: 16, rho: 0.1}', '[weak]'),
      new RegExp(`${at}\\.kwargs\\.m: BOTS' argument: it needs two feature_keys`),
    );
    assert.match(problems('{m: 16, rho: 0.1}', '[weak]'), new RegExp(`${at}\\.kwargs\\.rho: BOTS' argument`));
    assert.match(problems('{prior_strength: 4}'), new RegExp(`${at}\\.kwargs\\.prior_strength: weights one prior feature key`));
    assert.match(problems('{lamb: 1.5}'), new RegExp(`${at}\\.kwargs\\.lamb: must be in \\[0, 1\\], got 1.5`));
    assert.match(problems('{m: 0}'), new RegExp(`${at}\\.kwargs\\.m: must be > 0, got 0`));
    assert.match(problems('{adaptive_rho: 1}'), new RegExp(`${at}\\.kwargs\\.adaptive_rho: expected a boolean`));
    assert.equal(problems(kwargs), '');
  });
});
