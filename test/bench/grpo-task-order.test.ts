// bench:grpo --task-order shared (bench/grpo-stage.ts sharedTaskOrder): both sides read one seeded order of the
// train rows; a permutation of every row per pass, passes appended until the run's steps × batch tasks.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sharedTaskOrder } from '../../bench/grpo-stage.js';

const rows = Array.from({ length: 10 }, (_, i) => `{"prompt":"${i}"}`);

test('sharedTaskOrder: each pass is a permutation of all rows; passes until there are enough', () => {
  const ordered = sharedTaskOrder(rows, 3, 25);
  assert.equal(ordered.length, 30); // three passes of 10 for 25 tasks
  for (let pass = 0; pass < 3; pass++) {
    assert.deepEqual([...ordered.slice(pass * 10, pass * 10 + 10)].sort(), [...rows].sort(), `pass ${pass}`);
  }
  assert.notDeepEqual(ordered.slice(0, 10), rows, 'shuffled, not the file order');
  assert.notDeepEqual(ordered.slice(0, 10), ordered.slice(10, 20), 'a fresh permutation per pass');
});

test('sharedTaskOrder: the same seed gives the same order, another seed another', () => {
  assert.deepEqual(sharedTaskOrder(rows, 7, 10), sharedTaskOrder(rows, 7, 10));
  assert.notDeepEqual(sharedTaskOrder(rows, 7, 10), sharedTaskOrder(rows, 8, 10));
  assert.throws(() => sharedTaskOrder([], 0, 1), /the train file has no rows/);
});
