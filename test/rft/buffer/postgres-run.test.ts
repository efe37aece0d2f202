// `trinity run` with the experience buffer on a real PostgreSQL server: a mode-both GRPO run of the tiny model whose
// explorer writes every rollout to the database and whose trainer reads them from it, committing its cursor at the
// checkpoint.
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
      'SELECT eid, task_id, model_version FROM experiences ORDER BY id',
    );
    assert.equal(rows.rows.length, 16);
    assert.equal(new Set(rows.rows.map((r) => r.eid)).size, 16, 'each rollout stored once');
    assert.deepEqual(
      [...new Set(rows.rows.map((r) => Number(r.model_version)))],
      [0, 1],
      'step 1 explored with version 0, step 2 with version 1',
    );
    const cursor = await client.query<{ reader: string; position: string; max: string }>(
      'SELECT reader, position, (SELECT max(id) FROM experiences) AS max FROM experiences_cursors',
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
});

test('priority replay on the shared sql buffer is refused, not ignored', () => {
  const { configFile } = makeJob({ totalSteps: 2, saveInterval: 2 });
  assert.throws(
    () =>
      loadConfig(configFile, {
        resolveAlgorithm,
        overrides: [
          'buffer.trainer_input.experience_buffer.storage_type=sql',
          'buffer.trainer_input.experience_buffer.path=postgresql://u@127.0.0.1:5432/db',
          'buffer.trainer_input.experience_buffer.replay_buffer.enable=true',
        ],
      }),
    /buffer\.trainer_input\.experience_buffer\.replay_buffer\.enable: priority replay works on the in-memory buffer/,
  );
});
