// Algorithm modules selectable by name (advantage_fn, policy_loss_fn, sample_strategy), as Trinity-RFT's
// `trinity/utils/registry.py` `Registry`. A module is data plus one pure function: its name, its default options
// (Trinity-RFT's `default_args()`, camelCased) and `run(input, options)`. YAML arguments arrive in Trinity-RFT's
// snake_case (`clip_range_low`); `create` checks them against the defaults (unknown names and wrong types are errors
// that name the module and the argument) and returns the function with its options bound. Modules from user code
// (`algorithm.<slot>: path/to/file.ts#export`) are registered under their spec by ./plugins.ts.
import { resolveArgs } from '../../util/module-args.js';
import { Registry } from '../../util/registry.js';

export interface AlgorithmModule<Input, Options extends object, Result> {
  readonly name: string;
  /** One line: what it computes, and the paper. */
  readonly description: string;
  readonly defaults: Readonly<Options>;
  run(input: Input, options?: Partial<Options>): Result;
}

/** The generic registry (src/util/registry.ts) of modules that carry their own name, plus `create`. */
export class AlgorithmRegistry<Input, Result> {
  readonly #modules: Registry<AlgorithmModule<Input, object, Result>>;

  constructor(readonly kind: string) {
    this.#modules = new Registry(kind);
  }

  /**
   * Registers `module` under its name. The object is kept as given, so a module type that extends the contract (a
   * policy loss's `accumulation`) keeps its extra parts; its options type is its own (create() checks arguments).
   */
  register<Module extends AlgorithmModule<Input, object, Result>>(module: Module): this {
    this.#modules.register(module.name, module, module.description);
    return this;
  }

  has(name: string): boolean {
    return this.#modules.has(name);
  }

  names(): string[] {
    return this.#modules.names();
  }

  /** The module by name; the error lists the names and suggests the closest. */
  get(name: string): AlgorithmModule<Input, object, Result> {
    return this.#modules.get(name);
  }

  /** The module's function with options from snake_case (YAML) or camelCase arguments over its defaults. */
  create(name: string, args: Readonly<Record<string, unknown>> = {}): (input: Input) => Result {
    const module = this.get(name);
    const options = resolveArgs(`${this.kind} '${name}'`, module.defaults, args);
    return (input) => module.run(input, options);
  }
}

/** The name the module registries (advantage/, policy-loss/ and sample-strategy/, each in its registry.ts) import it by. */
export { AlgorithmRegistry as Registry };
// Moved to src/util (every layer imports them from there); re-exported for the files that import them from here.
export { closestName, didYouMean, editDistance } from '../../util/did-you-mean.js';
export { camelToSnake, resolveArgs, snakeToCamel } from '../../util/module-args.js';
