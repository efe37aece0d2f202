// Helpers the group-level operators share: grouping by task and the rewards they look at.
import type { Experience } from '../../experience.js';

/** Experiences grouped by info.taskId, in order of first appearance (Trinity's group_by(id_type="task")). */
export function groupsByTask(operator: string, experiences: readonly Experience[]): Experience[][] {
  const groups = new Map<string, Experience[]>();
  for (const e of experiences) {
    const task = e.info.taskId;
    if (task === undefined) throw new Error(`experience operator '${operator}': experience '${e.eid}' has no info.taskId`);
    let group = groups.get(task);
    if (group === undefined) {
      group = [];
      groups.set(task, group);
    }
    group.push(e);
  }
  return [...groups.values()];
}

/** The reward of an experience; an experience without one is an error naming the operator (put invalid_reward_filter first). */
export function rewardOf(operator: string, e: Experience): number {
  if (typeof e.reward !== 'number')
    throw new Error(
      `experience operator '${operator}': experience '${e.eid}' (task ${String(e.info.taskId)}) has no reward; ` +
        'put invalid_reward_filter before it to drop such experiences',
    );
  return e.reward;
}

/** Population standard deviation (numpy's np.std, ddof 0), as Trinity's reward_std_filter computes it. */
export function populationStd(values: readonly number[]): number {
  if (values.length === 0) return 0;
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return Math.sqrt(values.reduce((a, b) => a + (b - mean) ** 2, 0) / values.length);
}

/** A finite number argument, else an error naming the operator and the argument. */
export function checkFinite(operator: string, key: string, value: number): void {
  if (!Number.isFinite(value)) throw new Error(`experience operator '${operator}': ${key} must be a finite number, got ${value}`);
}
