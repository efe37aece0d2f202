// The Studio's HTTP server (node:http, no framework): a route table (pages, static assets, the JSON API of ./api.ts),
// access control, and nothing else. Safe by default:
//   - it listens on 127.0.0.1 unless told otherwise; on loopback, a request whose Host is not a loopback name is
//     refused (a web page cannot reach it through DNS rebinding);
//   - on any other address every request needs the token printed at start: ?token=… once (it becomes an HttpOnly
//     cookie and the address bar loses it), or the cookie, or "Authorization: Bearer …";
//   - every path from a request is resolved inside the runs folder, symbolic links included (./paths.ts);
//   - it only reads: SQLite files are opened read-only, files are opened, read and closed (a run never waits for it).
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { realpathSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isLoopbackHost } from '../openai/server.js';
import { RunFileTooLargeError } from '../rft/report/jsonl-chunks.js';
import { apiRoutes } from './api.js';
import { configRoutes } from './config-builder.js';
import { feedbackRoutes } from './feedback.js';
import { launchRoutes } from './launches.js';
import { SourceCache, type StudioContext } from './context.js';
import { EventHub } from './events.js';
import { resolveInside, StudioPathError } from './paths.js';
import { PostgresSourceError } from './rollouts.js';
import { HttpError, matchPath, type Route } from './router.js';
import { RunIndex } from './runs.js';

export interface StudioOptions {
  /** The runs folder (a checkpoint_root_dir, a project folder or one job folder). */
  runsDir: string;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 8765; 0 picks a free port. */
  port?: number;
  /** Required on a non-loopback host (default: a random one is made there); null: no token (loopback only). */
  token?: string | null;
}

export interface StudioServer {
  server: Server;
  /** http://host:port */
  url: string;
  /** The URL to open: with ?token=… when a token is needed. */
  openUrl: string;
  token: string | null;
  context: StudioContext;
  close(): Promise<void>;
}

const COOKIE = 'trinity_studio_token';
/** The browser app: these files, as they are in the package. */
export const APP_DIR = join(dirname(fileURLToPath(import.meta.url)), 'app');
const UPLOT_DIR = dirname(createRequire(import.meta.url).resolve('uplot'));

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
};

async function sendFile(res: ServerResponse, file: string): Promise<undefined> {
  const body = await readFile(file);
  res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream', 'cache-control': 'no-cache' });
  res.end(body);
  return undefined;
}

/** Pages and assets: the app's shell for every page path, its files, and uPlot from node_modules. */
export const staticRoutes: Route[] = [
  ...['/', '/runs', '/curves', '/rollouts', '/buffer', '/config', '/launches', '/feedback'].map(
    (path): Route => ({
      method: 'GET',
      path,
      description: 'the app (one HTML shell; the page is chosen in the browser)',
      handle: ({ res }) => sendFile(res, join(APP_DIR, 'index.html')),
    }),
  ),
  {
    method: 'GET',
    path: '/app/*',
    description: "the app's scripts and styles (src/studio/app)",
    handle: async ({ res, params }) => sendFile(res, await resolveInside(realpathSync(APP_DIR), params['*'] as string)),
  },
  {
    method: 'GET',
    path: '/vendor/uplot.js',
    description: 'uPlot (npm package uplot), served from node_modules',
    handle: ({ res }) => sendFile(res, join(UPLOT_DIR, 'uPlot.iife.min.js')),
  },
  {
    method: 'GET',
    path: '/vendor/uplot.css',
    description: "uPlot's stylesheet",
    handle: ({ res }) => sendFile(res, join(UPLOT_DIR, 'uPlot.min.css')),
  },
];

/** Every route the server answers, in match order. */
export const routes: Route[] = [...staticRoutes, ...apiRoutes, ...configRoutes, ...launchRoutes, ...feedbackRoutes];

function sameToken(given: string | undefined, token: string): boolean {
  if (given === undefined) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

function cookie(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === name) return decodeURIComponent(v.join('='));
  }
  return undefined;
}

