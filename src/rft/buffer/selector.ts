// Task selectors (Trinity-RFT's `data_selector: {selector_type, seed, feature_keys, kwargs}`): which rows of a
// taskset the explorer runs next. Every choice depends only on (seed, position, feedback), so a selector restored
// from state() picks exactly what the uninterrupted run would have picked.
//
//   sequential         rows in file order, epoch after epoch
//   shuffle            a fresh permutation per epoch, seeded by (seed, epoch)
//   random             uniform with replacement, draw k seeded by (seed, k)
//   offline_easy2hard  rows sorted by feature_keys (descending by default, as Trinity: a high pass rate is easy)
//   difficulty_based   a Beta posterior of each task's pass rate, fed by each step's rewards (./pass-rate-estimators.ts:
//                      counting, or BOTS' interpolation between two reference models' pass rates); picks tasks whose
//                      (sampled) pass rate is nearest `targetReward`:
//                        p_i ~ Beta(α_i, β_i) (doSample) or α_i / (α_i + β_i)
//                        score_i = −|target − p_i|;  tau = 0: top-k scores; tau > 0: sample ∝ exp(score/tau)
//                      without replacement. Unseen tasks have wide posteriors, so sampling explores them.
//
// Where the scores come from: feature_keys name numeric columns of the task rows, read into task.features by the
// taskset loader. The task pipeline's difficulty_scorer writes `pass_rate` (the fraction of k samples of the current
// model that passed; src/rft/data/task-pipeline), so `feature_keys: [pass_rate]` gives difficulty_based its prior and
// offline_easy2hard its order (descending: easy first). Online, the explorer feeds each step's rewards back
// (feedback); with `pass_rate_calculator` in data_processor.experience_pipeline, the rewards that operator saw.
// difficulty_based takes no feature key, one prior pass-rate column (counting), or two: the pass rates of a weaker and
// a stronger reference model (BOTS, Trinity's form, with its kwargs m, lamb, rho, adaptive_rho).
import type { Task } from '../task.js';
import {
  BotsEstimator,
  type BotsOptions,
  CountingEstimator,
  type EstimatorState,
  type PassRateEstimator,
  passRateFeature,
} from './pass-rate-estimators.js';
import { betaSample, permutation, seededRandom } from './random.js';

export type SelectorType = 'sequential' | 'shuffle' | 'random' | 'offline_easy2hard' | 'difficulty_based';

export const SELECTOR_TYPES: readonly SelectorType[] = [
  'sequential',
  'shuffle',
  'random',
  'offline_easy2hard',
  'difficulty_based',
];

export interface SelectorConfig {
  selectorType?: SelectorType;
  /** Default 42 (Trinity's). */
  seed?: number;
  /** offline_easy2hard: sort keys (first decides, later ones break ties); difficulty_based: optional prior pass rate. */
  featureKeys?: string[];
  /** offline_easy2hard: highest feature first (default true). */
  descending?: boolean;
  /** difficulty_based: the pass rate to aim at (default 0.5). */
  targetReward?: number;
  /** difficulty_based: softmax temperature over scores; 0 = take the top scores (default 0). */
  tau?: number;
  /** difficulty_based: Thompson-sample pass rates instead of using posterior means (default true). */
  doSample?: boolean;
  /** difficulty_based with one feature key: pseudo-observations given to the prior pass rate feature (default 2). */
  priorStrength?: number;
  /** difficulty_based with two feature keys (BOTS): ./pass-rate-estimators.ts. */
  m?: BotsOptions['m'];
  lamb?: BotsOptions['lamb'];
  rho?: BotsOptions['rho'];
  adaptiveRho?: BotsOptions['adaptiveRho'];
}

/** One explore step's feedback: task id → the rewards of its responses. */
export type TaskFeedback = ReadonlyMap<string, readonly number[]>;

export interface SelectorState {
  type: SelectorType;
  size: number;
  position: number;
  alpha?: number[];
  beta?: number[];
  capCoef?: EstimatorState['capCoef'];
  rho?: EstimatorState['rho'];
}

export interface TaskSelector {
  readonly type: SelectorType;
  /** Tasks handed out so far. */
  readonly position: number;
  /** floor(position / taskset size). */
  readonly epoch: number;
  /** Indices of the next `count` tasks. */
  next(count: number): number[];
  /** One explore step's rewards, by task (difficulty_based learns from them once per step; others ignore them). */
  feedback(step: TaskFeedback): void;
  state(): SelectorState;
  loadState(state: SelectorState): void;
}

