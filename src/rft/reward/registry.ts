// Reward functions by name (Trinity-RFT's REWARD_FUNCTIONS registry) or by module path (`path/to/file.ts#name`,
// a function `(input: { response, task, args }) => number | { reward, metrics }`, possibly async).
//
//   const rewardFn = await REWARD_FUNCTIONS.resolve(task.rewardFn ?? 'math_reward');
//   const { reward, metrics } = await scoreResponse(rewardFn, { response, task, args: task.rewardFnArgs ?? {} });
import { resolveArgs } from '../../util/module-args.js';
import { Registry } from '../../util/registry.js';
import type { Task } from '../task.js';
import { accuracyReward, formatReward, mathBoxedReward, mathReward, type RewardModule } from './builtin.js';
import type { RewardFn } from './types.js';

/** The generic registry (src/util/registry.ts) of reward functions; a module path's export must be a function. */
export class RewardRegistry extends Registry<RewardFn> {
  constructor() {
    super('reward function', {
      fromExport: (value, spec) => {
        if (typeof value !== 'function')
          throw new Error(`reward function '${spec}': the export is a ${typeof value}, not a function`);
        return value as RewardFn;
      },
    });
  }

  /** Registers a module: its YAML arguments are checked against its defaults (unknown names, wrong types). */
  registerModule<Options extends object>(module: RewardModule<Options>): this {
    const where = `reward function '${module.name}'`;
    return this.register(
      module.name,
      ({ response, task, args }) => module.score({ response, task }, resolveArgs(where, module.defaults, args)),
      module.description,
    );
  }
}

/** The built-in reward functions; register your own here or name them by module path. */
export const REWARD_FUNCTIONS = new RewardRegistry()
  .registerModule(accuracyReward)
  .registerModule(formatReward)
  .registerModule(mathReward)
  .registerModule(mathBoxedReward);

/** Runs a reward function and checks what it returned: a finite reward, finite metrics. */
export async function scoreResponse(
  fn: RewardFn,
  input: { response: string; task: Task; args: Record<string, unknown> },
  name = fn.name || 'reward function',
): Promise<{ reward: number; metrics: Record<string, number> }> {
  const output = await fn(input);
  const { reward, metrics = {} } = typeof output === 'number' ? { reward: output } : (output ?? { reward: Number.NaN });
  if (typeof reward !== 'number' || !Number.isFinite(reward))
    throw new Error(`${name} returned reward ${String(reward)} for task ${input.task.id}; expected a finite number`);
  for (const [key, value] of Object.entries(metrics)) {
    if (typeof value !== 'number' || !Number.isFinite(value))
      throw new Error(`${name} returned metric ${key} = ${String(value)} for task ${input.task.id}; expected a finite number`);
  }
  return { reward, metrics };
}
