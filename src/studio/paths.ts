// Every path the Studio opens for a request goes through here: a relative path from a request (a run id, a stage, a
// buffer file, a config to save) is checked for what a request may not say (NUL, absolute, '..'), then walked below
// the runs folder without leaving it (src/util/confined-path.ts: each symbolic link judged before it is followed,
// dangling ones included). Reads and writes open the walked real path O_NOFOLLOW and check the descriptor after the
// open. The answer is 403 for anything that leads outside, whether or not the file out there exists, and 404 only
// for a path that stays inside and names nothing.
import type { FileHandle } from 'node:fs/promises';
import { relative } from 'node:path';
import { READ_CHUNK_BYTES } from '../rft/report/jsonl-chunks.js';
import {
  ConfinedPathError,
  type ConfinedPath,
  openInside,
  resolveExistingInside,
  walkInside,
  writeInside,
} from '../util/confined-path.js';
import { HttpError } from './http-error.js';

export { isInside } from '../util/confined-path.js';

/** A request named something outside the runs folder, or something that does not exist: the HTTP status says which. */
export class StudioPathError extends Error {
  constructor(
    readonly status: 403 | 404,
    message: string,
  ) {
    super(message);
    this.name = 'StudioPathError';
  }
}

/** The Studio's answer to a walk's refusal: outside → 403, missing → 404. */
function asStudioError(error: unknown, relativePath: string): unknown {
  if (!(error instanceof ConfinedPathError)) return error;
  return error.problem === 'missing'
    ? new StudioPathError(404, `no such file or folder in the runs folder: '${relativePath}'`)
    : new StudioPathError(403, `path '${relativePath}' leads outside the runs folder (through a symbolic link)`);
}

/** Refuses what a request path may not say, whatever the folder holds. */
export function checkRequestPath(relativePath: string): void {
  if (relativePath.includes('\0')) throw new StudioPathError(403, `path '${relativePath}' holds a NUL character`);
  if (isAbsoluteAnywhere(relativePath))
    throw new StudioPathError(403, `path '${relativePath}' is absolute: give it relative to the runs folder`);
  if (relativePath.split(/[\\/]/).includes('..'))
    throw new StudioPathError(403, `path '${relativePath}' climbs out with '..': it must stay inside the runs folder`);
}

const isAbsoluteAnywhere = (path: string) => path.startsWith('/') || path.startsWith('\\') || /^[A-Za-z]:/.test(path);

/** `root` must already be a real path (realpath of the runs folder). Resolves `relativePath` inside it, or throws. */
export async function resolveInside(root: string, relativePath: string): Promise<string> {
  checkRequestPath(relativePath);
  try {
    return resolveExistingInside(root, relativePath);
  } catch (error) {
    throw asStudioError(error, relativePath);
  }
}

/** Where `relativePath` (checked as a request path) would be below `root`, existing or not; 403 when outside. */
export function walkRequestPath(root: string, relativePath: string): ConfinedPath {
  checkRequestPath(relativePath);
  try {
    return walkInside(root, relativePath);
  } catch (error) {
    throw asStudioError(error, relativePath);
  }
}

/** Opens a file the Studio found below the runs folder (an absolute path under `root`) for reading. */
export async function openUnderRoot(root: string, path: string): Promise<FileHandle> {
  const relativePath = relative(root, path);
  try {
    return await openInside(root, relativePath, path);
  } catch (error) {
    throw asStudioError(error, relativePath);
  }
}

/** Writes (or appends to) a file below the runs folder; `path` is absolute under `root`. Returns its real path. */
export function writeUnderRoot(
  root: string,
  path: string,
  data: string | Uint8Array,
  options: { append?: boolean } = {},
): string {
  const relativePath = relative(root, path);
  try {
    return writeInside(root, relativePath, data, { ...options, shown: path });
  } catch (error) {
    throw asStudioError(error, relativePath);
  }
}

/** A small file below the runs folder as text (a config, run_status.json); 413 when it is over `maxBytes`. */
export async function readTextUnderRoot(root: string, path: string, maxBytes: number): Promise<string> {
  const handle = await openUnderRoot(root, path);
  try {
    const { size } = await handle.stat();
    if (size > maxBytes)
      throw new HttpError(413, `${relative(root, path)} is ${size} bytes, over the ${maxBytes} the Studio reads of it`);
    return await handle.readFile('utf8');
  } finally {
    await handle.close();
  }
}

/** Lines with text in a file below the runs folder, counted in bounded chunks (a DPO file grows without end). */
export async function countLinesUnderRoot(root: string, path: string): Promise<number> {
  const handle = await openUnderRoot(root, path);
  try {
    const buffer = Buffer.alloc(READ_CHUNK_BYTES);
    let count = 0;
    let lineHasText = false;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, null);
      if (bytesRead === 0) break;
      for (let i = 0; i < bytesRead; i++) {
        const byte = buffer[i] as number;
        if (byte === 0x0a) {
          if (lineHasText) count += 1;
          lineHasText = false;
        } else if (byte !== 0x20 && byte !== 0x09 && byte !== 0x0d) lineHasText = true;
      }
    }
    return lineHasText ? count + 1 : count;
  } finally {
    await handle.close();
  }
}
