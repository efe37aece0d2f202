// Learning-rate schedules: a multiplier of the base learning rate as a function of the step (0-based), the lr_lambda
// of transformers' get_*_schedule(_with_warmup) (a torch LambdaLR):
//   constant:               1
//   constant_with_warmup:   step / max(1, warmup) while step < warmup, then 1
//   linear:                 warmup, then r + (1 - r) * max(0, (total - step) / max(1, total - warmup))
//   cosine:                 warmup, then max(0, r + (1 - r) * 0.5 * (1 + cos(pi * progress))),
//                           progress = (step - warmup) / max(1, total - warmup)
// where r = minLrRatio (0 by default). With r = 0 these are transformers' get_constant_schedule,
// get_constant_schedule_with_warmup, get_linear_schedule_with_warmup and get_cosine_schedule_with_warmup (num_cycles
// 0.5); cosine with r is get_cosine_with_min_lr_schedule_with_warmup(min_lr_rate=r) (verl's warmup-cosine decay).
// As in transformers, progress is not clamped: past totalSteps the cosine rises again. Linear with r > 0 is an
// extension (transformers' linear decays to 0).
import type { Optimizer } from './optim.js';

export type LrScheduleType = 'constant' | 'constant_with_warmup' | 'linear' | 'cosine';

export interface LrSchedule {
  type: LrScheduleType;
  warmupSteps?: number;
  /** Needed by linear and cosine. */
  totalSteps?: number;
  minLrRatio?: number;
}

export function lrMultiplier(schedule: LrSchedule, step: number): number {
  const warmup = schedule.warmupSteps ?? 0;
  const minRatio = schedule.minLrRatio ?? 0;
  if (schedule.type === 'constant') return 1;
  if (step < warmup) return step / Math.max(1, warmup);
  if (schedule.type === 'constant_with_warmup') return 1;
  const total = schedule.totalSteps;
  if (total === undefined) throw new RangeError(`lr schedule '${schedule.type}' needs totalSteps`);
  const span = Math.max(1, total - warmup);
  if (schedule.type === 'linear') return minRatio + (1 - minRatio) * Math.max(0, (total - step) / span);
  const progress = (step - warmup) / span;
  return Math.max(0, minRatio + (1 - minRatio) * 0.5 * (1 + Math.cos(Math.PI * progress)));
}

/**
 * Sets an optimizer's learning rates from a schedule, as torch's LambdaLR: each parameter group's lr is its base lr
 * times the multiplier. Construction applies step `startStep`; call step() after each optimizer step.
 * `baseLr` is one base lr for every group, or one per group (as LambdaLR's base_lrs, the groups' initial lrs).
 */
export class LrScheduler {
  #step: number;
  readonly baseLrs: readonly number[];
  constructor(
    readonly optimizer: Optimizer,
    baseLr: number | readonly number[],
    readonly schedule: LrSchedule,
    startStep = 0,
  ) {
    const groups = optimizer.groups.length;
    if (typeof baseLr !== 'number' && baseLr.length !== groups) {
      throw new RangeError(`LrScheduler: ${baseLr.length} base learning rates for ${groups} parameter groups`);
    }
    this.baseLrs = typeof baseLr === 'number' ? Array.from({ length: groups }, () => baseLr) : [...baseLr];
    this.#step = startStep;
    this.#apply();
  }

  /** The base lr of the first group. */
  get baseLr(): number {
    return this.baseLrs[0] ?? 0;
  }

  get currentStep(): number {
    return this.#step;
  }

  /** Advances one step and sets the new learning rates; returns the first group's. */
  step(): number {
    this.#step += 1;
    return this.#apply();
  }

  #apply(): number {
    const multiplier = lrMultiplier(this.schedule, this.#step);
    this.optimizer.groups.forEach((g, i) => {
      g.lr = (this.baseLrs[i] ?? 0) * multiplier;
    });
    return this.optimizer.lr;
  }
}
