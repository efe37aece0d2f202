// The pass-rate estimators behind the difficulty_based selector (./selector.ts): a Beta(α_i, β_i) posterior of each
// task's pass rate, updated once per explore step from the step's feedback (task → its responses' rewards).
//
// Counting (no feature key, or one prior pass-rate column p0 with `prior_strength` m):
//   α_i = 1 + m·p0_i + Σ r,   β_i = 1 + m·(1 − p0_i) + Σ (1 − r)                (each reward r clipped to [0, 1])
//
// BOTS (Trinity-RFT's InterpolationBetaPREstimator; "BOTS: Bayesian Online Task Selection", two feature_keys: the
// pass rates f0_i, f1_i of a weaker and a stronger reference model; kwargs m, lamb, rho, adaptive_rho). Every α_i, β_i
// starts at 1. A step that saw tasks I with pass rates s_i (the mean of a task's rewards, clipped to [0, 1]):
//   c      = (mean_I s − mean_I f0) / (mean_I f1 − mean_I f0 + 1e-6)        the model's place between the references
//   c_t    = c on the first step, else 0.9·c_{t−1} + 0.1·c
//   p̃_i    = clip(f0_i + c_t·(f1_i − f0_i), 0, 1) for i ∉ I;  p̃_i = s_i for i ∈ I     (interpolated pass rate)
//   adaptive_rho: rho ← rho / 2 when mean_I |p̃_i − s_i| ≥ 0.25, p̃ taken before s_i replaces it
//   α_i ← (1 − lamb)·α_i + lamb + (1 − rho)·m·s_i·[i ∈ I] + rho·m·p̃_i
//   β_i ← (1 − lamb)·β_i + lamb + (1 − rho)·m·(1 − s_i)·[i ∈ I] + rho·m·(1 − p̃_i)
// so every task, seen or not, moves towards where the interpolation puts it, and seen tasks mostly towards what was
// observed; lamb forgets old evidence. Upstream feeds the raw mean reward; a mean outside [0, 1] would give a Beta
// without meaning (a negative parameter), so it is clipped here.
import type { Task } from '../task.js';

/** One explore step's feedback: task index → the rewards of its responses. */
export type StepFeedback = ReadonlyMap<number, readonly number[]>;

export interface EstimatorState {
  alpha: number[];
  beta: number[];
  /** BOTS: the capability coefficient c_t (null before the first update) and rho (adaptive_rho halves it). */
  capCoef?: number | null;
  rho?: number;
}

export interface PassRateEstimator {
  readonly alpha: readonly number[];
  readonly beta: readonly number[];
  update(step: StepFeedback): void;
  state(): EstimatorState;
  loadState(state: EstimatorState, size: number): void;
}

export interface BotsOptions {
  /** Pseudo-observations per task and step (Trinity's `m`, its repeat_times; default 16). */
  m?: number;
  /** Discount of earlier evidence (default 0.2). */
  lamb?: number;
  /** Weight of the interpolated pass rate against the observed one (default 0.2). */
  rho?: number;
  /** Halve rho when the interpolation misses the observed pass rates by 0.25 or more on average (default false). */
  adaptiveRho?: boolean;
}

const clip01 = (x: number): number => Math.min(1, Math.max(0, x));
const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

function checkedState(state: EstimatorState, size: number): { alpha: number[]; beta: number[] } {
  const valid = (v: unknown): v is number[] =>
    Array.isArray(v) && v.length === size && v.every((x) => typeof x === 'number' && x > 0);
  if (!valid(state.alpha) || !valid(state.beta))
    throw new Error(`difficulty_based state needs alpha and beta: ${size} positive numbers each`);
  return { alpha: [...state.alpha], beta: [...state.beta] };
}

/** The counting estimator (see the header); `prior` is each task's prior pass rate, or null for none. */
export class CountingEstimator implements PassRateEstimator {
  alpha: number[];
  beta: number[];

  constructor(prior: readonly number[] | null, size: number, strength: number) {
    this.alpha = Array.from({ length: size }, (_, i) => 1 + (prior === null ? 0 : strength * (prior[i] as number)));
    this.beta = Array.from({ length: size }, (_, i) => 1 + (prior === null ? 0 : strength * (1 - (prior[i] as number))));
  }

