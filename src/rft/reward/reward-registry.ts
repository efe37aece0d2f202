// The reward-function registry (Trinity-RFT's REWARD_FUNCTIONS), created empty, and its class. Each built-in's file
// registers its modules at its bottom (`REWARD_FUNCTIONS.registerModule(mathReward)`), and ./registry.ts imports those
// files in registration order: import REWARD_FUNCTIONS from ./registry.ts (or the package), where every built-in is
// registered, not from here.
import { resolveArgs } from '../../util/module-args.js';
import { Registry } from '../../util/registry.js';
import type { AuxiliaryModels } from '../auxiliary/types.js';
import type { GroupRewardModule, RewardModule } from './module.js';
import type { AnyRewardFn, GroupRewardFn } from './types.js';

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
  readonly #modelChecks = new Map<string, (args: Readonly<Record<string, unknown>>, models: AuxiliaryModels) => void>();

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
   * Checks a registered module's options against the run's started auxiliary models (its checkModels: a judge's
   * fixed prompt against the judge's context); throws the error naming what cannot work. Others are not checked.
   */
  checkModels(name: string, args: Readonly<Record<string, unknown>>, models: AuxiliaryModels): void {
    this.#modelChecks.get(name)?.(args, models);
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
    if (module.checkModels !== undefined)
      this.#modelChecks.set(module.name, (args, models) => module.checkModels?.(options(args), models, where));
    return this;
  }
}

/** The reward functions by name: the built-ins register here (see the header). */
export const REWARD_FUNCTIONS = new RewardRegistry();
