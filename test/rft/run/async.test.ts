// Fully asynchronous RFT: an explorer process and a trainer process sharing a SQLite buffer and the job folder (the
// trainer started first); the explorer follows the trainer's published weights.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { SqliteBuffer } from '../../../src/rft/buffer/index.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

const lines = (file: string) =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);

test('explore and train as two processes (trainer started first) share the buffer and the weights', {
  timeout: 600_000,
}, async () => {
  const { root, configFile, jobDir } = makeJob({
    totalSteps: 3,
    saveInterval: 3,
    extra: `synchronizer:\n  sync_interval: 1\n  sync_timeout: 120\n`,
  });
  const bufferPath = join(root, 'shared.db');
  const setBuffer = `buffer.trainer_input.experience_buffer.storage_type=sql`;
  const setPath = `buffer.trainer_input.experience_buffer.path=${bufferPath}`;
  // the same config file for both; buffer settings through --set on both processes. `started` resolves when the
  // process reports that its stage began ("stage 1/1: mode <mode>"), or rejects if it exits first.
  const run = (mode: string) => {
    let started = (): void => {};
    let exitedEarly = (_error: Error): void => {};
    const startedReport = new Promise<void>((resolve, reject) => {
      started = resolve;
      exitedEarly = reject;
    });
    const done = new Promise<{ code: number | null; output: string }>((resolve) => {
      const child = spawn(
        process.execPath,
        [
          trinity,
          'run',
          '--config',
          configFile,
          '--set',
          `mode=${mode}`,
          '--set',
          setBuffer,
          '--set',
          setPath,
          '--set',
          'buffer.train_batch_size=8',
        ],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let output = '';
      const take = (d: Buffer) => {
        output += d;
        if (output.includes(`stage 1/1: mode ${mode},`)) started();
      };
      child.stdout.on('data', take);
      child.stderr.on('data', take);
      // a failure guard only: a hung process fails the test instead of hanging it
      const deadline = setTimeout(() => child.kill('SIGKILL'), 300_000);
      child.on('exit', (code) => {
        clearTimeout(deadline);
        exitedEarly(new Error(`trinity run (mode ${mode}) exited with ${code} before its stage began:\n${output}`));
        resolve({ code, output });
      });
    });
    startedReport.catch(() => {}); // the explorer's is not awaited: its exit code is checked instead
    return { started: startedReport, done };
  };
  const trainer = run('train');
  await trainer.started; // the explorer starts only once the trainer is running its stage
  const explorer = run('explore');
  const [t, e] = await Promise.all([trainer.done, explorer.done]);
  assert.equal(t.code, 0, `trainer:\n${t.output}`);
  assert.equal(e.code, 0, `explorer:\n${e.output}`);
  const trained = lines(join(jobDir, 'metrics.jsonl'));
  assert.deepEqual(
    trained.map((m) => m.step),
    [1, 2, 3],
  );
  const explored = lines(join(jobDir, 'explorer', 'metrics.jsonl'));
  // on-policy with a separate trainer: explore step s used the trainer's weights of step s - 1
  assert.deepEqual(
    explored.map((m) => [m.step, m['explorer/model_version']]),
    [
      [1, 0],
      [2, 1],
      [3, 2],
    ],
  );
  const buffer = new SqliteBuffer({ path: bufferPath, readonly: true });
  assert.equal(buffer.total, 3 * 2 * 4); // steps × tasks × repeat_times
  buffer.close();
});
