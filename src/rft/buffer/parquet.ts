// Parquet dataset files (what `datasets` and pyarrow write, and what the Hugging Face hub serves) read into plain
// JSON-like rows with hyparquet, one row group at a time.
//
//   values    strings, numbers, booleans, null, lists and structs as arrays and objects (a `messages` column of
//             list<struct<role, content>> is a list of {role, content}); a null list or struct is null (hyparquet
//             leaves it undefined); INT64 is a number when it is a safe integer (|v| ≤ 2^53 − 1), else an error
//             naming the column; dates and timestamps are ISO 8601 text; binary values without a UTF-8 annotation
//             are text when they are valid UTF-8, else bytes (a Uint8Array: the encoded image of a Hugging Face
//             Image column's {bytes, path} struct)
//   codecs    uncompressed, snappy (pyarrow's default), gzip and brotli (node:zlib), LZ4_RAW (pyarrow's 'lz4'; the
//             block decoder below), zstd where node:zlib has it (Node ≥ 22.15); any other codec is an error naming
//             the column and the codec before a row is read
//   encodings dictionary pages, plain, RLE, delta and byte-stream-split pages, data pages v1 and v2 (hyparquet)
import type { FileHandle } from 'node:fs/promises';
import * as zlib from 'node:zlib';
import {
  type AsyncBuffer,
  type CompressionCodec,
  type Compressors,
  type FileMetaData,
  parquetMetadataAsync,
  parquetReadObjects,
  parquetSchema,
} from 'hyparquet';
import { fileErrorDetail, openRegularFileHandle } from '../../util/index.js';

export class ParquetError extends Error {
  constructor(
    readonly file: string,
    readonly detail: string,
  ) {
    super(`${file}: ${detail}`);
    this.name = 'ParquetError';
  }
}

export interface ParquetRow {
  /** 1-based row number in the file. */
  row: number;
  value: Record<string, unknown>;
}

/**
 * LZ4 block format (LZ4_RAW pages): sequences of [token][literal length+][literals][offset LE16][match length+];
 * token = literal length (high 4 bits) and match length − 4 (low 4 bits), 15 meaning "more bytes follow, each added,
 * until one below 255"; the last sequence has literals only. A match copies `length` bytes from `offset` back,
 * byte by byte (it may overlap what it writes).
 */
export function lz4BlockDecompress(input: Uint8Array, outputLength: number): Uint8Array {
  const out = new Uint8Array(outputLength);
  let ip = 0;
  let op = 0;
  const byte = (): number => {
    if (ip >= input.length) throw new Error('LZ4 block ends inside a sequence');
    return input[ip++] as number;
  };
  const length = (base: number): number => {
    let n = base;
    if (base === 15) {
      let b: number;
      do {
        b = byte();
        n += b;
      } while (b === 255);
    }
    return n;
  };
  while (ip < input.length) {
    const token = byte();
    const literals = length(token >> 4);
    if (ip + literals > input.length || op + literals > outputLength) throw new Error('LZ4 literals run past the block');
    out.set(input.subarray(ip, ip + literals), op);
    ip += literals;
    op += literals;
    if (ip >= input.length) break;
    const offset = byte() | (byte() << 8);
    const match = length(token & 15) + 4;
    if (offset === 0 || offset > op || op + match > outputLength) throw new Error('LZ4 match points outside the output');
    for (let i = 0; i < match; i++, op++) out[op] = out[op - offset] as number;
  }
  if (op !== outputLength) throw new Error(`LZ4 block decoded to ${op} bytes, the page header says ${outputLength}`);
  return out;
}

/** zlib's zstd decoder where this Node has one (22.15+), looked up so older Nodes still type-check and run. */
const zstdDecompressSync = (zlib as unknown as { zstdDecompressSync?: (input: Uint8Array) => Buffer }).zstdDecompressSync;

const COMPRESSORS: Compressors = {
  GZIP: (input) => zlib.gunzipSync(input),
  BROTLI: (input) => zlib.brotliDecompressSync(input),
  LZ4_RAW: lz4BlockDecompress,
  ...(zstdDecompressSync === undefined ? {} : { ZSTD: (input: Uint8Array) => zstdDecompressSync(input) }),
};
const SUPPORTED_CODECS = new Set<CompressionCodec>([
  'UNCOMPRESSED',
  'SNAPPY',
  ...(Object.keys(COMPRESSORS) as CompressionCodec[]),
]);

/** The codecs this process reads (for messages and docs). */
export const supportedParquetCodecs = (): string[] => [...SUPPORTED_CODECS];

function codecAdvice(codec: CompressionCodec): string {
  if (codec === 'ZSTD') return 'zstd needs Node 22.15 or newer (node:zlib); or rewrite the file with snappy';
  if (codec === 'LZ4') return "the deprecated Hadoop LZ4 framing; rewrite the file with snappy or pyarrow's 'lz4' (LZ4_RAW)";
  return 'rewrite the file with snappy';
}

