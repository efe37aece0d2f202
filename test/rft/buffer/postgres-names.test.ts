// experience_buffer.name names the shared buffer's tables, on both backends (a real PostgreSQL server and an SQLite
// file): buffers of different names share a database without sharing rows; SQL keywords work (names are quoted); bad
// names are refused naming the setting; a buffer written before names named tables (every buffer in table
// "experiences") is taken over by the first name that opens it, rows and cursor included; `trinity buffer view` finds
// the only buffer, or the one --table names.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { bufferCommand } from '../../../src/cli/buffer-command.js';
import { isPostgresUrl, openSharedBuffer, PostgresBuffer, SqliteBuffer } from '../../../src/rft/buffer/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { makeJob } from '../run/helpers.js';
import { makeExperience } from './helpers.js';
import { backends, eids, useServer } from './postgres-setup.js';

const getServer = useServer();

/** Runs SQL on the database at `path` (either backend), returning the rows. */
async function sql(path: string, text: string): Promise<Record<string, unknown>[]> {
  if (!isPostgresUrl(path)) {
    const db = new Database(path);
    try {
      const statement = db.prepare(text);
      if (statement.reader) return statement.all() as Record<string, unknown>[];
      statement.run();
      return [];
    } finally {
      db.close();
    }
  }
  const client = new pg.Client({ connectionString: path });
  await client.connect();
  try {
    return (await client.query(text)).rows as Record<string, unknown>[];
  } finally {
    await client.end();
  }
}

function output(): { sink: { write(text: string): void }; text: () => string } {
  const captured: string[] = [];
  return { sink: { write: (t: string) => captured.push(t) }, text: () => captured.join('') };
}

for (const backend of backends(getServer)) {
  describe(`buffer names on ${backend.name}`, () => {
    test('the name is the table (lower case); two names are two buffers; an SQL keyword is a name; bad names are refused', async () => {
      const path = await backend.fresh();
      const rollouts = await openSharedBuffer({ path, name: 'My_Rollouts' });
      const order = await openSharedBuffer({ path, name: 'order' });
      try {
        assert.equal(rollouts.table, 'my_rollouts');
        assert.equal(await rollouts.write([makeExperience('a'), makeExperience('b')]), 2);
        assert.equal(await order.write([makeExperience('a')]), 1, 'same eid, another buffer');
        assert.deepEqual(
          (await sql(path, 'SELECT eid FROM my_rollouts ORDER BY id')).map((r) => r.eid),
          ['a', 'b'],
        );
        assert.deepEqual(
          (await sql(path, 'SELECT eid FROM "order"')).map((r) => r.eid),
          ['a'],
        );
        assert.deepEqual(
          (await order.read(1, { timeoutMs: 0 })).map((e) => e.eid),
          ['a'],
        );
      } finally {
        await rollouts.close();
        await order.close();
      }
      for (const [name, why] of [
        ['exp-db', /table name 'exp-db' cannot name an SQL table: use letters, digits and _ only/],
        ['1st', /table name '1st' cannot name an SQL table/],
        ['x'.repeat(41), /is 41 characters: an SQL table name takes at most 40/],
      ] as const)
        await assert.rejects(openSharedBuffer({ path, name }), why);
      // the viewer: several buffers in one database need --table
      const { sink, text } = output();
      await assert.rejects(bufferCommand(['view', path], sink), /holds several buffers \(my_rollouts, order\): name the table/);
      assert.equal(await bufferCommand(['view', path, '--table', 'My_Rollouts'], sink), 0);
      assert.match(text(), /: 2 experiences; showing 1-2\n/);
    });

    test('a buffer written before names named tables is taken over, rows and cursor included, by the name that opens it', async () => {
      const path = await backend.fresh();
      // the older layout: tables "experiences", _cursors, _meta and no replay tables, unversioned (SQLite) or at
      // schema version 1 (PostgreSQL)
      const old = await openSharedBuffer({ path });
      await old.write(['e0', 'e1', 'e2'].map((eid) => makeExperience(eid)));
      const first = await old.readBatch(1, { timeoutMs: 0 });
      await old.commit(first.cursor);
      await old.close();
      for (const t of ['experiences_replay', 'experiences_replay_revs']) await sql(path, `DROP TABLE ${t}`);
      if (isPostgresUrl(path)) await sql(path, "UPDATE schema_version SET version = 1 WHERE table_name = 'experiences'");
      else await sql(path, 'DROP TABLE schema_version');
      const viewed = output();
      assert.equal(await bufferCommand(['view', path], viewed.sink), 0, 'the viewer finds the old table');
      assert.match(viewed.text(), /: 3 experiences; showing 1-3\n/);

      const buffer = await openSharedBuffer({ path, name: 'experience_buffer' });
      try {
        assert.ok(buffer instanceof PostgresBuffer || buffer instanceof SqliteBuffer);
        assert.equal(buffer.migratedFrom, 'experiences');
        assert.equal(await buffer.total, 3);
        assert.deepEqual(
          (await buffer.read(5, { timeoutMs: 0, minCount: 0 })).map((e) => e.eid),
          ['e1', 'e2'],
          'the trainer reads on after its committed position',
        );
        assert.equal(await buffer.write([makeExperience('e3')]), 1);
        assert.deepEqual(
          (await buffer.peek({ limit: 10 })).map((r) => [r.id, r.experience.eid]),
          eids(4).map((eid, i) => [i + 1, eid]),
          'ids go on after the old ones',
        );
      } finally {
        await buffer.close();
      }
      assert.deepEqual(
        await sql(path, "SELECT table_name, version FROM schema_version WHERE table_name LIKE 'experience%' ORDER BY 1"),
        [{ table_name: 'experience_buffer', version: 2 }],
      );
      // a second name does not take it over again: it gets its own, empty buffer
      const other = await openSharedBuffer({ path, name: 'other' });
      assert.equal(await other.total, 0);
      await other.close();
      const { sink, text } = output();
      assert.equal(await bufferCommand(['view', path, '--table', 'experience_buffer'], sink), 0);
      assert.match(text(), /: 4 experiences; showing 1-4\n/);
    });
  });
}

describe('experience_buffer.name in the config', () => {
  test('storage_type sql refuses a name that cannot name a table, naming the setting; a queue takes any name', () => {
    const { configFile } = makeJob({ totalSteps: 1, saveInterval: 1 });
    const load = (...overrides: string[]) =>
      loadConfig(configFile, {
        resolveAlgorithm,
        overrides: overrides.map((o) => `buffer.trainer_input.experience_buffer.${o}`),
      });
    assert.throws(
      () => load('storage_type=sql', 'name=my-buffer'),
      /buffer\.trainer_input\.experience_buffer\.name: 'my-buffer' cannot name an SQL table: use letters, digits and _ only, not starting with a digit \(storage_type sql names its tables after it\)/,
    );
    load('name=my-buffer');
    load('storage_type=sql', 'name=my_buffer', 'replay_buffer.enable=true');
  });
});
