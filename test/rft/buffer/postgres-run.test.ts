// `trinity run` with the experience buffer on a real PostgreSQL server: a mode-both GRPO run of the tiny model whose
// explorer writes every rollout to the database and whose trainer reads them from it, committing its cursor at the
// checkpoint; the same with priority replay (the replay state in the database), the tables named after the buffer.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { ReplayEntries, resolveReplayPolicy } from '../../../src/rft/buffer/priority.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { makeJob } from '../run/helpers.js';

let server: PostgresServer;
before(async () => {
  server = await startPostgres();
});
after(async () => {
  await server?.stop();
});

test('a both-mode GRPO run reads and writes its experiences through PostgreSQL', async () => {
  const url = await server.createDatabase('run');
  const { configFile, jobDir } = makeJob({ totalSteps: 2, saveInterval: 2 });
  const config = loadConfig(configFile, {
    resolveAlgorithm,
    overrides: ['buffer.trainer_input.experience_buffer.storage_type=sql', `buffer.trainer_input.experience_buffer.path=${url}`],
  });
  const lines: string[] = [];
  await runConfig(config, { log: (l) => lines.push(l) });
  const metrics = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
  assert.deepEqual(
    metrics.map((m) => m.step),
    [1, 2],
  );
  for (const m of metrics) assert.ok(Number.isFinite(m['actor/loss']), `step ${m.step}: actor/loss`);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    // 2 steps × batch_size 2 tasks × repeat_times 4
    const rows = await client.query<{ eid: string; task_id: string; model_version: string }>(
      'SELECT eid, task_id, model_version FROM experience_buffer ORDER BY id',
    );
    assert.equal(rows.rows.length, 16);
    assert.equal(new Set(rows.rows.map((r) => r.eid)).size, 16, 'each rollout stored once');
    assert.deepEqual(
      [...new Set(rows.rows.map((r) => Number(r.model_version)))],
      [0, 1],
      'step 1 explored with version 0, step 2 with version 1',
    );
    const cursor = await client.query<{ reader: string; position: string; max: string }>(
      'SELECT reader, position, (SELECT max(id) FROM experience_buffer) AS max FROM experience_buffer_cursors',
    );
    assert.deepEqual(
      cursor.rows.map((r) => [r.reader, r.position]),
      [['trainer', cursor.rows[0]?.max]],
      'the checkpoint at step 2 committed everything the trainer read',
    );
  } finally {
    await client.end();
  }
  assert.ok(!lines.join('\n').includes(server.password), 'the password is never logged');
  // where the buffer is, for the Studio: the server and table, without the password
  const record = readFileSync(join(jobDir, 'buffer.json'), 'utf8');
  assert.ok(!record.includes(server.password), record);
  assert.deepEqual(JSON.parse(record), {
    backend: 'postgresql',
    url: url.replace(`:${server.password}@`, '@'),
    table: 'experience_buffer',
  });
});

