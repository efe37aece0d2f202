// What a reward function is: the contract between workflows (which call it) and reward code (built-in or a user's
// `path/to/file.ts#export`). It lives with the rewards so they depend on nothing of the workflow layer above them.
import type { AuxiliaryModels } from '../auxiliary/types.js';
import type { Task } from '../task.js';

/** A reward: a number, or a reward with named parts for metrics. */
export type RewardOutput = number | { reward: number; metrics?: Record<string, number> };

/** Scores a response against its task (task.response holds the reference answer). */
export type RewardFn = (input: {
  response: string;
  task: Task;
  args: Record<string, unknown>;
  /**
   * The run's auxiliary models (explorer.auxiliary_models: judges, reward models), when the caller has them: the
   * built-in workflows pass their WorkflowContext's. Their calls are metrics, never experiences.
   */
  auxiliaryModels?: AuxiliaryModels;
}) => RewardOutput | Promise<RewardOutput>;
