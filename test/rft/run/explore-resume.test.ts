// An explorer process (mode explore) that stops and starts again resumes after the last step whose rows it wrote:
// its position (step and task scheduler) is written into the shared SQLite buffer in the same transaction as the
// rows, so the rows of an interrupted and resumed explorer are those of one that ran through, none twice.
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { SqliteBuffer } from '../../../src/rft/buffer/index.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

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
  const buffer = new SqliteBuffer({ path, readonly: true });
  try {
    return buffer.peek({ limit: 1000 }).map(({ experience: e }) => `${e.info.step}/${e.info.taskId}/${e.info.runId}`);
  } finally {
    await buffer.close();
  }
}

test('an explorer process resumes after the last step it wrote, with the same tasks as one that ran through', {
  timeout: 600_000,
}, async () => {
  const through = makeJob({ totalSteps: 4, saveInterval: 4 });
  await explore(through.configFile, join(through.root, 'buffer.db'), 4, []);

  const resumed = makeJob({ totalSteps: 4, saveInterval: 4 });
  const bufferPath = join(resumed.root, 'buffer.db');
  await explore(resumed.configFile, bufferPath, 2, []);
  // the stage did not finish as far as the next run is concerned (an explorer stopped after step 2)
  rmSync(join(resumed.jobDir, 'done.json'));
  const log: string[] = [];
  await explore(resumed.configFile, bufferPath, 4, log);

  const expected = await rows(join(through.root, 'buffer.db'));
  assert.equal(expected.length, 4 * 2 * 4, '4 steps of 2 tasks × 4 runs');
  assert.deepEqual(await rows(bufferPath), expected);
});
