// Loading a run config: YAML → `--set` overrides → ${...} interpolation (environment, key references) → relative
// paths → schema and rules.
//
//   const config = loadConfig('examples/grpo.yaml', { overrides: ['buffer.batch_size=16', 'stages.0.mode=train'] });
//   for (const stage of resolveStages(config)) run(stage);
//
// Every problem is collected and thrown at once as a ConfigError, each with its key path and where the value was
// written (file:line:column, or the override).
import { statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import YAML, { isAlias, isMap, isPair, isScalar, isSeq, LineCounter, type Node as YamlNode, type Pair, type YAMLMap } from 'yaml';
import { fileErrorDetail, readRegularFile } from '../../../util/index.js';
import { ConfigError, type ConfigProblem } from '../../config/errors.js';
import { interpolateConfig } from '../../config/interpolate.js';
import type { Config, StageConfig } from './schema.js';
import {
  applyOverrides,
  isMapping,
  joinPath,
  type Override,
  parseOverrides,
  reservedKeyProblems,
  resolvePaths,
  type Segment,
  type Tree,
} from '../../config/source.js';
import { takeTrinityKeys } from './trinity-mappings.js';
import { finishMappings } from './trinity-report.js';
import { type ValidateOptions, validateConfig } from './validate.js';

export interface LoadConfigOptions extends ValidateOptions {
  /** `key.path=value` (`--set`): dotted paths, list indices as numbers (`stages.0.mode=train`), YAML values. */
  overrides?: readonly string[];
  /** Variables for ${VAR} / ${VAR:-default} (default process.env). */
  env?: Readonly<Record<string, string | undefined>>;
}

/** Reads, validates and resolves a YAML run config; throws ConfigError listing every problem. */
export function loadConfig(file: string, options: LoadConfigOptions = {}): Config {
  return parseConfig(readConfigFile(file), { ...options, file });
}

/**
 * The largest config, in bytes (1 MiB). A config names its data by path; a YAML that size holds data (rows, prompts,
 * long lists), and the yaml library's parse of it costs seconds and a hundred times its size in memory.
 */
export const MAX_CONFIG_BYTES = 1024 * 1024;

/** The refusal of a config of `bytes` bytes, or null when it is within MAX_CONFIG_BYTES. */
function oversizeProblem(bytes: number): ConfigProblem | null {
  if (bytes <= MAX_CONFIG_BYTES) return null;
  const mb = (n: number) => `${(n / (1024 * 1024)).toFixed(1)} MB`;
  return {
    path: '',
    message:
      `the config is ${mb(bytes)}, over the ${mb(MAX_CONFIG_BYTES)} a config may be (MAX_CONFIG_BYTES): it holds data, ` +
      'not settings. Put rows, prompts and long lists in a dataset file (.jsonl, .json, .parquet) and name it by ' +
      'path (buffer.explorer_input.taskset.path, a workflow_args value)',
  };
}

/**
 * The text of the config file `file` (`trinity run`, `trinity config check`); ConfigError when it cannot be read or
 * is over MAX_CONFIG_BYTES (refused from its size, before it is read).
 */
export function readConfigFile(file: string): string {
  let size = 0;
  try {
    size = statSync(file).size;
  } catch {
    // readRegularFile below names why it cannot be read
  }
  const tooLarge = oversizeProblem(size);
  if (tooLarge !== null) throw new ConfigError([tooLarge], file);
  try {
    return readRegularFile(file, 'utf8');
  } catch (error) {
    throw new ConfigError([{ path: '', message: `cannot read the config file: ${fileErrorDetail(error)}` }], file);
  }
}

export interface ParseConfigOptions extends LoadConfigOptions {
  /** The file the text came from: relative paths resolve against its folder, and problems name it. */
  file?: string;
}

/** As loadConfig, for YAML text (relative paths resolve against the folder of `file`, else the working directory). */
export function parseConfig(text: string, options: ParseConfigOptions = {}): Config {
  return parseConfigText(text, options).config;
}

/** A config parsed from YAML text, with what locates later problems in that text. */
export interface ParsedConfig {
  config: Config;
  /**
   * Adds where each problem's key was written (`file:line:column`, or the `--set` override) to problems found after
   * loading (the pre-run checks of ./preflight.ts), from the document parsed once: parsing a large file again costs
   * as much as loading it did. A key the file does not write keeps no source.
   */
  locate(problems: ConfigProblem[]): void;
}

/** As parseConfig, keeping the parsed document to locate later problems (`trinity config check`, the Studio). */
export function parseConfigText(text: string, options: ParseConfigOptions = {}): ParsedConfig {
  const cwd = options.cwd ?? process.cwd();
  const label = options.file ?? '<config>';
  // before the parse, whose time and memory grow far faster than the text
  const tooLarge = oversizeProblem(Buffer.byteLength(text, 'utf8'));
  if (tooLarge !== null) throw new ConfigError([tooLarge], options.file);
  const { doc, at } = parseYaml(text, label);
  const [syntaxError] = doc.errors;
  if (syntaxError !== undefined) {
    // the first error only: the parser's later ones mostly follow from it
    const message = `YAML syntax error: ${syntaxError.message}`;
    throw new ConfigError([{ path: '', message, source: at(syntaxError.pos[0]) }], options.file);
  }
  const data: unknown = doc.toJS({ maxAliasCount: 1000 }) ?? {};
  if (!isMapping(data)) {
    throw new ConfigError(
      [{ path: '', message: 'the top level must be a mapping of keys (mode, model, buffer, ...)' }],
      options.file,
    );
  }
  const tree: Tree = data;

  const problems: ConfigProblem[] = [];
  const overrides = parseOverrides(options.overrides ?? [], problems);
  applyOverrides(tree, overrides, problems);
  // before anything copies or merges the tree: a reserved key there would change an object's prototype
  const reserved = reservedKeyProblems(tree);
  if (reserved.length > 0) {
    for (const p of reserved) {
      const override = overrides.findLast((o) => `${p.path}.`.startsWith(`${joinPath(o.path)}.`));
      const offset = locate(doc, p.path.split('.'));
      if (override !== undefined) p.source = override.text;
      else if (offset !== undefined) p.source = at(offset);
    }
    throw new ConfigError([...problems, ...reserved], options.file);
  }
  interpolateConfig(tree, options.env ?? process.env, problems);
  const overriddenBy = (path: readonly Segment[]): Override | undefined => overrideOf(overrides, path);
  const baseDir = options.file !== undefined ? dirname(resolve(cwd, options.file)) : cwd;
  resolvePaths(tree, baseDir, cwd, (path) => overriddenBy(path) !== undefined);
  // Trinity's keys for vLLM/veRL/Ray taken out, its values in Trinity's terms mapped (printed once per run)
  const trinityKeys = takeTrinityKeys(tree, { baseDir }, problems);

  // validate even after problems above, to report everything at once (but each key once)
  const result = validateConfig(tree, { ...options, cwd });
  const reported = new Set(problems.map((p) => p.path));
  problems.push(...result.problems.filter((p) => !reported.has(p.path)));
  if (problems.length > 0 || result.config === undefined) {
    addSources(problems, doc, at, overrides);
    throw new ConfigError(problems, options.file);
  }
  const mapped = finishMappings(trinityKeys.mapped, result.config, resolveStages(result.config));
  const config: Config = { ...result.config, trinity_keys: { ...trinityKeys, mapped } };
  return { config, locate: (found) => addSources(found, doc, at, overrides) };
}

/**
 * The YAML document of `text` and `at(offset)`, the `label:line:column` of an offset in it. Merge keys (`<<: *base`)
 * are YAML that Trinity-RFT's loader (PyYAML, OmegaConf) accepts: they are read as such, not as a key named `<<`.
 */
function parseYaml(text: string, label: string): { doc: YAML.Document; at: (offset: number) => string } {
  const lineCounter = new LineCounter();
  const doc = YAML.parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true, merge: true });
  const at = (offset: number): string => {
    const { line, col } = lineCounter.linePos(offset);
    return `${label}:${line}:${col}`;
  };
  return { doc, at };
}

