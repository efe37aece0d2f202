// What algorithm modules report besides their loss: metrics by name, each a number or a scalar tensor. A module that
// runs inside the trainer's micro-batch loop (policy losses, the KL and entropy terms, rollout correction, the critic's
// value loss) returns its metrics as tensors: reading one to a number (`.item()`) waits for every kernel queued before
// it, so on a GPU each read would stop the host until the micro-batch's forward had finished, and the next micro-batch
// could not be queued meanwhile. The trainer keeps them and reads all of a step's metrics at once when the step ends
// (../trainer/step-metrics.ts); readMetrics() does the same for a caller that wants numbers now. Numbers are fine for
// what the host knows anyway (a coefficient, a count of rows).
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';

/** A metric: a number, or a scalar tensor (any device, any dtype; no gradient is kept). */
export type MetricValue = number | Tensor;

export type Metrics = Record<string, MetricValue>;

/**
 * The values of scalar tensors as numbers, read with one transfer per device (in the order given). Each number equals
 * the tensor's `.item()`: the values are widened to float64, which every float and integer dtype fits exactly but
 * int64 beyond 2^53.
 */
export function readScalars(tensors: readonly Tensor[]): number[] {
  const out = new Array<number>(tensors.length);
  const byDevice = new Map<string, number[]>();
  tensors.forEach((t, i) => {
    if (t.numel !== 1) throw new TypeError(`metric: expected a scalar tensor, got shape [${t.shape.join(', ')}]`);
    const list = byDevice.get(t.device) ?? [];
    list.push(i);
    byDevice.set(t.device, list);
  });
  for (const indices of byDevice.values()) {
    const values = torch.scope(() =>
      torch.noGrad(() =>
        torch.stack(indices.map((i) => (tensors[i] as Tensor).detach().reshape([]).to({ dtype: 'float64' }))).toTypedArray(),
      ),
    ) as Float64Array;
    indices.forEach((i, k) => {
      out[i] = values[k] as number;
    });
  }
  return out;
}

/** The metrics as numbers (tensors read at once, see readScalars). */
export function readMetrics(metrics: Readonly<Metrics>): Record<string, number> {
  const entries = Object.entries(metrics);
  const tensors = entries.flatMap(([, v]) => (typeof v === 'number' ? [] : [v]));
  const values = readScalars(tensors);
  let k = 0;
  return Object.fromEntries(entries.map(([key, v]) => [key, typeof v === 'number' ? v : (values[k++] as number)]));
}

/** A metric times a number (a tensor stays a tensor: no read). */
export function scaleMetric(value: MetricValue, factor: number): MetricValue {
  return typeof value === 'number' ? value * factor : torch.noGrad(() => value.detach().mul(factor));
}
