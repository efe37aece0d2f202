// Evaluation on the eval tasksets (explorer.eval_interval, and mode bench): eval/<taskset>/* metrics and a few
// answers per eval step for the report (eval_samples.jsonl); the workflow runner both build from the stage settings.
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { type AuxiliaryModelSet, NO_AUXILIARY_MODELS } from '../auxiliary/index.js';
import { loadTaskset } from '../buffer/index.js';
import type { Experience } from '../experience.js';
import type { Task } from '../task.js';
import { type EngineModelHandle, WorkflowRunner } from '../workflow/index.js';
import type { StageSettings } from '../settings.js';

/** What the explorer's workflow runner reads of the stage's settings. */
export type RunnerSettings = Pick<StageSettings, 'pluginBaseDir' | 'explorer' | 'seed'>;
/** What an evaluation reads of the stage's settings: the eval tasksets and their samples per task. */
export type EvaluationSettings = Pick<StageSettings, 'evalTasksets' | 'evalRepeatTimes'>;

/**
 * The workflow runner of a stage's explorer (and of bench, a task pipeline's sampler, a train stage's evaluator), with
 * the stage's explorer settings and auxiliary models; its handle takes the stage's prompt rule (model.max_prompt_tokens,
 * enable_prompt_truncation: ../workflow/prompt-truncation.ts).
 */
export function stageWorkflowRunner(
  settings: RunnerSettings,
  handle: EngineModelHandle,
  log: (line: string) => void,
  auxiliaryModels: AuxiliaryModelSet = NO_AUXILIARY_MODELS,
): WorkflowRunner {
  handle.promptLimit = settings.explorer.promptLimit;
  return new WorkflowRunner({
    models: handle,
    auxiliaryModels,
    baseDir: settings.pluginBaseDir,
    runnerPerModel: settings.explorer.runnerPerModel,
    maxTimeout: settings.explorer.maxTimeout,
    maxRetryTimes: settings.explorer.maxRetryTimes,
    workflowMaxHeapMb: settings.explorer.workflowMaxHeapMb,
    defaultWorkflow: settings.explorer.defaultWorkflow,
    seed: settings.seed,
    log,
  });
}

export interface Evaluation {
  tasks: Task[];
  metrics: Record<string, number>;
  experiences: Experience[];
}

/** Each eval taskset with its own samples per task; its eval/<taskset>/* metrics, tasks and experiences, together. */
export async function evaluateTasksets(
  runner: WorkflowRunner,
  settings: EvaluationSettings,
  step: number,
  signal?: AbortSignal,
): Promise<Evaluation> {
  const out: Evaluation = { tasks: [], metrics: {}, experiences: [] };
  for (const [i, config] of settings.evalTasksets.entries()) {
    const { tasks } = await loadTaskset({ ...config, isEval: true });
    const result = await runner.evaluate(tasks, {
      step,
      repeatTimes: settings.evalRepeatTimes[i] ?? 1,
      ...(signal ? { signal } : {}),
    });
    out.tasks.push(...tasks);
    out.experiences.push(...result.experiences);
    for (const [k, v] of Object.entries(result.metrics)) if (k.startsWith('eval/')) out.metrics[k] = v;
  }
  return out;
}

/**
 * The eval metrics a person reads in the log, per taskset: mean@n (n = samples per task; with one greedy sample, the
 * accuracy) and pass@n when n > 1 — `eval mean@1 0.420 | eval_sampled mean@8 0.385, pass@8 0.702`. The other
 * statistics (best@k, worst@k, pass@k for smaller k: eval-metrics.ts) stay in metrics.jsonl; a metric of another
 * form is shown as it is.
 */
export function formatEvalMetrics(metrics: Readonly<Record<string, number>>): string {
  const tasksets = new Map<string, Map<string, number>>();
  const other: Record<string, number> = {};
  for (const [key, value] of Object.entries(metrics)) {
    const match = /^eval\/(.+)\/((?:mean|best|worst|pass)@(\d+))$/.exec(key);
    if (!match) {
      other[key] = value;
      continue;
    }
    const [, taskset, statistic] = match as unknown as [string, string, string];
    if (!tasksets.has(taskset)) tasksets.set(taskset, new Map());
    tasksets.get(taskset)?.set(statistic, value);
  }
  const parts = [...tasksets].map(([taskset, stats]) => {
    const n = Math.max(...[...stats.keys()].filter((k) => k.startsWith('mean@')).map((k) => Number(k.slice(5))), 1);
    const shown = [`mean@${n}`, ...(n > 1 ? [`pass@${n}`] : [])].filter((k) => stats.has(k));
    return `${taskset} ${shown.map((k) => `${k} ${(stats.get(k) as number).toFixed(3)}`).join(', ')}`;
  });
  const rest = formatMetrics(other);
  return [...parts, ...(rest ? [rest] : [])].join(' | ');
}

/** One line of metrics for the log: `eval/x/accuracy 0.420, ...`. */
export function formatMetrics(metrics: Record<string, number>): string {
  return Object.entries(metrics)
    .map(([k, v]) => `${k} ${v.toFixed(3)}`)
    .join(', ');
}

/** A few eval answers per eval step (the report shows them before and after training). */
export function writeEvalSamples(dir: string, step: number, evaluation: Evaluation, limit = 12): void {
  const byId = new Map(evaluation.tasks.map((t) => [t.id, t]));
  const seen = new Set<string>();
  const lines: string[] = [];
  for (const e of evaluation.experiences) {
    const taskId = e.info.taskId ?? '';
    if (seen.has(taskId) || lines.length >= limit) continue;
    seen.add(taskId);
    const task = byId.get(taskId);
    lines.push(
      JSON.stringify({
        step,
        taskset: task?.taskset ?? '',
        taskId,
        prompt: task?.prompt ?? '',
        response: e.responseText ?? '',
        reference: task?.response ?? '',
        reward: e.reward ?? 0,
      }),
    );
  }
  if (lines.length) appendFileSync(join(dir, 'eval_samples.jsonl'), `${lines.join('\n')}\n`);
}
