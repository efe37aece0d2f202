// Several processes on one shared buffer, on both backends: four writer processes at once while a reader reads,
// and (PostgreSQL) a waiting reader woken by another process's write through LISTEN/NOTIFY, without polling.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, test } from 'node:test';
import pg from 'pg';
import { openSharedBuffer, type PostgresBuffer } from '../../../src/rft/buffer/index.js';
import { makeExperience } from './helpers.js';
import { backends, CHILD, child, eids, HANG_GUARD_MS, useServer } from './postgres-setup.js';

const getServer = useServer();

for (const backend of backends(getServer)) {
  describe(`shared buffer on ${backend.name}`, () => {
    test('four writer processes at once, a reader reading while they write: every row exactly once', async () => {
      const path = await backend.fresh();
      const reader = await openSharedBuffer({ path });
      // the tables exist before the writers start (they would also race to create them: see the next test)
      const writers = ['a', 'b', 'c', 'd'].map((prefix) => child('write-all', path, '60', '10', prefix));
      const got: string[] = [];
      const done = Promise.all(writers).then(async (results) => {
        for (const { stdout } of results)
          assert.deepEqual(JSON.parse(stdout), { inserted: 60 }, 'each writer inserted its own rows once');
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
      assert.equal(got.length, 240, 'no row lost or read twice while writers were writing');
      assert.equal(new Set(got).size, 240);
      for (const prefix of ['a', 'b', 'c', 'd']) {
        const mine = got.filter((eid) => eid.startsWith(prefix));
        assert.deepEqual(
          mine,
          eids(60).map((e) => `${prefix}${e.slice(1)}`),
          `writer ${prefix}'s rows in its write order`,
        );
      }
      await reader.close();
    });
  });
}

describe('PostgreSQL buffer', () => {
  test('a waiting reader is woken by another process’s write (LISTEN/NOTIFY), not by polling', async () => {
    const path = await getServer().createDatabase('notify');
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

  test('a reader whose LISTEN connection drops listens again and is still woken by the next write', async () => {
    const path = await getServer().createDatabase('reconnect');
    const reader = (await openSharedBuffer({ path })) as PostgresBuffer;
    const writer = await openSharedBuffer({ path, readerId: 'writer' });
    const admin = new pg.Client({ connectionString: path });
    await admin.connect();
    try {
      const reading = reader.readBatch(2, { timeoutMs: HANG_GUARD_MS });
      await reader.whenWaiting();
      // the server ends the reader's LISTEN session (as a restart or a network cut would); the next wait is
      // awaited from before the kill, so it cannot be missed
      const rewaited = reader.whenWaiting();
      const killed = await admin.query<{ ok: boolean }>(
        "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE datname = 'reconnect' AND query ILIKE 'LISTEN%'",
      );
      assert.deepEqual(
        killed.rows.map((r) => r.ok),
        [true],
        'one LISTEN session ended',
      );
      // woken by the drop, it counts again (nothing yet) and waits on a new LISTEN session
      await rewaited;
      await writer.write([makeExperience('r1'), makeExperience('r2')]);
      assert.deepEqual(
        (await reading).experiences.map((e) => e.eid),
        ['r1', 'r2'],
      );
    } finally {
      await admin.end();
      await writer.close();
      await reader.close();
    }
  });
});
