// Registries: algorithm modules selectable by name, as Trinity-RFT's `trinity/utils/registry.py` `Registry`.
// A module is data plus one pure function: its name, its default options (Trinity-RFT's `default_args()`, camelCased)
// and `run(input, options)`. YAML arguments arrive in Trinity-RFT's snake_case (`clip_range_low`); `create` checks
// them against the defaults (unknown names and wrong types are errors that name the module and the argument) and
// returns the function with its options bound. (Trinity-RFT also resolves dotted module paths; here `register`
// is the extension point until module paths are loaded by the config layer.)

export interface AlgorithmModule<Input, Options extends object, Result> {
  readonly name: string;
  /** One line: what it computes, and the paper. */
  readonly description: string;
  readonly defaults: Readonly<Options>;
  run(input: Input, options?: Partial<Options>): Result;
}

export class Registry<Input, Result> {
  readonly #modules = new Map<string, AlgorithmModule<Input, object, Result>>();

  constructor(readonly kind: string) {}

  register<Options extends object>(module: AlgorithmModule<Input, Options, Result>): this {
    if (this.#modules.has(module.name)) throw new Error(`${this.kind} '${module.name}' is already registered`);
    this.#modules.set(module.name, module as unknown as AlgorithmModule<Input, object, Result>);
    return this;
  }

  has(name: string): boolean {
    return this.#modules.has(name);
  }

  names(): string[] {
    return [...this.#modules.keys()];
  }

  get(name: string): AlgorithmModule<Input, object, Result> {
    const module = this.#modules.get(name);
    if (module === undefined) {
      throw new Error(`unknown ${this.kind} '${name}'; registered: ${this.names().join(', ')}`);
    }
    return module;
  }

  /** The module's function with options from snake_case (YAML) or camelCase arguments over its defaults. */
  create(name: string, args: Readonly<Record<string, unknown>> = {}): (input: Input) => Result {
    const module = this.get(name);
    const options = resolveArgs(`${this.kind} '${name}'`, module.defaults, args);
    return (input) => module.run(input, options);
  }
}

export const snakeToCamel = (key: string): string => key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
export const camelToSnake = (key: string): string => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** Defaults overridden by `args` (snake_case or camelCase keys), checked against the defaults' keys and types. */
export function resolveArgs<Options extends object>(
  where: string,
  defaults: Readonly<Options>,
  args: Readonly<Record<string, unknown>>,
): Options {
  const known = defaults as Readonly<Record<string, unknown>>;
  const out: Record<string, unknown> = { ...known };
  for (const [key, value] of Object.entries(args)) {
    const name = snakeToCamel(key);
    if (!Object.hasOwn(known, name)) {
      const expected = Object.keys(known).map(camelToSnake).join(', ') || '(none)';
      throw new Error(`${where}: unknown argument '${key}'; expected one of ${expected}`);
    }
    const fallback = known[name];
    const ok =
      fallback === null || fallback === undefined
        ? value === null || typeof value === 'number' || typeof value === 'string'
        : typeof value === typeof fallback || (value === null && typeof fallback === 'number');
    if (!ok) {
      throw new Error(`${where}: argument '${key}' must be a ${typeof fallback}, got ${JSON.stringify(value)}`);
    }
    out[name] = value;
  }
  return out as Options;
}
