// Two "nodes" on one machine: two network namespaces made here (`ip netns add`), joined by one veth pair with
// addresses the test assigns (node A 10.x.y.1, node B 10.x.y.2; no route leaves them, so no traffic leaves the
// machine). The PostgreSQL buffer runs inside node A, on A's address. Each node runs one trainer rank
// (`trinity run --nnodes 2 --node-rank K --master-addr <A>`: the ranks rendezvous across the veth pair) and one
// explorer (mode explore, explorer.name a / b), all on the same config; the job folder is a local path both see, as
// shared storage would be.
//
// After the trainer's first checkpoint, node B is killed: every process in its namespace gets SIGKILL. Node A's
// trainer rank fails, naming the collective and node B's address; the run is then started again on both nodes (the
// same commands) and resumes from its checkpoint to the end: every train step's metrics once, the last checkpoint
// the last step. Every wait is on a line a process prints or its exit; nothing races the clock.
//
// Needs root and iproute2 (`ip`): skipped, saying which is missing, otherwise.
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { listCheckpoints } from '../../../src/rft/checkpoint.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));
const TOTAL_STEPS = 4;

/** Why this machine cannot build the namespaces, or null. */
function missing(): string | null {
  if (process.getuid?.() !== 0) return 'needs root to create network namespaces (ip netns add)';
  try {
    execFileSync('ip', ['-V'], { stdio: 'ignore' });
  } catch {
    return "needs iproute2's `ip` command";
  }
  return null;
}

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString();

// names unique to this test process (veth names: at most 15 characters)
const tag = String(process.pid % 100_000);
const nodes = { a: `trn${tag}a`, b: `trn${tag}b` } as const;
const subnet = `10.${200 + (process.pid % 50)}.${(process.pid >> 6) % 250}`;
const addressOf = { a: `${subnet}.1`, b: `${subnet}.2` } as const;

/** Two namespaces joined by a veth pair, each end with its address, loopback up. */
function buildNodes(): void {
  ip('netns', 'add', nodes.a);
  ip('netns', 'add', nodes.b);
  ip('link', 'add', `${nodes.a}v`, 'netns', nodes.a, 'type', 'veth', 'peer', 'name', `${nodes.b}v`, 'netns', nodes.b);
  for (const node of ['a', 'b'] as const) {
    const inNode = (...args: string[]) => ip('netns', 'exec', nodes[node], 'ip', ...args);
    inNode('addr', 'add', `${addressOf[node]}/24`, 'dev', `${nodes[node]}v`);
    inNode('link', 'set', `${nodes[node]}v`, 'up');
    inNode('link', 'set', 'lo', 'up');
  }
}

function removeNodes(): void {
  for (const ns of Object.values(nodes)) {
    try {
      ip('netns', 'del', ns); // its end of the veth pair goes with it
    } catch {
      // never made
    }
  }
}

interface Run {
  child: ChildProcess;
  output: () => string;
  /** Resolves with the first match of `pattern` in the output; rejects if the process exits first. */
  waitFor: (pattern: RegExp) => Promise<RegExpMatchArray>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }>;
}

const children: ChildProcess[] = [];
let server: PostgresServer | undefined;
after(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await server?.stop();
  removeNodes();
});

