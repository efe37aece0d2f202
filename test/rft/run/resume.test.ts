// A real `trinity run` process killed with SIGKILL mid-run; the same command resumes from the last checkpoint and
// finishes with every training step recorded exactly once.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { listCheckpoints } from '../../../src/rft/checkpoint.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

const steps = (jobDir: string): number[] => {
  const file = join(jobDir, 'metrics.jsonl');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => (JSON.parse(l) as { step: number }).step);
};

function run(
  configFile: string,
  killWhen?: () => boolean,
  signal: NodeJS.Signals = 'SIGKILL',
): Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [trinity, 'run', '--config', configFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d) => {
      output += d;
    });
    child.stderr.on('data', (d) => {
      output += d;
    });
    const deadline = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`trinity run did not finish within 240 s:\n${output}`));
    }, 240_000);
    let sent = false;
    const poll = killWhen
      ? setInterval(() => {
          if (!sent && killWhen()) {
            sent = true;
            child.kill(signal);
          }
        }, 50)
      : null;
    child.on('exit', (code, signal) => {
      clearTimeout(deadline);
      if (poll) clearInterval(poll);
      resolve({ code, signal, output });
    });
  });
}

// enough steps after the signal at step 3 that a fast run cannot finish between two 50 ms polls
const TOTAL_STEPS = 12;
const ALL_STEPS = Array.from({ length: TOTAL_STEPS }, (_, i) => i + 1);

for (const [label, extra] of [
  ['on-policy', ''],
  ['one-step off-policy (sync_offset 1: the explorer runs a step ahead)', 'synchronizer: {sync_offset: 1}'],
] as const) {
  test(`kill -9 during a run, then the same command: resumes from the checkpoint, no step lost or repeated (${label})`, {
    timeout: 600_000,
  }, async () => {
    const { configFile, jobDir } = makeJob({ totalSteps: TOTAL_STEPS, saveInterval: 2, extra });
    // kill once step 3 is recorded: checkpoint 2 exists, step 3 was trained after it
    const first = await run(configFile, () => steps(jobDir).includes(3));
    assert.equal(first.signal, 'SIGKILL', `the first run should have been killed:\n${first.output}`);
    assert.ok(listCheckpoints(jobDir).includes(2));
    const second = await run(configFile);
    assert.equal(second.code, 0, second.output);
    assert.match(second.output, /resuming from checkpoint step [24]/);
    assert.deepEqual(steps(jobDir), ALL_STEPS);
    assert.deepEqual(listCheckpoints(jobDir).slice(-1), [TOTAL_STEPS]);
    assert.ok(existsSync(join(jobDir, 'final_model', 'model.safetensors')));
  });
}

test('Ctrl-C (SIGINT) stops after the current step with exit code 130; the same command resumes and finishes', {
  timeout: 600_000,
}, async () => {
  const { configFile, jobDir } = makeJob({ totalSteps: TOTAL_STEPS, saveInterval: 2, extra: 'synchronizer: {sync_offset: 1}' });
  const first = await run(configFile, () => steps(jobDir).includes(3), 'SIGINT');
  assert.equal(first.code, 130, `the first run should stop on SIGINT with 130:\n${first.output}`);
  assert.match(first.output, /stopping after the current step/);
  assert.ok(steps(jobDir).length < TOTAL_STEPS, 'the run stopped before its last step');
  const second = await run(configFile);
  assert.equal(second.code, 0, second.output);
  assert.match(second.output, /resuming from checkpoint step \d+/);
  assert.deepEqual(steps(jobDir), ALL_STEPS);
  assert.ok(existsSync(join(jobDir, 'final_model', 'model.safetensors')));
});
