// The current model as the task pipeline samples it: a stage's workflow runner (src/rft/workflow/runner.ts) over its
// engine, so a task is run exactly as the explorer will run it (its workflow, reward function, rollout args,
// timeouts and retries). A run that yields several experiences (a multi-turn workflow's steps) counts once, with
// the last experience's reward (where its final outcome is).
import type { WorkflowRunner } from '../../workflow/index.js';
import type { ModelSampler, SampledRun, SampledRuns } from './types.js';

export function workflowSampler(runner: WorkflowRunner, model: string): ModelSampler {
  return {
    model,
    async sample(tasks, repeatTimes, signal) {
      const result = await runner.runStep(tasks, { step: 0, repeatTimes, ...(signal ? { signal } : {}) });
      const byRun = new Map<string, Map<number, SampledRun>>();
      for (const [i, e] of result.experiences.entries()) {
        const taskId = String(e.info.taskId);
        const runs = byRun.get(taskId) ?? new Map<number, SampledRun>();
        const accuracy = e.metrics?.accuracy;
        runs.set(e.info.runId ?? -1 - i, { reward: e.reward ?? 0, ...(accuracy !== undefined ? { accuracy } : {}) });
        byRun.set(taskId, runs);
      }
      const out: SampledRuns = new Map();
      for (const [taskId, runs] of byRun) out.set(taskId, [...runs.values()]);
      return out;
    },
  };
}
