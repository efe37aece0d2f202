// Where a dataset's rows are: the files of a `split` (and `subset_name`) of a path, resolved the way Hugging Face's
// `datasets.load_dataset(path, subset_name, split=split)` resolves a local folder (Trinity-RFT reads tasksets and
// SFT/DPO datasets with it). One resolver for every kind of dataset: tasksets, SFT/DPO datasets, auxiliary buffers.
//
//   path       a file (the 'train' split, no subsets); a folder; a Hugging Face hub cache repo folder
//              (datasets--<org>--<name>, its snapshot: refs/main, else its only snapshot); or a hub id `<org>/<name>`
//              found in the local hub cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub). Nothing is
//              downloaded.
//   subsets    README.md's `configs:` metadata (what push_to_hub writes): each config_name's data_files
//              (`- split: train` / `path: main/train-*`, glob patterns) and data_dir; no subset_name: the config
//              marked `default: true`, else 'default', else the only one. Without that metadata a subset is the
//              subfolder of its name (datasets' data_dir).
//   splits     without `configs:` the first of these that finds files decides, as in datasets.data_files:
//                1. data/<split>-NNNNN-of-NNNNN.*             any split name (the hub's parquet layout)
//                2. a folder named after a split keyword       train/…, test-2024/…, data/my_eval/…
//                3. a file named after a split keyword          train.jsonl, train-00000-of-00002.parquet, x.test.json
//                4. everything is 'train'
//              keywords: train = train, training; validation = validation, valid, dev, val; test = test, testing,
//              eval, evaluation (a keyword is followed or preceded by one of -._ digits space, or is the whole name).
//              A split asked by a keyword reads its canonical split (split 'eval' reads test*, eval*, ...). A split
//              name that is no keyword (e.g. 'hard') also reads files and folders named after it (hard.jsonl,
//              hard-00000-of-00001.parquet, hard/…), a convenience datasets does not have.
//   files      .jsonl and .json (JSON Lines, or a JSON array), .parquet (./parquet.ts); shards in name order.
//              Hidden files and folders (.x) and __x folders are skipped, like datasets does. .csv/.tsv/.arrow are
//              refused with what to do; a split mixing JSON and parquet files is refused (datasets would silently keep
//              the more common format).
import { readdirSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, extname, join, sep } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { describeFileError, FileOpenError, fileErrorDetail, nonRegularKind, readRegularFile } from '../../util/index.js';

/** Extensions read here, by format family (a split must hold one family). */
const FORMATS: Readonly<Record<string, 'json' | 'parquet'>> = { '.jsonl': 'json', '.json': 'json', '.parquet': 'parquet' };
/** Data formats `datasets` reads that this reader does not: a split of them is refused with what to do. */
const OTHER_DATA_EXTENSIONS = new Set(['.csv', '.tsv', '.arrow', '.txt']);
/** datasets.data_files.SPLIT_KEYWORDS: the canonical splits and the file/folder names that belong to them. */
const SPLIT_KEYWORDS: Readonly<Record<string, readonly string[]>> = {
  train: ['train', 'training'],
  validation: ['validation', 'valid', 'dev', 'val'],
  test: ['test', 'testing', 'eval', 'evaluation'],
};
const CANONICAL: ReadonlyMap<string, string> = new Map(
  Object.entries(SPLIT_KEYWORDS).flatMap(([split, words]) => words.map((w) => [w, split] as const)),
);
/** datasets' NON_WORDS_CHARS (-._ space digits), plus '_' as the JSONL reader here always accepted. */
const SEP = '[-._ 0-9]';
/** Names that are files, not hub ids, when the path does not exist. */
const OTHER_FILE_EXTENSIONS = new Set(['.yaml', '.yml', '.db', '.sqlite', '.md']);
/** Files listed before giving up: a path at a home folder by mistake must not walk the disk. */
const MAX_FILES = 100_000;

export class SplitError extends Error {
  constructor(
    readonly where: string,
    readonly detail: string,
  ) {
    super(`${where}: ${detail}`);
    this.name = 'SplitError';
  }
}

export interface DatasetFiles {
  /** The folder the files were resolved in (a hub cache snapshot for a hub id), or the file itself. */
  root: string;
  /** The split's files, absolute or relative as `path` was, in read order. */
  files: string[];
}

