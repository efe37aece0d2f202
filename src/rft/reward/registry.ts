// Reward functions by name (Trinity-RFT's REWARD_FUNCTIONS registry) or by module path (`path/to/file.ts#name`: a
// function `(input: { response, task, args, auxiliaryModels?, signal? }) => number | { reward, metrics }`, possibly
// async, or a group reward `{ kind: 'group', scoreGroup({ responses, task, args, ... }) }`, see ./types.ts).
//
//   const rewardFn = await REWARD_FUNCTIONS.resolve(task.rewardFn ?? 'math_reward');
//   const scored = await scoreResponses(rewardFn, { responses, task, args: task.rewardFnArgs ?? {}, auxiliaryModels });
//   // scored[i] = { reward, metrics } of responses[i], whichever kind rewardFn is
import { resolveArgs } from '../../util/module-args.js';
import { Registry } from '../../util/registry.js';
import { accuracyReward, formatReward, mathBoxedReward, mathReward } from './builtin.js';
import { rubricJudgeReward, rulerReward } from './llm-judge.js';
import type { GroupRewardModule, RewardModule } from './module.js';
import { rmYesNoReward } from './reward-model.js';
import { type AnyRewardFn, type GroupRewardFn, isGroupReward, type RewardContext, type RewardOutput } from './types.js';

/** A module export as a reward: a function, or a group reward object. */
function rewardOfExport(value: unknown, spec: string): AnyRewardFn {
  if (typeof value === 'function') return value as AnyRewardFn;
  if (typeof value === 'object' && value !== null && (value as { kind?: unknown }).kind === 'group') {
    if (typeof (value as { scoreGroup?: unknown }).scoreGroup !== 'function')
      throw new Error(`reward function '${spec}': a group reward (kind: 'group') needs a scoreGroup function`);
    return value as GroupRewardFn;
  }
  const what = value === null ? 'null' : typeof value;
  throw new Error(
    `reward function '${spec}': the export is a ${what}, not a function or a group reward ({ kind: 'group', scoreGroup })`,
  );
}

/** The generic registry (src/util/registry.ts) of reward functions, per response or per group. */
export class RewardRegistry extends Registry<AnyRewardFn> {
  readonly #argChecks = new Map<string, (args: Readonly<Record<string, unknown>>) => void>();

  constructor() {
    super('reward function', { fromExport: rewardOfExport });
  }

  /**
   * Checks a registered module's reward_fn_args (names, types, values) without scoring anything, so a run can refuse
   * bad arguments before its first task; throws the error a call would. Rewards without declared arguments (plain
   * functions, module paths) check their own when called.
   */
  checkArgs(name: string, args: Readonly<Record<string, unknown>>): void {
    this.#argChecks.get(name)?.(args);
  }

  /**
   * Registers a module: its YAML arguments are checked against its defaults (unknown names, wrong types) and by its
   * own check (ranges, templates) on every call, so a bad argument fails the first task that uses it, by name.
   */
  registerModule<Options extends object>(module: RewardModule<Options> | GroupRewardModule<Options>): this {
    const where = `reward function '${module.name}'`;
    const options = (args: Readonly<Record<string, unknown>>): Options => {
      const resolved = resolveArgs(where, module.defaults, args);
      module.check?.(resolved, where);
      return resolved;
    };
    if ('scoreGroup' in module) {
      const group: GroupRewardFn = { kind: 'group', scoreGroup: (input) => module.scoreGroup(input, options(input.args)) };
      this.register(module.name, group, module.description);
    } else {
      this.register(module.name, (input) => module.score(input, options(input.args)), module.description);
    }
    this.#argChecks.set(module.name, options);
    return this;
  }
}

/** The built-in reward functions; register your own here or name them by module path. */
export const REWARD_FUNCTIONS = new RewardRegistry()
  .registerModule(accuracyReward)
  .registerModule(formatReward)
  .registerModule(mathReward)
  .registerModule(mathBoxedReward)
  .registerModule(rubricJudgeReward)
  .registerModule(rulerReward)
  .registerModule(rmYesNoReward);

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
