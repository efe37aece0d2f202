// The files of a dataset split (Trinity-RFT's `split` of a taskset or dataset, read there with Hugging Face's
// `load_dataset(path, split=...)`). What this reads, a subset of Hugging Face's local-folder conventions:
//
//   path is a file          it is the 'train' split (any other split is an error)
//   path is a folder        the split's .jsonl / .json files, in name order, from the folder, its data/ subfolder,
//                           or a subfolder named after the split:
//                             <split>.jsonl               train.jsonl, test.json
//                             <split>[-_.]*.jsonl          train-00000-of-00002.jsonl (HF shards), test_part1.jsonl
//                             data/<split>[-_.]*.jsonl     the Hugging Face Hub layout
//                             <split>/*.jsonl
//                           when no file is named after any split (train, test, validation, ...), every file is the
//                           'train' split, as Hugging Face does.
// Parquet and other formats are refused with a message (convert them to JSONL).
import { readdirSync, statSync } from 'node:fs';
import { extname, join } from 'node:path';

const DATA_EXTENSIONS = new Set(['.jsonl', '.json']);
const OTHER_DATA_EXTENSIONS = new Set(['.parquet', '.csv', '.arrow']);
/** Hugging Face's split keywords (datasets.data_files): a file named after one of these belongs to a split. */
const SPLIT_NAMES = ['train', 'training', 'test', 'testing', 'eval', 'evaluation', 'validation', 'valid', 'val', 'dev'];

export class SplitError extends Error {
  constructor(
    readonly where: string,
    readonly detail: string,
  ) {
    super(`${where}: ${detail}`);
    this.name = 'SplitError';
  }
}

const stem = (name: string): string => name.slice(0, name.length - extname(name).length);
const namedAfter = (name: string, split: string): boolean => {
  const s = stem(name);
  return s === split || (s.startsWith(split) && /^[-_.]/.test(s.slice(split.length)));
};

function filesIn(dir: string): string[] {
  try {
    return readdirSync(dir)
      .filter((name) => statSync(join(dir, name)).isFile())
      .sort();
  } catch {
    return [];
  }
}

/** The data files of `split` under `path` (see the header); throws SplitError naming what was looked for. */
export function splitFiles(path: string, split: string): string[] {
  let info: ReturnType<typeof statSync>;
  try {
    info = statSync(path);
  } catch (error) {
    throw new SplitError(path, `cannot read: ${(error as Error).message}`);
  }
  const checkFormat = (file: string) => {
    const ext = extname(file).toLowerCase();
    if (OTHER_DATA_EXTENSIONS.has(ext)) {
      throw new SplitError(file, `${ext.slice(1)} files are not supported here: convert the rows to JSONL (.jsonl)`);
    }
  };
  if (info.isFile()) {
    checkFormat(path);
    if (split !== 'train') {
      throw new SplitError(
        path,
        `a single file is the 'train' split, not '${split}': point path at a folder holding ${split}.jsonl, or at that file with split 'train'`,
      );
    }
    return [path];
  }
  const top = filesIn(path);
  const data = filesIn(join(path, 'data')).map((name) => join('data', name));
  const sub = filesIn(join(path, split)).map((name) => join(split, name));
  const candidates = [...top, ...data];
  const baseName = (file: string) => file.replace(/^data\//, '');
  const isData = (file: string) => DATA_EXTENSIONS.has(extname(file).toLowerCase());
  let named = [...candidates.filter((file) => namedAfter(baseName(file), split)), ...sub];
  // no file named after any split: they all are the train split
  if (named.length === 0 && split === 'train' && !candidates.some((f) => SPLIT_NAMES.some((s) => namedAfter(baseName(f), s)))) {
    named = candidates;
  }
  for (const file of named) checkFormat(join(path, file));
  const chosen = named.filter(isData);
  if (chosen.length === 0) {
    const found = [...candidates, ...sub];
    throw new SplitError(
      path,
      `no .jsonl/.json files of split '${split}' (looked for ${split}.jsonl, ${split}-*.jsonl, data/${split}-*.jsonl, ` +
        `${split}/*.jsonl; found ${found.length > 0 ? found.join(', ') : 'no files'})`,
    );
  }
  return chosen.map((file) => join(path, file));
}
