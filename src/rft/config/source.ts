// What happens to the YAML tree before the schema sees it: `--set` overrides and resolution of relative paths
// (${...} interpolation, between the two, is ./interpolate.ts). Each step reports problems with the key path instead
// of throwing at the first one.
import { homedir } from 'node:os';
import { isAbsolute, resolve } from 'node:path';
import YAML from 'yaml';
import type { ConfigProblem } from './errors.js';

export type Segment = string | number;
export type Tree = Record<string, unknown>;

export const isMapping = (v: unknown): v is Tree => typeof v === 'object' && v !== null && !Array.isArray(v);

/** `buffer.eval_tasksets.0.path` from its segments. */
export const joinPath = (path: readonly Segment[]): string => path.map(String).join('.');

export function getIn(tree: unknown, path: readonly Segment[]): unknown {
  let node = tree;
  for (const segment of path) {
    if (Array.isArray(node)) node = node[Number(segment)];
    else if (isMapping(node)) node = Object.hasOwn(node, String(segment)) ? node[String(segment)] : undefined;
    else return undefined;
  }
  return node;
}

/** The mapping of `tree` at `path`, made (with the mappings above it) where absent; null when something else is there. */
export function mappingAt(tree: Tree, path: readonly string[]): Tree | null {
  let at: Tree = tree;
  for (const key of path) {
    const next = at[key];
    if (next === undefined || next === null) at[key] = {};
    else if (!isMapping(next)) return null;
    at = at[key] as Tree;
  }
  return at;
}

/** A deep copy of plain YAML data (mappings, lists, scalars). */
export function clone<T>(value: T): T {
  return structuredClone(value);
}

/**
 * `override` deep-merged onto `base` (both left unchanged): mappings merge key by key, anything else (lists included)
 * replaces, and null removes the key so that its default applies.
 */
export function deepMerge(base: Tree, override: Tree): Tree {
  const out: Tree = clone(base);
  for (const [key, value] of Object.entries(override)) {
    if (value === null || value === undefined) delete out[key];
    else if (isMapping(value) && isMapping(out[key])) out[key] = deepMerge(out[key] as Tree, value);
    else out[key] = clone(value);
  }
  return out;
}

// --- reserved keys -------------------------------------------------------------------------------------------------

/**
 * Keys no config has and that plain-object assignment would turn into prototype changes (`tree['__proto__'] = ...`
 * replaces the prototype; `--set __proto__.x=1` would write into Object.prototype): refused wherever they appear.
 */
export const RESERVED_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype']);

const reservedMessage = (key: string): string =>
  `'${key}' is not a config key (a reserved name of JavaScript objects; rename it)`;

/** One problem per reserved key (./RESERVED_KEYS) in the mappings of `tree`, named by its key path. */
export function reservedKeyProblems(tree: unknown, path: Segment[] = []): ConfigProblem[] {
  if (Array.isArray(tree)) return tree.flatMap((item, i) => reservedKeyProblems(item, [...path, i]));
  if (!isMapping(tree)) return [];
  return Object.keys(tree).flatMap((key) =>
    RESERVED_KEYS.has(key)
      ? [{ path: joinPath([...path, key]), message: reservedMessage(key) }]
      : reservedKeyProblems(tree[key], [...path, key]),
  );
}

// --- overrides ------------------------------------------------------------------------------------------------------

export interface Override {
  path: Segment[];
  value: unknown;
  /** As given, for messages: `--set key=value`. */
  text: string;
}

/** A `--set` value: YAML (`8`, `true`, `null`, `[a, b]`, `{k: v}`), else the text itself. */
function parseOverrideValue(text: string): unknown {
  const trimmed = text.trim();
  try {
    const value: unknown = YAML.parse(text);
    if (typeof value === 'object' && value !== null && !trimmed.startsWith('[') && !trimmed.startsWith('{')) return text;
    return value;
  } catch {
    return text;
  }
}

/** Parses `key.path=value` overrides; list indices are numeric segments (`stages.0.mode=train`). */
export function parseOverrides(overrides: readonly string[], problems: ConfigProblem[]): Override[] {
  const out: Override[] = [];
  for (const text of overrides) {
    const eq = text.indexOf('=');
    const key = eq < 0 ? '' : text.slice(0, eq).trim();
    if (eq < 0 || key === '' || key.split('.').some((s) => s === '')) {
      problems.push({ path: '', message: `override '${text}' is not key.path=value`, source: `--set ${text}` });
      continue;
    }
    const reserved = key.split('.').find((s) => RESERVED_KEYS.has(s));
    if (reserved !== undefined) {
      problems.push({ path: '', message: `override '${text}': ${reservedMessage(reserved)}`, source: `--set ${text}` });
      continue;
    }
    const path = key.split('.').map((s): Segment => (/^\d+$/.test(s) ? Number(s) : s));
    out.push({ path, value: parseOverrideValue(text.slice(eq + 1)), text: `--set ${text}` });
  }
  return out;
}

