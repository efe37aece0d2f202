// Mode both on an SQL buffer (an SQLite file that outlives the process), killed with SIGKILL after it wrote an
// explore step its newest checkpoint does not cover, then resumed with the same command: the resumed explorer explores
// that step again, and the buffer still holds each (explore step, task, repeat) once — the rows carry ids keyed by what
// they are (stampExperienceIds), which the buffer stores once.
//
// Why the kill always lands after such a step (no race decides it): eval runs every 4 explore steps, before the step's
// rows are written, so the line "eval at step 4" means explore step 3 is in the buffer; checkpoints come every 2 train
// steps, and train step 4 needs explore step 4's rows, so no checkpoint covers step 3 yet (the newest is at most 2).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { listCheckpoints } from '../../../src/rft/checkpoint.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

/** Runs `trinity run`; with `killOn`, SIGKILLs it the moment its output first matches (an event, not a time). */
function run(
  configFile: string,
  sets: string[],
  killOn?: RegExp,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }> {
  return new Promise((resolve, reject) => {
    const args = [trinity, 'run', '--config', configFile, ...sets.flatMap((s) => ['--set', s])];
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let sent = false;
    const take = (d: Buffer) => {
      output += d;
      if (killOn && !sent && killOn.test(output)) {
        sent = true;
        child.kill('SIGKILL');
      }
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    // a failure guard only
    const deadline = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`trinity run did not finish within 240 s:\n${output}`));
    }, 240_000);
    child.on('exit', (code, signal) => {
      clearTimeout(deadline);
      resolve({ code, signal, output });
    });
  });
}

/** (explore step, task, repeat) of every row of the buffer's table. */
function rowKeys(file: string): string[] {
  const db = new Database(file, { readonly: true });
  try {
    const rows = db.prepare('SELECT data FROM experience_buffer ORDER BY id').all() as { data: string }[];
    return rows.map((r) => {
      const { info } = JSON.parse(r.data) as { info: { step: number; taskId: string; runId: number } };
      return `${info.step}/${info.taskId}/${info.runId}`;
    });
  } finally {
    db.close();
  }
}

test('mode both on an SQL buffer: a run killed after an explore step its checkpoint misses, resumed, stores each (task, repeat) once', {
  timeout: 600_000,
}, async () => {
  const totalSteps = 6;
  const { root, configFile, jobDir } = makeJob({ totalSteps, saveInterval: 2 });
  const bufferFile = join(root, 'buffer.db');
  const sets = [
    'buffer.trainer_input.experience_buffer.storage_type=sql',
    `buffer.trainer_input.experience_buffer.path=${bufferFile}`,
    `buffer.explorer_input.eval_tasksets=[{name: eval, path: ${join(root, 'tasks.jsonl')}}]`,
    'explorer.eval_interval=4',
  ];
  const killed = await run(configFile, sets, /eval at step 4/);
  assert.equal(killed.signal, 'SIGKILL', killed.output);
  const checkpoint = listCheckpoints(jobDir).at(-1) ?? 0;
  assert.ok(checkpoint <= 2, `checkpoints: ${listCheckpoints(jobDir)}`);
  const before = rowKeys(bufferFile);
  assert.ok(
    before.some((k) => Number(k.split('/')[0]) > checkpoint),
    `the buffer holds rows of explore step 3 (after checkpoint ${checkpoint}): ${before.length} rows`,
  );

  const resumed = await run(configFile, sets);
  assert.equal(resumed.code, 0, resumed.output);
  if (checkpoint > 0) assert.match(resumed.output, new RegExp(`resuming from checkpoint step ${checkpoint} `));
  const keys = rowKeys(bufferFile);
  // 6 explore steps × batch_size 2 × repeat_times 4, none twice
  assert.equal(new Set(keys).size, keys.length, 'no (explore step, task, repeat) stored twice');
  assert.equal(keys.length, totalSteps * 2 * 4);
});