test('a both-mode run with priority replay on the PostgreSQL buffer finishes; its replay state is committed at the checkpoint', async () => {
  const url = await server.createDatabase('replay');
  const { configFile, jobDir } = makeJob({ totalSteps: 3, saveInterval: 2 });
  const buffer = 'buffer.trainer_input.experience_buffer';
  const config = loadConfig(configFile, {
    resolveAlgorithm,
    overrides: [
      `${buffer}.storage_type=sql`,
      `${buffer}.path=${url}`,
      `${buffer}.name=Rollouts`,
      `${buffer}.replay_buffer.enable=true`,
      `${buffer}.replay_buffer.priority_fn=decay_limit_randomization`,
      `${buffer}.replay_buffer.reuse_cooldown_time=0`,
    ],
  });
  await runConfig(config, { log: () => {} });
  const metrics = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
  assert.deepEqual(
    metrics.map((m) => m.step),
    [1, 2, 3],
  );
  for (const m of metrics) assert.ok(Number.isFinite(m['actor/loss']), `step ${m.step}: actor/loss`);
  const state = JSON.parse(readFileSync(join(jobDir, 'checkpoints', 'global_step_3', 'state.json'), 'utf8')) as {
    buffer: { cursor: number };
  };
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    // experience_buffer.name is the table (PostgreSQL folds it to lower case)
    const tables = await client.query<{ table_name: string; version: number }>(
      'SELECT table_name, version FROM schema_version ORDER BY table_name',
    );
    assert.ok(
      tables.rows.some((r) => r.table_name === 'rollouts' && r.version === 2),
      JSON.stringify(tables.rows),
    );
    const rows = await client.query<{ n: string }>('SELECT count(*) AS n FROM rollouts');
    assert.ok(Number(rows.rows[0]?.n) >= 16, 'the explorer wrote its rollouts to the named table');
    // the revision of the last checkpoint (the final step's) was committed (the older ones are forgotten)
    const revisions = await client.query<{ first: string }>(
      "SELECT min(revision) AS first FROM rollouts_replay_revs WHERE reader = 'trainer'",
    );
    assert.equal(Number(revisions.rows[0]?.first), state.buffer.cursor);
    const forgotten = await client.query<{ n: string }>(
      "SELECT count(*) AS n FROM rollouts_replay WHERE reader = 'trainer' AND dropped <= $1",
      [state.buffer.cursor],
    );
    assert.equal(Number(forgotten.rows[0]?.n), 0, 'entries that left by the committed revision are deleted');
    // the committed revision's replay state is what the three reads of 8 make from the rows, for some order of the
    // explorer's writes and the trainer's reads (a read takes in what is written by then; with reuse_cooldown_time 0
    // it never waits for new rows: a trainer ahead of the explorer reuses the first 8 until their third use removes
    // them, one behind takes each step's fresh rows)
    const written = await client.query<{ id: string; model_version: string }>(
      'SELECT id, model_version FROM rollouts ORDER BY id',
    );
    const committed = await client.query<{ position: string }>(
      "SELECT position FROM rollouts_replay_revs WHERE reader = 'trainer' AND revision = $1",
      [state.buffer.cursor],
    );
    const position = Number(committed.rows[0]?.position);
    const cursor = await client.query<{ position: string }>(
      "SELECT position FROM rollouts_cursors WHERE reader = 'trainer.replay'",
    );
    assert.equal(Number(cursor.rows[0]?.position), position, 'the rows taken in are committed with the revision');
    const live = await client.query<{ id: string; use_count: string; priority: number }>(
      `SELECT id, use_count, priority FROM rollouts_replay
       WHERE reader = 'trainer' AND added <= $1 AND (dropped IS NULL OR dropped > $1) ORDER BY seq`,
      [state.buffer.cursor],
    );
    const stored = live.rows.map((e) => `${e.id}:${e.use_count}:${e.priority}`).join(' ');
    const possible = replayOrders(
      written.rows.map((r) => ({ id: Number(r.id), modelVersion: Number(r.model_version) })),
      position,
      3,
      8,
    );
    assert.ok(possible.has(stored), `replay state [${stored}] at position ${position}; possible: ${[...possible].join(' | ')}`);
  } finally {
    await client.end();
  }
});

/**
 * The replay states (entries as "rowId:useCount:priority", oldest first) that `reads` reads of `n` can leave, by the
 * replay's rules (ReplayEntries: decay_limit_randomization, no noise, reuse_cooldown_time 0), for every order of
 * writes and reads: each read takes in the rows written by then (in id order; the last read up to row `position`)
 * and hands out `n`; once the writers finished (every row written) a read experience leaves instead of coming back.
 */
function replayOrders(rows: { id: number; modelVersion: number }[], position: number, reads: number, n: number): Set<string> {
  const states = new Set<string>();
  const policy = resolveReplayPolicy({ priorityFn: 'decay_limit_randomization', reuseCooldownMs: 0 });
  const last = rows.findIndex((r) => r.id === position) + 1;
  // counts[i]: rows taken in by read i; read `finishedFrom` on ran after the writers finished
  const visit = (counts: number[], finishedFrom: number): void => {
    const replay = new ReplayEntries<number>(policy);
    let taken = 0;
    for (const [i, count] of counts.entries()) {
      for (const row of rows.slice(taken, count)) replay.insert(row.id, row.modelVersion, 0, 0);
      taken = count;
      const finished = i >= finishedFrom;
      if (replay.availableCount(0) < n && !finished) return; // that read would have waited for rows
      replay.take(n, 0, finished ? null : 0);
    }
    states.add(replay.entries.map((e) => `${e.payload}:${e.useCount}:${e.priority}`).join(' '));
  };
  const orders = (counts: number[]): void => {
    if (counts.length === reads) {
      if (counts.at(-1) !== last) return;
      for (let from = 0; from <= reads; from++) if (counts.slice(from).every((c) => c === rows.length)) visit(counts, from);
      return;
    }
    for (let c = counts.at(-1) ?? 1; c <= last; c++) orders([...counts, c]);
  };
  orders([]);
  return states;
}
