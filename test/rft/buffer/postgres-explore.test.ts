// An explorer process (mode explore) on a PostgreSQL buffer that stops and starts again resumes after the last step
// whose rows it wrote (its position is meta written in the rows' transaction): its rows equal those of an explorer
// that ran through on an SQLite buffer, none twice.
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { openSharedBuffer } from '../../../src/rft/buffer/index.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from '../run/helpers.js';
import { useServer } from './postgres-setup.js';

const getServer = useServer();

/** Explores `steps` steps of a fresh or existing job (trainer_driven: it never waits for a trainer process). */
async function explore(configFile: string, bufferPath: string, steps: number, log: string[]): Promise<void> {
  const overrides = [
    'mode=explore',
    `buffer.total_steps=${steps}`,
    'buffer.trainer_input.experience_buffer.storage_type=sql',
    `buffer.trainer_input.experience_buffer.path=${bufferPath}`,
    'synchronizer.sync_style=trainer_driven',
  ];
  await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: (l) => log.push(l) });
}

/** The rows of a buffer as (explore step, task id, run id), in write order. */
async function rows(path: string): Promise<string[]> {
  const buffer = await openSharedBuffer({ path, readonly: true });
  try {
    return (await buffer.peek({ limit: 1000 })).map(({ experience: e }) => `${e.info.step}/${e.info.taskId}/${e.info.runId}`);
  } finally {
    await buffer.close();
  }
}

test('an explorer on PostgreSQL resumes after the last step it wrote; its rows equal a run-through on SQLite', {
  timeout: 600_000,
}, async () => {
  const through = makeJob({ totalSteps: 3, saveInterval: 3 });
  await explore(through.configFile, join(through.root, 'buffer.db'), 3, []);

  const resumed = makeJob({ totalSteps: 3, saveInterval: 3 });
  const url = await getServer().createDatabase('explore');
  await explore(resumed.configFile, url, 1, []);
  // the stage did not finish as far as the next run is concerned (an explorer stopped after step 1)
  rmSync(join(resumed.jobDir, 'done.json'));
  // the progress lines (the resume line among them) go to the terminal: collected from both streams meanwhile
  const log: string[] = [];
  const writes = { out: process.stdout.write, err: process.stderr.write };
  const collect = (chunk: unknown) => {
    log.push(String(chunk));
    return true;
  };
  process.stdout.write = collect as typeof process.stdout.write;
  process.stderr.write = collect as typeof process.stderr.write;
  try {
    await explore(resumed.configFile, url, 3, log);
  } finally {
    process.stdout.write = writes.out;
    process.stderr.write = writes.err;
  }
  const output = log.join('\n');
  assert.ok(
    /resuming/.test(output) && output.includes(`postgresql://trinity@127.0.0.1:${getServer().port}/explore`),
    `the resume is logged, naming the buffer without its password:\n${output}`,
  );
  assert.ok(!output.includes(getServer().password));

  const expected = await rows(join(through.root, 'buffer.db'));
  assert.equal(expected.length, 3 * 2 * 4, '3 steps of 2 tasks × 4 runs');
  assert.deepEqual(await rows(url), expected);
});
