// The sample-strategy contract (see ../sample-strategy.ts for the overview): what a strategy is given each train
// step, what it returns, what it keeps between steps, and the helpers the built-ins share.
import { type AuxiliarySource, type ExperienceSource, experiencesFromState, sourceName } from '../../buffer/source.js';
import { BufferTimeoutError } from '../../buffer/types.js';
import type { Experience } from '../../experience.js';
import type { AlgorithmModule } from '../registry.js';

/** Longest timeout a timer can wait (2^31 − 1 ms, ~24.8 days); Node fires longer ones after 1 ms. */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** One train step's input. A plug-in strategy gets exactly this. */
export interface SampleInput {
  /**
   * The experience buffer (trainer_input.experience_buffer) as the trainer loop sees it. A strategy reads exactly
   * the experiences it uses or keeps; the rest stay in the source for later steps.
   */
  readonly source: ExperienceSource;
  /** Experiences per training step (buffer.train_batch_size): the batch size a strategy delivers. */
  readonly batchSize: number;
  /** The step's time budget: all of the step's reads share the deadline now + timeoutMs. */
  readonly timeoutMs: number;
  /**
   * At the deadline, the fewest experiences from the source the step accepts as a short batch (Trinity-RFT returns
   * an incomplete batch after max_read_timeout); with fewer the strategy rejects with BufferTimeoutError, keeping
   * what it read for the next call. Default batchSize (a short batch at the deadline is an error). A source that has
   * finished gives short batches without an error.
   */
  readonly minCount?: number;
  /** The trainer's current model version (staleness_control). */
  readonly modelVersion?: number;
  /** Responses per task (algorithm.repeat_times): the size of a complete group (dynamic_sampling). */
  readonly repeatTimes?: number;
  /** Auxiliary buffers by name (trainer_input.auxiliary_buffers), e.g. `sft_dataset` for mix. */
  readonly auxiliary?: Readonly<Record<string, AuxiliarySource>>;
}

export interface SampleResult {
  experiences: Experience[];
  metrics: Record<string, number>;
  /**
   * Set (with no experiences, nothing read) when the strategy can make no more batches — e.g. mix's expert data has
   * given its total_epochs: why, and training ends there as when the experience source is drained.
   */
  ended?: string;
}

/**
 * A strategy as a module's run() creates it: sample() once per train step (never two at once), state() between
 * steps (JSON-serialisable: it goes into the checkpoint) and loadState() with what state() returned, before the first
 * sample() of a resumed run. A stateless strategy may leave both out.
 */
export interface SampleStrategyInstance {
  sample(input: SampleInput): Promise<SampleResult>;
  state?(): unknown;
  loadState?(state: unknown): void;
}

/** What a module's run() is given besides its options. */
export interface SampleStrategyInit {
  /** The name the strategy was created under (a registered name or a plug-in's module path). */
  readonly name: string;
}

/** A sample strategy module: `run(init, options)` creates a strategy instance with fresh state. */
export type SampleStrategyModule<Options extends object> = AlgorithmModule<SampleStrategyInit, Options, SampleStrategyInstance>;

/** Checks a step's input; returns minCount with its default. */
export function checkSampleInput(where: string, input: SampleInput): number {
  if (input === null || typeof input !== 'object') throw new TypeError(`${where}: the input must be an object`);
  const { source, batchSize, timeoutMs, modelVersion, repeatTimes } = input;
  if (source === null || typeof source !== 'object' || typeof source.read !== 'function') {
    throw new TypeError(`${where}: input.source must be an experience source { read(count, { timeoutMs, minCount }) }`);
  }
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new RangeError(`${where}: batchSize must be a positive integer, got ${batchSize}`);
  }
  if (!(Number.isFinite(timeoutMs) && timeoutMs >= 0 && timeoutMs <= MAX_TIMEOUT_MS)) {
    throw new RangeError(`${where}: timeoutMs must be a number of milliseconds in [0, ${MAX_TIMEOUT_MS}], got ${timeoutMs}`);
  }
  const minCount = input.minCount ?? batchSize;
  if (!Number.isInteger(minCount) || minCount < 0 || minCount > batchSize) {
    throw new RangeError(`${where}: minCount must be an integer in [0, batchSize = ${batchSize}], got ${minCount}`);
  }
  if (modelVersion !== undefined && !Number.isInteger(modelVersion)) {
    throw new RangeError(`${where}: modelVersion must be an integer, got ${modelVersion}`);
  }
  if (repeatTimes !== undefined && !(Number.isInteger(repeatTimes) && repeatTimes >= 1)) {
    throw new RangeError(`${where}: repeatTimes must be a positive integer, got ${repeatTimes}`);
  }
  return minCount;
}

