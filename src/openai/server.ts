// The OpenAI-compatible HTTP server (node:http) over an OpenAIService.
//
//   GET  /health                      200 {"status":"ok"} (no key needed)
//   GET  /v1/models                   the served model (and aliases)
//   POST /v1/chat/completions         JSON or server-sent events (stream: true)
//   POST /v1/completions              JSON or server-sent events
//   POST /update_weights_from_disk    {model_path}: reload weights (SGLang's API), only with `reloadWeights` set and
//                                     only for paths inside its root
//   + routes the caller adds (serve mode's /feedback)
//   /s/<scope>/v1/...                 the same API within a scope (the explorer gives each workflow run its own,
//                                     so its calls are recorded into that run's conversations)
//   /v1/... with `keyScopes`          the API key picks the scope (a recording workflow's per-run key, given to a
//                                     black-box agent as OPENAI_API_KEY): an unknown, revoked or missing key is a
//                                     401, so runs never mix; /v1/completions is refused there (only chat calls are
//                                     recorded, and every call with a run's key must be)
//
// Safe by default: listens on 127.0.0.1; with an API key every route but /health needs `Authorization: Bearer <key>`
// (else 401); bodies over maxBodyBytes get 413; every error is OpenAI's JSON error shape; a request never names a
// file (models are the ones loaded). A client that disconnects cancels its generation.
//
// Web pages the user visits must not drive the server (a keyless loopback server trusts its machine, not its browser):
//   - POST bodies must be Content-Type: application/json (else 415): a page can send text/plain or form bodies
//     cross-origin without a CORS preflight, but not JSON;
//   - a request with an Origin header whose host is not loopback (a page of another site) gets 403;
//   - on a loopback address, the Host header must name a loopback host with this server's port (else 403): a
//     DNS-rebinding page reaches 127.0.0.1 under its own name, so its requests carry that name.
import { isIP } from 'node:net';
import { timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isAbsolute, relative, resolve } from 'node:path';
import { checkRequestLimits } from './limits.js';
import { asHttpError, OpenAIHttpError } from './protocol.js';
import type { OpenAIService, RequestScope, ServiceReply } from './service.js';
import { writeEventStream } from './streaming.js';

export interface ExtraRoute {
  method: 'GET' | 'POST';
  path: string;
  /** Returns the JSON body to answer with (status 200), or throws an OpenAIHttpError. */
  handle: (body: unknown) => Promise<unknown> | unknown;
}

export interface OpenAIServerOptions {
  service: OpenAIService;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0 (any free port). */
  port?: number;
  /** Bearer token every request (but /health) must carry; null/undefined: none. */
  apiKey?: string | null;
  /** Largest request body in bytes (default 1 MiB). */
  maxBodyBytes?: number;
  /** Scopes by id for /s/<id>/v1/...; unknown ids get 404. */
  scopes?: ReadonlyMap<string, RequestScope>;
  /** Scope of the plain /v1/... routes (serve mode records here). */
  defaultScope?: RequestScope;
  /**
   * Scopes by API key for the plain /v1/... routes (recording workflows' per-run keys): a request whose bearer key is
   * not in the map gets 401. Takes the place of `defaultScope` and `apiKey` (give neither).
   */
  keyScopes?: ReadonlyMap<string, RequestScope>;
  /** Enables POST /update_weights_from_disk for folders inside `root`. */
  reloadWeights?: { root: string; load: (dir: string) => Promise<unknown> };
  /**
   * Enables vLLM's dynamic LoRA API: POST /v1/load_lora_adapter {lora_name, lora_path} and POST
   * /v1/unload_lora_adapter {lora_name}, answered as vLLM does (200 with a plain-text "Success: ..." line; errors as
   * JSON). `serviceFor` answers the requests whose `model` is an adapter's name, and /v1/models lists the adapters.
   */
  loraAdapters?: {
    load: (name: string, path: string) => Promise<void>;
    unload: (name: string) => Promise<void>;
    serviceFor: (model: string) => OpenAIService | undefined;
    /** The loaded adapters' names (listed by /v1/models). */
    names: () => readonly string[];
  };
  routes?: readonly ExtraRoute[];
  /** Called for each failed request (logging); the server answers it either way. */
  onError?: (error: Error, request: { method: string; url: string }) => void;
}

export interface OpenAIServer {
  readonly server: Server;
  /** http://host:port */
  readonly url: string;
  /** url + '/v1' (what OpenAI clients take as baseURL). */
  readonly baseURL: string;
  close(): Promise<void>;
}

const DEFAULT_MAX_BODY = 1024 * 1024;
const SCOPED = /^\/s\/([A-Za-z0-9_-]{1,128})(\/v1\/.*)$/;

