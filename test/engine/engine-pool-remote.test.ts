// RemoteEnginePool (src/openai/remote-pool.ts) against scripted OpenAI-compatible HTTP servers on loopback, whose
// failures the test chooses: a server that stops answering (requests and /health hang) leaves the pool at its next
// health check and the request in flight on it finishes on the other server; a server that comes back loads the
// newest weights before it takes requests; a 4xx is the request's fault and is not retried; with no server left the
// pool fails with NoRolloutServerError. Every wait is on an event (a request arriving, a log line); the pool's own
// timers (health interval, grace) are short so the file runs fast, but no assertion depends on how long they take.
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import { NoRolloutServerError, RemoteEnginePool } from '../../src/openai/index.js';

type Mode = 'ok' | 'hang' | 'bad-request';

interface Scripted {
  name: string;
  mode: Mode;
  port: number;
  server: Server;
  completions: number;
  reloads: string[];
  /** Resolves the next time a completion request arrives. */
  nextCompletion(): Promise<void>;
  close(): Promise<void>;
  reopen(): Promise<void>;
}

const open: Scripted[] = [];
after(async () => {
  for (const s of open) await s.close();
});

async function body(req: IncomingMessage): Promise<Record<string, unknown>> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text ? (JSON.parse(text) as Record<string, unknown>) : {};
}

/** A server whose completions answer token id `marker` n times (so the test sees which server answered). */
async function scripted(name: string, marker: number): Promise<Scripted> {
  const waiting: (() => void)[] = [];
  const hung = new Set<ServerResponse>();
  const state: Scripted = {
    name,
    mode: 'ok',
    port: 0,
    server: null as unknown as Server,
    completions: 0,
    reloads: [],
    nextCompletion: () => new Promise((resolve) => waiting.push(resolve)),
    close: async () => {
      for (const res of hung) res.destroy();
      hung.clear();
      state.server.closeAllConnections();
      await new Promise<void>((resolve) => state.server.close(() => resolve()));
    },
    reopen: () => listen(state.port),
  };
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const send = (status: number, value: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(value));
    };
    if (req.url === '/health') {
      if (state.mode === 'hang') return void hung.add(res);
      return send(200, { status: 'ok' });
    }
    if (req.url === '/v1/models') return send(200, { data: [{ id: 'm' }] });
    if (req.url === '/update_weights_from_disk') {
      state.reloads.push((await body(req)).model_path as string);
      return send(200, { success: true });
    }
    if (req.url === '/v1/completions') {
      const request = await body(req);
      state.completions++;
      for (const wake of waiting.splice(0)) wake();
      if (state.mode === 'hang') return void hung.add(res);
      if (state.mode === 'bad-request') return send(400, { error: { message: "'max_tokens' is too large" } });
      const n = request.n as number;
      return send(200, {
        choices: Array.from({ length: n }, (_, index) => ({
          index,
          text: name,
          finish_reason: 'length',
          token_ids: [marker],
          logprobs: { tokens: [`token_id:${marker}`], token_logprobs: [-0.5], top_logprobs: null },
        })),
      });
    }
    send(404, { error: { message: 'no route' } });
  };
  const listen = (port: number) =>
    new Promise<void>((resolve) => {
      state.server = createServer((req, res) => void handle(req, res));
      state.server.listen(port, '127.0.0.1', () => {
        state.port = (state.server.address() as AddressInfo).port;
        resolve();
      });
    });
  await listen(0);
  open.push(state);
  return state;
}

const url = (s: Scripted) => `http://127.0.0.1:${s.port}/v1`;

/** A log that resolves waiters when a line matching their pattern arrives. */
function eventLog() {
  const lines: string[] = [];
  const waiters: { pattern: RegExp; resolve: () => void }[] = [];
  return {
    lines,
    log: (line: string) => {
      lines.push(line);
      for (const w of [...waiters]) if (w.pattern.test(line)) waiters.splice(waiters.indexOf(w), 1) && w.resolve();
    },
    waitFor: (pattern: RegExp) =>
      lines.some((l) => pattern.test(l)) ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ pattern, resolve })),
  };
}

const poolOptions = { model: 'm', tokenizer: null, healthIntervalMs: 50, healthTimeoutMs: 200, probeMaxMs: 100 };

