// The Studio's server over HTTP: what the API answers for runs written by the runs' own writers, access control, and
// path traversal refused on every route that takes a path or an id.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { routes, type StudioServer, startStudio } from '../../src/studio/index.js';
import { apiRoutes } from '../../src/studio/api.js';
import { downsampleIndices, smooth } from '../../src/studio/series.js';
import { appendMetrics, lossAt, writeRun } from './fixtures.js';

let root: string;
let outside: string;
let studio: StudioServer;

before(async () => {
  root = mkdtempSync(join(tmpdir(), 'studio-http-'));
  outside = mkdtempSync(join(tmpdir(), 'studio-outside-'));
  writeFileSync(join(outside, 'secret.jsonl'), '{"eid":"x","tokens":[1],"promptLength":0,"info":{}}\n');
  mkdirSync(join(outside, 'job', 'sft'), { recursive: true });
  writeFileSync(join(outside, 'job', 'stages.json'), '["sft"]\n');
  writeFileSync(join(outside, 'job', 'sft', 'metrics.jsonl'), '{"step":1,"secret":42}\n');
  await writeRun(root, 'proj', 'two-stage', [
    { name: 'sft', steps: 10, done: true, evalSteps: [0, 10] },
    { name: 'grpo', steps: 30, done: true, evalSteps: [30], tasksPerStep: 3, repeats: 3, tokenizer: true },
  ]);
  // links that lead outside the runs folder: a run, a buffer file
  symlinkSync(join(outside, 'job'), join(root, 'proj', 'linked-out'));
  symlinkSync(join(outside, 'secret.jsonl'), join(root, 'proj', 'two-stage', 'grpo', 'leak.jsonl'));
  studio = await startStudio({ runsDir: root, port: 0 });
});

