// Task selectors and the multi-taskset scheduler: determinism, epochs, curriculum order, difficulty feedback,
// mixing weights and state round trips.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createSelector, type SelectorConfig, type Taskset, TasksetScheduler } from '../../../src/rft/buffer/index.js';
import { seededRandom } from '../../../src/rft/buffer/random.js';
import type { Task } from '../../../src/rft/task.js';

function taskset(name: string, n: number, features?: (i: number) => Record<string, number>): Taskset {
  const tasks: Task[] = Array.from({ length: n }, (_, index) => ({
    id: `${name}:${index}`,
    taskset: name,
    index,
    raw: {},
    prompt: `q${index}`,
    ...(features ? { features: features(index) } : {}),
  }));
  return { name, path: `${name}.jsonl`, tasks };
}

const draw = (config: SelectorConfig, n: number, count: number) => createSelector(taskset('t', n).tasks, config).next(count);

describe('selectors', () => {
  test('sequential: file order, wrapping into the next epoch', () => {
    const s = createSelector(taskset('t', 4).tasks);
    assert.deepEqual(s.next(3), [0, 1, 2]);
    assert.deepEqual(s.next(3), [3, 0, 1]);
    assert.equal(s.epoch, 1);
  });

  test('shuffle: each epoch a permutation, different per epoch, same for the same seed', () => {
    const a = draw({ selectorType: 'shuffle', seed: 7 }, 10, 30);
    assert.deepEqual(a, draw({ selectorType: 'shuffle', seed: 7 }, 10, 30));
    assert.notDeepEqual(a, draw({ selectorType: 'shuffle', seed: 8 }, 10, 30));
    const epochs = [a.slice(0, 10), a.slice(10, 20), a.slice(20)];
    for (const epoch of epochs)
      assert.deepEqual(
        [...epoch].sort((x, y) => x - y),
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
      );
    assert.notDeepEqual(epochs[0], epochs[1]);
    // Chunking does not change the choices.
    const s = createSelector(taskset('t', 10).tasks, { selectorType: 'shuffle', seed: 7 });
    assert.deepEqual([...s.next(7), ...s.next(16), ...s.next(7)], a);
  });

  test('random: with replacement, seeded, in range', () => {
    const a = draw({ selectorType: 'random', seed: 1 }, 5, 200);
    assert.deepEqual(a, draw({ selectorType: 'random', seed: 1 }, 5, 200));
    assert.notDeepEqual(a, draw({ selectorType: 'random', seed: 2 }, 5, 200));
    assert.ok(a.every((i) => i >= 0 && i < 5));
    assert.deepEqual(new Set(a).size, 5);
    const batches = Array.from({ length: 40 }, (_, k) => a.slice(5 * k, 5 * k + 5));
    assert.ok(
      batches.some((batch) => new Set(batch).size < 5),
      'with replacement: some batch of 5 repeats a task',
    );
  });

  test('offline_easy2hard: sorted by the feature, highest first unless descending is false', () => {
    const tasks = taskset('t', 5, (i) => ({ passRate: [0.2, 0.9, 0.5, 0.9, 0.1][i] as number })).tasks;
    assert.deepEqual(
      createSelector(tasks, { selectorType: 'offline_easy2hard', featureKeys: ['passRate'] }).next(5),
      [1, 3, 2, 0, 4],
    );
    assert.deepEqual(
      createSelector(tasks, { selectorType: 'offline_easy2hard', featureKeys: ['passRate'], descending: false }).next(5),
      [4, 0, 2, 1, 3],
    );
    assert.throws(() => createSelector(tasks, { selectorType: 'offline_easy2hard' }), /needs feature_keys/);
  });

  test('difficulty_based: rewards move the choice toward tasks whose pass rate is near the target', () => {
    // 20 tasks with true pass rates 0, 1/19, ..., 1; rewards are Bernoulli draws. Target 0.5.
    const n = 20;
    const truth = Array.from({ length: n }, (_, i) => i / (n - 1));
    const s = createSelector(taskset('t', n).tasks, {
      selectorType: 'difficulty_based',
      seed: 3,
      targetReward: 0.5,
      tau: 0,
      doSample: true,
    });
    const coin = seededRandom(99);
    const distance = (picks: number[]) => picks.reduce((d, i) => d + Math.abs((truth[i] as number) - 0.5), 0) / picks.length;
    const early: number[] = [];
    const late: number[] = [];
    for (let step = 0; step < 60; step++) {
      const picks = s.next(4);
      (step < 5 ? early : step >= 50 ? late : []).push(...picks);
      s.feedback(new Map(picks.map((i) => [`t:${i}`, Array.from({ length: 8 }, () => (coin() < (truth[i] as number) ? 1 : 0))])));
    }
    // Uniform choice has mean distance 0.263; late picks must be much closer to 0.5.
    assert.ok(distance(late) < 0.12, `late distance ${distance(late)}`);
    assert.ok(distance(late) < distance(early), `late ${distance(late)} vs early ${distance(early)}`);
    const rates = (s as unknown as { passRates: number[] }).passRates;
    assert.ok((rates[0] as number) < 0.3 && (rates[n - 1] as number) > 0.7, 'extremes were learned');
    assert.throws(() => s.feedback(new Map([['nope', [1]]])), /unknown task id 'nope'/);
  });

  test("difficulty_based: Trinity's defaults (target_reward 1.0, tau 1.0, do_sample false)", () => {
    const s = createSelector(taskset('t', 4).tasks, { selectorType: 'difficulty_based', seed: 1 }) as unknown as {
      targetReward: number;
      tau: number;
      doSample: boolean;
    };
    assert.deepEqual([s.targetReward, s.tau, s.doSample], [1, 1, false]);
  });

  test('state round trip: a restored selector continues exactly', () => {
    for (const selectorType of ['sequential', 'shuffle', 'random', 'difficulty_based'] as const) {
      const a = createSelector(taskset('t', 7).tasks, { selectorType, seed: 5 });
      a.next(5);
      a.feedback(new Map([['t:2', [1, 0, 1]]]));
      const b = createSelector(taskset('t', 7).tasks, { selectorType, seed: 5 });
      b.loadState(JSON.parse(JSON.stringify(a.state())));
      assert.deepEqual(b.next(9), a.next(9), selectorType);
    }
    const s = createSelector(taskset('t', 7).tasks);
    assert.throws(() => s.loadState({ type: 'shuffle', size: 7, position: 0 }), /state is for 'shuffle'/);
    assert.throws(() => s.loadState({ type: 'sequential', size: 8, position: 0 }), /taskset of 8 tasks/);
  });
});

