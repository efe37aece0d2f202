// The rows of a dataset split, whatever the files: the one reader behind tasksets and SFT/DPO datasets. The split's
// files come from ./split.ts (folders, subsets, shards, the hub cache), each file is read by its format:
//
//   .jsonl     one JSON value per line (./jsonl.ts)                          where: file:line
//   .json      a JSON array of rows, or JSON Lines (what Dataset.to_json writes into a .json file)
//                                                                           where: file[index] (0-based) / file:line
//   .parquet   ./parquet.ts                                                  where: file row n (1-based)
//
// `name` names a row in default ids (task ids, experience ids): its line / index / row number, prefixed with the
// file's path in the dataset folder when the split has several files.
import { extname } from 'node:path';
import { FileOpenError, fileErrorDetail, readRegularFileAsync } from '../../util/index.js';
import { JsonlError, readJsonl, stripBom } from './jsonl.js';
import { ParquetError, readParquet } from './parquet.js';
import { datasetFiles, relativeName, SplitError } from './split.js';

export interface DatasetLocation {
  /** The split to read (default 'train'). */
  split?: string;
  /** The subset (Hugging Face config name; Trinity's subset_name); null: the default one. */
  subset?: string | null;
}

export interface DatasetRow {
  /** The file the row is in. */
  file: string;
  /** Where the row is, for errors: file:line, file[index], or file row n. */
  where: string;
  /** The row's short name for default ids (see the header). */
  name: string;
  value: unknown;
}

/**
 * A dataset that cannot be read: `where` is the path, file or row; `resolving` is true when the split's files could
 * not be found (nothing was read yet).
 */
export class DatasetReadError extends Error {
  constructor(
    readonly where: string,
    readonly detail: string,
    readonly resolving: boolean,
  ) {
    super(`${where}: ${detail}`);
    this.name = 'DatasetReadError';
  }
}

/** The rows of one file, by its format (see the header). */
export async function* readFileRows(file: string): AsyncGenerator<{ where: string; key: string; value: unknown }> {
  const ext = extname(file).toLowerCase();
  try {
    if (ext === '.parquet') {
      for await (const { row, value } of readParquet(file)) yield { where: `${file} row ${row}`, key: String(row), value };
    } else if (ext === '.json') {
      let text: string;
      try {
        text = stripBom(await readRegularFileAsync(file, 'utf8'));
      } catch (error) {
        throw new DatasetReadError(file, `cannot read: ${fileErrorDetail(error)}`, false);
      }
      let rows: unknown;
      try {
        rows = JSON.parse(text);
      } catch {
        rows = undefined; // not one JSON value: JSON Lines, as Dataset.to_json writes
      }
      const oneObject = rows !== null && typeof rows === 'object' && !Array.isArray(rows) && !text.trim().includes('\n');
      if (Array.isArray(rows)) {
        for (const [i, value] of rows.entries()) yield { where: `${file}[${i}]`, key: String(i), value };
      } else if (rows === undefined || oneObject) {
        for await (const { line, value } of readJsonl(file)) yield { where: `${file}:${line}`, key: String(line), value };
      } else {
        throw new DatasetReadError(file, 'a .json dataset must hold an array of rows (or one JSON object per line)', false);
      }
    } else {
      for await (const { line, value } of readJsonl(file)) yield { where: `${file}:${line}`, key: String(line), value };
    }
  } catch (error) {
    if (error instanceof JsonlError) throw new DatasetReadError(`${error.file}:${error.line}`, detailOf(error), false);
    if (error instanceof ParquetError) throw new DatasetReadError(error.file, error.detail, false);
    if (error instanceof FileOpenError) throw new DatasetReadError(error.file, `cannot read: ${error.detail}`, false);
    throw error;
  }
}

const detailOf = (error: JsonlError): string => error.message.slice(`${error.file}:${error.line}: `.length);

/** The rows of a dataset's split (see the header); throws DatasetReadError naming the path, file or row. */
export async function* readDatasetRows(path: string, location: DatasetLocation = {}): AsyncGenerator<DatasetRow> {
  let root: string;
  let files: string[];
  try {
    ({ root, files } = datasetFiles(path, location.split ?? 'train', location.subset ?? null));
  } catch (error) {
    if (error instanceof SplitError) throw new DatasetReadError(error.where, error.detail, true);
    throw error;
  }
  for (const file of files) {
    const prefix = files.length === 1 ? '' : `${relativeName(root, file)}:`;
    for await (const { where, key, value } of readFileRows(file)) yield { file, where, name: `${prefix}${key}`, value };
  }
}
