// Each stage's trainer ranks meet over a store of that stage (joinStageGroup in src/rft/trainer/data-parallel.ts):
// a rank 1 of stage "b" that reaches rank 0's port while rank 0 still serves stage "a"'s store (as a follower can,
// just after a stage ended) does not take part in stage "a"'s rendezvous; it waits there until rank 0 closes stage
// "a", then joins stage "b". Three real processes (./helpers/stage-rendezvous-rank.ts) report over IPC; every wait is
// on a message or an exit.
import assert from 'node:assert/strict';
import { type ChildProcess, fork } from 'node:child_process';
import { createServer } from 'node:net';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const HELPER = fileURLToPath(new URL('./helpers/stage-rendezvous-rank.ts', import.meta.url));

interface Message {
  type: 'other-stage' | 'result';
  stage: string;
  other?: string;
  sum?: number;
}

const children: ChildProcess[] = [];
after(() => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

function startRank(rank: number, stages: string[], port: number) {
  const child = fork(HELPER, [], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, RANK: String(rank), MASTER_PORT: String(port), STAGES: JSON.stringify(stages) },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  });
  children.push(child);
  let stderr = '';
  child.stderr?.on('data', (chunk) => {
    stderr += chunk;
  });
  const received: Message[] = [];
  const waiters: { type: Message['type']; stage: string; resolve: (m: Message) => void; reject: (e: Error) => void }[] = [];
  let exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  const settle = () => {
    for (const waiter of [...waiters]) {
      const index = received.findIndex((m) => m.type === waiter.type && m.stage === waiter.stage);
      if (index >= 0) waiter.resolve(received.splice(index, 1)[0] as Message);
      else if (exit !== null)
        waiter.reject(
          new Error(
            `rank ${rank} ${JSON.stringify(stages)} exited (${exit.code ?? exit.signal}) before ${waiter.type} of ${waiter.stage}:\n${stderr}`,
          ),
        );
      else continue;
      waiters.splice(waiters.indexOf(waiter), 1);
    }
  };
  child.on('message', (m: Message) => {
    received.push(m);
    settle();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => {
      exit = { code, signal };
      settle();
      resolve(exit);
    }),
  );
  return {
    exited,
    received,
    next: (type: Message['type'], stage: string) =>
      new Promise<Message>((resolve, reject) => {
        waiters.push({ type, stage, resolve, reject });
        settle();
      }),
    leave: (stage: string) => child.send({ type: 'leave', stage }),
  };
}

test("a rank of stage b that reaches stage a's store waits for it to close, then joins stage b", {
  timeout: 300_000,
}, async () => {
  const port = await freePort();
  const rank0 = startRank(0, ['a', 'b'], port);
  const rank1a = startRank(1, ['a'], port);
  // stage a's ranks met: all-reduced [1] + [2]
  assert.equal((await rank0.next('result', 'a')).sum, 3);
  assert.equal((await rank1a.next('result', 'a')).sum, 3);

  // rank 0 still serves stage a's store (it leaves only when told): stage b's rank 1 can only reach that one
  const rank1b = startRank(1, ['b'], port);
  assert.deepEqual(await rank1b.next('other-stage', 'b'), { type: 'other-stage', stage: 'b', other: 'a' });

  // stage a ends; rank 0 opens stage b, and the waiting rank 1 joins it
  rank1a.leave('a');
  rank0.leave('a');
  assert.equal((await rank0.next('result', 'b')).sum, 3);
  assert.equal((await rank1b.next('result', 'b')).sum, 3);
  rank0.leave('b');
  rank1b.leave('b');
  for (const [name, rank] of [
    ['rank 0', rank0],
    ['rank 1 of a', rank1a],
    ['rank 1 of b', rank1b],
  ] as const)
    assert.deepEqual(await rank.exited, { code: 0, signal: null }, name);
});
