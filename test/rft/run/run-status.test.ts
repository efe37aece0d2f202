// <job dir>/run_status.json (src/rft/run/run-status.ts): a run records that it is running (its pid and host), and
// how it ended — finished, interrupted (tested with SIGTERM in faults.test.ts) or failed with its error — so a
// watcher tells a crash from a stop without asking the process.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parseConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { writeRunStatus } from '../../../src/rft/run/run-status.js';
import { modelFolder, tasksetFile } from '../config/helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-run-status-'));
const model = modelFolder(join(dir, 'model'), 100);
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));
const status = (jobDir: string) => JSON.parse(readFileSync(join(jobDir, 'run_status.json'), 'utf8')) as unknown;

describe('run_status.json', () => {
  it('records a failed run with its error (a stage that throws)', async () => {
    // mode serve needs the serving layer, which runConfig is not given here: the stage throws after the checks
    const config = parseConfig(
      `model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
name: failing
mode: serve
buffer:
  explorer_input:
    taskset: {path: ${tasks}}
  trainer_input:
    experience_buffer: {storage_type: sql}
`,
      { env: {}, cwd: dir, file: join(dir, 'config.yaml') },
    );
    await assert.rejects(runConfig(config, { log: () => {}, distributed: null }), /mode serve needs the serving layer/);
    assert.deepEqual(status(config.checkpoint_job_dir), {
      state: 'failed',
      error: "stage 'run': mode serve needs the serving layer (run it with the trinity CLI)",
    });
  });

  it('is replaced atomically, with the pid and host of a running run', () => {
    const jobDir = join(dir, 'runs', 'manual');
    writeRunStatus(jobDir, { state: 'running', pid: process.pid, host: hostname() });
    assert.deepEqual(status(jobDir), { state: 'running', pid: process.pid, host: hostname() });
    writeRunStatus(jobDir, { state: 'finished' });
    assert.deepEqual(status(jobDir), { state: 'finished' });
  });
});