const escapeRegex = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A keyword name rule: the whole name, or the keyword with a separator after it / separators around it. */
const keywordName = (word: string): RegExp =>
  new RegExp(`^(${escapeRegex(word)}(${SEP}.*)?|.*${SEP}${escapeRegex(word)}(${SEP}.*)?)$`);
const stemOf = (name: string): string => name.slice(0, name.length - extname(name).length);

/** Glob (fsspec / huggingface_hub style: `*` and `?` stay inside a path segment, `**` spans segments) as a regex. */
export function globToRegex(pattern: string): RegExp {
  let out = '';
  const p = pattern.replace(/^\.\//, '');
  for (let i = 0; i < p.length; i++) {
    const c = p[i] as string;
    if (c === '*' && p[i + 1] === '*') {
      const slash = p[i + 2] === '/';
      out += slash ? '(?:.*/)?' : '.*';
      i += slash ? 2 : 1;
    } else if (c === '*') out += '[^/]*';
    else if (c === '?') out += '[^/]';
    else if (c === '[') {
      const close = p.indexOf(']', i + 1);
      if (close < 0) out += '\\[';
      else {
        const body = p.slice(i + 1, close);
        out += `[${body.startsWith('!') ? `^${body.slice(1)}` : body.replace(/\\/g, '\\\\')}]`;
        i = close;
      }
    } else out += escapeRegex(c);
  }
  return new RegExp(`^${out}$`);
}

/** The files under `dir`, as '/'-separated relative paths in name order; hidden and __special folders skipped. */
function listFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    let names: string[];
    try {
      names = readdirSync(rel === '' ? dir : join(dir, rel)).sort();
    } catch {
      return;
    }
    for (const name of names) {
      if (name.startsWith('.') || name.startsWith('__')) continue;
      const path = rel === '' ? name : `${rel}/${name}`;
      let info: ReturnType<typeof statSync> | undefined;
      try {
        info = statSync(join(dir, path)); // follows the hub cache's symlinks into blobs/
      } catch {
        info = undefined; // a dangling link (a blob never downloaded) is listed and reported when read
      }
      if (info?.isDirectory()) walk(path);
      else out.push(path);
      if (out.length > MAX_FILES) {
        throw new SplitError(dir, `more than ${MAX_FILES} files under this folder: point path at the dataset's folder`);
      }
    }
  };
  walk('');
  return out.sort();
}

const isDataFile = (file: string): boolean => {
  const ext = extname(file).toLowerCase();
  return ext in FORMATS || OTHER_DATA_EXTENSIONS.has(ext);
};

/** datasets' split inference over a folder's data files (see the header): split name → files. */
export function inferSplits(files: readonly string[]): Map<string, string[]> {
  const splits = new Map<string, string[]>();
  const add = (split: string, file: string) => splits.set(split, [...(splits.get(split) ?? []), file]);
  // 1. data/{split}-NNNNN-of-NNNNN*.*
  for (const file of files) {
    const m = /^data\/([^/]+)-\d{5}-of-\d{5}[^/]*\.[^/]+$/.exec(file);
    if (m) add(m[1] as string, file);
  }
  if (splits.size > 0) return splits;
  // 2. folders, 3. file names, named after a keyword
  const byFolder = (file: string, word: RegExp) =>
    file
      .split('/')
      .slice(0, -1)
      .some((d) => word.test(d));
  const byName = (file: string, word: RegExp) => word.test(stemOf(basename(file)));
  for (const rule of [byFolder, byName]) {
    for (const [split, words] of Object.entries(SPLIT_KEYWORDS)) {
      const patterns = words.map(keywordName);
      for (const file of files) if (patterns.some((w) => rule(file, w))) add(split, file);
    }
    if (splits.size > 0) return splits;
  }
  // 4. everything is the train split
  if (files.length > 0) splits.set('train', [...files]);
  return splits;
}

/** Files named after a split that is no keyword (the convenience in the header). */
function namedAfter(files: readonly string[], split: string): string[] {
  const exact = new RegExp(`^${escapeRegex(split)}([-._ ].*)?$`);
  return files.filter((file) => {
    const parts = file.split('/');
    return exact.test(stemOf(parts.at(-1) as string)) || parts.slice(0, -1).some((d) => d === split);
  });
}

interface SubsetConfig {
  name: string;
  isDefault: boolean;
  dataDir: string | null;
  /** split → glob patterns, relative to the folder (and data_dir), or null: infer the splits. */
  dataFiles: Map<string, string[]> | null;
}

