// A metric's curve over a run's stages, smoothed and thinned on the server so a browser never receives 100,000 points:
//
//   x = offset_stage + step          stages one after another on one axis (the report's stageOffsets)
//   smoothing (TensorBoard's debiased EMA, weight w in [0, 1)):
//     m_i = w·m_(i−1) + (1 − w)·y_i,   m_0 = 0,   ŷ_i = m_i / (1 − w^(i+1))
//   eval series (eval/...) are never smoothed (seriesSmoothing): each point is a score measured at its step over a
//   few eval steps, and an average with earlier evals would show a score the model never had
//   downsampling to at most `points` points: the points are cut into points/2 buckets of equal count and each
//   bucket keeps its lowest and highest point, in step order, so spikes survive and the line's envelope is exact.
import type { MetricsRow } from '../rft/report/read.js';

export interface SeriesStage {
  name: string;
  offset: number;
}

export interface Series {
  key: string;
  x: number[];
  y: number[];
  /** Points before downsampling. */
  total: number;
  /** The smoothing weight applied: the one asked for, 0 for an eval series. */
  smoothing: number;
  stages: SeriesStage[];
}

export function smooth(values: readonly number[], weight: number): number[] {
  if (weight <= 0) return [...values];
  const out: number[] = [];
  let m = 0;
  let debias = 1;
  for (const y of values) {
    m = weight * m + (1 - weight) * y;
    debias *= weight;
    out.push(m / (1 - debias));
  }
  return out;
}

/** The metrics named eval/... (src/rft/explorer/evaluation.ts): scores of the eval tasksets at eval steps. */
export const EVAL_PREFIX = 'eval/';

/** The smoothing weight for the series `key`: the one asked for, but 0 (raw values) for an eval series. */
export function seriesSmoothing(key: string, weight: number): number {
  return key.startsWith(EVAL_PREFIX) ? 0 : weight;
}

/** Indices of the kept points (see the header); all of them when there are at most `points`. */
export function downsampleIndices(y: readonly number[], points: number): number[] {
  const n = y.length;
  if (n <= points) return Array.from({ length: n }, (_, i) => i);
  const buckets = Math.max(1, Math.floor(points / 2));
  const kept: number[] = [];
  for (let b = 0; b < buckets; b++) {
    const start = Math.floor((b * n) / buckets);
    const end = Math.floor(((b + 1) * n) / buckets);
    let lo = start;
    let hi = start;
    for (let i = start + 1; i < end; i++) {
      if ((y[i] as number) < (y[lo] as number)) lo = i;
      if ((y[i] as number) > (y[hi] as number)) hi = i;
    }
    if (lo === hi) kept.push(lo);
    else kept.push(Math.min(lo, hi), Math.max(lo, hi));
  }
  return kept;
}

/** The metric `key` over the stages (in run order, with their offsets), smoothed (seriesSmoothing) then downsampled. */
export function metricSeries(
  key: string,
  stages: readonly { name: string; offset: number; rows: readonly MetricsRow[] }[],
  options: { points: number; smoothing: number },
): Series {
  const x: number[] = [];
  const raw: number[] = [];
  for (const stage of stages)
    for (const row of stage.rows) {
      const value = row.metrics[key];
      if (value === undefined) continue;
      x.push(stage.offset + row.step);
      raw.push(value);
    }
  const smoothing = seriesSmoothing(key, options.smoothing);
  const y = smooth(raw, smoothing);
  const kept = downsampleIndices(y, options.points);
  return {
    key,
    x: kept.map((i) => x[i] as number),
    y: kept.map((i) => y[i] as number),
    total: raw.length,
    smoothing,
    stages: stages.map((s) => ({ name: s.name, offset: s.offset })),
  };
}

/** Every metric key of the rows, sorted. */
export function metricKeys(rows: Iterable<MetricsRow>): string[] {
  const keys = new Set<string>();
  for (const row of rows) for (const key of Object.keys(row.metrics)) keys.add(key);
  return [...keys].sort();
}
