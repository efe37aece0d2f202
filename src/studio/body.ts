// Request bodies and write targets of the Studio's POST routes (config builder, run control, feedback): JSON read
// with a size limit and checked by a zod schema (a bad field is a 400 naming it), and file paths the Studio may
// write, which must stay inside the runs folder even when they do not exist yet.
import { existsSync, realpathSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { dirname, isAbsolute, join, relative, sep } from 'node:path';
import type { z } from 'zod';
import { isInside, StudioPathError } from './paths.js';
import { HttpError } from './router.js';

/** The largest POST body (a config's YAML is a few kB). */
export const MAX_BODY_BYTES = 1024 * 1024;

/** The request's JSON body, checked by `schema`; 400/413 naming what is wrong. */
export async function readJson<T extends z.ZodType>(req: IncomingMessage, schema: T): Promise<z.output<T>> {
  const type = req.headers['content-type'] ?? '';
  if (!type.startsWith('application/json')) throw new HttpError(415, `send the body as application/json (got '${type}')`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, `request body over ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  let value: unknown;
  try {
    value = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch (error) {
    throw new HttpError(400, `the body is not JSON: ${(error as Error).message}`);
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const at = issue?.path.length ? `'${issue.path.join('.')}': ` : '';
    throw new HttpError(400, `bad request body: ${at}${issue?.message ?? 'invalid'}`);
  }
  return parsed.data;
}

/**
 * The absolute path of a file the Studio may write: `relativePath` below the runs folder `root` (a real path), with
 * one of `extensions`. As resolveInside (./paths.ts) for a path that may not exist yet: no '..', not absolute, and
 * the nearest existing folder above it (and the file itself, if it exists) resolves inside the runs folder.
 */
export function writeTarget(root: string, relativePath: string, extensions: readonly string[]): string {
  if (relativePath.includes('\0')) throw new StudioPathError(403, `path '${relativePath}' holds a NUL character`);
  if (isAbsolute(relativePath) || /^[A-Za-z]:/.test(relativePath) || relativePath.startsWith('\\'))
    throw new StudioPathError(403, `path '${relativePath}' is absolute: give it relative to the runs folder`);
  const parts = relativePath.split(/[\\/]/);
  if (parts.includes('..'))
    throw new StudioPathError(403, `path '${relativePath}' climbs out with '..': it must stay inside the runs folder`);
  if (parts.some((p) => p.startsWith('.') && p !== '.'))
    throw new StudioPathError(403, `path '${relativePath}': names starting with '.' are the Studio's own`);
  if (!extensions.some((e) => relativePath.endsWith(e)))
    throw new StudioPathError(403, `path '${relativePath}' must end with ${extensions.join(' or ')}`);
  const path = join(root, relativePath);
  let existing = existsSync(path) ? path : dirname(path);
  while (!existsSync(existing)) existing = dirname(existing);
  const real = realpathSync(existing);
  if (!isInside(root, real))
    throw new StudioPathError(403, `path '${relativePath}' leads outside the runs folder (through a symbolic link)`);
  return existing === path ? real : join(real, relative(existing, path));
}

/** A path below the runs folder as the Studio names it ('/'-separated). */
export const relativeToRoot = (root: string, path: string): string => relative(root, path).split(sep).join('/');
