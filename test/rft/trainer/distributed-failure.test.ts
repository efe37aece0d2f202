// Rank 0 of a data-parallel trainer whose stage failed (test/rft/run/distributed-failure.test.ts runs it end to end):
//   - between steps: its close({ failure }) ends the follower's follow() with a RankZeroFailedError that names the
//     follower's rank and carries rank 0's message, after the follower took the step rank 0 took;
//   - inside a step (a policy-loss plug-in that throws on rank 0 alone): rank 0 sends nothing, since the follower is
//     inside one of the step's collectives, and leaves the group; the follower's collective fails with a
//     DistributedError naming it and rank 1 (the group timeout is 120 s: the follower must not wait it out, and the
//     test's own timeout is below it).
// Two real processes per case (./helpers/failure-rank.ts) report over IPC; every wait is on a message or an exit.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../../src/cli/launch.js';
import { forkChild, killForkedChildren } from '../../helpers/forked-child.js';
import { tinyModelDir } from './toy.js';

const HELPER = fileURLToPath(new URL('./helpers/failure-rank.ts', import.meta.url));
const FAILURE = 'the explorer of rank 0 broke (a test fault)';
const LOSS_FAILURE = 'the policy loss broke on rank 0 (a test fault)';

// SFT's NLL on the rows' response tokens, except on rank 0 (the trainer worker shares its process's environment)
const PLUGIN = `export const failOnRankZero = {
  defaults: {},
  run(input) {
    if (process.env.RANK === '0') throw new Error(${JSON.stringify(LOSS_FAILURE)});
    const mask = input.actionMask.to({ dtype: input.logprob.dtype });
    return { loss: input.logprob.mul(mask).sum().neg().div(mask.sum().clamp(1)), metrics: {} };
  },
};
`;

interface Message {
  type: 'closed' | 'step-failed' | 'followed' | 'error';
  message?: string;
  name?: string;
  steps?: number;
  rankZeroFailed?: boolean;
  distributed?: boolean;
  rank?: number;
  worldSize?: number;
  rankZeroMessage?: string;
  collective?: string;
}

let toy: { dir: string; remove: () => void };
let work: string;
before(() => {
  toy = tinyModelDir();
  work = mkdtempSync(join(tmpdir(), 'trinity-dp-failure-'));
  writeFileSync(join(work, 'fail-on-rank-0.mjs'), PLUGIN);
});
after(() => {
  killForkedChildren();
  toy.remove();
  rmSync(work, { recursive: true, force: true });
});

/** Both ranks of `kind`; resolves with every message each sent once both exited (code 0 each). */
async function runRanks(kind: 'between-steps' | 'mid-step'): Promise<[Message[], Message[]]> {
  const port = await freePort();
  const ranks = [0, 1].map((rank) => {
    const forked = forkChild<Message>(HELPER, {
      env: {
        ...process.env,
        RANK: String(rank),
        MASTER_PORT: String(port),
        CASE: kind,
        MODEL_DIR: toy.dir,
        JOB_DIR: join(work, kind),
        FAILURE,
        PLUGIN: join(work, 'fail-on-rank-0.mjs#failOnRankZero'),
      },
      label: `rank ${rank}`,
      serialization: 'advanced',
    });
    return forked.exited.then(({ code, signal }) => {
      if (code !== 0) throw new Error(`rank ${rank} exited (${code ?? signal}):\n${forked.stderr()}`);
      return forked.received;
    });
  });
  return (await Promise.all(ranks)) as [Message[], Message[]];
}

describe('rank 0 of a data-parallel trainer fails (2 ranks, Gloo)', { timeout: 100_000 }, () => {
  test("between steps: the follower's follow() rejects with a RankZeroFailedError carrying rank 0's message", async () => {
    const [rank0, rank1] = await runRanks('between-steps');
    assert.deepEqual(rank0, [{ type: 'closed' }]);
    assert.deepEqual(rank1, [
      {
        type: 'error',
        name: 'RankZeroFailedError',
        message: `trainer rank 1 of 2: rank 0's stage failed, so this rank stops too; rank 0: ${FAILURE}`,
        rankZeroFailed: true,
        rank: 1,
        worldSize: 2,
        rankZeroMessage: FAILURE,
      },
    ]);
  });

  test("inside a step: rank 0 sends nothing and leaves; the follower's collective fails naming it", async () => {
    const [rank0, rank1] = await runRanks('mid-step');
    assert.equal(rank0.length, 2, JSON.stringify(rank0));
    assert.equal(rank0[0]?.type, 'step-failed');
    assert.match(rank0[0]?.message ?? '', new RegExp(LOSS_FAILURE.replace(/[()]/g, '\\$&')));
    assert.deepEqual(rank0[1], { type: 'closed' });
    const [error] = rank1;
    assert.equal(rank1.length, 1, JSON.stringify(rank1));
    assert.equal(error?.name, 'DistributedError', error?.message);
    assert.equal(error?.distributed, true);
    assert.equal(error?.rank, 1);
    assert.match(error?.message ?? '', new RegExp(`^${error?.collective} on rank 1 of 2 \\(gloo\\) failed`));
  });
});
