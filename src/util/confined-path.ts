// Files inside a root folder that a request names, opened without ever leaving the root: the Studio's runs folder
// (src/studio/paths.ts) and `trinity serve`'s reload root (src/serve/serve-model.ts) go through here.
//
// The path is walked one component at a time from the root, as the kernel would, but each symbolic link is read
// (lstat + readlink) and judged before it is followed: a link whose target leaves the root is refused whether or not
// the target exists. So a dangling link out of the root cannot be written through, and a read through a link out of
// the root answers "outside" for a file that exists there and for one that does not alike (403 vs 404 says nothing
// about the world outside). ".." is followed as the kernel does (the parent of the real folder reached so far) and
// refused at the root; links are followed at most MAX_LINKS times (a loop is refused, not hung on).
//
// What the walk returns is a real path: every component is a real folder, none a link. Opening it then adds
// O_NOFOLLOW (a link put in the file's place since the walk is not followed) and checks after the open that the file
// descriptor is the file the walk found (/proc/self/fd on Linux, device and inode elsewhere), so a folder swapped for
// a link between the walk and the open is refused too. A write never creates a file through a link: missing folders
// are made one at a time below the real folder the walk reached, the file is created O_NOFOLLOW, checked, and only
// then truncated or written.
import {
  closeSync,
  constants,
  fstatSync,
  ftruncateSync,
  lstatSync,
  mkdirSync,
  openSync,
  readlinkSync,
  realpathSync,
  statSync,
  writeSync,
} from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import { dirname, isAbsolute, join, sep } from 'node:path';

/** Links followed on one walk before it is called a loop (Linux's own limit). */
const MAX_LINKS = 40;
/** O_NOFOLLOW where the platform has it (not Windows: the check after the open covers it there). */
const NOFOLLOW = constants.O_NOFOLLOW ?? 0;

/** outside: the path leads out of the root (or loops); missing: it stays inside but names nothing. */
export type ConfinedPathProblem = 'outside' | 'missing';

export class ConfinedPathError extends Error {
  constructor(
    readonly problem: ConfinedPathProblem,
    message: string,
  ) {
    super(message);
    this.name = 'ConfinedPathError';
  }
}

export interface ConfinedPath {
  /** The real path (no component a link), inside the root. */
  path: string;
  /** The components below `existing` that do not exist yet (empty when the path exists). */
  missing: string[];
  /** The deepest existing real folder or file of the path. */
  existing: string;
}

/** Whether `path` (a real path) is `root` or below it. */
export function isInside(root: string, path: string): boolean {
  return path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);
}

