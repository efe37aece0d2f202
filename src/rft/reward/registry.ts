// Reward functions by name (Trinity-RFT's REWARD_FUNCTIONS registry) or by module path (`path/to/file.ts#name`,
// a function `(input: { response, task, args }) => number | { reward, metrics }`, possibly async).
//
//   const rewardFn = await REWARD_FUNCTIONS.resolve(task.rewardFn ?? 'math_reward');
//   const { reward, metrics } = await scoreResponse(rewardFn, { response, task, args: task.rewardFnArgs ?? {} });
import { didYouMean, resolveArgs } from '../algorithm/registry.js';
import type { Task } from '../task.js';
import { isModulePath, loadModuleExport } from '../workflow/module-path.js';
import type { RewardFn } from '../workflow/types.js';
import { accuracyReward, formatReward, mathBoxedReward, mathReward, type RewardModule } from './builtin.js';

export class RewardRegistry {
  readonly #functions = new Map<string, { fn: RewardFn; description: string }>();
  readonly #loaded = new Map<string, Promise<RewardFn>>();

  /** Registers a module: its YAML arguments are checked against its defaults (unknown names, wrong types). */
  registerModule<Options extends object>(module: RewardModule<Options>): this {
    const where = `reward function '${module.name}'`;
    return this.register(
      module.name,
      ({ response, task, args }) => module.score({ response, task }, resolveArgs(where, module.defaults, args)),
      module.description,
    );
  }

  /** Registers a plain function (it receives the raw arguments). */
  register(name: string, fn: RewardFn, description = ''): this {
    if (this.#functions.has(name)) throw new Error(`reward function '${name}' is already registered`);
    this.#functions.set(name, { fn, description });
    return this;
  }

  has(name: string): boolean {
    return this.#functions.has(name);
  }

  names(): string[] {
    return [...this.#functions.keys()];
  }

  describe(name: string): string {
    return this.#functions.get(name)?.description ?? '';
  }

  /** A registered function by name; errors list the names and suggest the closest. */
  get(name: string): RewardFn {
    const entry = this.#functions.get(name);
    if (entry === undefined)
      throw new Error(
        `unknown reward function '${name}'${didYouMean(name, this.names())}; registered: ${this.names().join(', ')}`,
      );
    return entry.fn;
  }

  /** A registered name, or a module path (`file.ts#export`, relative to baseDir) imported once and cached. */
  resolve(spec: string, baseDir?: string): Promise<RewardFn> {
    if (this.#functions.has(spec) || !isModulePath(spec)) {
      try {
        return Promise.resolve(this.get(spec));
      } catch (error) {
        return Promise.reject(error);
      }
    }
    const key = `${baseDir ?? ''}\0${spec}`;
    let loaded = this.#loaded.get(key);
    if (loaded === undefined) {
      loaded = loadModuleExport(spec, 'reward function', baseDir).then((value) => {
        if (typeof value !== 'function')
          throw new Error(`reward function '${spec}': the export is a ${typeof value}, not a function`);
        return value as RewardFn;
      });
      loaded.catch(() => this.#loaded.delete(key)); // a fixed file loads on the next try
      this.#loaded.set(key, loaded);
    }
    return loaded;
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
