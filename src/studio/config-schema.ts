// The config builder's form, read from the config schema (ConfigSchema, the one `trinity config check` validates
// with): a tree of fields, each with its kind, default, bounds and choices. Read at request time, so a new key
// appears in the form by itself. The schema is read as data through src/rft/config/schema-walker.ts.
import type { z } from 'zod';
import { ConfigSchema } from '../rft/run/config/index.js';
import { defOf, type SchemaDef } from '../rft/config/schema-walker.js';

/** One field of the form. Lists, free-form mappings, unions and tuples are edited as YAML text (kind 'yaml'). */
export type FieldSpec =
  | { kind: 'object'; key: string; path: string; nullable: boolean; required: boolean; fields: FieldSpec[] }
  | {
      kind: 'string' | 'number' | 'integer' | 'boolean' | 'enum' | 'yaml';
      key: string;
      path: string;
      required: boolean;
      nullable: boolean;
      /** The schema's default (undefined: none, or derived from other keys). */
      default?: unknown;
      /** enum: the choices. */
      choices?: string[];
      /** number/integer bounds; `exclusive` marks an open end. */
      min?: { value: number; exclusive: boolean };
      max?: { value: number; exclusive: boolean };
    };

type Schema = z.ZodType;

interface Wrappers {
  nullable: boolean;
  optional: boolean;
  default?: unknown;
}

/** Walks the wrappers (default, prefault, nullable, optional, preprocess) down to the value's own schema. */
function peel(schema: Schema): { inner: Schema; wrappers: Wrappers } {
  const wrappers: Wrappers = { nullable: false, optional: false };
  let s = schema;
  for (;;) {
    const def = defOf(s) as SchemaDef & { defaultValue?: unknown };
    if (def.type === 'default' || def.type === 'prefault') {
      wrappers.optional = true;
      if (wrappers.default === undefined) wrappers.default = def.defaultValue;
    }
    if (def.type === 'nullable') wrappers.nullable = true;
    if (def.type === 'optional') wrappers.optional = true;
    if (def.innerType !== undefined) s = def.innerType;
    else if (def.type === 'pipe' && def.out !== undefined) s = def.out;
    else return { inner: s, wrappers };
  }
}

interface Check {
  check: string;
  value?: number;
  inclusive?: boolean;
}

/** The form's field tree for `schema` (ConfigSchema by default). */
export function describeSchema(schema: Schema = ConfigSchema as unknown as Schema, key = '', path = ''): FieldSpec {
  const { inner, wrappers } = peel(schema);
  const def = defOf(inner) as SchemaDef & {
    entries?: Record<string, string>;
    checks?: { _zod: { def: Check } }[];
  };
  const base = { key, path, required: !wrappers.optional, nullable: wrappers.nullable };
  if (def.type === 'object')
    return {
      kind: 'object',
      ...base,
      fields: Object.entries(def.shape ?? {}).map(([k, child]) => describeSchema(child, k, path === '' ? k : `${path}.${k}`)),
    };
  const field: FieldSpec = { kind: 'yaml', ...base };
  if (wrappers.default !== undefined && wrappers.default !== null) field.default = wrappers.default;
  if (def.type === 'enum') {
    field.kind = 'enum';
    field.choices = Object.values(def.entries ?? {});
  } else if (def.type === 'boolean') field.kind = 'boolean';
  else if (def.type === 'string') field.kind = 'string';
  else if (def.type === 'number') {
    field.kind = def.format?.includes('int') ? 'integer' : 'number';
    for (const c of def.checks ?? []) {
      const { check, value, inclusive } = c._zod.def;
      if (value === undefined) continue;
      if (check === 'greater_than') field.min = { value, exclusive: inclusive === false };
      if (check === 'less_than') field.max = { value, exclusive: inclusive === false };
    }
  }
  return field;
}
