// human_preference_annotation_mapper (Data-Juicer's name; Trinity's human-in-the-loop example runs it on Label
// Studio): every row holds a prompt and two answers; a person says which answer is better, and the rows come out
// with `chosen` / `rejected` set, plus a DPO dataset file (JSONL rows {prompt, chosen, rejected}) that a DPO stage
// trains on. Here the ratings arrive over HTTP from a small server the operator starts (loopback by default):
//
//   GET  /annotations        {"pending": [{"id", "prompt", "answer1", "answer2"}], "rated": n, "total": n}
//   POST /annotations/<id>   body {"preferred": "answer1" | "answer2"}
//                            200 {"id", "remaining"}; 400 a bad body, 404 an unknown id, 409 already rated
//
// (docs/data-pipelines.md documents it for people and tools.) The operator waits, without polling, until every pair
// is rated, or fails with AnnotationTimeoutError naming the pairs still pending after `timeout` seconds. Ids are
// the rows' positions in the operator's input ("0", "1", ...). While it listens, annotation_server.json in the work
// folder (the output taskset's) holds its URL, so tools (Trinity Studio's feedback page) find it.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isAbsolute, join, resolve } from 'node:path';
import { TASK_OPERATORS } from '../registry.js';
import { requireText, writeRows } from '../rows.js';
import type { TaskOperatorModule, TaskRow } from '../types.js';

export interface AnnotationOptions {
  promptKey: string;
  answer1Key: string;
  answer2Key: string;
  chosenKey: string;
  rejectedKey: string;
  /** Seconds to wait for every rating (Data-Juicer's default: 3600). */
  timeout: number;
  host: string;
  /** 0: any free port (the URL is logged and emitted as an annotation_server event). */
  port: number;
  /** The DPO dataset file ('' : preference_dpo.jsonl beside the output taskset; relative: to that folder). */
  outputPath: string;
  maxBodyBytes: number;
}

/** Every pair was not rated within the timeout. */
export class AnnotationTimeoutError extends Error {
  override name = 'AnnotationTimeoutError';
  constructor(
    readonly operator: string,
    readonly pending: readonly string[],
    readonly seconds: number,
    url: string,
  ) {
    const shown = pending.slice(0, 10).join(', ') + (pending.length > 10 ? ', ...' : '');
    super(
      `${operator}: ${pending.length} preference pair(s) not rated within ${seconds} s (ids ${shown}); ` +
        `rate them with POST ${url}/annotations/<id> {"preferred": "answer1" | "answer2"} (docs/data-pipelines.md), ` +
        'or raise the operator’s timeout',
    );
  }
}

type Choice = 'answer1' | 'answer2';

/** Written in the operator's work folder while its server listens: {url, operator, pid, total}. */
export const ANNOUNCEMENT_FILE = 'annotation_server.json';

