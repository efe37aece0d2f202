// Parsing a config tree with a zod schema: keys set to null take their defaults, and each of zod's issues becomes a
// ConfigProblem that names the key path in the config's words (`expected an integer, got 'abc'`, `unknown key
// 'batchsize'; did you mean 'batch_size'?`, `unknown key 'sync_iteration_interval'; an older Trinity-RFT key, renamed
// or moved since: use synchronizer.sync_interval`). Every section's schema, and the whole file's, is parsed through here.
import type { z } from 'zod';
import { closestName } from '../../util/did-you-mean.js';
import type { ConfigProblem } from './errors.js';
import { movedKeyHint } from './moved-keys.js';
import { unsupportedKeyHint, unsupportedValueHint } from './unsupported-keys.js';
import { matchesPath } from './refusals.js';
import { defOf, knownKeys, schemaAt, schemaLeafPaths, stripNulls, unwrap } from './schema-walker.js';
import { describeValue, getIn, joinPath, type Segment, type Tree } from './source.js';

type Schema = z.ZodType;

/** "an integer", "a string", ... for the schema at `path` (zod reports integers as numbers). */
function expectedName(schema: Schema, path: readonly Segment[], expected: string): string {
  const leaf = schemaAt(schema, path);
  const def = leaf === undefined ? undefined : defOf(unwrap(leaf));
  if (def?.type === 'number' && def.format?.includes('int')) return 'an integer';
  const names: Record<string, string> = {
    int: 'an integer',
    number: 'a number',
    string: 'a string',
    boolean: 'a boolean (true or false)',
    object: 'a mapping',
    record: 'a mapping',
    array: 'a list',
    tuple: 'a list',
  };
  return names[expected] ?? expected;
}

type Issue = z.core.$ZodIssue;

const quoteAll = (values: readonly unknown[]): string => values.map((v) => `'${String(v)}'`).join(', ');

function issueProblems(issue: Issue, input: unknown, schema: Schema, prefix: readonly Segment[] = []): ConfigProblem[] {
  const path: Segment[] = [...prefix, ...issue.path.map((p) => (typeof p === 'number' ? p : String(p)))];
  const value = getIn(input, path);
  const at = joinPath(path);
  switch (issue.code) {
    case 'unrecognized_keys':
      return issue.keys.map((key) => {
        const keyPath = joinPath([...path, key]);
        return { path: keyPath, message: `unknown key '${key}'; ${unknownKeyHint(schema, path, key)}` };
      });
    case 'invalid_type': {
      const expected = expectedName(schema, path, issue.expected);
      if (value === undefined) {
        const last = path[path.length - 1];
        const what = typeof last === 'number' ? `item ${last} is missing` : 'required key is missing';
        return [{ path: at, message: `${what} (expected ${expected})` }];
      }
      return [{ path: at, message: `expected ${expected}, got ${describeValue(value)}` }];
    }
    case 'invalid_value': {
      const best = typeof value === 'string' ? closestName(value, issue.values.map(String)) : null;
      const unsupported = unsupportedValueHint(at, value);
      const hint = unsupported !== null ? `; ${unsupported}` : best !== null ? `; did you mean '${best}'?` : '';
      const got = typeof value === 'string' ? `'${value}'` : describeValue(value);
      return [{ path: at, message: `expected one of ${quoteAll(issue.values)}; got ${got}${hint}` }];
    }
    case 'too_small': {
      const min = Number(issue.minimum);
      if (issue.origin === 'string' && min === 1) return [{ path: at, message: 'must not be empty' }];
      if (issue.origin === 'array') return [{ path: at, message: `must have at least ${min} item(s)` }];
      return [{ path: at, message: `must be ${issue.inclusive ? '>=' : '>'} ${min}, got ${describeValue(value)}` }];
    }
    case 'too_big': {
      const max = Number(issue.maximum);
      if (issue.origin === 'array') return [{ path: at, message: `must have at most ${max} item(s)` }];
      return [{ path: at, message: `must be ${issue.inclusive ? '<=' : '<'} ${max}, got ${describeValue(value)}` }];
    }
    case 'invalid_union': {
      // a branch whose type matched explains the problem best; else list the types that would do
      const isTypeMismatch = (i: Issue) => i.code === 'invalid_type' && i.path.length === 0;
      const matched = issue.errors.find((branch) => !branch.some(isTypeMismatch));
      if (matched !== undefined) return matched.flatMap((i) => issueProblems(i, input, schema, path));
      const expected = issue.errors.flatMap((b) =>
        b.filter(isTypeMismatch).map((i) => (i.code === 'invalid_type' ? i.expected : '')),
      );
      const names = [...new Set(expected.map((e) => expectedName(schema, [], e)))];
      return [{ path: at, message: `expected ${names.join(' or ')}, got ${describeValue(value)}` }];
    }
    default:
      return [{ path: at, message: issue.message }];
  }
}

