// The GRPO benchmark's figures (bench/grpo-figures.ts) against hand computations: which steps are evaluated, each
// side's clock at them, the time to a target accuracy and the spread over seeds.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { evalSchedule, firstReaching, ourClock, perSampleVerdict, spread, summedClock } from '../../bench/grpo-figures.js';

describe('GRPO bench figures', () => {
  test('the eval schedule is the start, every K-th step and the last step (once)', () => {
    assert.deepEqual(evalSchedule(360, 30), [0, 30, 60, 90, 120, 150, 180, 210, 240, 270, 300, 330, 360]);
    assert.deepEqual(evalSchedule(10, 4), [0, 4, 8, 10]);
    assert.deepEqual(evalSchedule(4, 2), [0, 2, 4]);
    assert.deepEqual(evalSchedule(3, 5), [0, 3]);
  });

  test("ours' clock starts at the first step's rollout + train before its line, and skips setup", () => {
    // step 1's line at 100.0 after 0.3 s of rollouts and 0.5 s of training: it started at 99.2
    const lines = [
      { time: 100.0, rolloutS: 0.3, trainS: 0.5 },
      { time: 100.6, rolloutS: 0.3, trainS: 0.5 },
      { time: 101.1, rolloutS: 0.2, trainS: 0.4 },
      { time: 101.9, rolloutS: 0.3, trainS: 0.5 },
    ];
    const clock = ourClock(lines, [0, 2, 4]);
    assert.equal(clock[0], 0);
    assert.ok(Math.abs((clock[1] as number) - 1.4) < 1e-9, `t(2) = 100.6 - 99.2 = 1.4, got ${clock[1]}`);
    assert.ok(Math.abs((clock[2] as number) - 2.7) < 1e-9, `t(4) = 101.9 - 99.2 = 2.7, got ${clock[2]}`);
    assert.throws(() => ourClock(lines, [0, 5]), /no metrics line for step 5/);
  });

  test("TRL's clock sums the step times up to each evaluated step", () => {
    assert.deepEqual(summedClock([1, 2, 3, 4], [0, 2, 4]), [0, 3, 10]);
    assert.throws(() => summedClock([1, 2], [0, 3]), /no step time for step 3/);
  });

  test('the time to target is the first evaluated step at or above it; null when never reached', () => {
    const steps = [0, 30, 60, 90];
    const clock = [0, 10, 20, 30];
    // start 0.30, target 0.40: step 60 is the first at or above (0.40 counts as reached)
    assert.deepEqual(firstReaching([0.3, 0.38, 0.4, 0.45], clock, steps, 0.3 + 0.1), { seconds: 20, step: 60 });
    assert.equal(firstReaching([0.3, 0.35, 0.39, 0.31], clock, steps, 0.4), null);
  });

  test('the spread over seeds leaves out the seeds that did not reach the target, and counts the rest', () => {
    assert.deepEqual(spread([1, 2, 6]), { mean: 3, min: 1, max: 6, n: 3 });
    assert.deepEqual(spread([4, null, 2]), { mean: 3, min: 2, max: 4, n: 2 });
    assert.deepEqual(spread([null, null]), { mean: null, min: null, max: null, n: 0 });
  });

  test('the per-sample verdict calls a difference only beyond two standard errors of the mean over seeds', () => {
    // [1, 2, 6]: mean 3, sample variance (4 + 1 + 9) / 2 = 7, standard error √(7 / 3) = 1.528; 3 − 3.055 < 0: level
    const wide = perSampleVerdict([1, 2, 6]);
    assert.equal(wide.mean, 3);
    assert.ok(Math.abs((wide.standardError as number) - Math.sqrt(7 / 3)) < 1e-12);
    assert.equal(wide.verdict, 'level');
    // [3, 4, 5]: mean 4, standard error √(1 / 3) = 0.577; 4 ± 1.155 excludes 0
    assert.equal(perSampleVerdict([3, 4, 5]).verdict, 'more');
    assert.equal(perSampleVerdict([-3, -4, -5]).verdict, 'less');
    // one seed: no error estimate, the sign decides
    assert.deepEqual(perSampleVerdict([-0.02]), { mean: -0.02, standardError: null, verdict: 'less' });
    assert.deepEqual(perSampleVerdict([0.01]), { mean: 0.01, standardError: null, verdict: 'level' });
    assert.throws(() => perSampleVerdict([]), /no differences/);
  });
});
