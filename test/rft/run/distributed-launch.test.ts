// The launch side of data-parallel runs: the torchrun environment read by the run (errors name the variable), and
// `trinity run --nproc-per-node N`'s launcher (src/cli/launch.ts) over small stand-in rank programs: the variables
// each rank gets, output prefixed by rank, a failed rank stopping the others with the failure's exit code, and
// SIGINT passed on once to every rank; --help, and misuse refused before anything runs. Every wait is on an event
// (a line printed, a process exit).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync } from 'node:fs';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { launchRanks } from '../../../src/cli/launch.js';
import { distributedLaunchFromEnv } from '../../../src/rft/run/distributed.js';
import { runProcess } from '../../helpers/run-process.js';
import { makeJob } from './helpers.js';

const launchModule = fileURLToPath(new URL('../../../src/cli/launch.ts', import.meta.url));

/** Runs launchRanks over `node -e rankScript`; collects what it writes. */
async function launch(rankScript: string, graceMs = 60_000): Promise<{ code: number; out: string; err: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d) => {
    out += d;
  });
  stderr.on('data', (d) => {
    err += d;
  });
  const code = await launchRanks({
    nproc: 2,
    command: [process.execPath, '-e', rankScript],
    env: { PATH: process.env.PATH },
    graceMs,
    stdout,
    stderr,
  });
  return { code, out, err };
}

test('the torchrun environment: one process without WORLD_SIZE > 1, a rank with it, a bad variable named', () => {
  assert.equal(distributedLaunchFromEnv({}), null);
  assert.equal(distributedLaunchFromEnv({ WORLD_SIZE: '1', RANK: '0', MASTER_PORT: '29500' }), null);
  assert.deepEqual(
    distributedLaunchFromEnv({
      RANK: '3',
      WORLD_SIZE: '4',
      LOCAL_RANK: '1',
      LOCAL_WORLD_SIZE: '2',
      MASTER_ADDR: 'node0',
      MASTER_PORT: '29500',
    }),
    { rank: 3, worldSize: 4, localRank: 1, localWorldSize: 2, masterAddr: 'node0', masterPort: 29500 },
  );
  // defaults torchrun would have set: the master on this machine, one rank per machine
  assert.deepEqual(distributedLaunchFromEnv({ RANK: '1', WORLD_SIZE: '2', MASTER_PORT: '1234' }), {
    rank: 1,
    worldSize: 2,
    localRank: 0,
    localWorldSize: 1,
    masterAddr: '127.0.0.1',
    masterPort: 1234,
  });
  assert.throws(() => distributedLaunchFromEnv({ WORLD_SIZE: '2', MASTER_PORT: '1' }), /WORLD_SIZE=2 but RANK is not set/);
  assert.throws(() => distributedLaunchFromEnv({ WORLD_SIZE: '2', RANK: '0' }), /MASTER_PORT is not set/);
  assert.throws(() => distributedLaunchFromEnv({ WORLD_SIZE: '2', RANK: '2', MASTER_PORT: '1' }), /RANK=2 is out of range/);
  assert.throws(() => distributedLaunchFromEnv({ RANK: '1' }), /RANK=1 needs WORLD_SIZE > 1/);
  assert.throws(() => distributedLaunchFromEnv({ WORLD_SIZE: 'two' }), /WORLD_SIZE="two"/);
  assert.throws(() => distributedLaunchFromEnv({ WORLD_SIZE: '2', RANK: '0', MASTER_PORT: '70000' }), /MASTER_PORT="70000"/);
  assert.throws(
    () => distributedLaunchFromEnv({ WORLD_SIZE: '2', RANK: '0', MASTER_PORT: '1', LOCAL_WORLD_SIZE: '3' }),
    /LOCAL_WORLD_SIZE="3" is not an integer in \[1, WORLD_SIZE=2\]/,
  );
});

test('--nproc-per-node launcher: each rank gets the torchrun variables, one free port, its output prefixed', async () => {
  const { code, out, err } = await launch(
    `const e = process.env; console.log(['RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT'].map((k) => k + '=' + e[k]).join(' '));
     console.error('to stderr');`,
  );
  assert.equal(code, 0, err);
  const lines = out.trim().split('\n').sort();
  const port = /MASTER_PORT=(\d+)/.exec(out)?.[1];
  assert.ok(port !== undefined && Number(port) > 0, out);
  assert.deepEqual(lines, [
    `[rank0]: RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=${port}`,
    `[rank1]: RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=${port}`,
  ]);
  assert.match(err, /\[rank0\]: to stderr\n/);
  assert.match(err, /\[rank1\]: to stderr\n/);
  assert.match(err, /\[launcher\] rank 1: pid \d+/);
});

