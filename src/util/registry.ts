// A registry: values of one kind by name (Trinity-RFT's `trinity/utils/registry.py` `Registry`), with the errors a
// user needs when a name is wrong, and optionally user code by module path (`path/to/file.ts#export`).
//
//   const COLORS = new Registry<string>('color').register('red', '#f00');
//   COLORS.get('rde')   // Error: unknown color 'rde'; did you mean 'red'?; registered: red
//   COLORS.unavailable('teal', 'needs a wider palette: use red').get('teal')
//                       // Error: color 'teal' is not available here: needs a wider palette: use red
//
// unavailable() names what another implementation registers (Trinity-RFT's own names) and this one does not, so a
// config written for it is told why and what to use instead, not only "unknown".
// The algorithm, reward and workflow registries of src/rft are this class with a domain-shaped `register`.
import { didYouMean } from './did-you-mean.js';
import { isModulePath, loadModuleExport } from './module-path.js';

/** `package.module.ClassName`: how Trinity-RFT names a plugin class (a dotted path ending in a capitalized name). */
const PYTHON_CLASS_PATH = /^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\.[A-Z]\w*$/;

export interface RegistryOptions<T> {
  /**
   * Turns a module's export into an entry (throwing an error that names `spec` when it does not fit). Given, resolve()
   * also accepts module paths; without it, resolve() accepts registered names only.
   */
  fromExport?: (value: unknown, spec: string) => T;
}

export class Registry<T> {
  readonly #entries = new Map<string, { value: T; description: string }>();
  readonly #loaded = new Map<string, Promise<T>>();
  readonly #unavailable = new Map<string, string>();
  readonly #fromExport: ((value: unknown, spec: string) => T) | undefined;

  /** `kind` words the errors: "unknown <kind> 'name'". */
  constructor(
    readonly kind: string,
    options: RegistryOptions<T> = {},
  ) {
    this.#fromExport = options.fromExport;
  }

  /** Adds `value` under `name`; a name is registered once (a second registration is an error, not an override). */
  register(name: string, value: T, description = ''): this {
    if (this.#entries.has(name)) throw new Error(`${this.kind} '${name}' is already registered`);
    this.#entries.set(name, { value, description });
    this.#unavailable.delete(name);
    return this;
  }

  /**
   * Marks `name` as one this registry lacks on purpose: get() refuses it with `reason` (why, and what to use
   * instead). A later register() of the name takes over.
   */
  unavailable(name: string, reason: string): this {
    if (!this.#entries.has(name)) this.#unavailable.set(name, reason);
    return this;
  }

  has(name: string): boolean {
    return this.#entries.has(name);
  }

  /** Registered names, in registration order. */
  names(): string[] {
    return [...this.#entries.keys()];
  }

  /** The one-line description given at registration ('' when none or not registered). */
  describe(name: string): string {
    return this.#entries.get(name)?.description ?? '';
  }

  /** The value registered under `name`; the error lists the names and suggests the closest. */
  get(name: string): T {
    const entry = this.#entries.get(name);
    if (entry === undefined) {
      const reason = this.#unavailable.get(name);
      if (reason !== undefined) throw new Error(`${this.kind} '${name}' is not available here: ${reason}`);
      if (this.#fromExport !== undefined && PYTHON_CLASS_PATH.test(name))
        throw new Error(
          `${this.kind} '${name}' is a Python class path (Trinity-RFT's plugin form): a ${this.kind} module here is a ` +
            'TypeScript or JavaScript file, named as path/to/file.ts#export',
        );
      const names = this.names();
      throw new Error(`unknown ${this.kind} '${name}'${didYouMean(name, names)}; registered: ${names.join(', ')}`);
    }
    return entry.value;
  }

  /**
   * A registered name, or (with `fromExport`) a module path (`file.ts#export`, relative to baseDir, default the working
   * directory) imported once per (baseDir, spec) and cached; a failed import is retried on the next call.
   */
  resolve(spec: string, baseDir?: string): Promise<T> {
    const fromExport = this.#fromExport;
    if (fromExport === undefined || this.#entries.has(spec) || !isModulePath(spec)) {
      try {
        return Promise.resolve(this.get(spec));
      } catch (error) {
        return Promise.reject(error);
      }
    }
    const key = `${baseDir ?? ''}\0${spec}`;
    let loaded = this.#loaded.get(key);
    if (loaded === undefined) {
      loaded = loadModuleExport(spec, this.kind, baseDir).then((value) => fromExport(value, spec));
      loaded.catch(() => this.#loaded.delete(key)); // a fixed file loads on the next try
      this.#loaded.set(key, loaded);
    }
    return loaded;
  }
}