export function createSelector(tasks: readonly Task[], config: SelectorConfig = {}): TaskSelector {
  if (tasks.length === 0) throw new Error('a selector needs a non-empty taskset');
  const type = config.selectorType ?? 'sequential';
  switch (type) {
    case 'sequential':
      return new OrderSelector(type, tasks, config, () => identity(tasks.length));
    case 'shuffle':
      return new OrderSelector(type, tasks, config, (epoch) => permutation(tasks.length, seededRandom(config.seed ?? 42, epoch)));
    case 'offline_easy2hard': {
      const order = easyToHardOrder(tasks, config);
      return new OrderSelector(type, tasks, config, () => order);
    }
    case 'random':
      return new RandomSelector(tasks, config);
    case 'difficulty_based':
      return new DifficultySelector(tasks, config);
    default:
      throw new Error(`unknown selector_type '${String(type)}' (one of ${SELECTOR_TYPES.join(', ')})`);
  }
}

abstract class BaseSelector implements TaskSelector {
  abstract readonly type: SelectorType;
  protected positionValue = 0;
  protected readonly seed: number;
  protected readonly indexById: Map<string, number>;

  constructor(
    protected readonly tasks: readonly Task[],
    config: SelectorConfig,
  ) {
    this.seed = config.seed ?? 42;
    this.indexById = new Map(tasks.map((t, i) => [t.id, i]));
  }

  get position(): number {
    return this.positionValue;
  }

  get epoch(): number {
    return Math.floor(this.positionValue / this.tasks.length);
  }

  abstract next(count: number): number[];

  feedback(step: TaskFeedback): void {
    this.indexedFeedback(step);
  }

  state(): SelectorState {
    return { type: this.type, size: this.tasks.length, position: this.positionValue };
  }

  loadState(state: SelectorState): void {
    if (state.type !== this.type) throw new Error(`selector state is for '${state.type}', this selector is '${this.type}'`);
    if (state.size !== this.tasks.length) {
      throw new Error(`selector state is for a taskset of ${state.size} tasks, this one has ${this.tasks.length}`);
    }
    if (!Number.isInteger(state.position) || state.position < 0)
      throw new Error(`selector state position ${state.position} is invalid`);
    this.positionValue = state.position;
  }

  /** The step's feedback by task index, each task known and its rewards finite. */
  protected indexedFeedback(step: TaskFeedback): Map<number, readonly number[]> {
    const byIndex = new Map<number, readonly number[]>();
    for (const [taskId, rewards] of step) {
      checkRewards(taskId, rewards);
      byIndex.set(this.indexOf(taskId), rewards);
    }
    return byIndex;
  }

  protected indexOf(taskId: string): number {
    const index = this.indexById.get(taskId);
    if (index === undefined) throw new Error(`selector feedback: unknown task id '${taskId}'`);
    return index;
  }

  protected checkCount(count: number): void {
    if (!Number.isInteger(count) || count < 0) throw new RangeError(`selector: count must be an integer >= 0, got ${count}`);
  }
}

/** Walks an order of the rows epoch after epoch; `orderOf(epoch)` gives each epoch's order. */
class OrderSelector extends BaseSelector {
  #cachedEpoch = -1;
  #order: number[] = [];

  constructor(
    readonly type: SelectorType,
    tasks: readonly Task[],
    config: SelectorConfig,
    private readonly orderOf: (epoch: number) => number[],
  ) {
    super(tasks, config);
  }

  next(count: number): number[] {
    this.checkCount(count);
    const out: number[] = [];
    for (let k = 0; k < count; k++) {
      const epoch = this.epoch;
      if (epoch !== this.#cachedEpoch) {
        this.#order = this.orderOf(epoch);
        this.#cachedEpoch = epoch;
      }
      out.push(this.#order[this.positionValue % this.tasks.length] as number);
      this.positionValue++;
    }
    return out;
  }
}

class RandomSelector extends BaseSelector {
  readonly type = 'random' as const;

  next(count: number): number[] {
    this.checkCount(count);
    const out: number[] = [];
    for (let k = 0; k < count; k++) {
      out.push(Math.floor(seededRandom(this.seed, this.positionValue)() * this.tasks.length));
      this.positionValue++;
    }
    return out;
  }
}

class DifficultySelector extends BaseSelector {
  readonly type = 'difficulty_based' as const;
  readonly targetReward: number;
  readonly tau: number;
  readonly doSample: boolean;
  readonly #estimator: PassRateEstimator;

  constructor(tasks: readonly Task[], config: SelectorConfig) {
    super(tasks, config);
    // Trinity's defaults (DifficultyBasedSelector's kwargs): target_reward 1.0, tau 1.0, do_sample false
    this.targetReward = config.targetReward ?? 1;
    this.tau = config.tau ?? 1;
    this.doSample = config.doSample ?? false;
    if (!(this.targetReward >= 0 && this.targetReward <= 1))
      throw new RangeError(`targetReward must be in [0, 1], got ${this.targetReward}`);
    if (!(this.tau >= 0)) throw new RangeError(`tau must be >= 0, got ${this.tau}`);
    this.#estimator = difficultyEstimator(tasks, config);
  }

