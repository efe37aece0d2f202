// The weight channel through the PostgreSQL buffer's database (src/rft/sync/postgres-channel.ts) on a real
// server: each side opens its own channel (its own connections, as separate processes would). The trainer side saves
// weight folders with a stand-in trainer (a file naming the version) and the explorer side's stand-in engine records
// the folders it was told to load. Every wait here is on the channel's change signal, which only a notification from
// the server (or a write of this side's own) moves; timeouts are safety nets.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { PostgresWeightChannel, WEIGHT_SYNC_SCHEMA_VERSION } from '../../../src/rft/sync/postgres-channel.js';
import { openProcessWeightChannel } from '../../../src/rft/sync/process-channel.js';
import { SyncFolderChannel } from '../../../src/rft/sync/sync-folder.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';

const WAIT_MS = 30_000;

let server: PostgresServer;
before(async () => {
  server = await startPostgres();
});
after(async () => {
  await server?.stop();
});

/** A trainer whose "weights" are one file naming the version it saved. */
function standInTrainer() {
  let saved = 0;
  return {
    async saveWeights(dir: string) {
      saved++;
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'weights.txt'), `save ${saved}\n`);
    },
  };
}

/** An engine that records the folders it loaded (and what they held when it loaded them). */
function standInEngine() {
  const loaded: { dir: string; content: string }[] = [];
  return {
    loaded,
    async syncWeightsFromDir(dir: string) {
      loaded.push({ dir, content: readFileSync(join(dir, 'weights.txt'), 'utf8') });
    },
  };
}

async function openBoth(database: string) {
  const url = await server.createDatabase(database);
  const jobDir = mkdtempSync(join(tmpdir(), 'pg-sync-'));
  const trainerSide = await PostgresWeightChannel.open({ url, jobDir });
  const explorerSide = await PostgresWeightChannel.open({ url, jobDir: '/nonexistent/explorer-job-dir' });
  return { url, jobDir, trainerSide, explorerSide };
}

