// A task: one row of a taskset (JSONL), with the fields workflows need pulled out by the taskset's format keys
// (Trinity-RFT's `format: {prompt_key, response_key, messages_key, system_prompt, reply_prefix, workflow_key,
// reward_fn_key, tools_key}`). The raw row stays available for custom workflows.
import type { ToolDefinition } from '../tokenizer/index.js';
import type { ChatTurn } from './experience.js';

export interface Task {
  /** Stable id: `<taskset>:<index>` unless the row names one; groups of responses are keyed by it. */
  id: string;
  /** The taskset it came from and its row index there. */
  taskset: string;
  index: number;
  /** The row as read. */
  raw: Record<string, unknown>;
  /** The prompt text (prompt_key), or the conversation so far (messages_key). */
  prompt?: string;
  messages?: ChatTurn[];
  /** The reference answer (response_key), for verifiers and SFT. */
  response?: string;
  systemPrompt?: string;
  replyPrefix?: string;
  /** The tools the model may call (tools_key), rendered by the chat template (OpenAI tool definitions). */
  tools?: ToolDefinition[];
  /** Workflow and reward function names (workflow_key / reward_fn_key, else the taskset's defaults). */
  workflow?: string;
  rewardFn?: string;
  /** Arguments from the taskset config (workflow_args, reward_fn_args, rollout_args). */
  workflowArgs?: Record<string, unknown>;
  rewardFnArgs?: Record<string, unknown>;
  rolloutArgs?: Record<string, unknown>;
  /** Numeric features for selectors (e.g. difficulty). */
  features?: Record<string, number>;
  /** True for eval tasksets. */
  isEval?: boolean;
}