/** README.md's `configs:` metadata (datasets' dataset card), or null when the card has none. */
function readConfigs(dir: string): SubsetConfig[] | null {
  let text: string;
  try {
    text = readRegularFile(join(dir, 'README.md'), 'utf8');
  } catch (error) {
    if (error instanceof FileOpenError && error.code === 'ENOENT') return null; // no dataset card
    throw new SplitError(join(dir, 'README.md'), `cannot read the dataset card: ${fileErrorDetail(error)}`);
  }
  const m = /^---\r?\n([\s\S]*?)\r?\n---\s*(\r?\n|$)/.exec(text.replace(/^\uFEFF/, ''));
  if (!m) return null;
  const where = join(dir, 'README.md');
  let meta: unknown;
  try {
    meta = parseYaml(m[1] as string);
  } catch (error) {
    throw new SplitError(where, `the dataset card's YAML metadata does not parse: ${(error as Error).message}`);
  }
  const configs = (meta as { configs?: unknown } | null)?.configs;
  if (configs === undefined || configs === null) return null;
  if (!Array.isArray(configs)) throw new SplitError(where, "'configs' must be a list of {config_name, data_files}");
  const patterns = (value: unknown, at: string): string[] => {
    const list = Array.isArray(value) ? value : [value];
    if (list.length === 0 || list.some((p) => typeof p !== 'string' || p === '')) {
      throw new SplitError(where, `${at} must be a glob pattern or a list of them`);
    }
    return list as string[];
  };
  return configs.map((raw, i): SubsetConfig => {
    const c = raw as Record<string, unknown> | null;
    if (c === null || typeof c !== 'object') throw new SplitError(where, `configs[${i}] must be a mapping`);
    const name = typeof c.config_name === 'string' ? c.config_name : 'default';
    const at = `configs[${i}] (${name}).data_files`;
    let dataFiles: Map<string, string[]> | null = null;
    const files = c.data_files;
    if (typeof files === 'string' || (Array.isArray(files) && files.every((f) => typeof f === 'string'))) {
      dataFiles = new Map([['train', patterns(files, at)]]);
    } else if (Array.isArray(files)) {
      dataFiles = new Map();
      for (const [j, entry] of files.entries()) {
        const e = entry as { split?: unknown; path?: unknown } | null;
        if (e === null || typeof e !== 'object' || typeof e.split !== 'string') {
          throw new SplitError(where, `${at}[${j}] must be {split, path}`);
        }
        dataFiles.set(e.split, [...(dataFiles.get(e.split) ?? []), ...patterns(e.path, `${at}[${j}].path`)]);
      }
    } else if (files !== null && typeof files === 'object') {
      dataFiles = new Map(Object.entries(files).map(([split, p]) => [split, patterns(p, `${at}.${split}`)]));
    } else if (files !== undefined && files !== null) {
      throw new SplitError(where, `${at} must be a pattern, a list, or a list of {split, path}`);
    }
    const dataDir = typeof c.data_dir === 'string' ? c.data_dir.replace(/\/+$/, '') : null;
    return { name, isDefault: c.default === true, dataDir, dataFiles };
  });
}

/** The hub cache folders to look in, in huggingface_hub's order. */
function hubCacheDirs(): string[] {
  const env = process.env;
  const dirs = [
    env.HF_HUB_CACHE,
    env.HUGGINGFACE_HUB_CACHE,
    env.HF_HOME ? join(env.HF_HOME, 'hub') : undefined,
    join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'huggingface', 'hub'),
  ];
  return [...new Set(dirs.filter((d): d is string => d !== undefined && d !== ''))];
}

const isDir = (path: string): boolean => {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
};

/** A hub cache repo folder's snapshot: the revision refs/main names, else the only one. */
function snapshotOf(repo: string): string {
  let revision: string | undefined;
  try {
    revision = readRegularFile(join(repo, 'refs', 'main'), 'utf8').trim();
  } catch {
    revision = undefined;
  }
  if (revision !== undefined && isDir(join(repo, 'snapshots', revision))) return join(repo, 'snapshots', revision);
  let snapshots: string[] = [];
  try {
    snapshots = readdirSync(join(repo, 'snapshots')).filter((s) => isDir(join(repo, 'snapshots', s)));
  } catch {
    snapshots = [];
  }
  if (snapshots.length === 1) return join(repo, 'snapshots', snapshots[0] as string);
  throw new SplitError(
    repo,
    revision !== undefined
      ? `refs/main names revision ${revision}, which has no snapshots/${revision} folder (found ${snapshots.join(', ') || 'none'})`
      : snapshots.length === 0
        ? 'a Hugging Face hub cache folder without snapshots: the download did not finish'
        : `several snapshots and no refs/main: point path at one of ${snapshots.map((s) => join(repo, 'snapshots', s)).join(', ')}`,
  );
}

