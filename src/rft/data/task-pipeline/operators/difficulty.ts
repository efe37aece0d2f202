// difficulty_scorer: samples the current model `repeat_times` (k) times per task, through the same workflow runner,
// workflows, rewards and engine the stage's explorer uses, and writes the task's pass rate into its row:
//
//   pass_rate = (1/k') Σ_j [ accuracy_j ≥ pass_threshold ]        (accuracy_j: the run's accuracy metric, else its
//                                                                   reward; k': the runs that succeeded, ≤ k)
//
// under PASS_RATE_FIELD ("pass_rate"; `field` renames it: Trinity's BOTS example names one column per model,
// `qwen2.5_7b_pass_rate`). data_selector difficulty_based reads it as the prior pass rate and offline_easy2hard
// sorts by it (descending: easy first), both through `feature_keys: [pass_rate]`. Rows outside
// [min_pass_rate, max_pass_rate] are dropped (e.g. min 0.01 and max 0.99 drop what is always or never solved).
// A task whose every run failed (workflow errors, timeouts) gets no score: dropped and counted (on_unscored: drop),
// or the pipeline fails naming it (error).
import { rowToTask } from '../../../buffer/index.js';
import type { Task } from '../../../task.js';
import { TASK_OPERATORS } from '../registry.js';
import type { TaskOperatorModule, TaskRow } from '../types.js';

/** The row field the difficulty scorer writes a task's pass rate to (its default; `field` may rename it). */
export const PASS_RATE_FIELD = 'pass_rate';

export interface DifficultyScorerOptions {
  repeatTimes: number;
  field: string;
  passThreshold: number;
  minPassRate: number;
  maxPassRate: number;
  onUnscored: string;
}

export const difficultyScorer: TaskOperatorModule<DifficultyScorerOptions> = {
  description: 'samples the current model repeat_times times per task and records its pass rate',
  usesModel: true,
  defaults: { repeatTimes: 8, field: PASS_RATE_FIELD, passThreshold: 1, minPassRate: 0, maxPassRate: 1, onUnscored: 'drop' },
  async run(rows, o, context) {
    const where = context.name;
    if (!Number.isInteger(o.repeatTimes) || o.repeatTimes < 1 || o.repeatTimes > 1024)
      throw new Error(`${where}: repeat_times must be an integer in [1, 1024], got ${o.repeatTimes}`);
    if (!(o.minPassRate >= 0 && o.minPassRate <= o.maxPassRate && o.maxPassRate <= 1))
      throw new Error(`${where}: need 0 <= min_pass_rate <= max_pass_rate <= 1`);
    if (o.onUnscored !== 'drop' && o.onUnscored !== 'error')
      throw new Error(`${where}: on_unscored must be 'drop' or 'error', got '${o.onUnscored}'`);
    if (o.field === '') throw new Error(`${where}: field must name the column the pass rate goes to`);
    // the rows as the stage will read them (its format keys, workflow and reward); ids by position, so that rows
    // whose own ids repeat are still told apart
    // (feature columns are not asked for: the pass rate is one, and it is being written)
    const { featureKeys: _, ...format } = context.taskset.format ?? {};
    const taskset = { ...context.taskset, format };
    const tasks: Task[] = rows.map((row, i) => ({
      ...rowToTask(taskset, i, row, `${where}: row ${i}`),
      id: `task_pipeline:${i}`,
    }));
    const sampler = await context.model();
    const passRates = new Array<number | null>(rows.length).fill(null);
    // a chunk of tasks at a time, so that progress shows while a large taskset is sampled
    const chunk = Math.max(1, context.numProcess);
    for (let start = 0; start < tasks.length; start += chunk) {
      context.signal?.throwIfAborted();
      const part = tasks.slice(start, start + chunk);
      const runs = await sampler.sample(part, o.repeatTimes, context.signal);
      part.forEach((task, j) => {
        const outcomes = runs.get(task.id) ?? [];
        context.count('runs', outcomes.length);
        if (outcomes.length === 0) return;
        const passed = outcomes.filter((r) => (r.accuracy ?? r.reward) >= o.passThreshold).length;
        passRates[start + j] = passed / outcomes.length;
      });
      context.progress(Math.min(start + chunk, tasks.length), tasks.length);
    }
    const out: TaskRow[] = [];
    rows.forEach((row, i) => {
      const passRate = passRates[i];
      if (passRate === null || passRate === undefined) {
        if (o.onUnscored === 'error')
          throw new Error(
            `${where}: row ${i}: every one of its ${o.repeatTimes} runs failed (see the log), so it has no pass rate`,
          );
        context.count('unscored');
        return;
      }
      if (passRate < o.minPassRate || passRate > o.maxPassRate) {
        context.count('out_of_range');
        return;
      }
      out.push({ ...row, [o.field]: passRate });
    });
    return out;
  },
};

TASK_OPERATORS.register('difficulty_scorer', difficultyScorer, difficultyScorer.description);
