// A train step's metrics stay on the device until the step ends (src/rft/trainer/step-metrics.ts), then are read in
// one transfer and summed on the host: the numbers must be the ones reading each value as it came would give.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readMetrics, readScalars, scaleMetric } from '../../../src/rft/algorithm/metrics.js';
import { StepMetrics } from '../../../src/rft/trainer/step-metrics.js';
import * as torch from '../../../src/torch/index.js';
import { recordNativeCalls } from '../../helpers/native-calls.js';

test('readScalars: every dtype read as its item(), all in one transfer; a tensor that is not a scalar is an error', () => {
  torch.scope(() => {
    const tensors = [
      torch.tensor([0.1], { dtype: 'float32' }).reshape([]),
      torch.tensor([1 / 3], { dtype: 'float64' }),
      torch.tensor([2.7], { dtype: 'float32' }).to({ dtype: 'bfloat16' }).reshape([]),
      torch.tensor([1234567], { dtype: 'int64' }).reshape([]),
      torch.tensor([true], { dtype: 'bool' }).reshape([]),
    ];
    const items = tensors.map((t) => Number(t.item()));
    const recording = recordNativeCalls(['toBytes', 'item']);
    let values: number[];
    try {
      values = readScalars(tensors);
    } finally {
      recording.stop();
    }
    assert.deepEqual(values, items);
    assert.deepEqual(recording.calls, ['toBytes']);
    assert.deepEqual(readScalars([]), []);
    assert.throws(() => readScalars([torch.zeros([2])]), /metric: expected a scalar tensor, got shape \[2\]/);
  });
});

test('readMetrics and scaleMetric: numbers stay numbers, tensors become their values', () => {
  torch.scope(() => {
    const half = torch.tensor([0.5]);
    assert.deepEqual(readMetrics({ a: 2, b: half, c: scaleMetric(half, 3), d: scaleMetric(4, 0.25) }), {
      a: 2,
      b: 0.5,
      c: 1.5,
      d: 1,
    });
    assert.ok(scaleMetric(half, 2) instanceof torch.Tensor, 'no read');
  });
});

test('StepMetrics: weighted sums as the host would add them, NaN terms skipped by add and kept by total', () => {
  const before = torch.liveTensorCount();
  const metrics = new StepMetrics();
  const expected = { clip: 0, loss: 0 };
  torch.scope(() => {
    // float32 values as a module computes them, each weighted by its micro-batch's share
    const parts = [0.1, 0.7, 0.35].map((v) => torch.tensor([v]).reshape([]));
    const weights = [0.25, 0.5, 0.25];
    parts.forEach((t, i) => {
      metrics.add('clip', t.mul(2), weights[i]);
      metrics.total('loss', t, weights[i]);
      expected.clip += (t.mul(2).item() as number) * (weights[i] as number);
      expected.loss += (t.item() as number) * (weights[i] as number);
    });
    metrics.add('clip', torch.tensor([Number.NaN]).reshape([]), 1); // a module's NaN (no tokens): skipped
    metrics.add('only_nan', torch.tensor([Number.NaN]).reshape([]));
    metrics.total('nan_loss', torch.tensor([1]).reshape([]));
    metrics.total('nan_loss', torch.tensor([Number.NaN]).reshape([])); // a diverged loss must show
    metrics.set('rows', 8);
    metrics.set('tokens', torch.tensor([3]).sum());
    metrics.add('dropped', 1);
    metrics.add('dropped', 2);
    metrics.set('replaced', 1);
    metrics.add('replaced', 5); // another kind of entry replaces it
  });
  // the tensors are held past their scopes until read
  assert.equal(torch.liveTensorCount(), before + 11);
  assert.ok(metrics.has('clip') && !metrics.has('absent'));
  const recording = recordNativeCalls(['toBytes', 'item']);
  let read: Map<string, number>;
  try {
    read = metrics.read();
  } finally {
    recording.stop();
  }
  assert.deepEqual(recording.calls, ['toBytes'], 'one transfer');
  assert.equal(torch.liveTensorCount(), before, 'freed when read');
  assert.deepEqual(Object.fromEntries(read), {
    clip: expected.clip,
    loss: expected.loss,
    nan_loss: Number.NaN,
    rows: 8,
    tokens: 3,
    dropped: 3,
    replaced: 5,
  });
  assert.equal(read.has('only_nan'), false, 'a metric with no finite value is left out');
  const dropped = new StepMetrics();
  torch.scope(() => dropped.add('x', torch.tensor([1]).reshape([])));
  dropped.dispose();
  assert.equal(torch.liveTensorCount(), before, 'dispose frees them');
});