/** `path` as a file or folder on disk: itself, a hub cache repo folder's snapshot, or a hub id's cached snapshot. */
export function resolveDatasetPath(path: string): { path: string; isFile: boolean } {
  let info: ReturnType<typeof statSync> | undefined;
  try {
    info = statSync(path);
  } catch (error) {
    const code = (error as { code?: string }).code;
    const hubId =
      /^[A-Za-z0-9][\w.-]*(\/[A-Za-z0-9][\w.-]*)?$/.test(path) &&
      !path.includes('..') &&
      !isDataFile(path) &&
      !OTHER_FILE_EXTENSIONS.has(extname(path).toLowerCase());
    if (code === 'ENOENT' && hubId) {
      const repoName = `datasets--${path.replace('/', '--')}`;
      const dirs = hubCacheDirs();
      for (const dir of dirs) {
        if (isDir(join(dir, repoName))) return { path: snapshotOf(join(dir, repoName)), isFile: false };
      }
      throw new SplitError(
        path,
        `cannot read: ${(error as Error).message}; as a Hugging Face hub id: no cache entry ${repoName} in ${dirs.join(', ')} ` +
          '(datasets are not downloaded here: fetch it where there is a network, e.g. `hf download --repo-type dataset ' +
          `${path}\`, and copy the cache or the folder)`,
      );
    }
    throw new SplitError(path, `cannot read: ${describeFileError(error)}`);
  }
  if (info.isFile()) return { path, isFile: true };
  // a FIFO read as a folder would list nothing ('no data files'), and opened as a file would block
  if (!info.isDirectory()) throw new SplitError(path, `is ${nonRegularKind(info)}, not a data file or a folder`);
  if (/^(datasets|models|spaces)--/.test(basename(path)) && isDir(join(path, 'snapshots'))) {
    return { path: snapshotOf(path), isFile: false };
  }
  return { path, isFile: false };
}

/** The splits found, train / validation / test first (datasets' order), then the others by name. */
const describeSplits = (splits: ReadonlyMap<string, readonly string[]>): string => {
  const rank = (s: string) => {
    const i = Object.keys(SPLIT_KEYWORDS).indexOf(s);
    return i < 0 ? 3 : i;
  };
  const sorted = [...splits].sort(([a], [b]) => rank(a) - rank(b) || a.localeCompare(b));
  return sorted.length === 0
    ? 'no data files'
    : sorted.map(([s, f]) => `${s} (${f.length} ${f.length === 1 ? 'file' : 'files'})`).join(', ');
};

/** The subset's config: the named one, or the default (see the header). */
function chooseSubset(configs: readonly SubsetConfig[], subset: string | null, where: string): SubsetConfig {
  const names = configs.map((c) => c.name).join(', ');
  if (subset !== null) {
    const found = configs.find((c) => c.name === subset);
    if (found === undefined) throw new SplitError(where, `no subset '${subset}' (subset_name): the dataset has ${names}`);
    return found;
  }
  const chosen =
    configs.find((c) => c.isDefault) ??
    configs.find((c) => c.name === 'default') ??
    (configs.length === 1 ? configs[0] : undefined);
  if (chosen === undefined) throw new SplitError(where, `the dataset has subsets ${names}: choose one with subset_name`);
  return chosen;
}

/** Checks that the chosen files are of one readable format; returns them. */
function checkFormats(files: readonly string[], where: string, split: string): void {
  const other = files.filter((f) => OTHER_DATA_EXTENSIONS.has(extname(f).toLowerCase()));
  if (other.length > 0) {
    const kinds = [...new Set(other.map((f) => extname(f).slice(1).toLowerCase()))].join('/');
    throw new SplitError(
      where,
      `split '${split}' has ${kinds} files (${other.slice(0, 3).join(', ')}${other.length > 3 ? ', ...' : ''}), which ` +
        'are not read here: convert the rows to JSONL or parquet',
    );
  }
  const families = new Set(files.map((f) => FORMATS[extname(f).toLowerCase()]));
  if (families.size > 1) {
    throw new SplitError(
      where,
      `split '${split}' mixes JSON and parquet files (${files.join(', ')}): keep one format, or point path at one file`,
    );
  }
}