  /** Posterior mean pass rate of each task. */
  get passRates(): number[] {
    const { alpha, beta } = this.#estimator;
    return alpha.map((a, i) => a / (a + (beta[i] as number)));
  }

  next(count: number): number[] {
    this.checkCount(count);
    const n = this.tasks.length;
    const random = seededRandom(this.seed, this.positionValue);
    const { alpha, beta } = this.#estimator;
    const keys = alpha.map((a, i) => {
      const b = beta[i] as number;
      const p = this.doSample ? betaSample(a, b, random) : a / (a + b);
      const score = -Math.abs(this.targetReward - p);
      // Gumbel-top-k: top-k of score/tau + Gumbel noise samples k indices ∝ softmax(score/tau) without replacement.
      return this.tau === 0 ? score : score / this.tau - Math.log(-Math.log(1 - random()));
    });
    const order = identity(n).sort((x, y) => (keys[y] as number) - (keys[x] as number) || x - y);
    const out: number[] = [];
    // More than n tasks in one call: every task once per pass through the ranking.
    for (let k = 0; k < count; k++) out.push(order[k % n] as number);
    this.positionValue += count;
    return out;
  }

  override feedback(step: TaskFeedback): void {
    this.#estimator.update(this.indexedFeedback(step));
  }

  override state(): SelectorState {
    return { ...super.state(), ...this.#estimator.state() };
  }

  override loadState(state: SelectorState): void {
    super.loadState(state);
    this.#estimator.loadState(
      { alpha: state.alpha ?? [], beta: state.beta ?? [], capCoef: state.capCoef, rho: state.rho },
      this.tasks.length,
    );
  }
}

/** difficulty_based's estimator by its feature keys: none or one (counting), two (BOTS). */
function difficultyEstimator(tasks: readonly Task[], config: SelectorConfig): PassRateEstimator {
  const keys = config.featureKeys ?? [];
  if (keys.length > 2)
    throw new Error(
      `difficulty_based takes at most two feature_keys (a prior pass rate, or BOTS' two reference models' pass ` +
        `rates), got ${keys.length} (${keys.join(', ')})`,
    );
  const bots = { m: config.m, lamb: config.lamb, rho: config.rho, adaptiveRho: config.adaptiveRho };
  if (keys.length === 2) {
    if (config.priorStrength !== undefined)
      throw new Error('difficulty_based: prior_strength is for one prior feature key; BOTS (two feature keys) takes m');
    const [weaker, stronger] = [passRateFeature(tasks, keys[0] as string), passRateFeature(tasks, keys[1] as string)];
    return new BotsEstimator(
      weaker.map((f0, i) => [f0, stronger[i] as number] as const),
      Object.fromEntries(Object.entries(bots).filter(([, v]) => v !== undefined)),
    );
  }
  const given = Object.entries(bots)
    .filter(([, v]) => v !== undefined)
    .map(([k]) => k);
  if (given.length > 0)
    throw new Error(
      `difficulty_based: ${given.join(', ')} are BOTS' arguments, which need two feature_keys (a weaker and a ` +
        `stronger reference model's pass rates), got ${keys.length}`,
    );
  const prior = keys.length === 1 ? passRateFeature(tasks, keys[0] as string) : null;
  return new CountingEstimator(prior, tasks.length, config.priorStrength ?? 2);
}

function identity(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

function checkRewards(taskId: string, rewards: readonly number[]): void {
  if (!rewards.every((r) => typeof r === 'number' && Number.isFinite(r))) {
    throw new Error(`selector feedback for task '${taskId}': rewards must be finite numbers`);
  }
}

function easyToHardOrder(tasks: readonly Task[], config: SelectorConfig): number[] {
  const keys = config.featureKeys ?? [];
  if (keys.length === 0) throw new Error('offline_easy2hard needs feature_keys (the columns to sort by)');
  const feature = (i: number, key: string): number => {
    const v = tasks[i]?.features?.[key];
    if (v === undefined)
      throw new Error(`offline_easy2hard: task '${tasks[i]?.id}' has no feature '${key}' (list it in format.featureKeys)`);
    return v;
  };
  const sign = (config.descending ?? true) ? -1 : 1;
  return identity(tasks.length).sort((a, b) => {
    for (const key of keys) {
      const d = feature(a, key) - feature(b, key);
      if (d !== 0) return sign * d;
    }
    return a - b;
  });
}
