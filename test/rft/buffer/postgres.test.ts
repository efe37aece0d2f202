// The shared experience buffer on both backends (SQLite file, PostgreSQL server): the SQLite buffer's behaviour
// tests run against each through openSharedBuffer, then what is PostgreSQL's own: LISTEN/NOTIFY wake-ups, four
// writer processes at once, the schema version, errors that name the server but not the password.
// A real server (test/helpers/postgres.ts) for the whole file; each test gets its own database.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import pg from 'pg';
import { bufferCommand } from '../../../src/cli/buffer-command.js';
import {
  BufferTimeoutError,
  loadTaskset,
  openSharedBuffer,
  PostgresBuffer,
  PostgresBufferError,
  type SharedExperienceBuffer,
} from '../../../src/rft/buffer/index.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { makeExperience, tempDir } from './helpers.js';

const run = promisify(execFile);
const CHILD = join(import.meta.dirname, 'postgres-child.ts');
// Only stops a hang with an error instead of the suite's test timeout: minutes, far beyond any machine's time for
// these steps. A guard kill is SIGTERM, which read-crash tells apart from the SIGKILL the child sends itself.
const HANG_GUARD_MS = 300_000;
const child = (...args: string[]) => run(process.execPath, ['--import', 'tsx', CHILD, ...args], { timeout: HANG_GUARD_MS });
const eids = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `e${from + i}`);

let server: PostgresServer;
let databases = 0;
before(async () => {
  server = await startPostgres();
});
after(async () => {
  await server?.stop();
});

const backends: { name: string; fresh: () => Promise<string> }[] = [
  { name: 'SQLite', fresh: async () => join(tempDir('shared'), 'buffer.db') },
  { name: 'PostgreSQL', fresh: () => server.createDatabase(`buffer_${++databases}`) },
];

/** Rows the reader has not been handed yet (SQLite counts synchronously, PostgreSQL over the network). */
async function available(buffer: SharedExperienceBuffer): Promise<number> {
  return buffer instanceof PostgresBuffer ? buffer.available() : buffer.size;
}

