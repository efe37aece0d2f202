// The figures of the GRPO benchmark (bench/grpo.bench.ts) from what each side's run records: the eval schedule, each
// side's clock (rollouts + training, no eval) at the evaluated steps, the time to a target accuracy, and the spread
// over seeds. Pure functions: test/bench/grpo-figures.test.ts checks them against hand computations.

/** The steps whose models are evaluated: 0 (the start), every `every`-th step before the last, and the last. */
export function evalSchedule(steps: number, every: number): number[] {
  return [0, ...Array.from({ length: Math.floor((steps - 1) / every) }, (_, i) => (i + 1) * every), steps];
}

/** One metrics.jsonl line of ours per step: when the line was written (the end of the step's training), in s. */
export interface OurStepLine {
  time: number;
  /** rollout/time_s: the step's rollouts. */
  rolloutS: number;
  /** time/train_s: the step's training. */
  trainS: number;
}

/**
 * Ours' clock at the evaluated steps: t(s) = time(s) − time(1) + rollout_s(1) + train_s(1). The first step's own
 * rollout + train time stands for its start, so setup (loading, the engine's start) is not counted; t(0) = 0.
 */
export function ourClock(lines: readonly OurStepLine[], evalSteps: readonly number[]): number[] {
  const first = lines[0];
  if (first === undefined) throw new Error('ours: no step lines in metrics.jsonl');
  const origin = first.time - first.rolloutS - first.trainS;
  return evalSteps.map((s) => {
    if (s === 0) return 0;
    const line = lines[s - 1];
    if (line === undefined) throw new Error(`ours: no metrics line for step ${s} (${lines.length} steps)`);
    return line.time - origin;
  });
}

/** TRL's clock at the evaluated steps: t(s) = Σ_{i ≤ s} step_s(i) (generation + update of each step); t(0) = 0. */
export function summedClock(stepSeconds: readonly number[], evalSteps: readonly number[]): number[] {
  const elapsed: number[] = [];
  let sum = 0;
  for (const s of stepSeconds) {
    sum += s;
    elapsed.push(sum);
  }
  return evalSteps.map((s) => {
    if (s === 0) return 0;
    const t = elapsed[s - 1];
    if (t === undefined) throw new Error(`TRL: no step time for step ${s} (${stepSeconds.length} steps)`);
    return t;
  });
}

/** The first evaluated step whose accuracy is at or above `target`, with its time on the side's clock; null: none. */
export function firstReaching(
  accuracy: readonly number[],
  clock: readonly number[],
  evalSteps: readonly number[],
  target: number,
): { seconds: number; step: number } | null {
  // 1e-9: accuracies are shares of the eval problems; start + gain must count as reached when equal
  const i = accuracy.findIndex((a) => a >= target - 1e-9);
  return i < 0 ? null : { seconds: clock[i] as number, step: evalSteps[i] as number };
}

/** Mean, min and max of per-seed values; nulls (a side that never reached the target) are left out and counted. */
export function spread(values: readonly (number | null)[]): {
  mean: number | null;
  min: number | null;
  max: number | null;
  n: number;
} {
  const v = values.filter((x): x is number => x !== null && Number.isFinite(x));
  if (v.length === 0) return { mean: null, min: null, max: null, n: 0 };
  return { mean: v.reduce((a, b) => a + b, 0) / v.length, min: Math.min(...v), max: Math.max(...v), n: v.length };
}

/**
 * Whether one side learns more, as much or less per sample than another, from per-seed differences (this − other):
 * their mean and its standard error (sample sd / √n); 'less' when mean + 2·se < 0, 'more' when mean − 2·se > 0, else
 * 'level' (no difference beyond the seeds' noise). With one seed there is no error estimate: the sign decides.
 */
export function perSampleVerdict(differences: readonly number[]): {
  mean: number;
  standardError: number | null;
  verdict: 'more' | 'level' | 'less';
} {
  const n = differences.length;
  if (n === 0) throw new RangeError('perSampleVerdict: no differences');
  const mean = differences.reduce((a, b) => a + b, 0) / n;
  if (n === 1) return { mean, standardError: null, verdict: mean < 0 ? 'less' : 'level' };
  const variance = differences.reduce((a, d) => a + (d - mean) ** 2, 0) / (n - 1);
  const standardError = Math.sqrt(variance / n);
  const verdict = mean + 2 * standardError < 0 ? 'less' : mean - 2 * standardError > 0 ? 'more' : 'level';
  return { mean, standardError, verdict };
}