/**
 * The data files of `split` (and `subset`) of `path` (see the header); throws SplitError naming what is missing and
 * what was found (the splits, the subsets).
 */
export function datasetFiles(path: string, split = 'train', subset: string | null = null): DatasetFiles {
  const resolved = resolveDatasetPath(path);
  if (resolved.isFile) {
    if (subset !== null && subset !== 'default') {
      throw new SplitError(path, `a single file has no subsets (subset_name '${subset}'): point path at the dataset's folder`);
    }
    if (split !== 'train') {
      throw new SplitError(
        path,
        `a single file is the 'train' split, not '${split}': point path at a folder holding ${split} files, or at that file with split 'train'`,
      );
    }
    checkFormats([path], path, split);
    if (!(extname(path).toLowerCase() in FORMATS)) {
      throw new SplitError(path, `not a dataset file: this reader takes .jsonl, .json and .parquet files`);
    }
    return { root: path, files: [path] };
  }
  let root = resolved.path;
  const configs = readConfigs(root);
  let splits: Map<string, string[]>;
  let where = root;
  if (configs !== null && configs.length > 0) {
    const config = chooseSubset(configs, subset, join(root, 'README.md'));
    where = `${root} (subset '${config.name}')`;
    const base = config.dataDir === null ? '' : `${config.dataDir}/`;
    const all = listFiles(root);
    if (config.dataFiles === null) {
      splits = inferSplits(all.filter((f) => f.startsWith(base) && isDataFile(f)).map((f) => f.slice(base.length)));
      splits = new Map([...splits].map(([s, fs]) => [s, fs.map((f) => base + f)]));
    } else {
      splits = new Map();
      for (const [name, patterns] of config.dataFiles) {
        const regexes = patterns.map((p) => globToRegex(base + p));
        const matched = all.filter((f) => regexes.some((r) => r.test(f)));
        if (matched.length === 0) {
          throw new SplitError(
            join(root, 'README.md'),
            `subset '${config.name}' split '${name}': no file matches ${patterns.map((p) => base + p).join(', ')}`,
          );
        }
        splits.set(name, matched);
      }
    }
  } else {
    if (subset !== null && subset !== 'default') {
      if (!isDir(join(root, subset))) {
        const folders = readdirSafe(root).filter((d) => !d.startsWith('.') && isDir(join(root, d)));
        throw new SplitError(
          root,
          `no subset '${subset}' (subset_name): the folder has no README.md 'configs:' metadata and no subfolder ` +
            `'${subset}' (subfolders: ${folders.join(', ') || 'none'})`,
        );
      }
      root = join(root, subset);
      where = root;
    }
    const files = listFiles(root).filter(isDataFile);
    splits = inferSplits(files);
    const canonical = CANONICAL.get(split) ?? split;
    if (!splits.has(canonical) && !CANONICAL.has(split)) {
      const named = namedAfter(files, split);
      if (named.length > 0) splits.set(split, named);
    }
  }
  const canonical = splits.has(split) ? split : (CANONICAL.get(split) ?? split);
  const chosen = splits.get(canonical);
  if (chosen === undefined || chosen.length === 0) {
    throw new SplitError(where, `no split '${split}': the dataset has ${describeSplits(splits)}`);
  }
  checkFormats(chosen, where, split);
  const files = chosen.filter((f) => extname(f).toLowerCase() in FORMATS).map((f) => join(root, ...f.split('/')));
  return { root, files };
}

function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir).sort();
  } catch {
    return [];
  }
}

/** The data files of `split` of `path` (see datasetFiles). */
export function splitFiles(path: string, split: string, subset: string | null = null): string[] {
  return datasetFiles(path, split, subset).files;
}

/** `file` relative to `root` with '/' separators (names rows in ids and errors). */
export const relativeName = (root: string, file: string): string =>
  file.startsWith(root + sep)
    ? file
        .slice(root.length + 1)
        .split(sep)
        .join('/')
    : basename(file);
