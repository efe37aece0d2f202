// Several explorer processes (mode explore, explorer.name a and b) and one trainer process (mode train) on one
// PostgreSQL buffer: a GRPO run of the tiny model. Explorer a is killed with SIGKILL right after it claims its second
// explore step (the line it prints), then started again under the same name. The run finishes; every task of the
// run's steps was explored exactly once (counted by task id and repeat index in the buffer), each step by one
// explorer, and each explorer's metrics hold exactly the steps it finished.
//
// Why a second claim always comes (no race decides whether the kill happens): a starts alone and claims step 1; then
// b starts. sync_interval 2 lets steps 1 and 2 explore with the base weights; steps 3.. need weights version 2, which
// needs the trainer's steps 1 and 2, which need the rows of explore steps 1 and 2. So b, holding step 2 then step 3,
// cannot finish step 3 before a finishes step 1, and a then claims another step (3 or 4).
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));
const TOTAL_STEPS = 4;

let server: PostgresServer;
const children: ChildProcess[] = [];
before(async () => {
  server = await startPostgres();
});
after(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await server?.stop();
});

interface Run {
  child: ChildProcess;
  output: () => string;
  /** Resolves with the first match of `pattern` in the output (or its `nth` match), rejects if the process exits. */
  waitFor: (pattern: RegExp, nth?: number) => Promise<RegExpMatchArray>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }>;
}

/** `trinity run` with the test's overrides; the waits follow what it prints, not the clock. */
function run(configFile: string, sets: string[]): Run {
  const args = [trinity, 'run', '--config', configFile, ...sets.flatMap((s) => ['--set', s])];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let output = '';
  const waiters = new Set<() => void>();
  const take = (chunk: Buffer) => {
    output += chunk;
    for (const wake of [...waiters]) wake();
  };
  child.stdout?.on('data', take);
  child.stderr?.on('data', take);
  // a failure guard only: a hung process fails the test instead of hanging it
  const guard = setTimeout(() => child.kill('SIGKILL'), 400_000);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }>((resolve) => {
    child.on('exit', (code, signal) => {
      clearTimeout(guard);
      for (const wake of [...waiters]) wake();
      resolve({ code, signal, output });
    });
  });
  const waitFor = (pattern: RegExp, nth = 1) =>
    new Promise<RegExpMatchArray>((resolve, reject) => {
      const check = () => {
        const matches = [...output.matchAll(new RegExp(pattern.source, `${pattern.flags.replace('g', '')}g`))];
        const match = matches[nth - 1];
        if (match !== undefined) {
          waiters.delete(check);
          resolve(match);
        } else if (child.exitCode !== null || child.signalCode !== null) {
          waiters.delete(check);
          reject(new Error(`the process exited before printing ${pattern} (${nth}):\n${output}`));
        }
      };
      waiters.add(check);
      check();
    });
  return { child, output: () => output, waitFor, exited };
}

const steps = (file: string): number[] =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .filter((l) => l.trim())
        .map((l) => (JSON.parse(l) as { step: number }).step)
    : [];

test('2 explorer processes and a trainer process on PostgreSQL finish a GRPO run; an explorer killed mid-step and restarted loses and repeats nothing', {
  timeout: 600_000,
}, async () => {
  const url = await server.createDatabase('many');
  const { configFile, jobDir } = makeJob({
    totalSteps: TOTAL_STEPS,
    saveInterval: TOTAL_STEPS,
    extra: 'synchronizer:\n  sync_interval: 2\n  sync_timeout: 300\n',
  });
  const shared = [
    'buffer.trainer_input.experience_buffer.storage_type=sql',
    `buffer.trainer_input.experience_buffer.path=${url}`,
    'buffer.train_batch_size=8',
  ];
  const trainer = run(configFile, ['mode=train', ...shared]);
  await trainer.waitFor(/stage 1\/1: mode train,/);
  const a = run(configFile, ['mode=explore', 'explorer.name=a', ...shared]);
  // b starts once a holds step 1, so a's first claim is step 1 whichever process starts faster
  await a.waitFor(/explorer 'a' claimed explore step 1\b/);
  const b = run(configFile, ['mode=explore', 'explorer.name=b', ...shared]);
  // a's second claim: it holds that step, unfinished, when the signal lands
  const claimed = await a.waitFor(/explorer 'a' claimed explore step (\d+)/, 2);
  a.child.kill('SIGKILL');
  const killed = await a.exited;
  assert.equal(killed.signal, 'SIGKILL', killed.output);
  const killedStep = Number(claimed[1]);
  const restarted = run(configFile, ['mode=explore', 'explorer.name=a', ...shared]);
  const [t, e1, e2] = await Promise.all([trainer.exited, b.exited, restarted.exited]);
  assert.equal(t.code, 0, `trainer:\n${t.output}`);
  assert.equal(e1.code, 0, `explorer b:\n${e1.output}`);
  assert.equal(e2.code, 0, `explorer a (restarted):\n${e2.output}`);

  // the killed step was explored again: by a on restart, or by b once it saw a dead
  const again = new RegExp(`explorer '(a|b)' claimed explore step ${killedStep}\\b`);
  assert.ok(again.test(e2.output) || again.test(e1.output), `step ${killedStep} explored again:\n${e1.output}\n${e2.output}`);

  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ task_id: string; data: string }>(
      'SELECT task_id, data FROM experience_buffer ORDER BY id',
    );
    const keys = rows.map((r) => {
      const info = (JSON.parse(r.data) as { info: { runId: number; step: number } }).info;
      return { task: r.task_id, run: info.runId, step: info.step };
    });
    // 4 steps × batch_size 2 × repeat_times 4, each (task, repeat) once: a sequential deal of 8 distinct tasks
    assert.equal(keys.length, TOTAL_STEPS * 2 * 4);
    assert.equal(new Set(keys.map((k) => `${k.task}/${k.run}`)).size, keys.length, 'no (task, repeat) written twice');
    for (let step = 1; step <= TOTAL_STEPS; step++)
      assert.equal(keys.filter((k) => k.step === step).length, 8, `explore step ${step}: 2 tasks × 4 repeats`);
    const claims = await client.query<{ step: number; owner: string; done: boolean }>(
      'SELECT step, owner, done FROM experience_buffer_claims ORDER BY step',
    );
    assert.deepEqual(
      claims.rows.map((c) => [c.step, c.done]),
      Array.from({ length: TOTAL_STEPS }, (_, i) => [i + 1, true]),
    );
    // each explorer's metrics: the steps it finished, none twice; together every step once
    const byOwner = (name: string) =>
      claims.rows
        .filter((c) => c.owner === name)
        .map((c) => c.step)
        .sort((x, y) => x - y);
    const aSteps = steps(join(jobDir, 'a', 'metrics.jsonl'));
    const bSteps = steps(join(jobDir, 'b', 'metrics.jsonl'));
    assert.deepEqual(
      [...aSteps].sort((x, y) => x - y),
      byOwner('a'),
    );
    assert.deepEqual(
      [...bSteps].sort((x, y) => x - y),
      byOwner('b'),
    );
    // a finished its first step before it was killed
    assert.ok(aSteps.length > 0, `a explored: a ${aSteps}, b ${bSteps}`);
    assert.deepEqual(
      claims.rows.filter((c) => c.owner !== 'a' && c.owner !== 'b'),
      [],
    );
  } finally {
    await client.end();
  }
  assert.deepEqual(
    steps(join(jobDir, 'metrics.jsonl')),
    Array.from({ length: TOTAL_STEPS }, (_, i) => i + 1),
    'the trainer trained every step once',
  );
});
