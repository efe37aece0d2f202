// Request bodies and write targets of the Studio's POST routes (config builder, run control, feedback): JSON read
// with a size limit and checked by a zod schema (a bad field is a 400 naming it), and file paths the Studio may
// write, which must stay inside the runs folder even when they do not exist yet (./paths.ts).
import type { IncomingMessage } from 'node:http';
import { relative, sep } from 'node:path';
import type { z } from 'zod';
import { checkRequestPath, StudioPathError, walkRequestPath } from './paths.js';
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
 * one of `extensions`, walked as resolveInside (./paths.ts) walks, for a path that may not exist yet: a link on the
 * way that leads outside (dangling or not) is refused. Write it with writeUnderRoot, which does not follow a link
 * put in its place meanwhile.
 */
export function writeTarget(root: string, relativePath: string, extensions: readonly string[]): string {
  checkRequestPath(relativePath);
  const parts = relativePath.split(/[\\/]/);
  if (parts.some((p) => p.startsWith('.') && p !== '.'))
    throw new StudioPathError(403, `path '${relativePath}': names starting with '.' are the Studio's own`);
  if (!extensions.some((e) => relativePath.endsWith(e)))
    throw new StudioPathError(403, `path '${relativePath}' must end with ${extensions.join(' or ')}`);
  const { path } = walkRequestPath(root, relativePath);
  // a link inside the runs folder to another file: that file must be one the Studio may write as well
  if (!extensions.some((e) => path.endsWith(e)))
    throw new StudioPathError(
      403,
      `path '${relativePath}' is a link to ${relativeToRoot(root, path)}, not a ${extensions.join(' or ')} file`,
    );
  return path;
}

/** A path below the runs folder as the Studio names it ('/'-separated). */
export const relativeToRoot = (root: string, path: string): string => relative(root, path).split(sep).join('/');