/** Writes each override into `tree`, creating mappings (or a list, before a numeric segment) on the way. */
export function applyOverrides(tree: Tree, overrides: readonly Override[], problems: ConfigProblem[]): void {
  for (const { path, value, text } of overrides) {
    let node: unknown = tree;
    for (let i = 0; i < path.length; i++) {
      const segment = path[i] as Segment;
      const last = i === path.length - 1;
      const here = joinPath(path.slice(0, i));
      if (Array.isArray(node)) {
        if (typeof segment !== 'number') {
          problems.push({ path: here, message: `is a list; '${segment}' is not an index`, source: text });
          break;
        }
        if (segment > node.length) {
          const message = `has ${node.length} item(s); index ${segment} is out of range (${node.length} appends)`;
          problems.push({ path: here, message, source: text });
          break;
        }
      } else if (!isMapping(node)) {
        problems.push({ path: here, message: `is ${describeValue(node)}, not a mapping or list`, source: text });
        break;
      }
      const container = node as Record<string | number, unknown>;
      if (last) {
        container[segment] = value;
        break;
      }
      const next = container[segment];
      if (next === undefined || next === null) container[segment] = typeof path[i + 1] === 'number' ? [] : {};
      node = container[segment];
    }
  }
}

// --- relative paths ------------------------------------------------------------------------------------------------

const URL_LIKE = /^[a-z][a-z0-9+.-]*:\/\//i;

function resolvePath(value: string, baseDir: string): string {
  if (value === '' || URL_LIKE.test(value)) return value;
  if (value === '~' || value.startsWith('~/')) return resolve(homedir(), value.slice(2));
  return isAbsolute(value) ? value : resolve(baseDir, value);
}

/** Keys that hold file paths, resolved against the config file's folder (`*`: any list index or mapping key). */
export const PATH_KEYS: readonly string[] = [
  'checkpoint_root_dir',
  'checkpoint_job_dir',
  'model.model_path',
  'model.critic_model_path',
  'model.lora.path',
  'model.lora_configs.*.path',
  'explorer.auxiliary_models.*.model_path',
  'buffer.explorer_input.taskset.path',
  'buffer.explorer_input.tasksets.*.path',
  'buffer.explorer_input.eval_tasksets.*.path',
  'buffer.trainer_input.experience_buffer.path',
  'buffer.trainer_input.sft_warmup_dataset.path',
  'buffer.trainer_input.auxiliary_buffers.*.path',
  'data_processor.task_pipeline.inputs.*',
  'data_processor.task_pipeline.config_path',
  'data_processor.task_pipeline.operators.*.args.config_path',
  'data_processor.experience_pipeline.operators.*.args.config_path',
  'data_processor.task_pipeline.output',
  'data_processor.task_pipeline.output.path',
  'data_processor.experience_pipeline.input_save_path',
  // Trinity 0.1's (src/rft/run/config/trinity-v01-form.ts moves them to today's keys)
  'data.dataset_path',
  'model.checkpoint_path',
  'buffer.train_dataset.path',
];

/**
 * Resolves the relative file paths of PATH_KEYS (at the top level and in each stage) in place: against `baseDir`,
 * or against `overrideDir` where an override wrote the value (`fromOverride`).
 */
export function resolvePaths(
  tree: Tree,
  baseDir: string,
  overrideDir: string,
  fromOverride: (path: readonly Segment[]) => boolean,
): void {
  const stages = Array.isArray(tree.stages) ? tree.stages : [];
  const roots: Segment[][] = [[], ...stages.map((_, i) => ['stages', i])];
  for (const root of roots) {
    for (const pattern of PATH_KEYS) visit(getIn(tree, root), pattern.split('.'), root);
  }

  function visit(node: unknown, pattern: readonly string[], at: Segment[]): void {
    const [head, ...rest] = pattern;
    if (head === undefined) return;
    const children: [Segment, unknown][] =
      head !== '*'
        ? isMapping(node) && Object.hasOwn(node, head)
          ? [[head, node[head]]]
          : []
        : Array.isArray(node)
          ? node.map((v, i): [Segment, unknown] => [i, v])
          : isMapping(node)
            ? Object.entries(node)
            : [];
    for (const [key, child] of children) {
      const path = [...at, key];
      if (rest.length > 0) visit(child, rest, path);
      else if (typeof child === 'string') {
        (node as Record<string | number, unknown>)[key] = resolvePath(child, fromOverride(path) ? overrideDir : baseDir);
      }
    }
  }
}

/** How a value reads in a message: `"abc" (a string)`, `1.5`, `a list`, `a mapping`, `null`. */
export function describeValue(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (typeof value === 'string') return `the string ${JSON.stringify(value)}`;
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  return String(value);
}
