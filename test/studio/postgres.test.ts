// The Studio over a run whose shared buffer is on a real PostgreSQL server: the stage's buffer.json (written by the
// hook `trinity run` uses) names the server without its password; the Studio lists the buffer, pages its rows in id
// order with the password from its own environment (PGPASSWORD), never writes the database, and answers a server it
// cannot reach with an error naming host, port and database.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { writeBufferRecord } from '../../src/rft/buffer/buffer-record.js';
import { PostgresBuffer } from '../../src/rft/buffer/postgres.js';
import { type StudioServer, startStudio } from '../../src/studio/index.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { makeExperiences, writeRun } from './fixtures.js';

let server: PostgresServer;
let root: string;
let studio: StudioServer;
let url: string;
const previousPassword = process.env.PGPASSWORD;
// 3 steps × 2 tasks × 2 repeats, written in two transactions
const experiences = makeExperiences(3, 2, 2);

before(async () => {
  server = await startPostgres();
  url = await server.createDatabase('studio');
  const writer = await PostgresBuffer.open({ url, table: 'rollouts' });
  try {
    await writer.write(experiences.slice(0, 5));
    await writer.write(experiences.slice(5));
  } finally {
    await writer.close();
  }
  root = mkdtempSync(join(tmpdir(), 'studio-pg-'));
  const job = await writeRun(root, 'proj', 'pg-run', [{ name: 'grpo', steps: 3, done: true }]);
  writeBufferRecord(join(job, 'grpo'), url, 'rollouts');
  // a stage whose record points at a server that is not there (a port nobody listens on: the test server's, stopped
  // servers aside, is the only one this test starts)
  const gone = await writeRun(root, 'proj', 'gone', [{ name: 'grpo', steps: 1 }]);
  writeBufferRecord(join(gone, 'grpo'), `postgresql://trinity:${server.password}@127.0.0.1:1/nowhere`, 'rollouts');
  // the Studio's password comes from its own environment, as libpq's does
  process.env.PGPASSWORD = server.password;
  studio = await startStudio({ runsDir: root, port: 0 });
});

after(async () => {
  if (previousPassword === undefined) delete process.env.PGPASSWORD;
  else process.env.PGPASSWORD = previousPassword;
  await studio?.close();
  await server?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

async function get(path: string) {
  const response = await fetch(`${studio.url}${path}`);
  const text = await response.text();
  return { status: response.status, text, body: JSON.parse(text) as Record<string, unknown> };
}

const FILE = encodeURIComponent('proj/pg-run/grpo/buffer.json');

test('the buffer record names the server and table without the password', () => {
  const record = JSON.parse(readFileSync(join(root, 'proj', 'pg-run', 'grpo', 'buffer.json'), 'utf8'));
  assert.deepEqual(record, { backend: 'postgresql', url: url.replace(`:${server.password}@`, '@'), table: 'rollouts' });
  assert.ok(!JSON.stringify(record).includes(server.password));
});

test('the run lists its PostgreSQL buffer beside the files of its stage', async () => {
  const { status, body } = await get(`/api/runs/${encodeURIComponent('proj/pg-run')}/sources`);
  assert.equal(status, 200);
  const location = `postgresql://trinity@127.0.0.1:${server.port}/studio`;
  assert.deepEqual(body, [
    {
      file: 'proj/pg-run/grpo/buffer.json',
      table: 'rollouts',
      kind: 'buffer',
      backend: 'postgresql',
      location,
      stage: 'grpo',
    },
  ]);
});

test('the Buffer API pages the PostgreSQL rows in id order, with details, and writes nothing', async () => {
  const seen: { id: number; eid: string }[] = [];
  for (let offset = 0; ; offset += 5) {
    const { status, body } = await get(`/api/rollouts?file=${FILE}&table=rollouts&order=id&offset=${offset}&limit=5`);
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.total, experiences.length);
    const rows = body.rows as { id: number; eid: string; reward: number; step: number }[];
    seen.push(...rows.map((r) => ({ id: r.id, eid: r.eid })));
    if (rows.length < 5) break;
  }
  assert.deepEqual(
    seen.map((r) => r.eid),
    experiences.map((e) => e.eid),
    'every row once, in write (id) order',
  );
  assert.deepEqual(
    seen.map((r) => r.id),
    seen.map((_, i) => i + 1),
  );
  const { status, body } = await get(`/api/rollouts/detail?file=${FILE}&id=3`);
  assert.equal(status, 200);
  const third = experiences[2];
  assert.equal(body.eid, third?.eid);
  assert.equal((body.tokens as unknown[]).length, (third?.tokens.length ?? 0) - (third?.promptLength ?? 0));

  // rows written after the first look appear on the next one (read incrementally after the last id)
  const writer = await PostgresBuffer.open({ url, table: 'rollouts' });
  try {
    await writer.write([{ ...experiences[0], eid: 'late' } as (typeof experiences)[number]]);
  } finally {
    await writer.close();
  }
  const more = await get(`/api/rollouts?file=${FILE}&order=id&offset=${experiences.length}&limit=5`);
  assert.deepEqual(
    (more.body.rows as { eid: string }[]).map((r) => r.eid),
    ['late'],
  );

  // read-only: no reader position, no meta entry was written by browsing
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    assert.equal((await client.query('SELECT * FROM rollouts_cursors')).rows.length, 0);
    assert.deepEqual((await client.query('SELECT key FROM rollouts_meta')).rows, []);
  } finally {
    await client.end();
  }
});

test('a table other than the recorded one, or a record outside the runs folder, is refused', async () => {
  assert.equal((await get(`/api/rollouts?file=${FILE}&table=other`)).status, 404);
  const outside = mkdtempSync(join(tmpdir(), 'studio-pg-outside-'));
  try {
    writeBufferRecord(outside, url, 'rollouts');
    const path = encodeURIComponent(`../${join(outside).split('/').at(-1)}/buffer.json`);
    assert.equal((await get(`/api/rollouts?file=${path}`)).status, 403);
  } finally {
    rmSync(outside, { recursive: true, force: true });
  }
  // a malformed record: 422 naming the file and the key
  const dir = join(root, 'proj', 'pg-run', 'bad');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'buffer.json'), '{"backend":"mysql","url":"x","table":"t"}\n');
  const bad = await get(`/api/rollouts?file=${encodeURIComponent('proj/pg-run/bad/buffer.json')}`);
  assert.equal(bad.status, 422);
  assert.match(
    (bad.body.error as { message: string }).message,
    /proj\/pg-run\/bad\/buffer\.json.*"backend" must be "postgresql" or "sqlite"/,
  );
});

test('a server that does not answer: an error naming host, port and database, never the password', async () => {
  const { status, text, body } = await get(`/api/rollouts?file=${encodeURIComponent('proj/gone/grpo/buffer.json')}`);
  assert.equal(status, 502);
  assert.match((body.error as { message: string }).message, /127\.0\.0\.1:1, database 'nowhere'/);
  assert.ok(!text.includes(server.password), text);
});