after(async () => {
  await studio?.close();
  rmSync(root, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

async function get(path: string, headers: Record<string, string> = {}, base = studio.url) {
  const response = await fetch(`${base}${path}`, { headers, redirect: 'manual' });
  const text = await response.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // a page or an asset
  }
  return { status: response.status, body: body as Record<string, unknown> & unknown[], response };
}

/** The status of a request sent as written (fetch normalises '..' away and sets Host itself). */
function rawStatus(path: string, headers: Record<string, string> = {}): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const req = request(`${studio.url}${path}`, { headers }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

const RUN = encodeURIComponent('proj/two-stage');

describe('runs and curves', () => {
  test('lists the run with its stages in stages.json order, statuses, steps and last metrics', async () => {
    const { status, body } = await get('/api/runs');
    assert.equal(status, 200);
    const run = (body as { id: string; status: string; stages: Record<string, unknown>[] }[]).find(
      (r) => r.id === 'proj/two-stage',
    );
    assert.ok(run);
    assert.equal(run.status, 'finished');
    assert.deepEqual(
      run.stages.map((s) => [s.path, s.status, s.step, s.offset]),
      [
        ['sft', 'finished', 10, 0],
        ['grpo', 'finished', 30, 10],
      ],
    );
    const grpo = run.stages[1] as { lastMetrics: Record<string, number>; buffers: string[] };
    assert.equal(grpo.lastMetrics['actor/loss'], lossAt(30));
    // leak.jsonl is a link (to outside): not listed
    assert.deepEqual(grpo.buffers, ['proj/two-stage/grpo/buffer.db']);
  });

  test('a stage without done.json that was just written to is running; the symlinked run outside is not listed', async () => {
    const jobDir = await writeRun(root, 'proj', 'live', [{ name: 'grpo', steps: 3 }]);
    appendMetrics(join(jobDir, 'grpo'), 4);
    const { body } = await get('/api/runs');
    const runs = body as { id: string; status: string; stages: { step: number }[] }[];
    const live = runs.find((r) => r.id === 'proj/live');
    assert.equal(live?.status, 'running');
    assert.equal(live?.stages[0]?.step, 4);
    assert.ok(!runs.some((r) => r.id === 'proj/linked-out'), 'a run reached through a link to outside is listed');
  });

  test('a series runs over both stages on one step axis, with every point when under the limit', async () => {
    const { body } = await get(`/api/runs/${RUN}/series?key=actor/loss`);
    const series = body as unknown as { x: number[]; y: number[]; total: number; stages: { offset: number }[] };
    assert.equal(series.total, 40);
    assert.deepEqual(series.x, [...Array.from({ length: 10 }, (_, i) => i + 1), ...Array.from({ length: 30 }, (_, i) => 11 + i)]);
    assert.equal(series.y[10], lossAt(1));
    assert.deepEqual(
      series.stages.map((s) => s.offset),
      [0, 10],
    );
  });

  test('smoothing is the debiased EMA, downsampling keeps each bucket’s extremes', () => {
    // hand computation, w = 0.5: m1 = 0.5·2 = 1, ŷ1 = 1/(1-0.5) = 2; m2 = 0.5 + 0.5·4 = 2.5, ŷ2 = 2.5/(1-0.25) = 3.333…
    const y = smooth([2, 4], 0.5);
    assert.equal(y[0], 2);
    assert.ok(Math.abs((y[1] as number) - 10 / 3) < 1e-12);
    // 8 points into 2 buckets of 4: [5,1,7,3] keeps 1 (i=1) and 7 (i=2); [2,9,0,4] keeps 9 (i=5) and 0 (i=6)
    assert.deepEqual(downsampleIndices([5, 1, 7, 3, 2, 9, 0, 4], 4), [1, 2, 5, 6]);
  });

  test('bad query values are a 400 naming the parameter', async () => {
    const { status, body } = await get(`/api/runs/${RUN}/series?key=actor/loss&points=1`);
    assert.equal(status, 400);
    assert.match(JSON.stringify(body), /'points'/);
  });
});

describe('rollouts', () => {
  const file = encodeURIComponent('proj/two-stage/grpo/buffer.db');

  test('filters by reward, truncated, length, task and step', async () => {
    const all = (await get(`/api/rollouts?file=${file}&limit=1000`)).body as unknown as { total: number; matched: number };
    assert.equal(all.total, 30 * 3 * 3);
    const rewarded = (await get(`/api/rollouts?file=${file}&minReward=1&limit=1000`)).body as unknown as {
      matched: number;
      rows: { reward: number }[];
    };
    // reward (t + r) % 2 = 1 for (t, r) in {(0,1), (1,0), (1,2), (2,1)}: 4 of 9 per step
    assert.equal(rewarded.matched, 30 * 4);
    assert.ok(rewarded.rows.every((r) => r.reward === 1));
    const truncated = (await get(`/api/rollouts?file=${file}&truncated=true&step=5`)).body as unknown as {
      rows: { finishReason: string; step: number }[];
    };
    assert.equal(truncated.rows.length, 3);
    assert.ok(truncated.rows.every((r) => r.finishReason === 'length' && r.step === 5));
    const short = (await get(`/api/rollouts?file=${file}&maxLength=3&task=task-0`)).body as unknown as { matched: number };
    assert.equal(short.matched, 30);
  });

  test('a multi-turn rollout shows its turns and the action mask of its tokens, decoded by the run’s tokenizer', async () => {
    const page = (await get(`/api/rollouts?file=${file}&task=task-2&step=1`)).body as unknown as { rows: { id: number }[] };
    const id = page.rows[0]?.id;
    const { body } = await get(`/api/rollouts/detail?file=${file}&id=${id}`);
    const detail = body as unknown as {
      messages: { role: string }[];
      tokens: { text: string; mask: number; logprob: number }[];
      turns: number;
      tokenizer: string;
    };
    assert.deepEqual(
      detail.messages.map((m) => m.role),
      ['user', 'assistant', 'tool', 'assistant'],
    );
    assert.equal(detail.turns, 2);
    assert.equal(detail.tokens.map((t) => t.text).join(''), 'call|tool:42|ok');
    assert.equal(
      detail.tokens
        .filter((t) => t.mask === 0)
        .map((t) => t.text)
        .join(''),
      'tool:42',
    );
    assert.equal(detail.tokens[0]?.logprob, -0.1);
    assert.match(detail.tokenizer, /final_model$/);
  });

  test('eval answers before vs after a stage', async () => {
    const { body } = await get(`/api/runs/${RUN}/eval?stage=sft`);
    const cmp = body as unknown as {
      before: string;
      after: string;
      pairs: { before: { reward: number }; after: { reward: number } }[];
    };
    assert.equal(cmp.before, 'sft step 0');
    assert.equal(cmp.after, 'sft step 10');
    assert.equal(cmp.pairs.length, 3);
    assert.ok(cmp.pairs.every((p) => p.before.reward === 0 && p.after.reward === 1));
  });
});

describe('path traversal is refused on every route that takes a path or an id', () => {
  const escapes = ['..', '../..', '../../etc', 'proj/../..', '/etc', 'proj/linked-out', '..%2F..%2Fetc'];

  test('run ids', async () => {
    for (const suffix of ['', '/series?key=actor/loss', '/sources', '/eval?stage=sft'])
      for (const id of escapes) {
        const { status, body } = await get(`/api/runs/${encodeURIComponent(id)}${suffix}`);
        assert.ok(status === 403 || status === 404, `${id}${suffix}: ${status}`);
        assert.doesNotMatch(JSON.stringify(body), /"secret"|42/);
      }
    // the symlinked job is refused as outside, not merely missing
    assert.equal((await get(`/api/runs/${encodeURIComponent('proj/linked-out')}`)).status, 403);
  });

  test('stage paths', async () => {
    for (const stage of ['../../linked-out/sft', '../../../', '/etc'])
      assert.ok([403, 404].includes((await get(`/api/runs/${RUN}/eval?stage=${encodeURIComponent(stage)}`)).status));
  });

  test('buffer files and dumps', async () => {
    for (const route of ['/api/rollouts', '/api/rollouts/detail'])
      for (const file of [
        '../../etc/passwd',
        '/etc/passwd',
        'proj/two-stage/grpo/leak.jsonl',
        'proj/two-stage/../../x.db',
        'proj/two-stage/grpo/metrics.jsonl/../../../../etc/passwd',
      ]) {
        const { status } = await get(`${route}?file=${encodeURIComponent(file)}&id=1`);
        assert.equal(status, 403, `${route} ${file}`);
      }
    // inside, but not a buffer or a dump
    assert.equal((await get(`/api/rollouts?file=${encodeURIComponent('proj/two-stage/stages.json')}`)).status, 403);
  });

  test('app assets', async () => {
    // fetch() normalises '..' away, so send the raw path
    for (const path of [
      '/app/../server.ts',
      '/app/..%2Fserver.ts',
      '/app/%2E%2E/%2E%2E/package.json',
      '/app/pages/..%2F..%2Fserver.ts',
    ]) {
      const status = await rawStatus(path);
      assert.ok(status === 403 || status === 404, `${path}: ${status}`);
    }
  });
});

describe('access control', () => {
  test('loopback: a request whose Host is another name is refused (DNS rebinding)', async () => {
    assert.equal(await rawStatus('/api/runs', { host: 'attacker.example' }), 403);
    assert.equal(await rawStatus('/api/runs', { host: `localhost:${new URL(studio.url).port}` }), 200);
  });

  test('with a token: refused without it; ?token= sets a cookie and drops it from the address; the cookie lets in', async () => {
    const guarded = await startStudio({ runsDir: root, port: 0, token: 'a-token-of-at-least-16' });
    try {
      assert.equal((await get('/api/runs', {}, guarded.url)).status, 401);
      assert.equal((await get('/api/runs?token=wrong-token-of-16-chars', {}, guarded.url)).status, 401);
      const first = await get('/curves?run=x&token=a-token-of-at-least-16', {}, guarded.url);
      assert.equal(first.status, 303);
      assert.equal(first.response.headers.get('location'), '/curves?run=x');
      const cookie = (first.response.headers.get('set-cookie') ?? '').split(';')[0] as string;
      assert.match(first.response.headers.get('set-cookie') ?? '', /HttpOnly; SameSite=Strict/);
      assert.equal((await get('/api/runs', { cookie }, guarded.url)).status, 200);
      assert.equal((await get('/api/runs', { authorization: 'Bearer a-token-of-at-least-16' }, guarded.url)).status, 200);
    } finally {
      await guarded.close();
    }
  });

  test('a non-loopback host gets a random token; no token there is refused', async () => {
    await assert.rejects(startStudio({ runsDir: root, port: 0, host: '0.0.0.0', token: null }), /needs a token/);
    const open = await startStudio({ runsDir: root, port: 0, host: '0.0.0.0' });
    try {
      assert.match(open.token ?? '', /^[0-9a-f]{48}$/);
      assert.match(open.openUrl, /\?token=[0-9a-f]{48}$/);
    } finally {
      await open.close();
    }
  });

  test('the watching routes only read (GET)', () => {
    assert.ok(apiRoutes.every((r) => r.method === 'GET'));
    assert.ok(routes.length > apiRoutes.length);
  });
});

describe('live updates', () => {
  test('a metrics line appended by the run arrives as a server-sent event', async () => {
    const jobDir = await writeRun(root, 'proj', 'sse', [{ name: 'grpo', steps: 2 }]);
    const controller = new AbortController();
    const response = await fetch(`${studio.url}/api/events`, { signal: controller.signal });
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = '';
    const until = async (pattern: RegExp) => {
      while (!pattern.test(text)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`event stream ended before ${pattern}`);
        text += decoder.decode(value);
      }
    };
    try {
      await until(/event: ready/);
      const written = Date.now();
      appendMetrics(join(jobDir, 'grpo'), 3);
      await until(/event: metrics\ndata: \{"run":"proj\/sse","stage":"grpo","rows":\[\{"step":3/);
      assert.ok(Date.now() - written < 1000, `the event came ${Date.now() - written} ms after the line`);
    } finally {
      controller.abort();
    }
  });
});