export async function startOpenAIServer(options: OpenAIServerOptions): Promise<OpenAIServer> {
  const host = options.host ?? '127.0.0.1';
  if (options.keyScopes && (options.apiKey || options.defaultScope))
    throw new Error('startOpenAIServer: keyScopes picks the scope of /v1/... by key; give no apiKey or defaultScope with it');
  if (options.apiKey === '')
    throw new Error(
      'startOpenAIServer: apiKey is an empty string, which would let every request in; give a key, or null for none',
    );
  const state: ServerState = {
    options,
    apiKey: options.apiKey ? Buffer.from(options.apiKey) : null,
    maxBodyBytes: options.maxBodyBytes ?? DEFAULT_MAX_BODY,
    port: -1, // known once listening
    loopbackOnly: false,
  };
  const server = createServer((req, res) => {
    handleRequest(state, req, res).catch((error: unknown) => {
      const failure = asHttpError(error);
      options.onError?.(failure, { method: req.method ?? '', url: req.url ?? '' });
      if (!res.headersSent) sendJson(res, failure.status, failure.toJSON());
      else res.end();
    });
  });
  // Keep-alive sockets must not hold close() forever.
  server.keepAliveTimeout = 5_000;

  await new Promise<void>((resolvePromise, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolvePromise();
    });
  });
  const address = server.address() as AddressInfo;
  state.port = address.port;
  state.loopbackOnly = isLoopbackHost(address.address);
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${shownHost}:${address.port}`;
  return {
    server,
    url,
    baseURL: `${url}/v1`,
    close: () =>
      new Promise<void>((resolvePromise) => {
        server.close(() => resolvePromise());
        server.closeAllConnections();
      }),
  };
}

/** What a request's handling reads: the server's options, its key, and where it listens. */
interface ServerState {
  readonly options: OpenAIServerOptions;
  readonly apiKey: Buffer | null;
  readonly maxBodyBytes: number;
  /** The listening port (-1 until then). */
  port: number;
  /** Listening on a loopback address: the Host header is checked (see the header). */
  loopbackOnly: boolean;
}

/** One request: the guards (origin, host, key), its scope, then its route; a failure throws an OpenAIHttpError. */
async function handleRequest(state: ServerState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { options, apiKey, maxBodyBytes } = state;
  checkOrigin(req.headers.origin);
  if (state.loopbackOnly) checkHost(req.headers.host, state.port);
  const url = new URL(req.url ?? '/', 'http://localhost');
  let path = url.pathname;
  if (path === '/health' && req.method === 'GET') return sendJson(res, 200, { status: 'ok' });
  if (apiKey !== null && !authorized(req.headers.authorization, apiKey)) {
    throw new OpenAIHttpError(401, 'Incorrect or missing API key: send Authorization: Bearer <key>', {
      code: 'invalid_api_key',
    });
  }
  let scope = options.defaultScope ?? {};
  const scoped = SCOPED.exec(path);
  if (scoped) {
    const found = options.scopes?.get(scoped[1] as string);
    if (found === undefined) throw new OpenAIHttpError(404, `unknown scope '${scoped[1]}' (its workflow run has ended?)`);
    scope = found;
    path = scoped[2] as string;
  }
  const keyed = !scoped && options.keyScopes !== undefined;
  if (keyed) {
    const found = keyScopeOf(req.headers.authorization, options.keyScopes as ReadonlyMap<string, RequestScope>);
    if (found === undefined) {
      throw new OpenAIHttpError(401, "Unknown or revoked API key: send Authorization: Bearer <the run's key>", {
        code: 'invalid_api_key',
      });
    }
    scope = found;
  }
  const abort = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) abort.abort(new Error('the client closed the connection'));
  });
  const requestScope: RequestScope = {
    ...scope,
    signal: scope.signal ? AbortSignal.any([scope.signal, abort.signal]) : abort.signal,
  };

  const route = `${req.method} ${path}`;
  switch (route) {
    case 'GET /v1/models':
      return sendJson(res, 200, modelList(options));
    case 'POST /v1/chat/completions': {
      const body = await readJson(req, maxBodyBytes);
      return sendReply(res, await serviceOf(options, body).chatCompletion(body, requestScope));
    }
    case 'POST /v1/completions': {
      if (keyed)
        throw new OpenAIHttpError(400, 'a recording run records chat completions only: use POST /v1/chat/completions', {
          code: 'unsupported_endpoint',
        });
      const body = await readJson(req, maxBodyBytes);
      return sendReply(res, await serviceOf(options, body).completion(body, requestScope));
    }
    case 'POST /update_weights_from_disk':
      if (options.reloadWeights && !scoped)
        return sendJson(res, 200, await reloadWeightsFromDisk(options, await readJson(req, maxBodyBytes)));
      break;
    case 'POST /v1/load_lora_adapter':
    case 'POST /v1/unload_lora_adapter':
      if (options.loraAdapters && !scoped)
        return sendText(res, await loraAdapter(options, path, await readJson(req, maxBodyBytes)));
      break;
  }
  const extra = options.routes?.find((r) => r.method === req.method && r.path === path);
  if (extra && !scoped) {
    const body = req.method === 'POST' ? await readJson(req, maxBodyBytes) : undefined;
    return sendJson(res, 200, await extra.handle(body));
  }
  const known = [
    '/v1/models',
    '/v1/chat/completions',
    '/v1/completions',
    ...(options.loraAdapters ? ['/v1/load_lora_adapter', '/v1/unload_lora_adapter'] : []),
    ...(options.routes ?? []).map((r) => r.path),
  ];
  if (known.includes(path)) throw new OpenAIHttpError(405, `${req.method} is not allowed on ${path}`);
  throw new OpenAIHttpError(404, `no route ${req.method} ${path}`, { code: 'not_found' });
}

/**
 * The service that answers `body.model`: an adapter's (loraAdapters), else the server's. With adapters loaded the
 * server serves several models, so a name that is none of them is a 404 naming them all (with one model, the service
 * decides: a server of one model may accept any name).
 */
function serviceOf(options: OpenAIServerOptions, body: unknown): OpenAIService {
  const model = (body as { model?: unknown } | null)?.model;
  if (typeof model !== 'string') return options.service; // the request schema names the missing field
  const adapter = options.loraAdapters?.serviceFor(model);
  if (adapter !== undefined) return adapter;
  const adapters = options.loraAdapters?.names() ?? [];
  if (adapters.length > 0 && !options.service.servesModel(model)) {
    const served = [...options.service.models().data.map((m) => m.id), ...adapters];
    throw new OpenAIHttpError(
      404,
      `The model '${model}' does not exist; this server serves ${served.length} models: ${served.join(', ')}`,
      { param: 'model', code: 'model_not_found' },
    );
  }
  return options.service;
}

/** GET /v1/models: the service's models, then the loaded LoRA adapters (their parent is the base model). */
function modelList(options: OpenAIServerOptions): unknown {
  const list = options.service.models();
  const adapters = options.loraAdapters?.names() ?? [];
  if (adapters.length === 0) return list;
  const created = list.data[0]?.created ?? Math.floor(Date.now() / 1000);
  const root = list.data[0]?.id ?? null;
  return {
    ...list,
    data: [
      ...list.data,
      ...adapters.map((id) => ({ id, object: 'model' as const, created, owned_by: 'trinity-rft', root: id, parent: root })),
    ],
  };
}

/** vLLM's load/unload_lora_adapter: a plain-text success line, or an OpenAIHttpError. */
async function loraAdapter(options: OpenAIServerOptions, path: string, body: unknown): Promise<string> {
  const adapters = options.loraAdapters as NonNullable<OpenAIServerOptions['loraAdapters']>;
  const b = (body ?? {}) as { lora_name?: unknown; lora_path?: unknown };
  if (typeof b.lora_name !== 'string' || b.lora_name.length === 0)
    throw new OpenAIHttpError(400, "'lora_name' is required (the adapter's model name)", { param: 'lora_name' });
  if (path === '/v1/unload_lora_adapter') {
    await adapters.unload(b.lora_name);
    return `Success: LoRA adapter '${b.lora_name}' removed successfully.`;
  }
  if (typeof b.lora_path !== 'string' || b.lora_path.length === 0)
    throw new OpenAIHttpError(400, "'lora_path' is required (a PEFT adapter folder)", { param: 'lora_path' });
  await adapters.load(b.lora_name, b.lora_path);
  return `Success: LoRA adapter '${b.lora_name}' added successfully.`;
}

/** POST /update_weights_from_disk {model_path}: loads a folder inside the reload root (SGLang's API). */
async function reloadWeightsFromDisk(options: OpenAIServerOptions, body: unknown): Promise<unknown> {
  const reloadWeights = options.reloadWeights;
  if (!reloadWeights) throw new OpenAIHttpError(404, 'weight reload is not enabled');
  const modelPath = (body as { model_path?: unknown } | null)?.model_path;
  if (typeof modelPath !== 'string' || modelPath.length === 0)
    throw new OpenAIHttpError(400, "'model_path' is required (a folder inside the reload root)", { param: 'model_path' });
  const dir = resolve(reloadWeights.root, modelPath);
  const inside = relative(resolve(reloadWeights.root), dir);
  if (inside.startsWith('..') || isAbsolute(inside))
    throw new OpenAIHttpError(403, `model_path must be inside ${reloadWeights.root}`, { param: 'model_path' });
  try {
    await reloadWeights.load(dir);
  } catch (error) {
    throw new OpenAIHttpError(400, `cannot load weights from ${dir}: ${(error as Error).message}`, { param: 'model_path' });
  }
  return { success: true, message: `loaded weights from ${dir}` };
}

/** localhost, 127.0.0.0/8, ::1 and ::ffff:127.x (IPv6 names with or without brackets): this machine only. */
export function isLoopbackHost(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (name === 'localhost') return true;
  if (isIP(name) === 4) return name.startsWith('127.');
  if (isIP(name) === 6) return name === '::1' || /^::ffff:127\./.test(name) || name === '0:0:0:0:0:0:0:1';
  return false;
}

/** A browser's request from a page of another site carries its Origin: only loopback pages may call. */
function checkOrigin(origin: string | undefined): void {
  if (origin === undefined) return;
  let hostname: string | null = null;
  try {
    hostname = origin === 'null' ? null : new URL(origin).hostname;
  } catch {}
  if (hostname === null || !isLoopbackHost(hostname))
    throw new OpenAIHttpError(403, `requests from web pages of other sites are refused (Origin: ${origin.slice(0, 200)})`, {
      code: 'forbidden_origin',
    });
}

/** DNS-rebinding defence of a loopback server: Host must be a loopback name with this server's port. */
function checkHost(host: string | undefined, port: number): void {
  let parsed: URL | null = null;
  try {
    parsed = host ? new URL(`http://${host}`) : null;
  } catch {}
  const ok = parsed !== null && isLoopbackHost(parsed.hostname) && Number(parsed.port || 80) === port && parsed.pathname === '/';
  if (!ok)
    throw new OpenAIHttpError(
      403,
      `this server listens on loopback only: the Host header must be localhost, 127.0.0.1 or [::1] with port ${port}, ` +
        `got ${host === undefined ? 'none' : `'${host.slice(0, 200)}'`}`,
      { code: 'forbidden_host' },
    );
}

