// Helpers for turning a resolved config section into the plain settings a part reads (each part's config.ts maps its
// own section; src/rft/run/config/stage-settings.ts assembles them).

type NonNullFields<T> = { [K in keyof T]?: Exclude<T[K], null> };

/** `o` without its null and undefined fields (the settings leave them out rather than carry null). */
export const omitNulls = <T extends Record<string, unknown>>(o: T): NonNullFields<T> =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null && v !== undefined)) as NonNullFields<T>;

/** The first value that is not null, else null. */
export const firstNonNull = <T>(...values: (T | null)[]): T | null => values.find((v) => v !== null) ?? null;
