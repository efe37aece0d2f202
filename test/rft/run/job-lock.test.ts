// A job folder belongs to the run that holds its lock (src/rft/run/job-lock.ts): a second run of the folder fails at
// once, naming the owner's pid and host, and writes nothing there; a lock left by a run killed with SIGKILL (which
// could not remove it) does not block the next run.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { jobLockFile } from '../../../src/rft/run/job-lock.js';
import { runningStatus } from '../../../src/rft/run/run-status.js';
import { makeJob } from './helpers.js';

const jobLockModule = fileURLToPath(new URL('../../../src/rft/run/job-lock.ts', import.meta.url));
const runStatus = (jobDir: string) => JSON.parse(readFileSync(join(jobDir, 'run_status.json'), 'utf8')) as unknown;

test('the serving process (mode serve) and its trainer process (mode train) of one folder hold different locks', () => {
  const explorer = { name: null } as never;
  assert.equal(jobLockFile([{ mode: 'serve', explorer }]), 'run.serve.lock');
  assert.equal(jobLockFile([{ mode: 'train', explorer }]), 'run.lock');
  assert.equal(
    jobLockFile([
      { mode: 'serve', explorer },
      { mode: 'train', explorer },
    ]),
    'run.lock',
  );
});

test('two runs of one job folder: the second fails at once naming the pid and host of the first, which goes on', async () => {
  const { configFile, jobDir } = makeJob({ totalSteps: 2, saveInterval: 2 });
  let started: () => void = () => {};
  const firstStarted = new Promise<void>((resolve) => {
    started = resolve;
  });
  const first = runConfig(loadConfig(configFile, { resolveAlgorithm }), {
    distributed: null,
    log: (line) => {
      if (/stage 1\/1/.test(line)) started();
    },
  });
  await firstStarted;
  const second: string[] = [];
  await assert.rejects(
    runConfig(loadConfig(configFile, { resolveAlgorithm }), { distributed: null, log: (l) => second.push(l) }),
    (error: Error) => {
      assert.equal(error.name, 'JobFolderLockedError');
      assert.match(error.message, new RegExp(`in use by the run of pid ${process.pid} on host ${hostname()}`));
      return true;
    },
  );
  assert.deepEqual(second, [], 'the second run ran nothing');
  // the owner's status is left as it is (the second run wrote no "running", no "failed")
  assert.deepEqual(runStatus(jobDir), runningStatus());
  const result = await first;
  assert.ok(result.finalModelDir);
  assert.deepEqual(runStatus(jobDir), { state: 'finished' });
  assert.ok(!existsSync(join(jobDir, 'run.lock')), 'the lock is released when the run ends');
});

test('a lock left by a run killed with SIGKILL does not block the next run', async () => {
  const { root, configFile, jobDir } = makeJob({ totalSteps: 1, saveInterval: 1 });
  // a process that takes the job folder's lock as a run does, says so, and waits to be killed
  const holder = join(root, 'holder.mts');
  writeFileSync(
    holder,
    `import { lockJobFolder } from ${JSON.stringify(jobLockModule)};
lockJobFolder(${JSON.stringify(jobDir)});
console.log('locked');
setInterval(() => {}, 1_000_000);
`,
  );
  const child = spawn(process.execPath, ['--import', 'tsx', holder], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      if (String(d).includes('locked')) resolve();
    });
    child.on('exit', (code) => reject(new Error(`the lock holder exited early (${code})`)));
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  child.kill('SIGKILL');
  await exited;
  const left = JSON.parse(readFileSync(join(jobDir, 'run.lock'), 'utf8')) as { pid: number; host: string; startTime?: string };
  assert.deepEqual({ pid: left.pid, host: left.host }, { pid: child.pid, host: hostname() }, 'the killed holder left its lock');
  if (existsSync('/proc/self/stat')) assert.equal(typeof left.startTime, 'string', 'the lock records when its owner started');
  const result = await runConfig(loadConfig(configFile, { resolveAlgorithm }), { distributed: null, log: () => {} });
  assert.ok(result.finalModelDir && existsSync(result.finalModelDir));
  assert.ok(!existsSync(join(jobDir, 'run.lock')));
});

test("a lock whose pid now belongs to another process (the pid's start time differs) does not block the next run", async () => {
  if (!existsSync(`/proc/${process.ppid}/stat`)) return; // start times come from /proc
  const { configFile, jobDir } = makeJob({ totalSteps: 1, saveInterval: 1 });
  // a live pid (this test's parent) with a start time it never had: the run that wrote this record is gone
  mkdirSync(jobDir, { recursive: true });
  writeFileSync(join(jobDir, 'run.lock'), `${JSON.stringify({ pid: process.ppid, host: hostname(), startTime: '1' })}\n`);
  const result = await runConfig(loadConfig(configFile, { resolveAlgorithm }), { distributed: null, log: () => {} });
  assert.ok(result.finalModelDir && existsSync(result.finalModelDir));
  // the same live pid without a start time (a record from a host without /proc) is taken for a live owner
  writeFileSync(join(jobDir, 'run.lock'), `${JSON.stringify({ pid: process.ppid, host: hostname() })}\n`);
  await assert.rejects(
    runConfig(loadConfig(configFile, { resolveAlgorithm }), { distributed: null, log: () => {} }),
    new RegExp(`in use by the run of pid ${process.ppid} on host`),
  );
});
