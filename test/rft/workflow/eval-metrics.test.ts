// Eval metrics against hand computations: pass@k (unbiased), best@k/worst@k as exact expectations over k-subsets.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bestAtK, binomial, evalKs, evalMetrics, passAtK, worstAtK } from '../../../src/rft/workflow/index.js';

const close = (actual: number | undefined, expected: number, what: string) =>
  assert.ok(actual !== undefined && Math.abs(actual - expected) < 1e-12, `${what}: ${actual} vs ${expected}`);

test('binomial and the ks', () => {
  assert.deepEqual(
    [binomial(4, 0), binomial(4, 1), binomial(4, 2), binomial(4, 4), binomial(4, 5), binomial(10, 3)],
    [1, 4, 6, 1, 0, 120],
  );
  assert.deepEqual(evalKs(4), [1, 2, 4]);
  assert.deepEqual(evalKs(6), [1, 2, 4, 6]);
  assert.deepEqual(evalKs(1), [1]);
});

test('pass@k = 1 − C(n−c, k)/C(n, k)', () => {
  // n = 4, c = 2: pass@1 = 1 − 2/4; pass@2 = 1 − C(2,2)/C(4,2) = 1 − 1/6; pass@3 = 1 (only 2 wrong).
  close(passAtK(4, 2, 1), 0.5, 'pass@1');
  close(passAtK(4, 2, 2), 5 / 6, 'pass@2');
  close(passAtK(4, 2, 3), 1, 'pass@3');
  // n = 10, c = 3, k = 5: 1 − C(7,5)/C(10,5) = 1 − 21/252.
  close(passAtK(10, 3, 5), 1 - 21 / 252, 'pass@5 of 10');
  close(passAtK(5, 0, 2), 0, 'none correct');
  assert.throws(() => passAtK(2, 1, 3), /needs at least 3 samples/);
});

test('best@k and worst@k are expectations over k-subsets', () => {
  // Pairs of [1,2,3,4]: max 2,3,4,3,4,4 → 20/6; min 1,1,1,2,2,3 → 10/6.
  close(bestAtK([3, 1, 4, 2], 2), 20 / 6, 'best@2');
  close(worstAtK([3, 1, 4, 2], 2), 10 / 6, 'worst@2');
  close(bestAtK([3, 1, 4, 2], 1), 2.5, 'best@1 = mean');
  close(bestAtK([3, 1, 4, 2], 4), 4, 'best@n = max');
  close(worstAtK([3, 1, 4, 2], 4), 1, 'worst@n = min');
});

test('evalMetrics averages over tasks', () => {
  const metrics = evalMetrics([
    { rewards: [1, 0, 1, 0], correct: [true, false, true, false] },
    { rewards: [0, 0, 0, 0], correct: [false, false, false, false] },
  ]);
  // Task A: mean 0.5, pass@1 0.5, pass@2 5/6, pass@4 1, best@2 5/6, worst@2 1/6. Task B: all 0.
  close(metrics['mean@4'], 0.25, 'mean@4');
  close(metrics['pass@1'], 0.25, 'pass@1');
  close(metrics['pass@2'], 5 / 12, 'pass@2');
  close(metrics['pass@4'], 0.5, 'pass@4');
  close(metrics['best@2'], 5 / 12, 'best@2');
  close(metrics['worst@2'], 1 / 12, 'worst@2');
  close(metrics['worst@4'], 0, 'worst@4');
  assert.deepEqual(Object.keys(metrics).sort(), [
    'best@1',
    'best@2',
    'best@4',
    'mean@4',
    'pass@1',
    'pass@2',
    'pass@4',
    'worst@1',
    'worst@2',
    'worst@4',
  ]);
});

test('a task with fewer samples (failed runs) is left out of the larger ks', () => {
  const metrics = evalMetrics([
    { rewards: [1, 1], correct: [true, true] },
    { rewards: [0], correct: [false] },
  ]);
  close(metrics['pass@1'], 0.5, 'pass@1 over both');
  close(metrics['pass@2'], 1, 'pass@2 over the task with 2 samples');
  close(metrics['mean@2'], 0.5, 'mean over tasks');
});