describe('TasksetScheduler', () => {
  test('one taskset: batches until the epochs run out, last batch short', () => {
    const s = new TasksetScheduler({ tasksets: [{ taskset: taskset('a', 5) }], batchSize: 3, totalEpochs: 2 });
    assert.equal(s.totalSteps, 4);
    const batches = [];
    for (let b = s.nextBatch(); b !== null; b = s.nextBatch()) batches.push(b.tasks.map((t) => t.index));
    assert.deepEqual(batches, [[0, 1, 2], [3, 4, 0], [1, 2, 3], [4]]);
    const steps = new TasksetScheduler({ tasksets: [{ taskset: taskset('a', 5) }], batchSize: 2, totalSteps: 4 });
    let count = 0;
    while (steps.nextBatch() !== null) count++;
    assert.equal(count, 4);
  });

  test('mixing: each batch follows the weights; default weights are taskset sizes', () => {
    const s = new TasksetScheduler({
      tasksets: [
        { taskset: taskset('a', 10), weight: 3 },
        { taskset: taskset('b', 10), weight: 1 },
      ],
      batchSize: 8,
      totalSteps: 10,
    });
    for (let b = s.nextBatch(); b !== null; b = s.nextBatch()) {
      const fromA = b.tasks.filter((t) => t.taskset === 'a').length;
      assert.equal(fromA, 6, `step ${b.step}: 3:1 of 8 is 6 from a`);
    }
    const bySize = new TasksetScheduler({ tasksets: [{ taskset: taskset('a', 6) }, { taskset: taskset('b', 3) }], batchSize: 3 });
    const seen = { a: 0, b: 0 };
    for (let b = bySize.nextBatch(); b !== null; b = bySize.nextBatch()) for (const t of b.tasks) seen[t.taskset as 'a' | 'b']++;
    assert.deepEqual(seen, { a: 6, b: 3 }, 'one epoch of each');
  });

  test('feedback reaches the owning selector; state round-trips through JSON', () => {
    const make = () =>
      new TasksetScheduler({
        tasksets: [
          { taskset: taskset('a', 6), selector: { selectorType: 'shuffle', seed: 1 } },
          { taskset: taskset('b', 4), selector: { selectorType: 'difficulty_based', seed: 2 }, weight: 2 },
        ],
        batchSize: 4,
        totalEpochs: 3,
      });
    const a = make();
    a.nextBatch();
    a.nextBatch();
    a.feedback(new Map([['b:1', [1, 1, 1]]]));
    const saved = JSON.stringify(a.state());
    const b = make();
    b.loadState(JSON.parse(saved));
    const rest = (s: TasksetScheduler) => {
      const out: string[] = [];
      for (let batch = s.nextBatch(); batch !== null; batch = s.nextBatch()) out.push(...batch.tasks.map((t) => t.id));
      return out;
    };
    assert.equal(b.step, 2);
    assert.deepEqual(rest(b), rest(a));
    assert.throws(() => a.feedback(new Map([['c:0', [1]]])), /unknown task id 'c:0'/);
    const other = new TasksetScheduler({ tasksets: [{ taskset: taskset('z', 3) }], batchSize: 1 });
    assert.throws(() => other.loadState(JSON.parse(saved)), /state is for tasksets \[a, b\], this run has \[z\]/);
  });
});
