// Step-wise GRPO advantage for multi-step agents — Trinity-RFT `advantage_fn: step_wise_grpo`
// (StepWiseGRPOAdvantageFn, after rLLM). Each run (one episode of a task) contributes the reward of its last step;
// GRPO over the runs of a task gives one score per run, broadcast to every step of that run:
//   s_run = (r_last(run) − mean_task(r_last)) / (std + ε)     std: the task's (group) or all last steps' (batch)
//   A[step, t] = s_run · mask[step, t]                          (÷ number of steps of the run if enable_step_norm)
// A task with one run has mean 0 and std 1. std_threshold drops whole tasks whose std ≤ threshold or that have
// one run. The last step of a run is its last experience in batch order.
import * as torch from '../../../torch/index.js';
import { scoresToResult } from './groups.js';
import { ADVANTAGE_FN } from './registry.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export interface StepWiseGrpoAdvantageOptions {
  epsilon: number;
  enableStepNorm: boolean;
  stdThreshold: number | null;
  stdCalLevel: 'group' | 'batch';
}

export const STEP_WISE_GRPO_ADVANTAGE_DEFAULTS: Readonly<StepWiseGrpoAdvantageOptions> = {
  epsilon: 1e-6,
  enableStepNorm: false,
  stdThreshold: null,
  stdCalLevel: 'group',
};

const unbiasedStd = (xs: readonly number[]): number => {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  return Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / (xs.length - 1));
};

export function computeStepWiseGrpoAdvantages(
  input: AdvantageInput,
  options: Partial<StepWiseGrpoAdvantageOptions> = {},
): AdvantageResult {
  const { epsilon, enableStepNorm, stdThreshold, stdCalLevel } = { ...STEP_WISE_GRPO_ADVANTAGE_DEFAULTS, ...options };
  if (stdCalLevel !== 'group' && stdCalLevel !== 'batch') {
    throw new Error(`advantage_fn 'step_wise_grpo': std_cal_level must be group or batch, got '${String(stdCalLevel)}'`);
  }
  const rewardsTensor = requireField(input, 'rewards', 'step_wise_grpo');
  const taskIds = requireField(input, 'groupIds', 'step_wise_grpo');
  const runIds = requireField(input, 'runIds', 'step_wise_grpo');
  const rewards = torch.scope(() => rewardsTensor.to({ dtype: 'float64', device: 'cpu' }).toTypedArray() as Float64Array);
  if (taskIds.length !== rewards.length || runIds.length !== rewards.length) {
    throw new Error(
      `advantage_fn 'step_wise_grpo': ${rewards.length} rewards, ${taskIds.length} groupIds, ${runIds.length} runIds`,
    );
  }
  // runs keyed by (task, run); each run's steps in batch order
  const tasks = new Map<string, Map<string, number[]>>();
  rewards.forEach((_, i) => {
    const task = String(taskIds[i]);
    const run = String(runIds[i]);
    const runs = tasks.get(task) ?? new Map<string, number[]>();
    tasks.set(task, runs);
    const steps = runs.get(run) ?? [];
    runs.set(run, steps);
    steps.push(i);
  });
  const lastReward = (steps: number[]): number => rewards[steps[steps.length - 1] as number] as number;
  let batchStd = 1;
  if (stdCalLevel === 'batch') {
    const all = [...tasks.values()].flatMap((runs) => [...runs.values()].map(lastReward));
    batchStd = all.length <= 1 ? 1 : unbiasedStd(all);
  }
  const score = new Float64Array(rewards.length);
  const keep = new Uint8Array(rewards.length).fill(1);
  let skipped = 0;
  for (const runs of tasks.values()) {
    const last = [...runs.values()].map(lastReward);
    const single = last.length === 1;
    const mean = single ? 0 : last.reduce((a, b) => a + b, 0) / last.length;
    const std = single ? 1 : unbiasedStd(last);
    const skip = stdThreshold !== null && (single || std <= stdThreshold);
    for (const steps of runs.values()) {
      const s = (lastReward(steps) - mean) / ((stdCalLevel === 'batch' ? batchStd : std) + epsilon);
      for (const i of steps) {
        score[i] = enableStepNorm ? s / steps.length : s;
        if (skip) keep[i] = 0;
      }
      if (skip) skipped += steps.length;
    }
  }
  return torch.scope(() =>
    scoresToResult(
      torch.tensor(score, { dtype: 'float64' }).to({ dtype: rewardsTensor.dtype, device: rewardsTensor.device }),
      input.actionMask,
      torch.tensor(keep, { dtype: 'uint8' }).to({ dtype: 'bool', device: rewardsTensor.device }),
      { filtered_count: skipped, experience_count: rewards.length - skipped },
    ),
  );
}

export const stepWiseGrpoAdvantage: AdvantageModule<StepWiseGrpoAdvantageOptions> = {
  name: 'step_wise_grpo',
  description: "GRPO on each run's last-step reward, broadcast to all its steps (multi-step GRPO, after rLLM)",
  defaults: STEP_WISE_GRPO_ADVANTAGE_DEFAULTS,
  computeInTrainer: false,
  run: computeStepWiseGrpoAdvantages,
};

ADVANTAGE_FN.register(stepWiseGrpoAdvantage);
