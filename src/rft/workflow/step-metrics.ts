// How a step's runs went (RunStatus, one per run of the workflow runner) and the step's rollout metrics over its
// experiences and statuses: reward and response-length summaries, each experience metric's mean, the share of
// experiences whose prompt was over model.max_prompt_tokens (masked placeholders, ./prompt-truncation.ts), and
// counts of tasks, runs and attempts that succeeded, failed, timed out or returned malformed experiences.
import { type Experience, responseLength } from '../experience.js';

/** How one run went. */
export interface RunStatus {
  taskId: string;
  taskset: string;
  /** The run ids it was to produce (runIdBase .. runIdBase + repeatTimes − 1). */
  runIds: number[];
  ok: boolean;
  attempts: number;
  timedOut: number;
  malformed: number;
  errored: number;
  /** The last attempt's error, when it failed. */
  error?: string;
  /**
   * Cut short by the step stopping (a Ctrl-C, or the stage failing elsewhere: a checkpoint that could not be written):
   * not a failure of this run. `error` then names the stop's reason; its attempt is counted in no failure column.
   */
  cancelled?: boolean;
  /** Wall time of the successful attempt, or of all attempts when it failed. */
  seconds: number;
}

/** Mean, population std, max and min of a non-empty list. */
function summary(values: readonly number[]): { mean: number; std: number; max: number; min: number } {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  const variance = values.reduce((a, b) => a + (b - mean) ** 2, 0) / values.length;
  return { mean, std: Math.sqrt(variance), max: Math.max(...values), min: Math.min(...values) };
}

/** The step's metrics; see StepResult.metrics. */
export function stepMetrics(experiences: readonly Experience[], statuses: readonly RunStatus[]): Record<string, number> {
  const metrics: Record<string, number> = { 'rollout/experiences': experiences.length };
  const rewards = experiences.flatMap((e) => (e.reward === undefined ? [] : [e.reward]));
  if (rewards.length > 0) {
    const s = summary(rewards);
    Object.assign(metrics, {
      'rollout/reward/mean': s.mean,
      'rollout/reward/std': s.std,
      'rollout/reward/max': s.max,
      'rollout/reward/min': s.min,
    });
  }
  if (experiences.length > 0) {
    const s = summary(experiences.map(responseLength));
    Object.assign(metrics, {
      'rollout/response_length/mean': s.mean,
      'rollout/response_length/max': s.max,
      'rollout/response_length/min': s.min,
    });
    const truncated = experiences.filter((e) => e.truncateStatus === 'prompt_truncated').length;
    metrics['rollout/prompt_truncated_ratio'] = truncated / experiences.length;
  }
  const named = new Map<string, number[]>();
  for (const e of experiences) {
    for (const [key, value] of Object.entries(e.metrics ?? {})) named.set(key, [...(named.get(key) ?? []), value]);
  }
  for (const [key, values] of named) metrics[`rollout/${key}/mean`] = summary(values).mean;

  const failedTasks = new Set(statuses.filter((s) => !s.ok).map((s) => s.taskId));
  const allTasks = new Set(statuses.map((s) => s.taskId));
  metrics['rollout/tasks/ok'] = allTasks.size - failedTasks.size;
  metrics['rollout/tasks/failed'] = failedTasks.size;
  metrics['rollout/runs/ok'] = statuses.filter((s) => s.ok).length;
  metrics['rollout/runs/failed'] = statuses.filter((s) => !s.ok).length;
  metrics['rollout/attempts/timed_out'] = statuses.reduce((a, s) => a + s.timedOut, 0);
  metrics['rollout/attempts/malformed'] = statuses.reduce((a, s) => a + s.malformed, 0);
  metrics['rollout/attempts/errored'] = statuses.reduce((a, s) => a + s.errored, 0);
  const times = statuses.filter((s) => s.ok).map((s) => s.seconds);
  if (times.length > 0) {
    const s = summary(times);
    metrics['rollout/run_time_s/mean'] = s.mean;
    metrics['rollout/run_time_s/max'] = s.max;
  }
  return metrics;
}
