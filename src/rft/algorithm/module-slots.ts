// The module slots of the `algorithm:` section (sample_strategy, advantage_fn, policy_loss_fn, kl_penalty_fn,
// kl_loss_fn, entropy_loss_fn): each slot's registry, and `resolveSlot`, which turns one slot's YAML keys
// (`<slot>` and `<slot>_args`) into a module with every argument filled in. resolveAlgorithm (./presets.ts) resolves
// the six slots through it. Argument checks report every bad argument of a slot at once, each with its key path
// (`algorithm.policy_loss_fn_args.mu: ...`), so that `trinity config check` lists them all in one run.
import { ADVANTAGE_FN } from './advantage/index.js';
import { ENTROPY_LOSS_DEFAULTS, ENTROPY_LOSS_FNS } from './entropy.js';
import { KL_DEFAULTS, KL_ESTIMATORS } from './kl.js';
import { POLICY_LOSS_FN } from './policy-loss/index.js';
import { camelToSnake, didYouMean, resolveArgs, snakeToCamel } from './registry.js';
import { SAMPLE_STRATEGY } from './sample-strategy.js';

/** A module by name with the arguments that differ from its own defaults (snake_case, as in YAML). */
export interface ModuleChoice {
  readonly name: string;
  readonly args?: Readonly<Record<string, unknown>>;
}

/** A module by name with every argument resolved (snake_case keys, defaults filled in). */
export interface ResolvedModule {
  readonly name: string;
  readonly args: Readonly<Record<string, unknown>>;
}

export type Slot = 'sample_strategy' | 'advantage_fn' | 'policy_loss_fn' | 'kl_penalty_fn' | 'kl_loss_fn' | 'entropy_loss_fn';

/** Each slot's module names and each module's defaults (camelCase). */
const SLOTS: Record<Slot, { names: () => readonly string[]; defaults: (name: string) => Readonly<object> }> = {
  sample_strategy: { names: () => SAMPLE_STRATEGY.names(), defaults: (n) => SAMPLE_STRATEGY.get(n).defaults },
  advantage_fn: { names: () => ADVANTAGE_FN.names(), defaults: (n) => ADVANTAGE_FN.get(n).defaults },
  policy_loss_fn: { names: () => POLICY_LOSS_FN.names(), defaults: (n) => POLICY_LOSS_FN.get(n).defaults },
  kl_penalty_fn: { names: () => KL_ESTIMATORS, defaults: () => KL_DEFAULTS },
  kl_loss_fn: { names: () => KL_ESTIMATORS, defaults: () => KL_DEFAULTS },
  entropy_loss_fn: { names: () => ENTROPY_LOSS_FNS, defaults: () => ENTROPY_LOSS_DEFAULTS },
};

export const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

const toSnake = (options: object): Record<string, unknown> =>
  Object.fromEntries(Object.entries(options).map(([k, v]) => [camelToSnake(k), v]));

/**
 * One Error for a list of problems (each message starts with its key path): the problem itself when there is one,
 * else an AggregateError whose `errors` are the problems and whose message lists them one a line.
 */
export function algorithmProblemsError(messages: readonly string[]): Error {
  if (messages.length === 1) return new Error(messages[0]);
  return new AggregateError(
    messages.map((m) => new Error(m)),
    messages.join('\n'),
  );
}

/** The problem messages an Error carries: an AggregateError's one per entry, else its message. */
export function algorithmProblemMessages(error: unknown): string[] {
  if (error instanceof AggregateError) return error.errors.map((e) => (e instanceof Error ? e.message : String(e)));
  return [error instanceof Error ? error.message : String(error)];
}

/**
 * One module slot of resolveAlgorithm: the module `config` names for `slot` (else the preset's `choice`), checked
 * against the slot's registry, with its arguments: the module's defaults, then the preset's arguments (while the
 * preset's module is chosen), then `injected` ones the module takes and `config` does not set, then `config`'s.
 * null for an advantage_fn of none. Throws every bad argument at once (algorithmProblemsError).
 */
export function resolveSlot(
  config: Record<string, unknown>,
  algorithmType: string,
  slot: Slot,
  choice: ModuleChoice | null,
  injected: Record<string, unknown> = {},
): ResolvedModule | null {
  const nameValue = Object.hasOwn(config, slot) ? config[slot] : (choice?.name ?? null);
  const argsValue = config[`${slot}_args`];
  if (nameValue === null || nameValue === 'none' || nameValue === undefined) {
    if (slot === 'advantage_fn') {
      if (argsValue !== undefined && isPlainObject(argsValue) && Object.keys(argsValue).length > 0) {
        throw new Error(`algorithm.advantage_fn_args: given, but ${algorithmType} has no advantage_fn (set advantage_fn)`);
      }
      return null;
    }
  }
  if (typeof nameValue !== 'string')
    throw new Error(`algorithm.${slot}: expected a module name, got ${JSON.stringify(nameValue)}`);
  const names = SLOTS[slot].names();
  if (!names.includes(nameValue)) {
    throw new Error(
      `algorithm.${slot}: unknown ${slot} '${nameValue}'${didYouMean(nameValue, names)}; registered: ${names.join(', ')}`,
    );
  }
  if (argsValue !== undefined && argsValue !== null && !isPlainObject(argsValue)) {
    throw new Error(`algorithm.${slot}_args: expected a mapping of arguments, got ${JSON.stringify(argsValue)}`);
  }
  const given = argsValue ?? {};
  // the preset's arguments apply only while the preset's module is chosen
  const presetArgs = choice !== null && choice.name === nameValue ? (choice.args ?? {}) : {};
  const defaults = SLOTS[slot].defaults(nameValue);
  const extra = Object.fromEntries(Object.entries(injected).filter(([k]) => Object.hasOwn(defaults, k) && !hasArg(given, k)));
  const args = { ...presetArgs, ...extra, ...given };
  // each argument checked by itself, so that one bad argument does not hide the next
  const problems = Object.entries(args).flatMap(([key, value]) => {
    const problem = argumentProblem(slot, nameValue, defaults, key, value);
    return problem === null ? [] : [problem];
  });
  if (problems.length > 0) throw algorithmProblemsError(problems);
  return { name: nameValue, args: toSnake(resolveArgs(`algorithm.${slot}_args`, defaults, args)) };
}

/** What is wrong with argument `key` of module `name` in `slot` (key path first), or null when nothing is. */
function argumentProblem(slot: Slot, name: string, defaults: Readonly<object>, key: string, value: unknown): string | null {
  if (!Object.hasOwn(defaults, snakeToCamel(key))) {
    const expected = Object.keys(defaults).map(camelToSnake);
    return (
      `algorithm.${slot}_args.${key}: unknown argument of ${slot} '${name}'${didYouMean(key, expected)}; ` +
      `expected one of ${expected.join(', ') || '(none)'}`
    );
  }
  try {
    resolveArgs(`algorithm.${slot}_args`, defaults, { [key]: value });
    return null;
  } catch (error) {
    const message = (error as Error).message.replace(/^(\S+): argument '([^']+)'/, '$1.$2:');
    return `${message} (${slot} '${name}')`;
  }
}

function hasArg(args: Readonly<Record<string, unknown>>, camelName: string): boolean {
  return Object.hasOwn(args, camelName) || Object.hasOwn(args, camelToSnake(camelName));
}