describe('RemoteEnginePool', () => {
  it('a server that stops answering leaves the pool; the request in flight on it finishes on the other', async () => {
    const [a, b] = [await scripted('A', 11), await scripted('B', 22)];
    const events = eventLog();
    const pool = await RemoteEnginePool.connect({ ...poolOptions, baseURLs: [url(a), url(b)], log: events.log });
    try {
      a.mode = 'hang';
      const arrived = a.nextCompletion();
      const pending = pool.generate({ promptIds: [1, 2, 3], n: 2, maxTokens: 1, seed: 7, timeoutMs: 120_000 });
      await arrived; // the idle pool sent it to A (index 0), which will never answer
      const result = await pending;
      assert.deepEqual(
        result.completions.map((c) => c.tokenIds),
        [[22], [22]],
        'answered by B',
      );
      assert.match(events.lines.join('\n'), new RegExp(`rollout server ${url(a)} left the pool: health check failed`));
      assert.deepEqual(
        pool.members().map((m) => [m.inPool, m.departures]),
        [
          [false, 1],
          [true, 0],
        ],
      );
    } finally {
      await pool.close();
      await a.close();
      await b.close();
    }
  });

  it('a server that comes back loads the newest weights before it takes requests', async () => {
    const [a, b] = [await scripted('A', 11), await scripted('B', 22)];
    const events = eventLog();
    const pool = await RemoteEnginePool.connect({ ...poolOptions, baseURLs: [url(a), url(b)], log: events.log });
    try {
      await a.close();
      // A is gone: the request fails there (connection refused), A leaves, B answers
      const first = await pool.generate({ promptIds: [1], maxTokens: 1, seed: 1 });
      assert.deepEqual(first.completions[0]?.tokenIds, [22]);
      await pool.syncWeightsFromDir('/weights/version_1');
      await pool.syncWeightsFromDir('/weights/version_2');
      assert.deepEqual(b.reloads, ['/weights/version_1', '/weights/version_2']);
      await a.reopen();
      await events.waitFor(new RegExp(`rollout server ${url(a)} is back in the pool`));
      assert.deepEqual(a.reloads, ['/weights/version_2'], 'A loaded the newest version before rejoining');
      assert.equal(pool.members()[0]?.inPool, true);
      // back in: the idle pool sends the next request to A again
      const second = await pool.generate({ promptIds: [5, 6], maxTokens: 1, seed: 2 });
      assert.deepEqual(second.completions[0]?.tokenIds, [11]);
      await pool.syncWeightsFromDir('/weights/version_3');
      assert.deepEqual(a.reloads, ['/weights/version_2', '/weights/version_3']);
      assert.deepEqual(
        pool.members().map((m) => m.reloads),
        [2, 3],
      );
    } finally {
      await pool.close();
      await a.close().catch(() => {});
      await b.close();
    }
  });

  it('a 4xx is the request’s fault: not retried elsewhere, the server stays in the pool', async () => {
    const [a, b] = [await scripted('A', 11), await scripted('B', 22)];
    const pool = await RemoteEnginePool.connect({ ...poolOptions, baseURLs: [url(a), url(b)] });
    try {
      a.mode = 'bad-request';
      await assert.rejects(pool.generate({ promptIds: [1], maxTokens: 1 }), /HTTP 400: 'max_tokens' is too large/);
      assert.equal(b.completions, 0);
      assert.equal(pool.members()[0]?.inPool, true);
    } finally {
      await pool.close();
      await a.close();
      await b.close();
    }
  });

  it('with no server left the pool fails with NoRolloutServerError, naming each server', async () => {
    const [a, b] = [await scripted('A', 11), await scripted('B', 22)];
    const pool = await RemoteEnginePool.connect({ ...poolOptions, downGraceMs: 300, baseURLs: [url(a), url(b)] });
    const failed = new Promise<NoRolloutServerError>((resolve) => pool.onFailure(resolve));
    try {
      await a.close();
      await b.close();
      const request = pool.generate({ promptIds: [1], maxTokens: 1, timeoutMs: 120_000 });
      await assert.rejects(request, (error: Error) => {
        assert.ok(error instanceof NoRolloutServerError, `${error.name}: ${error.message}`);
        assert.match(error.message, new RegExp(`no rollout server has answered for 300 ms: ${url(a)}: out \\(`));
        assert.match(error.message, new RegExp(`${url(b)}: out \\(`));
        return true;
      });
      assert.ok((await failed) instanceof NoRolloutServerError);
      await assert.rejects(pool.generate({ promptIds: [1] }), NoRolloutServerError);
    } finally {
      await pool.close();
    }
  });

  it('connect needs one server that answers, and names each that does not', async () => {
    await assert.rejects(
      RemoteEnginePool.connect({ ...poolOptions, baseURLs: ['http://127.0.0.1:9/v1', 'http://127.0.0.1:10/v1'] }),
      /none of the 2 rollout servers answers: http:\/\/127\.0\.0\.1:9\/v1: .*; http:\/\/127\.0\.0\.1:10\/v1: /,
    );
  });
});
