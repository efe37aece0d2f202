// The check of a tool's `parameters` (a chat request's tools[i].function.parameters): a JSON Schema object, as OpenAI
// requires, before the chat template renders it into the prompt. Without it a schema of `type: 'objekt'` was accepted
// and the model shown nonsense, and one nested 5,000 deep overflowed the template's recursive `tojson` ("Maximum call
// stack size exceeded", blamed on `messages`).
//
// What is checked, structurally and no further (the model reads the schema; nothing here validates arguments with it):
//   the top      an object whose `type`, if given, is 'object'
//   any schema   an object or a boolean; `type` a JSON type name or a list of them; `required` a list of strings;
//                `enum` a list; keywords holding schemas (properties, items, anyOf, ...) hold schemas
//   depth        schemas nest at most MAX_SCHEMA_DEPTH deep, and values (const, default, enum, examples) at most
//                MAX_SCHEMA_DEPTH levels: a template renders both recursively
// The walks keep their own work list (never recursion), so no input can overflow the stack here either.

/** How deep schemas (and JSON values inside them) may nest in a tool's parameters. */
export const MAX_SCHEMA_DEPTH = 32;

/** A problem found: where (keys below `parameters`) and what is wrong. */
export interface SchemaProblem {
  path: (string | number)[];
  message: string;
}

const JSON_TYPES = new Set(['object', 'array', 'string', 'number', 'integer', 'boolean', 'null']);
/** Keywords whose value is an object of schemas by name. */
const SCHEMA_MAPS = ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'];
/** Keywords whose value is a non-empty list of schemas. */
const SCHEMA_LISTS = ['anyOf', 'oneOf', 'allOf', 'prefixItems'];
/** Keywords whose value is one schema (`items` may also be a list: the tuple form before draft 2020-12). */
const SCHEMA_VALUED = [
  'items',
  'additionalItems',
  'additionalProperties',
  'unevaluatedItems',
  'unevaluatedProperties',
  'propertyNames',
  'contains',
  'not',
  'if',
  'then',
  'else',
];
/** Keywords holding JSON values, which a template renders as they are. */
const VALUE_KEYWORDS = ['const', 'default', 'enum', 'examples'];

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** A JSON value's kind as a client would name it. */
function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'string' ? `string ${JSON.stringify(value.slice(0, 40))}` : typeof value;
}

/** Whether a JSON value nests arrays/objects more than `limit` levels deep (a scalar is 0 levels, `{}` is 1). */
export function nestsDeeperThan(value: unknown, limit: number): boolean {
  const pending: Array<[unknown, number]> = [[value, 0]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [item, depth] = next;
    if (typeof item !== 'object' || item === null) continue;
    if (depth + 1 > limit) return true;
    for (const child of Object.values(item)) pending.push([child, depth + 1]);
  }
  return false;
}

/** The first problem of a tool's parameters (shallowest first), or undefined when it is a usable JSON Schema object. */
export function findToolParametersProblem(parameters: Record<string, unknown>): SchemaProblem | undefined {
  if (parameters.type !== undefined && parameters.type !== 'object')
    return {
      path: ['type'],
      message: `a function's parameters must be a schema of type 'object'; received ${kindOf(parameters.type)}`,
    };
  // breadth first: the shallowest problem is the one reported, and the depth limit ends the walk
  const pending: Array<{ schema: unknown; path: (string | number)[]; depth: number }> = [
    { schema: parameters, path: [], depth: 1 },
  ];
  for (let index = 0; index < pending.length; index++) {
    const { schema, path, depth } = pending[index] as (typeof pending)[number];
    if (depth > MAX_SCHEMA_DEPTH) return { path, message: `schemas nest more than ${MAX_SCHEMA_DEPTH} deep` };
    const problem = checkOneSchema(schema, path, (child, childPath) => {
      pending.push({ schema: child, path: childPath, depth: depth + 1 });
    });
    if (problem !== undefined) return problem;
  }
  return undefined;
}

/** One schema's own keywords checked; the schemas inside it are handed to `visit` (checked later, by the caller). */
function checkOneSchema(
  schema: unknown,
  path: (string | number)[],
  visit: (child: unknown, childPath: (string | number)[]) => void,
): SchemaProblem | undefined {
  if (typeof schema === 'boolean') return undefined;
  if (!isPlainObject(schema))
    return { path, message: `must be a JSON Schema (an object or a boolean); received ${kindOf(schema)}` };
  const { type, required } = schema;
  const typeNames = Array.isArray(type) ? type : [type];
  if (type !== undefined && (typeNames.length === 0 || !typeNames.every((t) => typeof t === 'string' && JSON_TYPES.has(t))))
    return {
      path: [...path, 'type'],
      message: `must be one of ${[...JSON_TYPES].join(', ')} or a list of them; received ${kindOf(type)}`,
    };
  if (required !== undefined && !(Array.isArray(required) && required.every((name) => typeof name === 'string')))
    return { path: [...path, 'required'], message: `must be a list of property names; received ${kindOf(required)}` };
  if (schema.enum !== undefined && !Array.isArray(schema.enum))
    return { path: [...path, 'enum'], message: `must be a list of values; received ${kindOf(schema.enum)}` };
  for (const key of VALUE_KEYWORDS) {
    if (nestsDeeperThan(schema[key], MAX_SCHEMA_DEPTH))
      return { path: [...path, key], message: `nests more than ${MAX_SCHEMA_DEPTH} levels deep` };
  }
  for (const key of SCHEMA_MAPS) {
    const map = schema[key];
    if (map === undefined) continue;
    if (!isPlainObject(map))
      return { path: [...path, key], message: `must be an object of schemas by name; received ${kindOf(map)}` };
    for (const [name, child] of Object.entries(map)) visit(child, [...path, key, name]);
  }
  for (const key of SCHEMA_LISTS) {
    const list = schema[key];
    if (list === undefined) continue;
    if (!Array.isArray(list) || list.length === 0)
      return { path: [...path, key], message: `must be a non-empty list of schemas; received ${kindOf(list)}` };
    for (const [i, child] of list.entries()) visit(child, [...path, key, i]);
  }
  for (const key of SCHEMA_VALUED) {
    const child = schema[key];
    if (child === undefined) continue;
    if (key === 'items' && Array.isArray(child)) for (const [i, item] of child.entries()) visit(item, [...path, key, i]);
    else visit(child, [...path, key]);
  }
  return undefined;
}