/**
 * What to write instead of the unknown key `key` in the mapping at `path`, the first that applies: where an older
 * Trinity-RFT version's key went (./moved-keys.ts); why a key of Trinity's has no counterpart here
 * (./unsupported-keys.ts); the places elsewhere in the schema that have a key of that name
 * (a key written in the wrong section; at most three, as a name used everywhere says nothing, or of more the one nearest
 * the top when no other is as near); the closest key of
 * that mapping by edit distance; else that mapping's keys.
 */
function unknownKeyHint(schema: Schema, path: readonly Segment[], key: string): string {
  const keyPath = joinPath([...path, key]);
  const moved = movedKeyHint(keyPath);
  if (moved !== null) return moved;
  const unsupported = unsupportedKeyHint(keyPath);
  if (unsupported !== null) return unsupported;
  const elsewhere = placesOfKey(schema, key).filter((place) => !matchesPath(place, keyPath));
  const section = (place: string) => (place === key ? 'the top level' : place.slice(0, -key.length - 1));
  if (elsewhere.length > 0 && elsewhere.length <= 3) return `it is a key of ${elsewhere.map(section).join(', ')}: move it there`;
  // a key of many sections (e.g. default_workflow_type: buffer.explorer_input and each taskset) names the one place
  // nearest the top when it is the only one at its depth, as the section a misplaced key most likely belongs to
  const depth = (place: string) => place.split('.').length;
  const nearest = Math.min(...elsewhere.map(depth));
  const shallowest = elsewhere.filter((place) => depth(place) === nearest);
  if (elsewhere.length > 3 && shallowest.length === 1)
    return `it is a key of ${section(shallowest[0] as string)} (and of ${elsewhere.length - 1} other sections): move it there`;
  const known = knownKeys(schema, path);
  const best = closestName(key, known);
  return best !== null ? `did you mean '${best}'?` : `expected one of: ${known.join(', ')}`;
}

const keyPlaces = new WeakMap<Schema, Map<string, string[]>>();

/** The key paths (`*` for list items and mapping keys) whose last key is `key`, outside the stages' free-form overrides. */
function placesOfKey(schema: Schema, key: string): string[] {
  let places = keyPlaces.get(schema);
  if (places === undefined) {
    places = new Map();
    for (const leaf of schemaLeafPaths(schema)) {
      const segments = leaf.split('.');
      if (segments[0] === 'stages') continue;
      segments.forEach((segment, i) => {
        const place = segments.slice(0, i + 1).join('.');
        const list = places?.get(segment) ?? [];
        if (segment !== '*' && !list.includes(place)) places?.set(segment, [...list, place]);
      });
    }
    keyPlaces.set(schema, places);
  }
  return places.get(key) ?? [];
}

export function parseWith<S extends Schema>(schema: S, input: Tree, problems: ConfigProblem[]): z.output<S> | undefined {
  stripNulls(input, schema);
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  for (const issue of result.error.issues) problems.push(...issueProblems(issue, input, schema));
  return undefined;
}
