// Opening a file whose path a user gave (a model folder's config.json and weights, a tokenizer, a dataset, a buffer
// dump) without ever blocking on it. A FIFO where a file should be makes a plain open() wait for a writer, holding the
// thread (and a SIGTERM handler that needs it) for ever; a device or a folder reads as nonsense or fails with an
// error that names no file. So the file is opened non-blocking (O_NONBLOCK: a FIFO's open returns at once), its kind
// checked on the open descriptor (no window for the path to change), and anything but a regular file refused with a
// message naming the path and what it is. Open failures are named too: a symlink loop is not "does not exist".
import { closeSync, constants, copyFileSync, fstatSync, openSync, readFileSync, type Stats, statSync } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';

/**
 * A path that cannot be opened as a regular file; `detail` says why without the path (for callers' own errors),
 * `code` is the errno code of a failed open or stat ('ENOENT', 'ELOOP', ...), null for a file of the wrong kind.
 */
export class FileOpenError extends Error {
  readonly file: string;
  readonly detail: string;
  readonly code: string | null;
  constructor(file: string, detail: string, code: string | null = null) {
    super(`${file}: ${detail}`);
    this.name = 'FileOpenError';
    this.file = file;
    this.detail = detail;
    this.code = code;
  }
}

/** FileOpenError for a failed open or stat of `file`. */
const openFailure = (file: string, error: unknown): FileOpenError =>
  new FileOpenError(file, describeFileError(error), (error as { code?: string }).code ?? null);

// O_NONBLOCK is POSIX; where it is missing (Windows) there are no FIFOs to block on
const READ_NONBLOCKING = constants.O_RDONLY | (constants.O_NONBLOCK ?? 0);

/** What a non-regular file is, in words ('a FIFO (named pipe)', 'a folder', ...); null for a regular file. */
export function nonRegularKind(stats: Stats): string | null {
  if (stats.isFile()) return null;
  if (stats.isDirectory()) return 'a folder';
  if (stats.isFIFO()) return 'a FIFO (named pipe)';
  if (stats.isSocket()) return 'a socket';
  if (stats.isCharacterDevice() || stats.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/**
 * An open or stat failure for a message: Node's (its code, what failed and the path), a symlink loop said in words
 * (existsSync calls one 'missing', and ELOOP's own text does not say loop).
 */
export function describeFileError(error: unknown): string {
  const message = (error as Error).message;
  return (error as { code?: string }).code === 'ELOOP' ? `a symbolic link loop (${message})` : message;
}

function refusal(file: string, stats: Stats): FileOpenError | null {
  const kind = nonRegularKind(stats);
  return kind === null ? null : new FileOpenError(file, `is ${kind}, not a regular file`);
}

/**
 * Whether `path` exists (links followed), for optional files: false only when nothing is there (ENOENT, ENOTDIR);
 * any other failure (a symlink loop, no permission) is a FileOpenError, where existsSync would call it missing.
 */
export function pathExists(path: string): boolean {
  try {
    statSync(path);
    return true;
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return false;
    throw openFailure(path, error);
  }
}

/** A read-only descriptor of `file`, which must be a regular file (else FileOpenError); the caller closes it. */
export function openRegularFile(file: string): number {
  let fd: number;
  try {
    fd = openSync(file, READ_NONBLOCKING);
  } catch (error) {
    throw openFailure(file, error);
  }
  let refused: FileOpenError | null;
  try {
    refused = refusal(file, fstatSync(fd));
  } catch (error) {
    closeSync(fd);
    throw openFailure(file, error);
  }
  if (refused !== null) {
    closeSync(fd);
    throw refused;
  }
  return fd;
}

/** Throws FileOpenError unless `file` opens as a regular file (for libraries that open the path themselves). */
export function checkRegularFile(file: string): void {
  closeSync(openRegularFile(file));
}

/** Copies the regular file `source` to `target` (FileOpenError for anything else: copying a FIFO would block). */
export function copyRegularFile(source: string, target: string): void {
  checkRegularFile(source);
  copyFileSync(source, target);
}

/** The contents of the regular file `file` (FileOpenError for anything else). */
export function readRegularFile(file: string): Buffer;
export function readRegularFile(file: string, encoding: BufferEncoding): string;
export function readRegularFile(file: string, encoding?: BufferEncoding): Buffer | string {
  const fd = openRegularFile(file);
  try {
    return encoding === undefined ? readFileSync(fd) : readFileSync(fd, encoding);
  } finally {
    closeSync(fd);
  }
}

/** openRegularFile's asynchronous twin: a promise FileHandle of the regular file `file`; the caller closes it. */
export async function openRegularFileHandle(file: string): Promise<FileHandle> {
  let handle: FileHandle;
  try {
    handle = await open(file, READ_NONBLOCKING);
  } catch (error) {
    throw openFailure(file, error);
  }
  let refused: FileOpenError | null;
  try {
    refused = refusal(file, await handle.stat());
  } catch (error) {
    refused = openFailure(file, error);
  }
  if (refused !== null) {
    await handle.close();
    throw refused;
  }
  return handle;
}

/** readRegularFile's asynchronous twin. */
export async function readRegularFileAsync(file: string, encoding: BufferEncoding): Promise<string> {
  const handle = await openRegularFileHandle(file);
  try {
    return await handle.readFile({ encoding });
  } finally {
    await handle.close();
  }
}

/** An error's text for a caller's own message: FileOpenError's detail (the caller names the file), else the message. */
export function fileErrorDetail(error: unknown): string {
  return error instanceof FileOpenError ? error.detail : (error as Error).message;
}
