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
      throw new Error(`unknown ${this.kind} '${name}'${didYouMean(name, this.names())}; registered: ${this.names().join(', ')}`);
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

/** Edit distance (insertions, deletions, substitutions, adjacent transpositions) between two names. */
export function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  const at = (i: number, j: number) => (d[i] as number[])[j] as number;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, at(i - 2, j - 2) + 1);
      (d[i] as number[])[j] = best;
    }
  }
  return at(a.length, b.length);
}

/** The candidate closest to `name` when it is a plausible typo (distance ≤ max(2, ⌊|name|/3⌋)), else null. */
export function closestName(name: string, candidates: Iterable<string>): string | null {
  let best: string | null = null;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of candidates) {
    const d = editDistance(name.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return bestDistance <= Math.max(2, Math.floor(name.length / 3)) ? best : null;
}

/** "; did you mean 'x'?" when a candidate is close to `name`, else "". */
export function didYouMean(name: string, candidates: Iterable<string>): string {
  const best = closestName(name, candidates);
  return best === null ? '' : `; did you mean '${best}'?`;
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
      const names = Object.keys(known).map(camelToSnake);
      const expected = names.join(', ') || '(none)';
      throw new Error(`${where}: unknown argument '${key}'${didYouMean(camelToSnake(key), names)}; expected one of ${expected}`);
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