describe('weight sync through PostgreSQL', () => {
  test('the buffer path chooses it: a PostgreSQL URL gives the database channel, a file the job folder', async () => {
    const url = await server.createDatabase('choose');
    // the buffer's table names the sync table (a run passes its buffer's: experience_buffer.name, folded to lower case)
    const channel = await openProcessWeightChannel({ path: url, table: 'My_Buffer', jobDir: '/unused' });
    try {
      assert.ok(channel instanceof PostgresWeightChannel);
      assert.match(channel.location, /table my_buffer_sync$/);
      assert.doesNotMatch(channel.location, /test-secret-pw/, 'no password in messages');
    } finally {
      await channel.close();
    }
    const folder = await openProcessWeightChannel({ path: '/tmp/x/buffer.db', table: 'experiences', jobDir: '/tmp/x' });
    assert.ok(folder instanceof SyncFolderChannel);
  });

  test('the job folder channel (SQLite buffers) behind the same interface: pointer file, version folders, finished', async () => {
    const jobDir = mkdtempSync(join(tmpdir(), 'folder-sync-'));
    const channel = new SyncFolderChannel(jobDir);
    const publisher = channel.publisher(standInTrainer());
    const engine = standInEngine();
    const receiver = channel.receiver({ engine, startVersion: 0, timeoutMs: WAIT_MS });
    assert.equal(await channel.latest(), null);
    const waiting = receiver.waitForVersion(1, 'weights version 1');
    await publisher.publish(1);
    await waiting;
    const dir = join(jobDir, 'sync', 'version_1');
    assert.deepEqual(await channel.latest(), { version: 1, dir });
    assert.deepEqual(engine.loaded, [{ dir, content: 'save 1\n' }]);
    await publisher.publish(2);
    await publisher.publish(3);
    assert.deepEqual(readdirSync(join(jobDir, 'sync')).sort(), ['latest.json', 'version_2', 'version_3']);
    publisher.finish(3);
    await assert.rejects(
      receiver.waitForVersion(5, 'weights version 5'),
      /the trainer process finished \(3 in .*without publishing weights version 5/,
    );
    await channel.close();
  });

  test('a published version reaches a waiting explorer through the database; the job folder holds only weights', async () => {
    const { url, jobDir, trainerSide, explorerSide } = await openBoth('publish');
    try {
      assert.equal(await explorerSide.latest(), null, 'nothing published yet');
      const publisher = trainerSide.publisher(standInTrainer());
      const engine = standInEngine();
      const versions: number[] = [];
      const receiver = explorerSide.receiver({
        engine,
        startVersion: 0,
        timeoutMs: WAIT_MS,
        onVersion: (v) => versions.push(v),
      });
      const waiting = receiver.waitForVersion(2, 'weights version 2 for explore step 3');
      await publisher.publish(2);
      await waiting;
      const dir = join(jobDir, 'sync', 'version_2');
      assert.deepEqual(engine.loaded, [{ dir, content: 'save 1\n' }]);
      assert.deepEqual(versions, [2]);
      assert.equal(receiver.version, 2);
      // the pointer is in the database: a process opening later starts from it
      const later = await PostgresWeightChannel.open({ url, jobDir: '/unused' });
      try {
        assert.deepEqual(await later.latest(), { version: 2, dir });
      } finally {
        await later.close();
      }
      // the previous version stays (a reader may be loading it), older ones go; no pointer, request or marker files
      await publisher.publish(3);
      await publisher.publish(4);
      assert.deepEqual(readdirSync(join(jobDir, 'sync')).sort(), ['version_3', 'version_4']);
      // (version 3 too, if its notification was read before version 4 was published)
      await receiver.waitForVersion(4, 'weights version 4');
      assert.equal(engine.loaded[0]?.dir, dir);
      assert.deepEqual(engine.loaded.at(-1), { dir: join(jobDir, 'sync', 'version_4'), content: 'save 3\n' });
    } finally {
      await Promise.all([trainerSide.close(), explorerSide.close()]);
    }
  });

  test('explorer_driven: a request is seen by the trainer from memory, answered with new weights, then without', async () => {
    const { url, jobDir, trainerSide, explorerSide } = await openBoth('request');
    try {
      const publisher = trainerSide.publisher(standInTrainer());
      const engine = standInEngine();
      const receiver = explorerSide.receiver({ engine, startVersion: 0, timeoutMs: WAIT_MS });
      assert.equal(publisher.requestPending(), false);
      const asked = receiver.requestWeights('the trainer to answer the sync requested at explore step 2');
      // the notification updates the trainer side's row: requestPending() reads it, no query
      await trainerSide.changed.waitUntil(() => publisher.requestPending(), WAIT_MS, 'the request to reach the trainer');
      await publisher.publish(1);
      publisher.answerRequest();
      assert.equal(publisher.requestPending(), false, 'answered locally at once');
      await asked;
      assert.deepEqual(
        engine.loaded.map((l) => l.dir),
        [join(jobDir, 'sync', 'version_1')],
      );
      // a second request with nothing newer trained: answered without publishing, the engine loads nothing
      const again = receiver.requestWeights('the second sync request');
      await trainerSide.changed.waitUntil(() => publisher.requestPending(), WAIT_MS, 'the second request');
      publisher.answerRequest();
      await again;
      assert.equal(engine.loaded.length, 1);
      assert.equal(receiver.version, 1);
      // two explorers asking before the trainer looks are both answered by one answer
      const other = await PostgresWeightChannel.open({ url, jobDir: '/unused' });
      try {
        const second = other.receiver({ engine: standInEngine(), startVersion: 1, timeoutMs: WAIT_MS });
        const first = receiver.requestWeights('request of explorer a');
        const firstRequested = trainerSide.row.requested;
        await trainerSide.changed.waitUntil(() => trainerSide.row.requested === firstRequested + 1, WAIT_MS, 'request a');
        const secondAsked = second.requestWeights('request of explorer b');
        await trainerSide.changed.waitUntil(() => trainerSide.row.requested === firstRequested + 2, WAIT_MS, 'request b');
        publisher.answerRequest();
        await Promise.all([first, secondAsked]);
      } finally {
        await other.close();
      }
      await publisher.flush();
    } finally {
      await Promise.all([trainerSide.close(), explorerSide.close()]);
    }
  });

  test("the trainer's finished marker stops an explorer waiting for weights it will never publish", async () => {
    const { url, trainerSide, explorerSide } = await openBoth('finished');
    try {
      const publisher = trainerSide.publisher(standInTrainer());
      const receiver = explorerSide.receiver({ engine: standInEngine(), startVersion: 0, timeoutMs: WAIT_MS });
      const waiting = receiver.waitForVersion(4, 'weights version 4 for explore step 5');
      await publisher.publish(2);
      publisher.finish(2);
      await assert.rejects(
        waiting,
        /the trainer process finished \(its last step 2, in postgresql:\/\/trinity@127\.0\.0\.1:\d+\/finished table experiences_sync\) without publishing weights version 4 for explore step 5/,
      );
      // an explorer requesting weights is released too
      await receiver.requestWeights('a request after the trainer finished');
      await publisher.flush();

      // a marker older than the explorer (a finished run's) is ignored: it waits on, until stopped
      const later = await PostgresWeightChannel.open({ url, jobDir: '/unused' });
      try {
        const stop = new AbortController();
        let loadedThree = () => {};
        const three = new Promise<void>((resolve) => {
          loadedThree = resolve;
        });
        const fresh = later.receiver({
          engine: standInEngine(),
          startVersion: 0,
          timeoutMs: WAIT_MS,
          signal: stop.signal,
          onVersion: (v) => {
            if (v === 3) loadedThree();
          },
        });
        const stillWaiting = fresh.waitForVersion(4, 'weights version 4');
        // a change of the row wakes it: it loads version 3 and goes on waiting despite the old marker
        await publisher.publish(3);
        await three;
        stop.abort();
        await assert.rejects(stillWaiting, /stopped while waiting for weights version 4/);
        // a restarted trainer clears the marker; its own finish counts again
        const restarted = trainerSide.publisher(standInTrainer());
        await restarted.flush();
        assert.equal(trainerSide.row.finishedStep, null);
        assert.equal(trainerSide.row.finishedRevision, null);
        const next = later.receiver({ engine: standInEngine(), startVersion: 3, timeoutMs: WAIT_MS });
        const waitingNext = next.waitForVersion(6, 'weights version 6');
        restarted.finish(5);
        await assert.rejects(
          waitingNext,
          /the trainer process finished \(its last step 5, .*without publishing weights version 6/,
        );
        await restarted.flush();
      } finally {
        await later.close();
      }
    } finally {
      await Promise.all([trainerSide.close(), explorerSide.close()]);
    }
  });

  test('a sync table of a newer schema version is refused, naming the table and the versions', async () => {
    const url = await server.createDatabase('newer');
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query('CREATE TABLE schema_version (table_name TEXT PRIMARY KEY, version INTEGER NOT NULL)');
      await client.query("INSERT INTO schema_version VALUES ('experiences_sync', $1)", [WEIGHT_SYNC_SCHEMA_VERSION + 1]);
    } finally {
      await client.end();
    }
    await assert.rejects(
      PostgresWeightChannel.open({ url, jobDir: '/unused' }),
      new RegExp(
        `table 'experiences_sync' has schema version ${WEIGHT_SYNC_SCHEMA_VERSION + 1} .*versions up to ${WEIGHT_SYNC_SCHEMA_VERSION}`,
      ),
    );
  });

  test('a published folder this machine cannot read: the error names it, the database, and the shared-storage rule', async () => {
    const { trainerSide, explorerSide } = await openBoth('unreadable');
    try {
      const missing = '/nonexistent/trainer-job/sync/version_1';
      await trainerSide.update('point at a folder elsewhere', 'version = $2, dir = $3', [1, missing]);
      const receiver = explorerSide.receiver({
        engine: {
          async syncWeightsFromDir(dir: string) {
            if (!existsSync(dir)) throw new Error(`${dir}: no such folder`);
          },
        },
        startVersion: 0,
        timeoutMs: WAIT_MS,
      });
      await assert.rejects(
        receiver.waitForVersion(1, 'weights version 1'),
        /loading weights version 1 from \/nonexistent\/trainer-job\/sync\/version_1 \(sync pointer in postgresql:\/\/.*experiences_sync\) \(there is no such folder on .*: the trainer's job folder must be on storage every explorer machine mounts at the same path\)/,
      );
    } finally {
      await Promise.all([trainerSide.close(), explorerSide.close()]);
    }
  });
});
