// A named reward module: a reward with typed options, their defaults (which also give the YAML argument names and
// types, ../../util/module-args.ts) and a check of the values beyond their types. The registry turns one into a
// RewardFn or a GroupRewardFn (./reward-registry.ts registerModule), so built-ins and plug-ins are called the same way.
import type { AuxiliaryModels } from '../auxiliary/types.js';
import type { ResponseInput, ResponsesInput, RewardOutput } from './types.js';

interface ModuleBase<Options extends object> {
  readonly name: string;
  readonly description: string;
  readonly defaults: Readonly<Options>;
  /** Throws an error naming the argument when a value is unusable (a range, a template); `where` names the reward. */
  check?(options: Readonly<Options>, where: string): void;
  /**
   * Throws when the run's auxiliary models cannot serve these options on any task (a judge whose fixed prompt leaves
   * no room for its reply in its context), checked once when the run has started them (./registry.ts
   * checkRewardModels) instead of failing every call.
   */
  checkModels?(options: Readonly<Options>, models: AuxiliaryModels, where: string): void;
}

/** Scores one response. */
export interface RewardModule<Options extends object> extends ModuleBase<Options> {
  score(input: ResponseInput, options: Options): RewardOutput | Promise<RewardOutput>;
}

/** Scores all responses of one task in one call (one output per response, in order). */
export interface GroupRewardModule<Options extends object> extends ModuleBase<Options> {
  readonly kind: 'group';
  scoreGroup(input: ResponsesInput, options: Options): readonly RewardOutput[] | Promise<readonly RewardOutput[]>;
}