  update(step: StepFeedback): void {
    for (const [index, rewards] of step) {
      for (const r of rewards) {
        const clipped = clip01(r);
        this.alpha[index] = (this.alpha[index] as number) + clipped;
        this.beta[index] = (this.beta[index] as number) + 1 - clipped;
      }
    }
  }

  state(): EstimatorState {
    return { alpha: [...this.alpha], beta: [...this.beta] };
  }

  loadState(state: EstimatorState, size: number): void {
    ({ alpha: this.alpha, beta: this.beta } = checkedState(state, size));
  }
}

/** Trinity-RFT's InterpolationBetaPREstimator (BOTS); `features[i]` = [f0_i, f1_i] (see the header). */
export class BotsEstimator implements PassRateEstimator {
  alpha: number[];
  beta: number[];
  rho: number;
  capCoef: number | null = null;
  readonly m: number;
  readonly lamb: number;
  readonly adaptiveRho: boolean;

  constructor(
    private readonly features: readonly (readonly [number, number])[],
    options: BotsOptions = {},
  ) {
    this.m = options.m ?? 16;
    this.lamb = options.lamb ?? 0.2;
    this.rho = options.rho ?? 0.2;
    this.adaptiveRho = options.adaptiveRho ?? false;
    if (!(this.m > 0)) throw new RangeError(`difficulty_based: m must be > 0, got ${this.m}`);
    if (!(this.lamb >= 0 && this.lamb <= 1)) throw new RangeError(`difficulty_based: lamb must be in [0, 1], got ${this.lamb}`);
    if (!(this.rho >= 0 && this.rho <= 1)) throw new RangeError(`difficulty_based: rho must be in [0, 1], got ${this.rho}`);
    this.alpha = features.map(() => 1);
    this.beta = features.map(() => 1);
  }

  update(step: StepFeedback): void {
    const seen = [...step].filter(([, rewards]) => rewards.length > 0);
    if (seen.length === 0) return;
    const indices = seen.map(([index]) => index);
    const observed = new Map(seen.map(([index, rewards]) => [index, clip01(mean(rewards))]));
    const anchor0 = mean(indices.map((i) => (this.features[i] as [number, number])[0]));
    const anchor1 = mean(indices.map((i) => (this.features[i] as [number, number])[1]));
    const estimate = (mean([...observed.values()]) - anchor0) / (anchor1 - anchor0 + 1e-6);
    this.capCoef = this.capCoef === null ? estimate : 0.9 * this.capCoef + 0.1 * estimate;
    const capCoef = this.capCoef;
    const interpolated = this.features.map(([f0, f1]) => clip01((f1 - f0) * capCoef + f0));
    if (this.adaptiveRho) {
      const miss = mean(indices.map((i) => Math.abs((interpolated[i] as number) - (observed.get(i) as number))));
      if (miss >= 0.25) this.rho *= 0.5;
    }
    const { m, lamb, rho } = this;
    for (let i = 0; i < this.alpha.length; i++) {
      const s = observed.get(i);
      const p = s ?? (interpolated[i] as number);
      const successes = s === undefined ? 0 : s * m;
      const failures = s === undefined ? 0 : (1 - s) * m;
      this.alpha[i] = (1 - lamb) * (this.alpha[i] as number) + lamb + (1 - rho) * successes + rho * p * m;
      this.beta[i] = (1 - lamb) * (this.beta[i] as number) + lamb + (1 - rho) * failures + rho * (1 - p) * m;
    }
  }

  state(): EstimatorState {
    return { alpha: [...this.alpha], beta: [...this.beta], capCoef: this.capCoef, rho: this.rho };
  }

  loadState(state: EstimatorState, size: number): void {
    ({ alpha: this.alpha, beta: this.beta } = checkedState(state, size));
    if (state.capCoef !== undefined && state.capCoef !== null && !Number.isFinite(state.capCoef))
      throw new Error('difficulty_based state: capCoef must be a number or null');
    this.capCoef = state.capCoef ?? null;
    if (state.rho !== undefined) this.rho = state.rho;
  }
}

/** Each task's feature `key` as a number in [0, 1] (a pass rate), or an error naming the task. */
export function passRateFeature(tasks: readonly Task[], key: string): number[] {
  return tasks.map((task) => {
    const p = task.features?.[key];
    if (p === undefined || !(p >= 0 && p <= 1)) {
      throw new Error(`difficulty_based: task '${task.id}' feature '${key}' must be a pass rate in [0, 1], got ${String(p)}`);
    }
    return p;
  });
}
