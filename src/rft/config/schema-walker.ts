// Reading a zod schema as data: its definition (zod's `_zod.def`, the one place that reaches into zod's internals),
// the schema under its wrappers, the schema of the value at a key path, and the key paths of its leaves. Validation
// (./parse.ts) walks the config schema with these to name problems; the Studio's form (src/studio/config-schema.ts)
// and the config tests read it with them too.
import type { z } from 'zod';
import { isMapping, type Segment } from './source.js';

export interface SchemaDef {
  type: string;
  innerType?: Schema;
  out?: Schema;
  shape?: Record<string, Schema>;
  element?: Schema;
  valueType?: Schema;
  items?: Schema[];
  options?: Schema[];
  format?: string;
}
type Schema = z.ZodType;

export const defOf = (schema: Schema): SchemaDef => (schema as unknown as { _zod: { def: SchemaDef } })._zod.def;

/** The schema under wrappers (optional, nullable, default, preprocess...). */
export function unwrap(schema: Schema): Schema {
  let s = schema;
  for (;;) {
    const def = defOf(s);
    if (def.innerType !== undefined) s = def.innerType;
    else if (def.type === 'pipe' && def.out !== undefined) s = def.out;
    else return s;
  }
}

/** The schema of the value at `path` below `schema`, if the schema describes it. */
export function schemaAt(schema: Schema, path: readonly Segment[]): Schema | undefined {
  let s: Schema | undefined = schema;
  for (const segment of path) {
    if (s === undefined) return undefined;
    const def = defOf(unwrap(s));
    if (def.type === 'object') s = def.shape?.[String(segment)];
    else if (def.type === 'array') s = def.element;
    else if (def.type === 'record') s = def.valueType;
    else if (def.type === 'tuple') s = def.items?.[Number(segment)];
    else return undefined;
  }
  return s;
}

/** The keys of the mapping at `path` (empty where the schema has no mapping of known keys). */
export function knownKeys(schema: Schema, path: readonly Segment[]): string[] {
  const s = schemaAt(schema, path);
  if (s === undefined) return [];
  const def = defOf(unwrap(s));
  return def.type === 'object' ? Object.keys(def.shape ?? {}) : [];
}

/**
 * The key paths of a schema's leaves (`*` for list items and mapping keys), e.g. `buffer.explorer_input.tasksets.*.path`:
 * a mapping of known keys is walked into; a free-form mapping (workflow_args, monitor_args...), a scalar, a tuple or a
 * union is a leaf. The schema-coverage test walks ConfigSchema with it.
 */
export function schemaLeafPaths(schema: Schema, prefix = ''): string[] {
  const def = defOf(unwrap(schema));
  const at = (key: string) => (prefix === '' ? key : `${prefix}.${key}`);
  if (def.type === 'object') {
    return Object.entries(def.shape ?? {}).flatMap(([key, child]) => schemaLeafPaths(child, at(key)));
  }
  const inner = def.type === 'array' ? def.element : def.type === 'record' ? def.valueType : undefined;
  if (inner !== undefined && ['object', 'array', 'record'].includes(defOf(unwrap(inner)).type)) {
    return schemaLeafPaths(inner, at('*'));
  }
  return [prefix];
}

/** Deletes keys set to null in schema-described mappings, so that their defaults apply (free-form mappings keep nulls). */
export function stripNulls(node: unknown, schema: Schema | undefined): void {
  if (schema === undefined) return;
  const def = defOf(unwrap(schema));
  if (def.type === 'object' && isMapping(node)) {
    for (const key of Object.keys(node)) {
      if (node[key] === null) delete node[key];
      else stripNulls(node[key], def.shape?.[key]);
    }
  } else if (def.type === 'record' && isMapping(node)) {
    for (const value of Object.values(node)) stripNulls(value, def.valueType);
  } else if (def.type === 'array' && Array.isArray(node)) {
    for (const item of node) stripNulls(item, def.element);
  }
}
