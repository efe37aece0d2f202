// The shared experience buffer on both backends (SQLite file, PostgreSQL server): the SQLite buffer's behaviour
// tests run against each through openSharedBuffer, then what is PostgreSQL's own: the schema version, the viewer,
// tasksets, errors that name the server but not the password. Several processes at once: postgres-writers.test.ts.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { describe, test } from 'node:test';
import pg from 'pg';
import { bufferCommand } from '../../../src/cli/buffer-command.js';
import { BufferTimeoutError, loadTaskset, openSharedBuffer, PostgresBufferError } from '../../../src/rft/buffer/index.js';
import { makeExperience } from './helpers.js';
import { available, backends, CHILD, child, eids, HANG_GUARD_MS, useServer } from './postgres-setup.js';

const getServer = useServer();

for (const backend of backends(getServer)) {
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
      const buffer = await openSharedBuffer({ path, name: 'exp-db', table: 'experiences' });
      await buffer.write([makeExperience('a')]);
      await assert.rejects(buffer.read(2, { timeoutMs: 40 }), (error: unknown) => {
        assert.ok(error instanceof BufferTimeoutError);
        assert.match(
          error.message,
          /buffer 'exp-db': timed out after 40 ms waiting for 2 experiences from .* for reader 'trainer'/,
        );
        assert.ok(!error.message.includes(getServer().password), 'no password in messages');
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
  });
}

describe('PostgreSQL buffer', () => {
  test('tables created once by concurrent openers; a schema version newer than the code is a precise error', async () => {
    const path = await getServer().createDatabase('schema');
    const buffers = await Promise.all([1, 2, 3, 4].map(() => openSharedBuffer({ path, table: 'exp' })));
    await Promise.all(buffers.map((b) => b.close()));
    const client = new pg.Client({ connectionString: path });
    await client.connect();
    try {
      const { rows } = await client.query('SELECT table_name, version FROM schema_version');
      assert.deepEqual(rows, [{ table_name: 'exp', version: 2 }]);
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
            `PostgreSQL 127\\.0\\.0\\.1:${getServer().port}, database 'schema' \\(user trinity\\): open: table 'exp' has schema version 7 \\(schema_version table\\), but this trinity knows versions up to 2`,
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
    const path = await getServer().createDatabase('view');
    const buffer = await openSharedBuffer({ path, table: 'exp' });
    await buffer.write([makeExperience('v1'), makeExperience('v2', { reward: 0.25 }), makeExperience('v3')]);
    const captured: string[] = [];
    const sink = { write: (text: string) => captured.push(text) };
    assert.equal(await bufferCommand(['view', path, '--table', 'exp', '--offset', '1', '--limit', '1'], sink), 0);
    const out = captured.join('');
    assert.match(out, new RegExp(`^postgresql://trinity@127\\.0\\.0\\.1:${getServer().port}/view: 3 experiences; showing 2-2\n`));
    assert.match(out, /\nv2\s+task-v2\s+0\.2500\s+-\s+2\s+5 6 7 \| 8 9\n/);
    assert.ok(!out.includes(getServer().password));
    assert.equal(await available(buffer), 3, 'the viewer moved no cursor');
    await buffer.close();
    await assert.rejects(bufferCommand(['view', path, '--table', 'missing'], sink), /there is no buffer table 'missing'/);
  });

  test('an sql taskset and eval set read from a PostgreSQL table (id order, raw_task as text or jsonb)', async () => {
    const path = await getServer().createDatabase('tasks');
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
        new RegExp(`127\\.0\\.0\\.1:${getServer().port}, database 'tasks' \\(user trinity\\) has no table 'nope'`),
      );
      assert.ok(!String(error).includes(getServer().password));
      return true;
    });
  });

  test('connection errors name host, port and database, never the password', async () => {
    const wrongPassword = getServer().url('postgres').replace(getServer().password, 'not-the-password-42');
    await assert.rejects(openSharedBuffer({ path: wrongPassword }), (error: unknown) => {
      assert.ok(error instanceof PostgresBufferError);
      assert.match(error.message, new RegExp(`127\\.0\\.0\\.1:${getServer().port}, database 'postgres'`));
      assert.match(error.message, /password authentication failed.*check the user and password/);
      assert.ok(!error.message.includes('not-the-password-42'));
      return true;
    });
    await assert.rejects(openSharedBuffer({ path: getServer().url('no_such_db') }), (error: unknown) => {
      assert.match(String(error), /database 'no_such_db'.*does not exist/);
      assert.ok(!String(error).includes(getServer().password));
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
      openSharedBuffer({ path: `postgresql://trinity:${getServer().password}@127.0.0.1:${closedPort}/db1` }),
      (error: unknown) => {
        assert.match(
          String(error),
          new RegExp(`127\\.0\\.0\\.1:${closedPort}, database 'db1'.*ECONNREFUSED.*is the server running`),
        );
        assert.ok(!String(error).includes(getServer().password));
        return true;
      },
    );
  });
});