/** Whether something (a file, a folder, a link, dangling or not) is at `path`: a link is judged, not looked past. */
export function pathPresent(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

const parts = (path: string) => path.split(/[\\/]/).filter((p) => p !== '' && p !== '.');

/**
 * Walks `relativePath` below `root` (a real path) as described in the header. `shown` names the path in messages.
 * A path that does not exist is returned with its missing tail; the caller decides whether that is an error.
 */
export function walkInside(root: string, relativePath: string, shown = relativePath, rootName = root): ConfinedPath {
  const rootParts = parts(root);
  // components still to walk, the next one last
  const todo = parts(relativePath).reverse();
  let current = root;
  let links = 0;
  const outside = (why: string) => new ConfinedPathError('outside', `${shown} ${why}, outside ${rootName}`);
  while (todo.length > 0) {
    const name = todo.pop() as string;
    if (name === '..') {
      if (current === root) throw outside('climbs out with ..');
      current = dirname(current);
      continue;
    }
    const next = join(current, name);
    let info: ReturnType<typeof lstatSync>;
    try {
      info = lstatSync(next);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw error;
      return missingTail(root, current, [name, ...todo.reverse()], outside);
    }
    if (info.isSymbolicLink()) {
      if (++links > MAX_LINKS) throw outside(`goes through more than ${MAX_LINKS} symbolic links (a loop)`);
      const target = readlinkSync(next);
      if (isAbsolute(target)) {
        // an absolute target must start with the root's own components: it is then walked from the root
        const targetParts = parts(target);
        if (!rootParts.every((p, i) => targetParts[i] === p)) throw outside(`resolves to ${target}`);
        current = root;
        todo.push(...targetParts.slice(rootParts.length).reverse());
      } else todo.push(...parts(target).reverse());
      continue;
    }
    if (todo.length > 0 && !info.isDirectory()) return missingTail(root, current, [name, ...todo.reverse()], outside);
    current = next;
  }
  return { path: current, missing: [], existing: current };
}

/** Below a component that does not exist nothing is a link: the rest is joined by name, '..' taking one back. */
function missingTail(root: string, existing: string, rest: string[], outside: (why: string) => ConfinedPathError): ConfinedPath {
  const missing: string[] = [];
  let base = existing;
  for (const name of rest) {
    if (name !== '..') missing.push(name);
    else if (missing.length > 0) missing.pop();
    else if (base === root) throw outside('climbs out with ..');
    else base = dirname(base);
  }
  return { path: join(base, ...missing), missing, existing: base };
}

/** The real path of an existing file or folder below `root`; ConfinedPathError (outside / missing) else. */
export function resolveExistingInside(root: string, relativePath: string, shown = relativePath, rootName = root): string {
  const found = walkInside(root, relativePath, shown, rootName);
  if (found.missing.length > 0) throw new ConfinedPathError('missing', `${shown}: no such file or folder`);
  return found.path;
}

/** The path the open file descriptor `fd` has now (Linux: /proc/self/fd), or null where that cannot be asked. */
function pathOfDescriptor(fd: number): string | null {
  try {
    return readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return null;
  }
}

/** Throws unless `fd` is the file at the real path `path` (see the header). */
function checkOpened(fd: number, path: string, shown: string): void {
  const opened = pathOfDescriptor(fd);
  let same: boolean;
  if (opened !== null) same = opened === path;
  else {
    const a = fstatSync(fd);
    let b: ReturnType<typeof statSync> | null = null;
    try {
      b = realpathSync(path) === path ? statSync(path) : null;
    } catch {
      b = null;
    }
    same = b !== null && a.dev === b.dev && a.ino === b.ino;
  }
  if (!same) throw new ConfinedPathError('outside', `${shown} changed into a link while it was opened: refused`);
}

/** Opens an existing file below `root` for reading (async); the caller closes the handle. */
export async function openInside(root: string, relativePath: string, shown = relativePath): Promise<FileHandle> {
  const path = resolveExistingInside(root, relativePath, shown);
  let handle: FileHandle;
  try {
    handle = await open(path, constants.O_RDONLY | NOFOLLOW);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ELOOP')
      throw new ConfinedPathError('outside', `${shown} changed into a link while it was opened: refused`);
    throw error;
  }
  try {
    checkOpened(handle.fd, path, shown);
    if (!(await handle.stat()).isFile()) throw new ConfinedPathError('missing', `${shown} is a folder, not a file`);
  } catch (error) {
    await handle.close();
    throw error;
  }
  return handle;
}

/**
 * Writes `data` to a file below `root` (replacing it, or appended with `append`), making missing folders; the file
 * and every folder are created below real folders of the root only (see the header). Returns the real path.
 */
export function writeInside(
  root: string,
  relativePath: string,
  data: string | Uint8Array,
  options: { append?: boolean; shown?: string } = {},
): string {
  const shown = options.shown ?? relativePath;
  const found = walkInside(root, relativePath, shown);
  let folder = found.existing;
  for (const name of found.missing.slice(0, -1)) {
    folder = join(folder, name);
    try {
      mkdirSync(folder);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      // made meanwhile: a real folder is fine, a link put there is not followed
      if (!lstatSync(folder).isDirectory()) throw new ConfinedPathError('outside', `${shown}: ${folder} is not a folder`);
    }
  }
  const path = found.path;
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | NOFOLLOW | (options.append ? constants.O_APPEND : 0), 0o666);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ELOOP')
      throw new ConfinedPathError('outside', `${shown} is a symbolic link: refused`);
    throw error;
  }
  try {
    checkOpened(fd, path, shown);
    if (!options.append) ftruncateSync(fd, 0);
    const bytes = typeof data === 'string' ? Buffer.from(data) : data;
    let written = 0;
    while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
  } finally {
    closeSync(fd);
  }
  return path;
}
