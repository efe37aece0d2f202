// Every path the Studio opens for a request goes through resolveInside: a relative path from a request (a run id,
// a stage, a buffer file) is joined to the runs folder, its symlinks are resolved, and it is refused unless the real
// path is the runs folder or below it. So "..", absolute paths, encoded slashes and links that point outside all end
// in the same refusal.
import { realpath } from 'node:fs/promises';
import { isAbsolute, join, sep } from 'node:path';

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

/** `root` must already be a real path (realpath of the runs folder). Resolves `relativePath` inside it, or throws. */
export async function resolveInside(root: string, relativePath: string): Promise<string> {
  if (relativePath.includes('\0')) throw new StudioPathError(403, `path '${relativePath}' holds a NUL character`);
  if (isAbsolute(relativePath) || /^[A-Za-z]:/.test(relativePath) || relativePath.startsWith('\\'))
    throw new StudioPathError(403, `path '${relativePath}' is absolute: give it relative to the runs folder`);
  if (relativePath.split(/[\\/]/).includes('..'))
    throw new StudioPathError(403, `path '${relativePath}' climbs out with '..': it must stay inside the runs folder`);
  let real: string;
  try {
    real = await realpath(join(root, relativePath));
  } catch {
    throw new StudioPathError(404, `no such file or folder in the runs folder: '${relativePath}'`);
  }
  if (!isInside(root, real))
    throw new StudioPathError(403, `path '${relativePath}' leads outside the runs folder (through a symbolic link)`);
  return real;
}

/** Whether `path` (a real path) is `root` or below it. */
export function isInside(root: string, path: string): boolean {
  return path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);
}
