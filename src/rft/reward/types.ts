// What a reward function is: the contract between workflows (which call it) and reward code (built-in or a user's
// `path/to/file.ts#export`). It lives with the rewards so they depend on nothing of the workflow layer above them.
//
// Two kinds:
//   RewardFn       a function: one response → one reward (verifiers, pointwise judges, reward models)
//   GroupRewardFn  { kind: 'group', scoreGroup }: all responses of one task → one reward each, in one call (RULER:
//                  a judge ranks the group relative to itself, which is what group advantages (GRPO) need)
// A workflow calls either through scoreResponses() (./registry.ts), so it never checks which kind it holds.
import type { AuxiliaryModels } from '../auxiliary/types.js';
import type { ChatMessage } from '../../tokenizer/index.js';
import type { Task } from '../task.js';

/** A reward: a number, or a reward with named parts for metrics. */
export type RewardOutput = number | { reward: number; metrics?: Record<string, number> };

/** What a reward function is given besides the response(s). */
export interface RewardContext {
  task: Task;
  /** The task's reward_fn_args (snake_case keys as written in YAML). */
  args: Record<string, unknown>;
  /**
   * The run's auxiliary models (explorer.auxiliary_models: judges, reward models), when the caller has them: the
   * built-in workflows pass their WorkflowContext's. Their calls are metrics, never experiences.
   */
  auxiliaryModels?: AuxiliaryModels;
  /**
   * The turns the response answers, when the workflow has them: a single-turn workflow's prompt messages (system
   * first), an environment episode's turns before its last reply (which is then the response). A judge of the whole
   * trajectory reads them (trajectory_accuracy_grader_reward).
   */
  conversation?: readonly ChatMessage[];
  /** Aborted when the task times out or the run stops: pass it on to judge calls. */
  signal?: AbortSignal;
}

/**
 * One response to score. responseTokens: how many tokens the model generated for it (its completion ids, a final
 * stop token included; a reply prefix is not counted), when the caller generated it: DAPO's overlong penalty reads it.
 */
export type ResponseInput = RewardContext & { response: string; responseTokens?: number };

/** All responses of one task; responseTokens[i] belongs to responses[i] (see ResponseInput). */
export type ResponsesInput = RewardContext & { responses: readonly string[]; responseTokens?: readonly number[] };

/** Scores a response against its task (task.response holds the reference answer). */
export type RewardFn = (input: ResponseInput) => RewardOutput | Promise<RewardOutput>;

/** Scores all responses of one task in one call: the result has one entry per response, in order. */
export interface GroupRewardFn {
  readonly kind: 'group';
  scoreGroup(input: ResponsesInput): readonly RewardOutput[] | Promise<readonly RewardOutput[]>;
}

/** Either kind, as the reward registry holds them. */
export type AnyRewardFn = RewardFn | GroupRewardFn;

export const isGroupReward = (fn: AnyRewardFn): fn is GroupRewardFn => typeof fn === 'object' && fn.kind === 'group';
