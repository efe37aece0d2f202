// A run's JSONL files (metrics.jsonl, eval_samples.jsonl, experience dumps) read in bounded chunks, for `trinity
// report` (./read.ts) and the Studio's incremental tails (src/studio/tail.ts) alike. Reading a file in one piece
// cost twice its size in memory (the bytes, then the string) and a 4 GiB file aborted the process (a Buffer or
// string past V8's limit); here memory is one chunk plus the line being assembled plus the parsed rows:
//
//   - bytes are read READ_CHUNK_BYTES at a time; each chunk's complete lines are parsed before the next is read
//   - a line longer than maxLineBytes is skipped up to its newline, with a warning naming file and line (the same
//     for any chunk size: a long line inside one chunk too)
//   - a file over maxFileBytes is not read at all: RunFileTooLargeError names it, its size and the limit, and the
//     caller shows that on the run instead of its rows
import type { FileHandle } from 'node:fs/promises';

export const READ_CHUNK_BYTES = 1024 * 1024;
/** A metrics line is a few hundred bytes, an eval sample a few pages: 16 MiB is no real line. */
export const MAX_LINE_BYTES = 16 * 1024 * 1024;
/** The largest run file read (its parsed rows take about as much memory again). */
export const MAX_RUN_FILE_BYTES = 512 * 1024 * 1024;

export interface ChunkLimits {
  chunkBytes?: number;
  maxLineBytes?: number;
  maxFileBytes?: number;
}

/** Parses complete lines; `firstLine` is the file's line number of the text's first line (for warnings). */
export type LineParser<T> = (text: string, file: string, warnings: string[], firstLine?: number) => T[];

export class RunFileTooLargeError extends Error {
  constructor(
    readonly file: string,
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(`${file} is ${formatBytes(bytes)}, over the ${formatBytes(limit)} a run file may have to be read: not read`);
    this.name = 'RunFileTooLargeError';
  }
}

const formatBytes = (bytes: number) =>
  bytes >= 1024 ** 3 ? `${(bytes / 1024 ** 3).toFixed(1)} GiB` : `${(bytes / 1024 ** 2).toFixed(1)} MiB`;

/** Throws RunFileTooLargeError when `size` is over the limit. */
export function checkRunFileSize(file: string, size: number, limits: ChunkLimits = {}): void {
  const limit = limits.maxFileBytes ?? MAX_RUN_FILE_BYTES;
  if (size > limit) throw new RunFileTooLargeError(file, size, limit);
}

const NEWLINE = Buffer.from('\n');
const tooLong = (file: string, line: number, limit: number) => `${file}:${line}: a line over ${limit} bytes: skipped`;

/**
 * Cuts bytes that arrive in chunks into complete lines: the bytes after the last newline wait for the next chunk
 * (at most maxLineBytes of them: a longer line is dropped up to its newline, with a warning).
 */
export class LineAssembler {
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  /** Dropping a line that grew past the limit, until its newline. */
  #dropping = false;
  /** The file's line number of the next line to complete. */
  #line = 1;

  constructor(
    readonly file: string,
    readonly maxLineBytes = MAX_LINE_BYTES,
  ) {}

  /** The complete lines that `chunk` ends (their text, with the line number of the first), or null when none. */
  push(chunk: Buffer, warnings: string[]): { text: string; firstLine: number } | null {
    let start = 0;
    if (this.#dropping) {
      // the rest of a dropped line goes up to its newline; it counts as one (skipped) line
      const newline = chunk.indexOf(0x0a);
      if (newline < 0) return null;
      start = newline + 1;
      this.#dropping = false;
      this.#line += 1;
    }
    const end = chunk.lastIndexOf(0x0a);
    if (end < start) {
      this.#hold(chunk.subarray(start), warnings);
      return null;
    }
    const head = chunk.subarray(start, end + 1);
    const firstLine = this.#line;
    // the complete lines, each over the limit replaced by an empty line (so the line numbers stay)
    const pieces: Buffer[] = [];
    let lineStart = 0;
    for (let i = head.indexOf(0x0a); i >= 0; i = head.indexOf(0x0a, i + 1)) {
      const held = lineStart === 0 ? this.#pending : [];
      const length = (lineStart === 0 ? this.#pendingBytes : 0) + i - lineStart;
      if (length > this.maxLineBytes) {
        warnings.push(tooLong(this.file, this.#line, this.maxLineBytes));
        pieces.push(NEWLINE);
      } else pieces.push(...held, head.subarray(lineStart, i + 1));
      this.#line += 1;
      lineStart = i + 1;
    }
    this.#pending = [];
    this.#pendingBytes = 0;
    this.#hold(chunk.subarray(end + 1), warnings);
    return { text: Buffer.concat(pieces).toString('utf8'), firstLine };
  }

  #hold(bytes: Buffer, warnings: string[]): void {
    if (bytes.length === 0) return;
    if (this.#pendingBytes + bytes.length > this.maxLineBytes) {
      warnings.push(tooLong(this.file, this.#line, this.maxLineBytes));
      this.#pending = [];
      this.#pendingBytes = 0;
      this.#dropping = true;
      return;
    }
    // copied: the chunk's buffer is reused for the next read
    this.#pending.push(Buffer.from(bytes));
    this.#pendingBytes += bytes.length;
  }
}

/**
 * Reads bytes [from, to) of an open file in chunks through `lines`, parsing each chunk's complete lines with
 * `parse`; returns the rows and the bytes read (less than to − from when the file was cut meanwhile).
 */
export async function readChunkedLines<T>(
  handle: FileHandle,
  from: number,
  to: number,
  lines: LineAssembler,
  parse: LineParser<T>,
  warnings: string[],
  limits: ChunkLimits = {},
): Promise<{ rows: T[]; bytesRead: number }> {
  const buffer = Buffer.alloc(Math.min(limits.chunkBytes ?? READ_CHUNK_BYTES, Math.max(1, to - from)));
  const rows: T[] = [];
  let offset = from;
  while (offset < to) {
    const { bytesRead } = await handle.read(buffer, 0, Math.min(buffer.length, to - offset), offset);
    if (bytesRead === 0) break;
    offset += bytesRead;
    const complete = lines.push(buffer.subarray(0, bytesRead), warnings);
    if (complete !== null) for (const row of parse(complete.text, lines.file, warnings, complete.firstLine)) rows.push(row);
  }
  return { rows, bytesRead: offset - from };
}
