// The trainer's learning-rate schedule from Trinity's optimizer keys (algorithm.optimizer: lr_scheduler_type,
// lr_warmup_steps, lr_warmup_steps_ratio, min_lr_ratio) and the stage's train steps; the multipliers themselves are
// src/torch/lr-schedule.ts. A stage with no end step (online training) takes only schedules that need none.
import type { LrSchedule } from '../../torch/index.js';
import type { ResolvedAlgorithm } from '../algorithm/presets.js';

/** LR schedule from Trinity's optimizer keys: constant, or cosine/linear with warmup and min_lr_ratio. */
export function trainerLrSchedule(o: ResolvedAlgorithm['optimizer'], totalSteps: number): LrSchedule {
  if (!Number.isFinite(totalSteps)) checkOnlineSchedule(o);
  const warmupSteps =
    o.lrWarmupSteps >= 0 ? o.lrWarmupSteps : o.lrWarmupStepsRatio === 0 ? 0 : Math.floor(o.lrWarmupStepsRatio * totalSteps);
  const type =
    o.lrSchedulerType === 'cosine' || o.lrSchedulerType === 'linear'
      ? o.lrSchedulerType
      : warmupSteps > 0
        ? 'constant_with_warmup'
        : 'constant';
  return { type, warmupSteps, totalSteps: Math.max(totalSteps, warmupSteps + 1), minLrRatio: o.minLrRatio };
}

/** A stage with no end step (online training, ../run/stage-plan.ts trainsOnline) has no schedule that needs one. */
function checkOnlineSchedule(o: ResolvedAlgorithm['optimizer']): void {
  const online = 'this stage trains online with no end step (mode train over a shared buffer without buffer.total_steps)';
  if (o.lrSchedulerType === 'cosine' || o.lrSchedulerType === 'linear')
    throw new Error(
      `algorithm.optimizer.lr_scheduler_type '${o.lrSchedulerType}' decays towards the last step, and ${online}: ` +
        "use 'constant', or set buffer.total_steps",
    );
  if (o.lrWarmupSteps < 0 && o.lrWarmupStepsRatio > 0)
    throw new Error(
      `algorithm.optimizer.lr_warmup_steps_ratio ${o.lrWarmupStepsRatio} is a share of the steps, and ${online}: ` +
        'set lr_warmup_steps instead, or buffer.total_steps',
    );
}