function authorized(header: string | undefined, key: Buffer): boolean {
  const match = /^Bearer\s+(.+)$/i.exec(header ?? '');
  if (!match) return false;
  const given = Buffer.from((match[1] as string).trim());
  return given.length === key.length && timingSafeEqual(given, key);
}

/** The scope of a request's bearer key (a Map lookup: the keys are 128-bit random, not guessable by timing). */
function keyScopeOf(header: string | undefined, scopes: ReadonlyMap<string, RequestScope>): RequestScope | undefined {
  const match = /^Bearer\s+(.+)$/i.exec(header ?? '');
  return match ? scopes.get((match[1] as string).trim()) : undefined;
}

async function readJson(req: IncomingMessage, maxBytes: number): Promise<unknown> {
  const contentType = req.headers['content-type'];
  const mediaType = (contentType ?? '').split(';')[0]?.trim().toLowerCase() ?? '';
  if (mediaType !== 'application/json' && !/^application\/[a-z0-9.+-]+\+json$/.test(mediaType)) {
    req.resume();
    throw new OpenAIHttpError(
      415,
      `the request body must be JSON sent with Content-Type: application/json, got ${contentType === undefined ? 'no Content-Type' : `'${contentType.slice(0, 100)}'`}`,
      { code: 'unsupported_media_type' },
    );
  }
  const checkSize = (bodyBytes: number) => {
    try {
      checkRequestLimits({ bodyBytes }, { maxBodyBytes: maxBytes });
    } catch (error) {
      req.resume();
      throw error;
    }
  };
  const declared = Number(req.headers['content-length'] ?? Number.NaN);
  if (Number.isFinite(declared)) checkSize(declared);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    checkSize(size); // a body without (or with a false) content-length stops at the limit
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim().length === 0) throw new OpenAIHttpError(400, 'the request body is empty; expected a JSON object');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new OpenAIHttpError(400, `the request body is not valid JSON: ${(error as Error).message}`, { code: 'invalid_json' });
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new OpenAIHttpError(400, 'the request body must be a JSON object');
  return value;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function sendText(res: ServerResponse, text: string): void {
  res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

async function sendReply(res: ServerResponse, reply: ServiceReply): Promise<void> {
  if (!reply.stream) return sendJson(res, 200, reply.body);
  await writeEventStream(res, reply.chunks);
}
