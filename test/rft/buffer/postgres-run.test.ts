// `trinity run` with the experience buffer on a real PostgreSQL server: a mode-both GRPO run of the tiny model whose
// explorer writes every rollout to the database and whose trainer reads them from it, committing its cursor at the
// checkpoint; the same with priority replay (the replay state in the database), the tables named after the buffer.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/config/index.js';
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
    // 3 train steps × 8 experiences from at least 16 rows: reads reused experiences (decay_limit_randomization: at
    // most 3 uses each)
    const uses = await client.query<{ most: string }>(
      "SELECT max(use_count) AS most FROM rollouts_replay WHERE reader = 'trainer'",
    );
    assert.ok(Number(uses.rows[0]?.most) >= 1 && Number(uses.rows[0]?.most) <= 2, `use counts: ${uses.rows[0]?.most}`);
  } finally {
    await client.end();
  }
});