/** The last override that wrote `path` or a mapping above it. */
const overrideOf = (overrides: readonly Override[], path: readonly Segment[]): Override | undefined =>
  overrides.findLast((o) => o.path.length <= path.length && o.path.every((s, i) => String(s) === String(path[i])));

/** Sets each problem's source, where it has none: the override that wrote its key, else where the file wrote it. */
function addSources(
  problems: ConfigProblem[],
  doc: YAML.Document,
  at: (offset: number) => string,
  overrides: readonly Override[],
): void {
  for (const p of problems) {
    if (p.source !== undefined || p.path === '') continue;
    const path = p.path.split('.');
    const override = overrideOf(overrides, path);
    if (override !== undefined) p.source = override.text;
    else {
      const offset = locate(doc, path);
      if (offset !== undefined) p.source = at(offset);
    }
  }
}

/** Offset of the deepest node on `path` in the YAML document (a mapping entry's key, a list item). */
function locate(doc: YAML.Document, path: readonly string[]): number | undefined {
  let node: unknown = doc.contents;
  let offset: number | undefined;
  for (const segment of path) {
    if (isAlias(node)) node = node.resolve(doc);
    if (isMap(node)) {
      const pair = entryOf(doc, node, segment);
      if (pair === undefined) break;
      offset = (pair.key as YamlNode).range?.[0] ?? offset;
      node = pair.value;
    } else if (isSeq(node)) {
      const item = node.items[Number(segment)];
      if (item === undefined || !/^\d+$/.test(segment)) break;
      offset = (item as YamlNode).range?.[0] ?? offset;
      node = item;
    } else break;
  }
  return offset;
}

/** The entry of `key` in `map`, or in the mappings it merges (`<<: *base`, `<<: [*a, *b]`), where it was written. */
function entryOf(doc: YAML.Document, map: YAMLMap, key: string): Pair | undefined {
  const pair = map.items.find((p) => isPair(p) && isScalar(p.key) && String(p.key.value) === key);
  if (pair !== undefined) return pair;
  for (const merge of map.items) {
    // the parser reads a merge key as a scalar whose value is Symbol('<<')
    const isMergeKey = isScalar(merge.key) && String(merge.key.source ?? merge.key.value) === '<<';
    if (!isMergeKey) continue;
    const sources = isSeq(merge.value) ? merge.value.items : [merge.value];
    for (const source of sources) {
      const base = isAlias(source) ? source.resolve(doc) : source;
      const found = isMap(base) ? entryOf(doc, base, key) : undefined;
      if (found !== undefined) return found;
    }
  }
  return undefined;
}

/**
 * The runs of a config, in order: its stages (each the top level with the stage's overrides, resolved), or the
 * config itself as the only stage (stage_name '').
 */
export function resolveStages(config: Config): StageConfig[] {
  if (config.stages.length > 0) return config.stages;
  const { stages: _stages, trinity_keys: _trinityKeys, ...run } = config;
  return [{ ...run, stage_name: '' }];
}
