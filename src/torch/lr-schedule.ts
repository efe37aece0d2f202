// Learning-rate schedules: a multiplier of the base learning rate as a function of the step (0-based).
//   constant:               1
//   constant_with_warmup:   min(1, step / warmup)
//   linear:                 warmup, then r + (1 - r) * max(0, (total - step) / (total - warmup))
//   cosine:                 warmup, then r + (1 - r) * 0.5 * (1 + cos(pi * progress)), progress = (step - warmup) / (total - warmup)
// where r = minLrRatio (0 by default), as transformers' get_*_schedule_with_warmup and verl's warmup-cosine.
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
  if (step < warmup) return warmup > 0 ? step / warmup : 1;
  if (schedule.type === 'constant_with_warmup') return 1;
  const total = schedule.totalSteps;
  if (total === undefined || total <= warmup) {
    throw new RangeError(`lr schedule '${schedule.type}' needs totalSteps greater than warmupSteps (${warmup}), got ${total}`);
  }
  const progress = Math.min(1, (step - warmup) / (total - warmup));
  const decay = schedule.type === 'linear' ? 1 - progress : 0.5 * (1 + Math.cos(Math.PI * progress));
  return minRatio + (1 - minRatio) * decay;
}

/** Sets an optimizer's learning rate from a schedule; call step() after each optimizer step. */
export class LrScheduler {
  #step: number;
  constructor(
    readonly optimizer: Optimizer,
    readonly baseLr: number,
    readonly schedule: LrSchedule,
    startStep = 0,
  ) {
    this.#step = startStep;
    optimizer.setLr(baseLr * lrMultiplier(schedule, startStep));
  }

  get currentStep(): number {
    return this.#step;
  }

  step(): number {
    this.#step += 1;
    const lr = this.baseLr * lrMultiplier(this.schedule, this.#step);
    this.optimizer.setLr(lr);
    return lr;
  }
}