/** A step's deadline. */
/** An option that must be a non-negative integer (max_read_rounds, max_staleness); the error names it. */
export function checkNonNegativeInteger(where: string, key: string, value: number): void {
  if (!(Number.isInteger(value) && value >= 0)) throw new Error(`${where}: ${key} must be a non-negative integer, got ${value}`);
}

export class Deadline {
  readonly at: number;

  constructor(timeoutMs: number) {
    this.at = Date.now() + timeoutMs;
  }

  remaining(): number {
    return Math.max(0, this.at - Date.now());
  }
}

export interface Round {
  experiences: Experience[];
  /** The source returned fewer than asked before the deadline: it has finished and is drained. */
  finished: boolean;
  /** The deadline passed before `count` were there; `experiences` is what was there then (maybe none). */
  timedOut: boolean;
}

/**
 * One read of a strategy that reads several times a step: all `count` before the deadline, or at the deadline
 * whatever is there (a second, non-waiting read; the timed-out one took nothing).
 */
export async function readRound(source: ExperienceSource, count: number, deadline: Deadline): Promise<Round> {
  try {
    const experiences = await source.read(count, { timeoutMs: deadline.remaining(), minCount: count });
    return { experiences, finished: experiences.length < count, timedOut: false };
  } catch (error) {
    if (!(error instanceof BufferTimeoutError)) throw error;
    return { experiences: await source.read(count, { timeoutMs: 0, minCount: 0 }), finished: false, timedOut: true };
  }
}

/** The BufferTimeoutError a strategy throws when the deadline leaves it below minCount. */
export function stepTimeout(source: ExperienceSource, waitedFor: string, timeoutMs: number): BufferTimeoutError {
  return new BufferTimeoutError(sourceName(source), waitedFor, timeoutMs);
}

/**
 * Experiences a strategy has read from the source but not used yet (a group that did not fit, the start of a group
 * whose rest had not arrived, a batch interrupted by a timeout): the next step starts with them, and they are the
 * strategy's checkpoint state, so nothing read is lost and a resumed run sees the same experiences.
 */
export class HeldExperiences {
  #items: Experience[] = [];

  constructor(readonly where: string) {}

  get count(): number {
    return this.#items.length;
  }

  /** All held experiences, in source order; the holder is empty afterwards. */
  take(): Experience[] {
    const out = this.#items;
    this.#items = [];
    return out;
  }

  /** Holds `items` (replacing what was held: take() first). */
  hold(items: readonly Experience[]): void {
    this.#items = [...items];
  }

  state(): { held: Experience[] } {
    return { held: [...this.#items] };
  }

  loadState(state: unknown): void {
    const s = state as { held?: unknown } | null;
    if (s === null || typeof s !== 'object') throw new Error(`${this.where}: bad checkpoint state ${JSON.stringify(state)}`);
    this.#items = experiencesFromState(`${this.where}: checkpoint state 'held'`, s.held);
  }
}

export function rewardOf(module: string, e: Experience): number {
  if (typeof e.reward !== 'number') throw new Error(`sample_strategy '${module}': experience '${e.eid}' has no reward`);
  return e.reward;
}

/** Experiences grouped by info.taskId (first appearance order). */
export function groupsByTask(module: string, experiences: readonly Experience[]): Experience[][] {
  const groups = new Map<string, Experience[]>();
  for (const e of experiences) {
    const task = e.info.taskId;
    if (task === undefined) throw new Error(`sample_strategy '${module}': experience '${e.eid}' has no info.taskId to group by`);
    const group = groups.get(task) ?? [];
    groups.set(task, group);
    group.push(e);
  }
  return [...groups.values()];
}

/**
 * Runs of consecutive experiences from the same task and explorer step (info.taskId, info.step): the explorer
 * writes each task's responses together, so a run is a group, and the same task explored again at a later step
 * (the next epoch) is a new group.
 */
export function consecutiveGroups(module: string, experiences: readonly Experience[]): Experience[][] {
  const groups: Experience[][] = [];
  let key: string | null = null;
  for (const e of experiences) {
    const task = e.info.taskId;
    if (task === undefined) throw new Error(`sample_strategy '${module}': experience '${e.eid}' has no info.taskId to group by`);
    const next = JSON.stringify([task, e.info.step ?? null]);
    if (next !== key) groups.push([]);
    key = next;
    (groups.at(-1) as Experience[]).push(e);
  }
  return groups;
}

/** Sample standard deviation (n − 1); 0 for fewer than two values. */
export function standardDeviation(values: readonly number[]): number {
  if (values.length < 2) return 0;
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return Math.sqrt(values.reduce((a, b) => a + (b - mean) ** 2, 0) / (values.length - 1));
}