test('--nproc-per-node launcher: a rank that fails stops the others; the exit code is the failure', async () => {
  // rank 1 exits with 3 once rank 0 is up (connected to on MASTER_PORT); rank 0 waits, as a rank stuck in a collective
  // would, until the launcher's SIGTERM
  const exits = await launch(
    `const net = require('node:net'); const port = Number(process.env.MASTER_PORT);
     if (process.env.RANK === '1') {
       const connect = () => net.connect(port, '127.0.0.1', () => process.exit(3)).on('error', () => setTimeout(connect, 20));
       connect();
     } else {
       process.on('SIGTERM', () => { console.log('rank 0 got SIGTERM'); process.exit(143); });
       net.createServer((socket) => socket.on('error', () => {})).listen(port, '127.0.0.1');
     }`,
    0,
  );
  assert.equal(exits.code, 3, exits.err);
  assert.match(exits.err, /rank 1 \(pid \d+\) exited: exit code 3/);
  assert.match(exits.out, /\[rank0\]: rank 0 got SIGTERM/);
  assert.match(exits.err, /the run failed: rank 1 first \(exit code 3\)/);

  // a rank killed by a signal: 128 + its number; a rank that stops by itself within the grace period is not signalled.
  // As in a collective, rank 0 learns of rank 1's death from their connection (rank 0 listens on MASTER_PORT). Rank 0
  // then exits only once rank 1 is reaped (its pid gone: the launcher has seen its exit), so the launcher sees the
  // deaths in that order: exiting on the close alone raced rank 1's exit to the launcher (and sometimes won).
  const killed = await launch(
    `const net = require('node:net'); const port = Number(process.env.MASTER_PORT);
     if (process.env.RANK === '1') {
       const connect = () => {
         const socket = net.connect(port, '127.0.0.1', () => socket.write(String(process.pid), () => process.kill(process.pid, 'SIGKILL')));
         socket.on('error', () => setTimeout(connect, 20));
       };
       connect();
     } else {
       process.on('SIGTERM', () => console.log('unexpected SIGTERM'));
       const gone = (pid) => { try { process.kill(pid, 0); return false; } catch { return true; } };
       const exitOnceGone = (pid) => (gone(pid) ? process.exit(1) : setTimeout(() => exitOnceGone(pid), 5));
       net.createServer((socket) => {
         let pid = '';
         socket.on('data', (d) => { pid += d; }).on('close', () => exitOnceGone(Number(pid))).on('error', () => {});
       }).listen(port, '127.0.0.1');
     }`,
  );
  assert.equal(killed.code, 137, killed.err);
  assert.match(killed.err, /rank 1 \(pid \d+\) exited: killed by SIGKILL/);
  assert.match(killed.err, /rank 0 \(pid \d+\) exited: exit code 1/);
  assert.doesNotMatch(killed.out, /unexpected SIGTERM/);
});

test('--nproc-per-node launcher: SIGINT reaches every rank once; exit code 130', async () => {
  // the launcher in its own process, so the test can signal it; each rank says when it is ready and how often it
  // was interrupted
  const rankScript = `let n = 0; process.on('SIGINT', () => { n++; console.log('SIGINT ' + n); setImmediate(() => process.exit(130)); });
    console.log('ready'); setInterval(() => {}, 1 << 30);`;
  const driver = `const { launchRanks } = await import(${JSON.stringify(launchModule)});
    process.exitCode = await launchRanks({ nproc: 2, command: [process.execPath, '-e', ${JSON.stringify(rankScript)}], graceMs: 60000 });`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', driver], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  let sent = false;
  child.stdout.on('data', (d) => {
    out += d;
    if (!sent && (out.match(/\]: ready/g) ?? []).length === 2) {
      sent = true;
      child.kill('SIGINT');
    }
  });
  child.stderr.on('data', (d) => {
    err += d;
  });
  const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
  assert.equal(code, 130, `${out}\n${err}`);
  assert.deepEqual(out.match(/\[rank\d\]: SIGINT \d/g)?.sort(), ['[rank0]: SIGINT 1', '[rank1]: SIGINT 1']);
  assert.match(err, /SIGINT: passed on to every rank/);
});

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

/** `trinity ...args` as a process with `env` added; resolves with its exit code and output. */
const trinityCli = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  runProcess(process.execPath, [trinity, ...args], { env: { ...process.env, ...env } });

test('trinity run --help documents --nproc-per-node and the torchrun environment', async () => {
  const { code, output } = await trinityCli(['run', '--help']);
  assert.equal(code, 0);
  for (const text of ['--nproc-per-node N', 'RANK, WORLD_SIZE', 'MASTER_PORT', 'trainer.distributed_timeout', 'torchrun'])
    assert.ok(output.includes(text), `--help lacks '${text}':\n${output}`);
});

test('--nproc-per-node and rank misuse are refused before anything runs, naming the problem', async () => {
  const { configFile, jobDir } = makeJob({ totalSteps: 2, saveInterval: 2 });
  const cases: [string[], NodeJS.ProcessEnv, RegExp][] = [
    [['run', '--config', configFile, '--nproc-per-node', '0'], {}, /--nproc-per-node must be an integer in \[1, 1024\], got '0'/],
    [['run', '--config', configFile, '--nproc-per-node', 'two'], {}, /--nproc-per-node must be an integer/],
    [['bench', '--config', configFile, '--nproc-per-node', '2'], {}, /bench: --nproc-per-node is for training/],
    [
      ['run', '--config', configFile, '--nproc-per-node', '2'],
      { WORLD_SIZE: '2', RANK: '0', MASTER_PORT: '1' },
      /--nproc-per-node starts the ranks itself, but this process is already one \(WORLD_SIZE=2\)/,
    ],
    [['run', '--config', configFile], { WORLD_SIZE: '2', MASTER_PORT: '1' }, /WORLD_SIZE=2 but RANK is not set/],
  ];
  for (const [args, env, message] of cases) {
    const { code, output } = await trinityCli(args, env);
    assert.equal(code, 1, output);
    assert.match(output, message);
  }
  // a data-parallel run cannot start afresh in a renamed folder: the other ranks would not know its name
  mkdirSync(jobDir, { recursive: true });
  const fresh = await trinityCli(['run', '--config', configFile, '--set', 'continue_from_checkpoint=false'], {
    WORLD_SIZE: '2',
    RANK: '0',
    MASTER_PORT: '1',
  });
  assert.equal(fresh.code, 1, fresh.output);
  assert.match(fresh.output, /continue_from_checkpoint is false and .*e2e exists: a data-parallel run cannot start afresh/);
  assert.deepEqual(readdirSync(jobDir), []);
});