/** A local file as hyparquet's AsyncBuffer: positioned reads on one open handle. */
function fileBuffer(handle: FileHandle, size: number): AsyncBuffer {
  return {
    byteLength: size,
    async slice(start: number, end = size): Promise<ArrayBuffer> {
      const bytes = new Uint8Array(Math.max(0, end - start));
      let done = 0;
      while (done < bytes.length) {
        const { bytesRead } = await handle.read(bytes, done, bytes.length - done, start + done);
        if (bytesRead === 0) throw new Error(`the file ended at byte ${start + done} (expected ${end})`);
        done += bytesRead;
      }
      return bytes.buffer;
    },
  };
}

/** A value of a row as JSON-like data (see the header); `at` names it in errors. */
function plain(value: unknown, at: () => string): unknown {
  if (value === undefined || value === null) return null;
  if (typeof value === 'bigint') {
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(-Number.MAX_SAFE_INTEGER)) {
      throw new Error(`${at()}: the integer ${value} is beyond ±(2^53 − 1), which a JavaScript number cannot hold exactly`);
    }
    return Number(value);
  }
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value.toISOString();
  if (value instanceof Uint8Array) return binaryValue(value);
  if (Array.isArray(value)) return value.map((v, i) => plain(v, () => `${at()}[${i}]`));
  if (typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v, () => `${at()}.${k}`)]));
  }
  return value;
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** An unannotated binary value: its text when it is valid UTF-8, else the bytes (see the header). */
function binaryValue(bytes: Uint8Array): string | Uint8Array {
  try {
    return UTF8.decode(bytes);
  } catch {
    return bytes;
  }
}

/** The codec problems of a file: per codec this process cannot decompress, the columns compressed with it. */
function unsupportedCodecs(metadata: FileMetaData): string[] {
  const columns = new Map<CompressionCodec, Set<string>>();
  for (const group of metadata.row_groups) {
    for (const chunk of group.columns) {
      const meta = chunk.meta_data;
      if (meta === undefined || SUPPORTED_CODECS.has(meta.codec)) continue;
      const names = columns.get(meta.codec) ?? new Set<string>();
      names.add(`'${meta.path_in_schema.join('.')}'`);
      columns.set(meta.codec, names);
    }
  }
  return [...columns].map(
    ([codec, names]) =>
      `${names.size === 1 ? 'column' : 'columns'} ${[...names].join(', ')} ${names.size === 1 ? 'is' : 'are'} compressed with ${codec} (${codecAdvice(codec)})`,
  );
}

/**
 * Streams the rows of a parquet file, one row group at a time, with their 1-based row numbers. Throws ParquetError
 * naming the file (and the column, for an unsupported codec or value) when the file cannot be read.
 */
export async function* readParquet(file: string): AsyncGenerator<ParquetRow> {
  let handle: FileHandle;
  try {
    handle = await openRegularFileHandle(file);
  } catch (error) {
    throw new ParquetError(file, `cannot read: ${fileErrorDetail(error)}`);
  }
  try {
    const { size } = await handle.stat();
    const magic = new Uint8Array(4);
    const head = size >= 12 ? (await handle.read(magic, 0, 4, 0)).bytesRead : 0;
    if (head < 4 || new TextDecoder().decode(magic) !== 'PAR1') {
      throw new ParquetError(file, `not a parquet file (${size} bytes; a parquet file starts and ends with 'PAR1')`);
    }
    const buffer = fileBuffer(handle, size);
    let metadata: FileMetaData;
    try {
      metadata = await parquetMetadataAsync(buffer);
    } catch (error) {
      throw new ParquetError(file, `cannot read the parquet footer (a damaged or cut-off file?): ${(error as Error).message}`);
    }
    const problems = unsupportedCodecs(metadata);
    if (problems.length > 0) {
      throw new ParquetError(file, `${problems.join('; ')}: this reader decompresses ${supportedParquetCodecs().join(', ')}`);
    }
    const columns = parquetSchema(metadata).children.map((c) => c.element.name);
    let start = 0;
    for (const group of metadata.row_groups) {
      const end = start + Number(group.num_rows);
      let rows: Record<string, unknown>[];
      try {
        rows = await parquetReadObjects({
          file: buffer,
          metadata,
          rowStart: start,
          rowEnd: end,
          compressors: COMPRESSORS,
          utf8: false, // annotated text stays text; other binary values: binaryValue
        });
      } catch (error) {
        throw new ParquetError(file, `cannot decode rows ${start + 1}-${end}: ${(error as Error).message}`);
      }
      for (const [i, raw] of rows.entries()) {
        const row = start + i + 1;
        const value: Record<string, unknown> = {};
        for (const column of columns) {
          try {
            value[column] = plain(raw[column], () => `column '${column}'`);
          } catch (error) {
            throw new ParquetError(file, `row ${row}: ${(error as Error).message}`);
          }
        }
        yield { row, value };
      }
      start = end;
    }
  } finally {
    await handle.close();
  }
}
