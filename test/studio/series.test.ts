// The Studio's curves (src/studio/series.ts): eval series are drawn as measured, whatever smoothing the page asks for;
// training series are smoothed as asked. Values by hand next to each assertion.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { metricSeries, seriesSmoothing } from '../../src/studio/series.js';

// two stages: eval every 5 steps in the first, a training metric every step
const stages = [
  {
    name: 'grpo',
    offset: 0,
    rows: [1, 2, 3, 4, 5, 10].map((step) => ({
      step,
      metrics: {
        'actor/loss': step % 2 === 0 ? 4 : 2,
        ...(step % 5 === 0 ? { 'eval/math/accuracy/mean': step === 5 ? 0.2 : 0.8 } : {}),
      },
    })),
  },
];

describe('series smoothing', () => {
  it('draws an eval series raw whatever smoothing is asked', () => {
    const series = metricSeries('eval/math/accuracy/mean', stages, { points: 100, smoothing: 0.9 });
    // smoothed at w = 0.9 the second point would be (0.9·0.02 + 0.1·0.8)/(1 − 0.81) = 0.098/0.19 ≈ 0.516, not 0.8
    assert.deepEqual(series.x, [5, 10]);
    assert.deepEqual(series.y, [0.2, 0.8]);
    assert.equal(series.smoothing, 0);
  });

  it('smooths a training series as asked', () => {
    const series = metricSeries('actor/loss', stages, { points: 100, smoothing: 0.5 });
    // w = 0.5: ŷ1 = 2; m2 = 0.5·1 + 0.5·4 = 2.5, ŷ2 = 2.5/0.75 = 10/3
    assert.equal(series.y[0], 2);
    assert.ok(Math.abs((series.y[1] as number) - 10 / 3) < 1e-12);
    assert.equal(series.smoothing, 0.5);
  });

  it('decides by the eval/ prefix of the key', () => {
    assert.equal(seriesSmoothing('eval/countdown/accuracy/mean', 0.6), 0);
    assert.equal(seriesSmoothing('rollout/reward/mean', 0.6), 0.6);
    assert.equal(seriesSmoothing('actor/eval/x', 0.6), 0.6);
  });
});