/** Whether the request may go on; answers it (401, 403, or the redirect that drops ?token) when not. */
function authorize(req: IncomingMessage, res: ServerResponse, url: URL, token: string | null, loopback: boolean): boolean {
  if (loopback) {
    const host = (req.headers.host ?? '').replace(/:\d+$/, '');
    if (!isLoopbackHost(host)) {
      fail(res, 403, `Host '${req.headers.host ?? ''}' is not this machine's loopback name: refused`);
      return false;
    }
  }
  if (token === null) return true;
  const fromQuery = url.searchParams.get('token');
  if (fromQuery !== null) {
    if (!sameToken(fromQuery, token)) {
      fail(res, 401, 'wrong token: open the address trinity studio printed');
      return false;
    }
    url.searchParams.delete('token');
    res.writeHead(303, {
      location: `${url.pathname}${url.search}`,
      'set-cookie': `${COOKIE}=${encodeURIComponent(token)}; HttpOnly; SameSite=Strict; Path=/`,
    });
    res.end();
    return false;
  }
  const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
  if (sameToken(cookie(req, COOKIE), token) || sameToken(bearer, token)) return true;
  fail(res, 401, 'this Studio needs its token: open the address trinity studio printed (with ?token=…)');
  return false;
}

function fail(res: ServerResponse, status: number, message: string): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
  res.end(JSON.stringify({ error: { status, message } }));
}

/** Starts the Studio over `options.runsDir`; resolves once it listens. */
export async function startStudio(options: StudioOptions): Promise<StudioServer> {
  const host = options.host ?? '127.0.0.1';
  const loopback = isLoopbackHost(host);
  let root: string;
  try {
    root = realpathSync(options.runsDir);
  } catch {
    throw new Error(`runs folder ${options.runsDir} does not exist (give --runs DIR: a checkpoint_root_dir or a job folder)`);
  }
  if (options.token === null && !loopback)
    throw new Error(`host ${host} is reachable from other machines: the Studio needs a token there`);
  if (options.token !== undefined && options.token !== null && options.token.length < 16)
    throw new Error('a Studio token must have at least 16 characters');
  const token = options.token === undefined ? (loopback ? null : randomBytes(24).toString('hex')) : options.token;
  const runs = new RunIndex(root);
  const context: StudioContext = { root, runs, sources: new SourceCache(root), events: new EventHub(runs) };

  const server = createServer((req, res) => {
    res.setHeader('x-content-type-options', 'nosniff');
    res.setHeader('referrer-policy', 'no-referrer');
    res.setHeader('x-frame-options', 'DENY');
    res.setHeader(
      'content-security-policy',
      "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'",
    );
    void handle(req, res);
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const url = new URL(req.url ?? '/', 'http://studio.invalid');
      if (!authorize(req, res, url, token, loopback)) return;
      let methodMismatch = false;
      for (const route of routes) {
        const params = matchPath(route.path, url.pathname);
        if (params === null) continue;
        if (route.method !== req.method) {
          methodMismatch = true;
          continue;
        }
        const body = await route.handle({ req, res, url, params, studio: context });
        if (body !== undefined) {
          res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' });
          res.end(JSON.stringify(body));
        }
        return;
      }
      if (methodMismatch) fail(res, 405, `${req.method} is not allowed on ${url.pathname}`);
      else fail(res, 404, `no such page or API route: ${url.pathname}`);
    } catch (error) {
      if (error instanceof HttpError || error instanceof StudioPathError) fail(res, error.status, error.message);
      // a run file over the read limit: named, and the request refused; the Studio goes on
      else if (error instanceof RunFileTooLargeError) fail(res, 413, error.message);
      // the buffer's database did not answer: the message names its server and database (never a password)
      else if (error instanceof PostgresSourceError) fail(res, 502, error.message);
      else fail(res, 500, (error as Error).message);
    }
  }

  await new Promise<void>((resolvePromise, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 8765, host, () => {
      server.off('error', reject);
      resolvePromise();
    });
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${shownHost}:${address.port}`;
  return {
    server,
    url,
    openUrl: token === null ? `${url}/` : `${url}/?token=${token}`,
    token,
    context,
    close: () =>
      new Promise<void>((resolvePromise) => {
        context.events.close();
        server.close(() => resolvePromise());
        server.closeAllConnections();
      }),
  };
}
