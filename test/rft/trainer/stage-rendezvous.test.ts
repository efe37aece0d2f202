// Each stage's trainer ranks meet over a store of that stage (joinStageGroup in src/rft/trainer/data-parallel.ts):
// a rank 1 of stage "b" that reaches rank 0's port while rank 0 still serves stage "a"'s store (as a follower can,
// just after a stage ended) does not take part in stage "a"'s rendezvous; it waits there until rank 0 closes stage
// "a", then joins stage "b". Three real processes (./helpers/stage-rendezvous-rank.ts) report over IPC; every wait is
// on a message or an exit.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../../src/cli/launch.js';
import { forkChild, killForkedChildren } from '../../helpers/forked-child.js';

const HELPER = fileURLToPath(new URL('./helpers/stage-rendezvous-rank.ts', import.meta.url));

interface Message {
  type: 'other-stage' | 'result';
  stage: string;
  other?: string;
  sum?: number;
}

after(killForkedChildren);

function startRank(rank: number, stages: string[], port: number) {
  const forked = forkChild<Message>(HELPER, {
    env: { ...process.env, RANK: String(rank), MASTER_PORT: String(port), STAGES: JSON.stringify(stages) },
    label: `rank ${rank} ${JSON.stringify(stages)}`,
  });
  return {
    exited: forked.exited,
    received: forked.received,
    next: (type: Message['type'], stage: string) =>
      forked.next((m) => m.type === type && m.stage === stage, `${type} of ${stage}`),
    leave: (stage: string) => forked.child.send({ type: 'leave', stage }),
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
