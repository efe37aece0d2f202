// Options of a named module from its YAML arguments. YAML speaks Trinity-RFT's snake_case (`clip_range_low`), the
// modules' defaults are camelCase (`clipRangeLow`); both spellings are accepted, checked against the defaults' keys
// and value types, and an unknown argument is an error that names the module and suggests the closest argument.
import { didYouMean } from './did-you-mean.js';

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
