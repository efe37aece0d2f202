// Reward functions by name (Trinity-RFT's REWARD_FUNCTIONS registry) or by module path (`path/to/file.ts#name`: a
// function `(input: { response, task, args, responseTokens?, auxiliaryModels?, signal? }) => number | { reward,
// metrics }`, possibly async, or a group reward `{ kind: 'group', scoreGroup({ responses, task, args, ... }) }`, see
// ./types.ts).
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
import './countdown.js'; // countdown_reward
import './dapo.js'; // math_dapo_reward
import './rlcr.js'; // rlcr_reward
import './bots.js'; // bots_math_boxed_reward
import './trajectory-accuracy.js'; // trajectory_accuracy_grader_reward (OpenJudge's trajectory accuracy grader)
import './trinity-names.js'; // Trinity's reward names that are refused here, with why
import type { AuxiliaryModels } from '../auxiliary/types.js';
import { REWARD_FUNCTIONS } from './reward-registry.js';
import { type AnyRewardFn, isGroupReward, type ResponseInput, type ResponsesInput } from './types.js';

export { REWARD_FUNCTIONS, RewardRegistry } from './reward-registry.js';

/** What checkRewardModels reads of a taskset: its reward function and arguments. */
export interface TasksetReward {
  name: string;
  defaultRewardFnType?: string;
  rewardFnArgs?: Record<string, unknown>;
}

/**
 * When a run has started its auxiliary models: each taskset's reward function (its default_reward_fn_type with its
 * reward_fn_args) checked against them (RewardRegistry.checkModels: a judge whose fixed prompt cannot fit its context
 * with room for its reply), so the run stops now with one error naming every taskset that cannot work, instead of
 * failing every call. A reward a row names for itself (format.reward_fn_key) is checked by its calls.
 */
export function checkRewardModels(
  tasksets: readonly TasksetReward[],
  models: AuxiliaryModels,
  registry = REWARD_FUNCTIONS,
): void {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const { name, defaultRewardFnType, rewardFnArgs } of tasksets) {
    if (defaultRewardFnType === undefined) continue;
    const key = JSON.stringify([defaultRewardFnType, rewardFnArgs ?? {}]);
    if (seen.has(key)) continue; // the same reward on several tasksets: said once
    seen.add(key);
    try {
      registry.checkModels(defaultRewardFnType, rewardFnArgs ?? {}, models);
    } catch (error) {
      problems.push(`taskset '${name}': ${(error as Error).message}`);
    }
  }
  if (problems.length > 0) throw new Error(problems.join('\n'));
}

export interface ScoredResponse {
  reward: number;
  metrics: Record<string, number>;
}

/** The longest excerpt of a reward function's output that an error quotes. */
const QUOTED_OUTPUT_CHARS = 200;

/**
 * What a reward function returned, as an error quotes it: JSON, with NaN, ±Infinity, undefined and bigints written as
 * JavaScript would (JSON would print null or drop them), cut to QUOTED_OUTPUT_CHARS so a function that returned a
 * whole document still gives a readable error.
 */
function quoteOutput(output: unknown): string {
  const mark = '\u0000'; // wraps the stand-ins, which are unquoted after stringify
  const replacer = (_key: string, value: unknown) =>
    value === undefined || typeof value === 'bigint' || (typeof value === 'number' && !Number.isFinite(value))
      ? `${mark}${String(value)}${typeof value === 'bigint' ? 'n' : ''}${mark}`
      : value;
  let text: string;
  try {
    text = (JSON.stringify(output, replacer) ?? String(output)).replace(/"\\u0000(.*?)\\u0000"/g, '$1');
  } catch {
    text = String(output); // a cycle
  }
  return text.length <= QUOTED_OUTPUT_CHARS ? text : `${text.slice(0, QUOTED_OUTPUT_CHARS)}… (${text.length} chars)`;
}

/**
 * A reward function's output checked: a finite reward, finite metrics. The error quotes what the function returned
 * (not the reward read out of it), so `{ score: 1 }`, `'0.5'` and `undefined` are told apart.
 */
function checkedOutput(output: unknown, name: string, taskId: string): ScoredResponse {
  const fail = (what: string): never => {
    throw new Error(`${name} returned ${quoteOutput(output)} for task ${taskId}: ${what}`);
  };
  const finite = (value: unknown): value is number => typeof value === 'number' && Number.isFinite(value);
  if (typeof output === 'number') return finite(output) ? { reward: output, metrics: {} } : fail('not a finite number');
  if (typeof output !== 'object' || output === null || Array.isArray(output))
    return fail('expected a finite number or { reward, metrics? }');
  const { reward, metrics = {} } = output as { reward?: unknown; metrics?: unknown };
  if (!finite(reward)) return fail(`reward ${quoteOutput(reward)} is not a finite number`);
  if (typeof metrics !== 'object' || metrics === null || Array.isArray(metrics))
    return fail('metrics must be an object of finite numbers');
  for (const [key, value] of Object.entries(metrics)) {
    if (!finite(value)) fail(`metric ${key} = ${quoteOutput(value)} is not a finite number`);
  }
  return { reward, metrics: metrics as Record<string, number> };
}

/** Runs a per-response reward function on one response and checks what it returned. */
export async function scoreResponse(
  fn: AnyRewardFn,
  input: ResponseInput,
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
  input: ResponsesInput,
  name = (typeof fn === 'function' && fn.name) || 'reward function',
): Promise<ScoredResponse[]> {
  const { responses, responseTokens, ...context } = input;
  if (!isGroupReward(fn)) {
    return Promise.all(
      responses.map((response, i) => {
        const tokens = responseTokens?.[i];
        return scoreResponse(fn, { ...context, response, ...(tokens !== undefined ? { responseTokens: tokens } : {}) }, name);
      }),
    );
  }
  if (responses.length === 0) return [];
  const outputs: unknown = await fn.scoreGroup(input);
  if (!Array.isArray(outputs) || outputs.length !== responses.length) {
    const got = Array.isArray(outputs) ? `${outputs.length} rewards` : `a ${typeof outputs}`;
    throw new Error(
      `${name} returned ${got} for the ${responses.length} responses of task ${input.task.id}; expected one per response`,
    );
  }
  return outputs.map((output: unknown) => checkedOutput(output, name, input.task.id));
}
