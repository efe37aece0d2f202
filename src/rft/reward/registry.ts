// Reward functions by name (Trinity-RFT's REWARD_FUNCTIONS registry) or by module path (`path/to/file.ts#name`: a
// function `(input: { response, task, args, auxiliaryModels?, signal? }) => number | { reward, metrics }`, possibly
// async, or a group reward `{ kind: 'group', scoreGroup({ responses, task, args, ... }) }`, see ./types.ts).
//
//   const rewardFn = await REWARD_FUNCTIONS.resolve(task.rewardFn ?? 'math_reward');
//   const scored = await scoreResponses(rewardFn, { responses, task, args: task.rewardFnArgs ?? {}, auxiliaryModels });
//   // scored[i] = { reward, metrics } of responses[i], whichever kind rewardFn is
//
// The built-ins, in registration order (REWARD_FUNCTIONS.names()): each file registers its modules at its bottom, so a
// new reward function is one file plus one line here. Import the built-ins' files through this list or ./index.ts
// (which imports it first): a file imported before this list would register first and reorder the names.
import './builtin.js'; // accuracy_reward, format_reward, math_reward, math_boxed_reward
import './llm-judge.js'; // rubric_judge_reward, ruler_reward
import './reward-model.js'; // rm_yes_no_reward
import { type AnyRewardFn, isGroupReward, type RewardContext, type RewardOutput } from './types.js';

export { REWARD_FUNCTIONS, RewardRegistry } from './reward-registry.js';

export interface ScoredResponse {
  reward: number;
  metrics: Record<string, number>;
}

/** A reward function's output checked: a finite reward, finite metrics. */
function checkedOutput(output: RewardOutput | undefined, name: string, taskId: string): ScoredResponse {
  const { reward, metrics = {} } = typeof output === 'number' ? { reward: output } : (output ?? { reward: Number.NaN });
  if (typeof reward !== 'number' || !Number.isFinite(reward))
    throw new Error(`${name} returned reward ${String(reward)} for task ${taskId}; expected a finite number`);
  for (const [key, value] of Object.entries(metrics)) {
    if (typeof value !== 'number' || !Number.isFinite(value))
      throw new Error(`${name} returned metric ${key} = ${String(value)} for task ${taskId}; expected a finite number`);
  }
  return { reward, metrics };
}

/** Runs a per-response reward function on one response and checks what it returned. */
export async function scoreResponse(
  fn: AnyRewardFn,
  input: RewardContext & { response: string },
  name = (typeof fn === 'function' && fn.name) || 'reward function',
): Promise<ScoredResponse> {
  if (isGroupReward(fn))
    throw new Error(`${name} scores a whole group of responses at once; call scoreResponses with all of a task's responses`);
  return checkedOutput(await fn(input), name, input.task.id);
}

/**
 * Scores all responses of one task: a group reward in one call (its result must have one entry per response), a
 * per-response reward on each response concurrently (judges batch them). Entry i belongs to responses[i].
 */
export async function scoreResponses(
  fn: AnyRewardFn,
  input: RewardContext & { responses: readonly string[] },
  name = (typeof fn === 'function' && fn.name) || 'reward function',
): Promise<ScoredResponse[]> {
  const { responses, ...context } = input;
  if (!isGroupReward(fn)) return Promise.all(responses.map((response) => scoreResponse(fn, { ...context, response }, name)));
  if (responses.length === 0) return [];
  const outputs: unknown = await fn.scoreGroup(input);
  if (!Array.isArray(outputs) || outputs.length !== responses.length) {
    const got = Array.isArray(outputs) ? `${outputs.length} rewards` : `a ${typeof outputs}`;
    throw new Error(
      `${name} returned ${got} for the ${responses.length} responses of task ${input.task.id}; expected one per response`,
    );
  }
  return outputs.map((output: RewardOutput) => checkedOutput(output, name, input.task.id));
}
