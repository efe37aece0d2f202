// The threads a run computes with: OMP_NUM_THREADS when set (trinity quickstart --threads sets it), else the cores.
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { test } from 'node:test';
import { coreBudget } from '../../../src/rft/run/config/stage-settings.js';

test('OMP_NUM_THREADS sets the thread budget per process; unset, the cores are shared by the ranks of the machine', () => {
  assert.equal(coreBudget(1, { OMP_NUM_THREADS: '1' }), 1);
  assert.equal(coreBudget(4, { OMP_NUM_THREADS: '3' }), 3, "a rank's own budget, as PyTorch reads it");
  assert.equal(coreBudget(1, {}), availableParallelism());
  assert.equal(coreBudget(1, { OMP_NUM_THREADS: ' ' }), availableParallelism(), 'blank: not set');
  assert.equal(coreBudget(availableParallelism() * 2, {}), 1, 'at least one');
  for (const bad of ['0', '-2', '1.5', 'two', '5000'])
    assert.throws(
      () => coreBudget(1, { OMP_NUM_THREADS: bad }),
      new RegExp(`OMP_NUM_THREADS must be a whole number of threads from 1 to 4096, got '${bad}'`),
    );
});
