// `pass_rate_calculator` (Trinity-RFT's PassRateCalculator): the selector feedback of the step. Each task's pass rate
// is the mean reward of its responses as this operator sees them, p_t = mean_{o ∈ t} r(o); with it in the pipeline
// the task selectors (difficulty_based) learn from these rewards instead of every raw reward of the step, so its
// place decides what they see (after a reward_shaping_mapper: shaped rewards; after a filter: only kept groups).
// The experiences pass through unchanged.
import { rewardOf } from '../groups.js';
import { registerExperienceOperator } from '../registry.js';
import type { ExperienceOperatorModule } from '../types.js';

export type PassRateCalculatorOptions = Record<string, never>;

const NAME = 'pass_rate_calculator';

export const passRateCalculator: ExperienceOperatorModule<PassRateCalculatorOptions> = {
  description: 'per-task mean reward, fed to the task selectors (difficulty_based)',
  defaults: {},
  feedsSelectors: true,
  create: () => ({
    process: (experiences) => {
      const byTask = new Map<string, number[]>();
      for (const e of experiences) {
        const task = e.info.taskId;
        if (task === undefined) throw new Error(`experience operator '${NAME}': experience '${e.eid}' has no info.taskId`);
        let rewards = byTask.get(task);
        if (rewards === undefined) {
          rewards = [];
          byTask.set(task, rewards);
        }
        rewards.push(rewardOf(NAME, e));
      }
      const rates = [...byTask.values()].map((r) => r.reduce((a, b) => a + b, 0) / r.length);
      const metrics: Record<string, number> = { tasks: byTask.size };
      if (rates.length > 0) metrics['pass_rate/mean'] = rates.reduce((a, b) => a + b, 0) / rates.length;
      return { experiences: [...experiences], metrics, taskFeedback: byTask };
    },
  }),
};

registerExperienceOperator('pass_rate_calculator', passRateCalculator);