export const humanPreferenceAnnotationMapper: TaskOperatorModule<AnnotationOptions> = {
  description: 'asks a person (over HTTP) which of two answers is better; writes chosen/rejected and a DPO file',
  defaults: {
    promptKey: '',
    answer1Key: 'answer1',
    answer2Key: 'answer2',
    chosenKey: 'chosen',
    rejectedKey: 'rejected',
    timeout: 3600,
    host: '127.0.0.1',
    port: 0,
    outputPath: '',
    maxBodyBytes: 65_536,
  },
  async run(rows, o, context) {
    const where = context.name;
    if (!(o.timeout > 0)) throw new Error(`${where}: timeout must be > 0 seconds`);
    if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) throw new Error(`${where}: port must be in [0, 65535]`);
    const promptKey = o.promptKey || context.textKey;
    const pairs: PreferencePair[] = rows.map((row, i) => ({
      id: String(i),
      prompt: requireText(row, promptKey, where, i),
      answer1: requireText(row, o.answer1Key, where, i),
      answer2: requireText(row, o.answer2Key, where, i),
    }));
    const ratings = new Map<string, Choice>();
    let allRated: () => void = () => {};
    const finished = new Promise<void>((resolveAll) => {
      allRated = resolveAll;
    });
    if (pairs.length === 0) allRated();

    const handle = annotationRequestHandler(pairs, ratings, o.maxBodyBytes, (id, remaining) => {
      context.emit({ type: 'annotation_rated', operator: where, id, remaining });
      if (remaining === 0) allRated();
    });
    const server = createServer((req, res) => {
      handle(req, res).catch((error: unknown) => {
        if (!res.headersSent) send(res, 500, { error: (error as Error).message });
      });
    });
    await new Promise<void>((ready, fail) => {
      server.once('error', (error) => fail(new Error(`${where}: cannot listen on ${o.host}:${o.port}: ${error.message}`)));
      server.listen(o.port, o.host, () => ready());
    });
    const address = server.address() as AddressInfo;
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    const base = `http://${host}:${address.port}`;
    // where a person's tools find the server (Trinity Studio's feedback page looks for this file in its runs folder);
    // removed when the server closes
    const announcement = join(context.workDir, ANNOUNCEMENT_FILE);
    mkdirSync(context.workDir, { recursive: true });
    writeFileSync(announcement, `${JSON.stringify({ url: base, operator: where, pid: process.pid, total: pairs.length })}\n`);
    try {
      context.log(`${where}: ${pairs.length} preference pair(s) to rate: GET ${base}/annotations, POST ${base}/annotations/<id>`);
      context.emit({ type: 'annotation_server', operator: where, url: base, pending: pairs.map((p) => p.id) });
      let timer: NodeJS.Timeout | undefined;
      let onAbort: (() => void) | undefined;
      try {
        await Promise.race([
          finished,
          new Promise<never>((_, fail) => {
            timer = setTimeout(() => {
              const pending = pairs.filter((p) => !ratings.has(p.id)).map((p) => p.id);
              fail(new AnnotationTimeoutError(where, pending, o.timeout, base));
            }, o.timeout * 1000);
            onAbort = () => fail(context.signal?.reason ?? new Error(`${where}: stopped`));
            context.signal?.addEventListener('abort', onAbort, { once: true });
          }),
        ]);
      } finally {
        clearTimeout(timer);
        if (onAbort) context.signal?.removeEventListener('abort', onAbort);
      }
    } finally {
      rmSync(announcement, { force: true });
      server.closeAllConnections();
      await new Promise<void>((closed) => server.close(() => closed()));
    }

    const out: TaskRow[] = [];
    const dpo: TaskRow[] = [];
    rows.forEach((row, i) => {
      const pair = pairs[i] as (typeof pairs)[number];
      const choice = ratings.get(pair.id) as Choice;
      const chosen = choice === 'answer1' ? pair.answer1 : pair.answer2;
      const rejected = choice === 'answer1' ? pair.answer2 : pair.answer1;
      out.push({ ...row, [o.chosenKey]: chosen, [o.rejectedKey]: rejected });
      dpo.push({ prompt: pair.prompt, chosen, rejected });
      context.count(choice === 'answer1' ? 'preferred_answer1' : 'preferred_answer2');
    });
    const file =
      o.outputPath === ''
        ? join(context.workDir, 'preference_dpo.jsonl')
        : isAbsolute(o.outputPath)
          ? o.outputPath
          : resolve(context.workDir, o.outputPath);
    writeRows(file, dpo);
    context.log(`${where}: ${dpo.length} rated pair(s) written to ${file} (prompt/chosen/rejected)`);
    return out;
  },
};

interface PreferencePair {
  id: string;
  prompt: string;
  answer1: string;
  answer2: string;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(`${JSON.stringify(body)}\n`);
}

/**
 * The annotation server's requests (the API in the header): GET lists the pending pairs; POST records a pair's
 * rating in `ratings`, answers, then calls onRated with the pairs still unrated.
 */
function annotationRequestHandler(
  pairs: readonly PreferencePair[],
  ratings: Map<string, Choice>,
  maxBodyBytes: number,
  onRated: (id: string, remaining: number) => void,
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  const byId = new Map(pairs.map((p) => [p.id, p]));
  return async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname === '/annotations' && req.method === 'GET') {
      const pending = pairs.filter((p) => !ratings.has(p.id));
      return send(res, 200, { pending, rated: ratings.size, total: pairs.length });
    }
    const match = /^\/annotations\/([^/]+)$/.exec(url.pathname);
    if (match === null) return send(res, 404, { error: `no such endpoint: ${req.method} ${url.pathname}` });
    if (req.method !== 'POST') return send(res, 405, { error: `use POST ${url.pathname}` });
    const id = decodeURIComponent(match[1] as string);
    let size = 0;
    const chunks: Buffer[] = [];
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > maxBodyBytes) return send(res, 413, { error: `body over ${maxBodyBytes} bytes` });
      chunks.push(chunk as Buffer);
    }
    let body: unknown;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      return send(res, 400, { error: 'the body must be JSON: {"preferred": "answer1" | "answer2"}' });
    }
    const preferred = (body as { preferred?: unknown } | null)?.preferred;
    const keys = body !== null && typeof body === 'object' && !Array.isArray(body) ? Object.keys(body) : null;
    if (keys === null || keys.length !== 1 || (preferred !== 'answer1' && preferred !== 'answer2'))
      return send(res, 400, {
        error: `expected {"preferred": "answer1" | "answer2"}, got ${JSON.stringify(body)}`,
      });
    if (!byId.has(id)) return send(res, 404, { error: `no pair with id '${id}' (ids 0..${pairs.length - 1})` });
    if (ratings.has(id)) return send(res, 409, { error: `pair '${id}' is already rated (${ratings.get(id)})` });
    ratings.set(id, preferred);
    const remaining = pairs.length - ratings.size;
    send(res, 200, { id, remaining });
    onRated(id, remaining);
  };
}

TASK_OPERATORS.register(
  'human_preference_annotation_mapper',
  humanPreferenceAnnotationMapper,
  humanPreferenceAnnotationMapper.description,
);
