// The Workflow API: what user code implements to produce experiences from a task with the rollout model.
//
//   const myWorkflow: Workflow = async ({ task, model, repeatTimes }) => {
//     const { choices } = await model.chat([{ role: 'user', content: task.prompt ?? '' }], { n: repeatTimes });
//     return choices.map((c) => model.toExperience(c, { reward: score(c.message.content, task.response) }));
//   };
import type { ChatOptions, ChatResult, GenerateRequest, GenerateResult } from '../../engine/index.js';
import type { ChatMessage, Tokenizer } from '../../tokenizer/index.js';
import type { Experience } from '../experience.js';
import type { Task } from '../task.js';

/** The rollout model as a workflow sees it: exact token ids in and out, whatever engine serves it. */
export interface ModelHandle {
  readonly tokenizer: Tokenizer | null;
  /** Weights version currently served (bumped by the synchronizer). */
  readonly modelVersion: number;
  generate(request: GenerateRequest): Promise<GenerateResult>;
  chat(messages: readonly ChatMessage[], options?: ChatOptions): Promise<ChatResult>;
}

export interface WorkflowContext {
  task: Task;
  model: ModelHandle;
  /** Responses wanted for this task (algorithm.repeat_times); a workflow may run once with n = repeatTimes. */
  repeatTimes: number;
  /** Seed for this task's sampling (reproducible runs). */
  seed: number;
  /** Aborted when the task times out or the run stops: pass it on to model calls. */
  signal: AbortSignal;
  /** True when running an eval taskset (greedy or eval rollout args, no training). */
  isEval: boolean;
}

/** Runs a task; returns its experiences (info.taskId/runId/modelVersion are stamped by the runner if missing). */
export type Workflow = (context: WorkflowContext) => Promise<Experience[]>;

/** Scores a response: a number (the reward), or a reward with named parts for metrics. */
export type RewardFn = (input: {
  response: string;
  task: Task;
  args: Record<string, unknown>;
}) =>
  | number
  | { reward: number; metrics?: Record<string, number> }
  | Promise<number | { reward: number; metrics?: Record<string, number> }>;