for (const backend of backends) {
  describe(`shared buffer on ${backend.name}`, () => {
    test('a trainer reads everything an explorer process writes, in order, once (reader started first)', async () => {
      const path = await backend.fresh();
      const reader = await openSharedBuffer({ path });
      // 8 chunks of 5, each written when the parent asks (a line on the child's stdin)
      const writer = spawn(process.execPath, ['--import', 'tsx', CHILD, 'write', path, '40', '5'], {
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let output = '';
      writer.stdout.on('data', (d) => {
        output += d;
      });
      writer.stderr.on('data', (d) => {
        output += d;
      });
      const exited = new Promise<number | null>((resolve) => writer.on('exit', (code) => resolve(code)));
      const writerDied = exited.then((code) =>
        code === 0 ? new Promise<never>(() => {}) : Promise.reject(new Error(`writer exited with code ${code}:\n${output}`)),
      );
      try {
        const got: string[] = [];
        let chunksAsked = 0;
        for (;;) {
          const ready = await available(reader);
          // readBatch looks once before it waits: with fewer than 4 rows the chunk asked for next lands while it
          // waits (or before its first look: either way it is read)
          const reading = reader.readBatch(4, { timeoutMs: HANG_GUARD_MS });
          if (ready < 4 && chunksAsked < 8) {
            chunksAsked++;
            writer.stdin.write('next\n');
          }
          const { experiences, cursor } = await Promise.race([reading, writerDied]);
          if (experiences.length === 0) break;
          got.push(...experiences.map((e) => e.eid));
          await reader.commit(cursor);
        }
        writer.stdin.end();
        assert.equal(await exited, 0, `writer:\n${output}`);
        assert.deepEqual(got, eids(40), 'no loss, no duplicates, write order');
        assert.equal(await reader.total, 40, 'duplicate eids were ignored');
      } finally {
        writer.stdin.end();
        await reader.close();
      }
    });

    test('a restarted reader resumes after its last commit; a kill -9 between read and commit re-delivers the batch', async () => {
      const path = await backend.fresh();
      const writer = await openSharedBuffer({ path });
      assert.equal(await writer.write(eids(12).map((eid) => makeExperience(eid))), 12);
      assert.equal(await writer.write([makeExperience('e0')]), 0, 'duplicate ignored');
      await writer.finishWriting();
      await writer.close();

      const { stdout } = await child('read-crash', path, '3').catch((error: { stdout: string; signal: string }) => {
        assert.equal(error.signal, 'SIGKILL');
        return error;
      });
      assert.deepEqual(JSON.parse(stdout), ['e3', 'e4', 'e5'], 'the child saw the second batch');

      const trainer = await openSharedBuffer({ path });
      const again = await trainer.readBatch(3, { timeoutMs: 1000 });
      assert.deepEqual(
        again.experiences.map((e) => e.eid),
        ['e3', 'e4', 'e5'],
        'the uncommitted batch comes again',
      );
      await trainer.commit(again.cursor);
      const next = await trainer.read(3, { timeoutMs: 1000 });
      assert.deepEqual(
        next.map((e) => e.eid),
        ['e6', 'e7', 'e8'],
      );
      await trainer.commit();
      await trainer.close();

      const restarted = await openSharedBuffer({ path });
      const rest = await restarted.read(10, { timeoutMs: 1000 });
      assert.deepEqual(
        rest.map((e) => e.eid),
        ['e9', 'e10', 'e11'],
        'clean restart continues after the commit; finished writer gives a short batch',
      );
      assert.deepEqual(rest[0], makeExperience('e9'), 'stored as JSON, read back equal');
      await restarted.rewind();
      assert.equal((await restarted.read(3, { timeoutMs: 1000 })).length, 3, 'rewind goes back to the commit');
      await restarted.restore(0);
      assert.deepEqual(
        (await restarted.read(2, { timeoutMs: 1000 })).map((e) => e.eid),
        ['e0', 'e1'],
        'restore sets the position (a checkpoint is the truth)',
      );
      await restarted.close();
    });

    test('readers wait with a timeout naming the buffer; readers have separate cursors; writes reopen a finished buffer', async () => {
      const path = await backend.fresh();
      const buffer = await openSharedBuffer({ path, name: 'exp-db' });
      await buffer.write([makeExperience('a')]);
      await assert.rejects(buffer.read(2, { timeoutMs: 40 }), (error: unknown) => {
        assert.ok(error instanceof BufferTimeoutError);
        assert.match(
          error.message,
          /buffer 'exp-db': timed out after 40 ms waiting for 2 experiences from .* for reader 'trainer'/,
        );
        assert.ok(!error.message.includes(server.password), 'no password in messages');
        return true;
      });
      assert.equal((await buffer.read(2, { timeoutMs: 20, minCount: 1 })).length, 1);
      const other = await openSharedBuffer({ path, readerId: 'eval' });
      assert.equal(await available(other), 1, 'another reader id has its own position');
      await buffer.finishWriting();
      assert.deepEqual(await buffer.read(2, { timeoutMs: 1000 }), []);
      await other.write([makeExperience('b')]);
      const waiting = buffer.read(2, { timeoutMs: HANG_GUARD_MS });
      assert.equal(await other.write([makeExperience('c')]), 1);
      assert.deepEqual(
        (await waiting).map((e) => e.eid),
        ['b', 'c'],
      );
      await assert.rejects(async () => buffer.commit(99), /commit cursor 99/);
      await buffer.close();
      await other.close();
    });

    test('explorer meta goes in with its rows and reads back', async () => {
      const path = await backend.fresh();
      const buffer = await openSharedBuffer({ path });
      assert.equal(await buffer.readMeta('explorer_state'), null);
      await buffer.write([makeExperience('a')], { meta: { explorer_state: '{"step":1}' } });
      await buffer.write([makeExperience('b')], { meta: { explorer_state: '{"step":2}' } });
      assert.equal(await buffer.readMeta('explorer_state'), '{"step":2}');
      const rows = await buffer.peek({ offset: 1, limit: 5 });
      assert.deepEqual(
        rows.map((r) => r.experience.eid),
        ['b'],
      );
      assert.equal(await available(buffer), 2, 'peek moves no cursor');
      await buffer.close();
    });

    test('four writer processes at once, a reader reading while they write: every row exactly once', async () => {
      const path = await backend.fresh();
      const reader = await openSharedBuffer({ path });
      // the tables exist before the writers start (they would also race to create them: see the next test)
      const writers = ['a', 'b', 'c', 'd'].map((prefix) => child('write-all', path, '150', '10', prefix));
      const got: string[] = [];
      const done = Promise.all(writers).then(async (results) => {
        for (const { stdout } of results)
          assert.deepEqual(JSON.parse(stdout), { inserted: 150 }, 'each writer inserted its own rows once');
        const last = await openSharedBuffer({ path, readerId: 'closer' });
        await last.finishWriting();
        await last.close();
      });
      for (;;) {
        const batch = await reader.readBatch(16, { timeoutMs: HANG_GUARD_MS });
        if (batch.experiences.length === 0) break;
        got.push(...batch.experiences.map((e) => e.eid));
        await reader.commit(batch.cursor);
      }
      await done;
      assert.equal(got.length, 600, 'no row lost or read twice while writers were writing');
      assert.equal(new Set(got).size, 600);
      for (const prefix of ['a', 'b', 'c', 'd']) {
        const mine = got.filter((eid) => eid.startsWith(prefix));
        assert.deepEqual(
          mine,
          eids(150).map((e) => `${prefix}${e.slice(1)}`),
          `writer ${prefix}'s rows in its write order`,
        );
      }
      await reader.close();
    });
  });
}

describe('PostgreSQL buffer', () => {
  test('a waiting reader is woken by another process’s write (LISTEN/NOTIFY), not by polling', async () => {
    const path = await server.createDatabase('notify');
    const reader = (await openSharedBuffer({ path })) as PostgresBuffer;
    const writer = spawn(process.execPath, ['--import', 'tsx', CHILD, 'write', path, '4', '4'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let output = '';
    writer.stderr.on('data', (d) => {
      output += d;
    });
    const exited = new Promise<number | null>((resolve) => writer.on('exit', (code) => resolve(code)));
    try {
      const reading = reader.readBatch(4, { timeoutMs: HANG_GUARD_MS });
      await reader.whenWaiting();
      assert.equal(reader.lookups, 1, 'one look, then a wait');
      writer.stdin.write('next\n');
      const batch = await reading;
      assert.deepEqual(
        batch.experiences.map((e) => e.eid),
        eids(4),
      );
      // the writer's 4 rows came in one transaction, its duplicate in a second (inserting nothing, so no notify):
      // one notification, one look after it. A poll would have looked at every interval of a child's start-up.
      assert.equal(reader.lookups, 2, 'looked again only when notified');
      writer.stdin.end();
      assert.equal(await exited, 0, output);
    } finally {
      writer.stdin.end();
      await reader.close();
    }
  });

  test('tables created once by concurrent openers; a schema version newer than the code is a precise error', async () => {
    const path = await server.createDatabase('schema');
    const buffers = await Promise.all([1, 2, 3, 4].map(() => openSharedBuffer({ path, table: 'exp' })));
    await Promise.all(buffers.map((b) => b.close()));
    const client = new pg.Client({ connectionString: path });
    await client.connect();
    try {
      const { rows } = await client.query('SELECT table_name, version FROM schema_version');
      assert.deepEqual(rows, [{ table_name: 'exp', version: 1 }]);
      await client.query("UPDATE schema_version SET version = 7 WHERE table_name = 'exp'");
    } finally {
      await client.end();
    }
    for (const readonly of [false, true])
      await assert.rejects(openSharedBuffer({ path, table: 'exp', readonly }), (error: unknown) => {
        assert.ok(error instanceof PostgresBufferError);
        assert.match(
          error.message,
          new RegExp(
            `PostgreSQL 127\\.0\\.0\\.1:${server.port}, database 'schema' \\(user trinity\\): open: table 'exp' has schema version 7 \\(schema_version table\\), but this trinity knows versions up to 1`,
          ),
        );
        return true;
      });
    await assert.rejects(
      openSharedBuffer({ path, table: 'nothing_here', readonly: true }),
      /there is no buffer table 'nothing_here'/,
    );
  });

  test('trinity buffer view reads a PostgreSQL buffer without moving cursors or printing the password', async () => {
    const path = await server.createDatabase('view');
    const buffer = await openSharedBuffer({ path, table: 'exp' });
    await buffer.write([makeExperience('v1'), makeExperience('v2', { reward: 0.25 }), makeExperience('v3')]);
    const captured: string[] = [];
    const sink = { write: (text: string) => captured.push(text) };
    assert.equal(await bufferCommand(['view', path, '--table', 'exp', '--offset', '1', '--limit', '1'], sink), 0);
    const out = captured.join('');
    assert.match(out, new RegExp(`^postgresql://trinity@127\\.0\\.0\\.1:${server.port}/view: 3 experiences; showing 2-2\n`));
    assert.match(out, /\nv2\s+task-v2\s+0\.2500\s+-\s+2\s+5 6 7 \| 8 9\n/);
    assert.ok(!out.includes(server.password));
    assert.equal(await available(buffer), 3, 'the viewer moved no cursor');
    await buffer.close();
    await assert.rejects(bufferCommand(['view', path, '--table', 'missing'], sink), /there is no buffer table 'missing'/);
  });

  test('an sql taskset and eval set read from a PostgreSQL table (id order, raw_task as text or jsonb)', async () => {
    const path = await server.createDatabase('tasks');
    const client = new pg.Client({ connectionString: path });
    await client.connect();
    try {
      await client.query('CREATE TABLE math (id INTEGER PRIMARY KEY, raw_task JSONB NOT NULL)');
      await client.query(
        `INSERT INTO math VALUES (2, '{"prompt": "2+2=", "response": "4"}'), (1, '{"prompt": "1+1=", "response": "2"}')`,
      );
      await client.query('CREATE TABLE "Evals" (id INTEGER, raw_task TEXT)');
      await client.query(`INSERT INTO "Evals" VALUES (1, '{"prompt": "3+3=", "response": "6"}'), (2, 'not json')`);
    } finally {
      await client.end();
    }
    const taskset = await loadTaskset({ name: 'math', path, storageType: 'sql' });
    assert.deepEqual(
      taskset.tasks.map((t) => [t.prompt, t.response]),
      [
        ['1+1=', '2'],
        ['2+2=', '4'],
      ],
    );
    await assert.rejects(
      loadTaskset({ name: 'Evals', path, storageType: 'sql', isEval: true }),
      /tasks:Evals:2: raw_task is not JSON/,
    );
    await assert.rejects(loadTaskset({ name: 'nope', path, storageType: 'sql' }), (error: unknown) => {
      assert.match(
        String(error),
        new RegExp(`127\\.0\\.0\\.1:${server.port}, database 'tasks' \\(user trinity\\) has no table 'nope'`),
      );
      assert.ok(!String(error).includes(server.password));
      return true;
    });
  });

  test('connection errors name host, port and database, never the password', async () => {
    const wrongPassword = server.url('postgres').replace(server.password, 'not-the-password-42');
    await assert.rejects(openSharedBuffer({ path: wrongPassword }), (error: unknown) => {
      assert.ok(error instanceof PostgresBufferError);
      assert.match(error.message, new RegExp(`127\\.0\\.0\\.1:${server.port}, database 'postgres'`));
      assert.match(error.message, /password authentication failed.*check the user and password/);
      assert.ok(!error.message.includes('not-the-password-42'));
      return true;
    });
    await assert.rejects(openSharedBuffer({ path: server.url('no_such_db') }), (error: unknown) => {
      assert.match(String(error), /database 'no_such_db'.*does not exist/);
      assert.ok(!String(error).includes(server.password));
      return true;
    });
    // a port nobody listens on: the server's own port + 1 is not guaranteed free, so use the port of a closed socket
    const closedPort = await new Promise<number>((resolve) => {
      const s = createServer();
      s.listen(0, '127.0.0.1', () => {
        const port = (s.address() as { port: number }).port;
        s.close(() => resolve(port));
      });
    });
    await assert.rejects(
      openSharedBuffer({ path: `postgresql://trinity:${server.password}@127.0.0.1:${closedPort}/db1` }),
      (error: unknown) => {
        assert.match(
          String(error),
          new RegExp(`127\\.0\\.0\\.1:${closedPort}, database 'db1'.*ECONNREFUSED.*is the server running`),
        );
        assert.ok(!String(error).includes(server.password));
        return true;
      },
    );
  });
});
