// Task claims (src/rft/explorer/task-claims.ts) on a real PostgreSQL server and on an SQLite file: the claim rule (own
// unfinished step first, then a dead explorer's, then the next unclaimed one; wait while others explore; done), who
// counts as dead (PostgreSQL: its connection is gone; SQLite: its process is gone), one process per name, and
// explorers that deal differently refused.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { openTaskClaims, type TaskClaims } from '../../../src/rft/explorer/task-claims.js';
import { decideClaim } from '../../../src/rft/explorer/task-claims-rule.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { makeJob } from './helpers.js';

test('explorer.name: refused outside mode explore, checked as a name; difficulty_based refused in mode explore', () => {
  const { configFile } = makeJob({ totalSteps: 2, saveInterval: 2 });
  const explore = ['mode=explore', 'buffer.trainer_input.experience_buffer.storage_type=sql'];
  const problem = (overrides: string[]) => {
    try {
      loadConfig(configFile, { resolveAlgorithm, overrides });
      return null;
    } catch (error) {
      return (error as Error).message;
    }
  };
  assert.match(
    problem(['explorer.name=a']) ?? '',
    /explorer\.name: names an explorer process of mode explore .*mode both: remove it/,
  );
  assert.match(problem([...explore, 'explorer.name=a b']) ?? '', /explorer\.name: expected a name of letters, digits/);
  assert.equal(problem([...explore, 'explorer.name=a']), null);
  assert.match(
    problem([...explore, 'buffer.explorer_input.taskset.data_selector.selector_type=difficulty_based']) ?? '',
    /taskset\.data_selector\.selector_type: difficulty_based picks from the rewards one process saw/,
  );
});

test('the claim rule: own step, then a dead explorer’s, then the next; wait; done', () => {
  const alive = (owner: string) => owner !== 'dead';
  assert.deepEqual(
    decideClaim(
      [
        { step: 2, owner: 'dead' },
        { step: 3, owner: 'me' },
      ],
      4,
      9,
      'me',
      alive,
    ),
    { action: 'take', step: 3, from: null },
  );
  assert.deepEqual(decideClaim([{ step: 2, owner: 'dead' }], 4, 9, 'me', alive), { action: 'take', step: 2, from: 'dead' });
  assert.deepEqual(decideClaim([{ step: 2, owner: 'b' }], 4, 9, 'me', alive), { action: 'insert', step: 5 });
  assert.deepEqual(decideClaim([{ step: 9, owner: 'b' }], 9, 9, 'me', alive), {
    action: 'none',
    claim: { kind: 'wait', inFlight: [{ step: 9, owner: 'b' }] },
  });
  assert.deepEqual(decideClaim([], 9, 9, 'me', alive), { action: 'none', claim: { kind: 'done' } });
});

const options = (path: string, explorer: string, deal = 'batch 2') => ({
  path,
  table: 'experiences',
  stage: 'grpo',
  explorer,
  deal,
  totalSteps: 3,
});

const stepOf = async (claims: TaskClaims) => {
  const claim = await claims.claim();
  return claim.kind === 'step' ? claim.step : claim.kind;
};

describe('PostgreSQL', () => {
  let server: PostgresServer;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server?.stop();
  });

  test('two explorers share the steps; a dead one’s step is taken over; a restarted one takes its own back', async () => {
    const url = await server.createDatabase('claims');
    const a = await openTaskClaims(options(url, 'a'));
    const b = await openTaskClaims(options(url, 'b'));
    try {
      assert.equal(await stepOf(a), 1);
      assert.equal(await stepOf(b), 2);
      await a.complete(1);
      assert.equal(await stepOf(a), 3);
      // every step claimed, b's and a's unfinished and both alive: b waits
      await b.complete(2);
      assert.deepEqual(await b.claim(), { kind: 'wait', inFlight: [{ step: 3, owner: 'a' }] });
      // a's connection is cut (what a killed process's socket does): the server releases its name lock
      const admin = new pg.Client({ connectionString: url });
      await admin.connect();
      // (the timeout form returns once the session is gone, its locks released)
      const ended = await admin.query<{ ended: boolean }>(
        "SELECT pg_terminate_backend(pid, 30000) AS ended FROM pg_stat_activity WHERE application_name = 'trinity explorer a (name lock)'",
      );
      assert.deepEqual(
        ended.rows.map((r) => r.ended),
        [true],
      );
      await admin.end();
      assert.deepEqual(await b.claim(), { kind: 'step', step: 3, from: 'a' });
      await b.complete(3);
      assert.deepEqual(await b.claim(), { kind: 'done' });
      assert.deepEqual(await a.completedBy(), [1]);
      assert.deepEqual(await b.completedBy(), [2, 3]);
    } finally {
      await a.close();
      await b.close();
    }
  });

  test('an explorer that restarts under its name resumes its own unfinished step', async () => {
    const url = await server.createDatabase('restart');
    const first = await openTaskClaims(options(url, 'a'));
    assert.equal(await stepOf(first), 1);
    await first.close();
    const again = await openTaskClaims(options(url, 'a'));
    try {
      assert.deepEqual(await again.claim(), { kind: 'step', step: 1, from: null });
    } finally {
      await again.close();
    }
  });

  test('a second process with a running explorer’s name, and an explorer dealing differently, are refused', async () => {
    const url = await server.createDatabase('refusals');
    const a = await openTaskClaims(options(url, 'a'));
    try {
      await assert.rejects(openTaskClaims(options(url, 'a')), /explorer 'a' is already running .*own explorer\.name/);
      await assert.rejects(
        openTaskClaims(options(url, 'b', 'batch 4')),
        /dealt as batch 2, but this explorer deals batch 4: every explorer process of a stage needs the same tasksets/,
      );
    } finally {
      await a.close();
    }
  });
});

describe('SQLite', () => {
  test('explorers on one machine: an explorer whose process is gone is dead, its step taken over', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'claims-')), 'buffer.db');
    const a = await openTaskClaims(options(path, 'a'));
    const b = await openTaskClaims(options(path, 'b'));
    try {
      assert.equal(await stepOf(a), 1);
      assert.equal(await stepOf(b), 2);
      assert.equal(await stepOf(a), 1, 'its own unfinished step again');
      await b.complete(2);
      assert.equal(await stepOf(b), 3);
      await b.complete(3);
      // step 1 moves to an explorer 'c' registered with the id of a process that has exited
      const finished = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
      const deadPid = Number(finished.stdout);
      const db = new Database(path);
      db.prepare(
        "INSERT INTO experiences_explorers (name, pid, host) SELECT 'c', ?, host FROM experiences_explorers WHERE name = 'a'",
      ).run(deadPid);
      db.prepare("UPDATE experiences_claims SET owner = 'c' WHERE step = 1").run();
      db.close();
      assert.deepEqual(await b.claim(), { kind: 'step', step: 1, from: 'c' });
      await b.complete(1);
      assert.deepEqual(await a.claim(), { kind: 'done' });
      // a name registered by a process that runs (this one's parent) is taken
      const registry = new Database(path);
      registry
        .prepare(
          "INSERT INTO experiences_explorers (name, pid, host) SELECT 'd', ?, host FROM experiences_explorers WHERE name = 'a'",
        )
        .run(process.ppid);
      registry.close();
      await assert.rejects(openTaskClaims(options(path, 'd')), /explorer 'd' is already running \(process \d+ on /);
    } finally {
      await a.close();
      await b.close();
    }
  });
});