/** `trinity run` inside node `node`'s namespace (`ip netns exec` execs it: the child is trinity itself). */
function runOn(node: 'a' | 'b', configFile: string, args: string[]): Run {
  const child = spawn('ip', ['netns', 'exec', nodes[node], process.execPath, trinity, 'run', '--config', configFile, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
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
  const guard = setTimeout(() => child.kill('SIGKILL'), 500_000);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }>((resolve) => {
    child.on('exit', (code, signal) => {
      clearTimeout(guard);
      for (const wake of [...waiters]) wake();
      resolve({ code, signal, output });
    });
  });
  const waitFor = (pattern: RegExp) =>
    new Promise<RegExpMatchArray>((resolve, reject) => {
      const check = () => {
        const match = pattern.exec(output);
        if (match !== null) {
          waiters.delete(check);
          resolve(match);
        } else if (child.exitCode !== null || child.signalCode !== null) {
          waiters.delete(check);
          reject(new Error(`the process exited before printing ${pattern}:\n${output}`));
        }
      };
      waiters.add(check);
      check();
    });
  return { child, output: () => output, waitFor, exited };
}

/** SIGKILL to every process in node `node`'s namespace: the machine is gone. */
function killNode(node: 'a' | 'b'): number[] {
  const pids = ip('netns', 'pids', nodes[node])
    .split('\n')
    .map((l) => Number(l.trim()))
    .filter((pid) => pid > 0);
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

const trainerMetrics = (jobDir: string): Record<string, number>[] =>
  readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, number>);

const reason = missing();
test('two nodes (network namespaces): a trainer rank and an explorer on each, PostgreSQL buffer; node B killed is named, the run resumes', {
  timeout: 1_200_000,
  skip: reason ?? false,
}, async () => {
  buildNodes();
  server = await startPostgres({ netns: nodes.a, host: addressOf.a });
  const { configFile, jobDir } = makeJob({
    totalSteps: TOTAL_STEPS,
    saveInterval: 1,
    extra: 'synchronizer:\n  sync_interval: 2\n  sync_timeout: 300\n',
  });
  const shared = [
    'buffer.trainer_input.experience_buffer.storage_type=sql',
    `buffer.trainer_input.experience_buffer.path=${server.url('postgres')}`,
    'buffer.train_batch_size=8',
  ].flatMap((s) => ['--set', s]);
  const trainerOn = (node: 'a' | 'b') =>
    runOn(node, configFile, [
      '--nnodes',
      '2',
      '--node-rank',
      node === 'a' ? '0' : '1',
      '--master-addr',
      addressOf.a,
      '--master-port',
      '29500',
      '--set',
      'mode=train',
      '--set',
      'trainer.micro_batch_size=2',
      '--set',
      'trainer.distributed_timeout=300',
      ...shared,
    ]);
  const explorerOn = (node: 'a' | 'b') =>
    runOn(node, configFile, ['--set', 'mode=explore', '--set', `explorer.name=${node}`, ...shared]);

  const first = { trainerA: trainerOn('a'), trainerB: trainerOn('b'), explorerA: explorerOn('a'), explorerB: explorerOn('b') };
  // rank 1 runs on node B, across the veth pair
  await first.trainerB.waitFor(/\[rank1\]: .*rank 1 of 2 \(local rank 0, rendezvous at [\d.]+:29500\)/);
  await first.trainerA.waitFor(/\[rank0\]: .*checkpoint step 1 saved/);
  const killed = killNode('b');
  assert.ok(killed.length >= 3, `node B's processes: ${killed}`); // launcher, its rank, the explorer
  const failedA = await first.trainerA.exited;
  assert.notEqual(failedA.code, 0, failedA.output);
  // rank 0 names the collective that broke and the peer it lost: node B, by its address, rank and node index
  assert.match(failedA.output, /\[rank0\]: trinity: .*\b\w+ on rank 0 of 2 \(gloo\) (failed|timed out)/);
  assert.ok(
    failedA.output.includes(`(${addressOf.b} is rank 1: node 1, host `),
    `node B (${addressOf.b}) is not named:\n${failedA.output}`,
  );
  for (const run of [first.trainerB, first.explorerB]) assert.equal((await run.exited).signal, 'SIGKILL');
  // explorer a waits for weights a dead trainer will not publish (or saw it finish): stop it too, losing nothing
  if (first.explorerA.child.exitCode === null) first.explorerA.child.kill('SIGKILL');
  await first.explorerA.exited;
  const saved = listCheckpoints(jobDir).at(-1);
  assert.ok(saved !== undefined && saved >= 1 && saved < TOTAL_STEPS, `checkpoints: ${listCheckpoints(jobDir)}`);

  // the same commands on both nodes: the run resumes from its checkpoint and finishes
  const second = { trainerA: trainerOn('a'), trainerB: trainerOn('b'), explorerA: explorerOn('a'), explorerB: explorerOn('b') };
  const exits = await Promise.all(Object.values(second).map((run) => run.exited));
  for (const [i, name] of Object.keys(second).entries()) assert.equal(exits[i]?.code, 0, `${name}:\n${exits[i]?.output}`);
  assert.match(exits[0]?.output ?? '', new RegExp(`\\[rank0\\]: .*resuming from checkpoint step ${saved} `));
  // every step once; the steps that published weights for the explorers (sync_interval 2) say what it cost
  assert.deepEqual(
    trainerMetrics(jobDir).map((m) => [m.step, 'sync/seconds' in m]),
    Array.from({ length: TOTAL_STEPS }, (_, i) => [i + 1, (i + 1) % 2 === 0]),
  );
  assert.equal(listCheckpoints(jobDir).at(-1), TOTAL_STEPS);
});
