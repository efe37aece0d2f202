// The route table's types and matcher. A route is data: a method, a path pattern and a handler. Patterns are
// '/'-separated; ':name' matches one segment (percent-decoded, so a run id 'proj/name' travels as 'proj%2Fname'), and
// a final '*' matches the rest of the path. A handler returns the JSON body, or `undefined` when it wrote the reply
// itself (static files, server-sent events).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { StudioContext } from './context.js';
import { HttpError } from './http-error.js';

// A handler fails with an HttpError (./http-error.ts): re-exported so that handlers import the route types, the query
// readers and the error from one place.
export { HttpError };

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

export interface RouteRequest {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  /** The pattern's :params (and '*' for the rest of the path), decoded. */
  params: Readonly<Record<string, string>>;
  studio: StudioContext;
}

export interface Route {
  method: Method;
  path: string;
  /** One line for docs/studio.md and the route listing. */
  description: string;
  handle(request: RouteRequest): Promise<unknown> | unknown;
}

/** The :params of `pattern` in `pathname`, or null when it does not match. */
export function matchPath(pattern: string, pathname: string): Record<string, string> | null {
  const want = pattern.split('/');
  const got = pathname.split('/');
  const params: Record<string, string> = {};
  for (let i = 0; i < want.length; i++) {
    const part = want[i] as string;
    if (part === '*' && i === want.length - 1) {
      params['*'] = got.slice(i).map(decodeSegment).join('/');
      return params;
    }
    const segment = got[i];
    if (segment === undefined) return null;
    if (part.startsWith(':')) {
      if (segment === '') return null;
      params[part.slice(1)] = decodeSegment(segment);
    } else if (part !== segment) return null;
  }
  return got.length === want.length ? params : null;
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new HttpError(400, `bad percent-encoding in path segment '${segment}'`);
  }
}

/** Query parameters, typed; a malformed value is a 400 naming it. */
export const query = {
  string(url: URL, name: string): string | undefined {
    return url.searchParams.get(name) ?? undefined;
  },
  required(url: URL, name: string): string {
    const value = url.searchParams.get(name);
    if (value === null || value === '') throw new HttpError(400, `query parameter '${name}' is required`);
    return value;
  },
  number(url: URL, name: string, bounds: { min?: number; max?: number; integer?: boolean } = {}): number | undefined {
    const text = url.searchParams.get(name);
    if (text === null || text === '') return undefined;
    const value = Number(text);
    const { min = Number.NEGATIVE_INFINITY, max = Number.POSITIVE_INFINITY, integer = false } = bounds;
    if (!Number.isFinite(value) || value < min || value > max || (integer && !Number.isInteger(value)))
      throw new HttpError(
        400,
        `query parameter '${name}' must be ${integer ? 'an integer' : 'a number'} in [${min}, ${max}], got '${text}'`,
      );
    return value;
  },
  boolean(url: URL, name: string): boolean | undefined {
    const text = url.searchParams.get(name);
    if (text === null || text === '' || text === 'any') return undefined;
    if (text === 'true' || text === '1' || text === 'yes') return true;
    if (text === 'false' || text === '0' || text === 'no') return false;
    throw new HttpError(400, `query parameter '${name}' must be true, false or any, got '${text}'`);
  },
};
