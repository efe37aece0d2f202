// Priority replay over the shared sql buffer (src/rft/buffer/sql-replay.ts) on both backends, a real PostgreSQL
// server and an SQLite file: the same writes and reads give the in-memory replay's reads (order, use counts, cooldowns,
// eviction, noise), and a trainer killed after a checkpoint but before its commit resumes with the batches an
// uninterrupted reader got.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import {
  openSharedBuffer,
  type PriorityReplayOptions,
  PriorityReplayBuffer,
  type SharedExperienceBuffer,
  SqlReplayBuffer,
} from '../../../src/rft/buffer/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { makeExperience } from './helpers.js';
import { backends, HANG_GUARD_MS, useServer } from './postgres-setup.js';

const getServer = useServer();
const CHILD = join(import.meta.dirname, 'sql-replay-child.ts');

const v = (eid: string, modelVersion: number): Experience =>
  makeExperience(eid, { info: { taskId: `task-${eid}`, modelVersion, useCount: 0 } });
const names = (xs: Experience[]) => xs.map((x) => `${x.eid}#${x.info.useCount}`);
const now = { timeoutMs: 0, minCount: 0 };

/** Writes, reads (timeout 0: what is readable now) and clock moves, played on both replays in the same order. */
type Op = { write: Experience[] } | { read: number } | { tick: number };

const SCRIPT: Op[] = [
  { write: [v('a', 1), v('b', 3), v('c', 2), v('d', 3)] },
  { read: 2 },
  { write: [v('e', 4), v('f', 0)] },
  { read: 3 },
  { tick: 40 },
  { read: 4 },
  { write: [v('g', 5), v('h', 1), v('i', 2), v('j', 6)] },
  { read: 2 },
  { tick: 70 },
  { read: 5 },
  { read: 3 },
  { tick: 200 },
  { read: 6 },
  { write: [v('k', 2)] },
  { read: 6 },
  { tick: 500 },
  { read: 8 },
];

const POLICIES: Record<string, PriorityReplayOptions> = {
  'linear_decay, reused at once': { priorityFn: 'linear_decay', decay: 1, reuseCooldownMs: 0 },
  'decay_limit_randomization with noise, a cooldown and a small capacity': {
    priorityFn: 'decay_limit_randomization',
    decay: 1.5,
    useCountLimit: 3,
    sigma: 0.7,
    reuseCooldownMs: 100,
    capacity: 5,
    seed: 7,
  },
  'linear_decay read once, capacity 3': { priorityFn: 'linear_decay', capacity: 3 },
};

async function play(
  t: { mock: { timers: { tick(ms: number): void } } },
  replay: { write(xs: Experience[]): Promise<unknown>; read(n: number, o: typeof now): Promise<Experience[]> },
): Promise<string[][]> {
  const reads: string[][] = [];
  for (const op of SCRIPT) {
    if ('write' in op) await replay.write(op.write);
    else if ('read' in op) reads.push(names(await replay.read(op.read, now)));
    else t.mock.timers.tick(op.tick);
  }
  return reads;
}

for (const backend of backends(getServer)) {
  describe(`priority replay over the sql buffer on ${backend.name}`, () => {
    for (const [label, policy] of Object.entries(POLICIES))
      test(`${label}: the in-memory replay's reads`, async (t) => {
        // only Date is mocked: the database clients keep their own timers
        t.mock.timers.enable({ apis: ['Date'], now: 1_000_000 });
        const expected = await play(t, new PriorityReplayBuffer(policy));
        t.mock.timers.reset();
        t.mock.timers.enable({ apis: ['Date'], now: 1_000_000 });
        const buffer = await openSharedBuffer({ path: await backend.fresh(), name: 'replayed', replay: policy });
        try {
          assert.ok(buffer instanceof SqlReplayBuffer);
          assert.deepEqual(await play(t, buffer), expected);
        } finally {
          await buffer.close();
        }
        if (label.startsWith('linear_decay, reused'))
          // by hand: priority = model_version − use_count, seq in brackets. a 1 [0], b 3 [1], c 2 [2], d 3 [3]: read b, d
          // (3; b older), back as b 2 [4], d 2 [5]; then e 4 [6], f 0 [7]: read e, then the 2s oldest first: c [2], b [4]
          assert.deepEqual(expected.slice(0, 2), [
            ['b#1', 'd#1'],
            ['e#1', 'c#1', 'b#2'],
          ]);
      });

    test('use counts and cooldowns by hand: back exactly when the cooldown ends, gone after use_count_limit', async (t) => {
      t.mock.timers.enable({ apis: ['Date'], now: 5000 });
      const path = await backend.fresh();
      const buffer = await openSharedBuffer({
        path,
        replay: { priorityFn: 'decay_limit_randomization', useCountLimit: 2, reuseCooldownMs: 100 },
      });
      try {
        await buffer.write([v('x', 1)]);
        assert.deepEqual(names(await buffer.read(1, now)), ['x#1']);
        t.mock.timers.tick(99);
        assert.deepEqual(await buffer.read(1, now), [], 'cooling until t + 100');
        t.mock.timers.tick(1);
        assert.deepEqual(names(await buffer.read(1, now)), ['x#2']);
        t.mock.timers.tick(1000);
        assert.deepEqual(await buffer.read(1, now), [], 'used twice: gone');
        assert.equal(buffer.size, 0);
        assert.equal(await buffer.total, 1, 'the row stays in the table');
        // the writers finish: reuse stops, a read drains what is there instead of waiting
        await buffer.write([v('y', 0)]);
        await buffer.finishWriting();
        assert.deepEqual(names(await buffer.read(3, { timeoutMs: 60_000 })), ['y#1']);
        assert.deepEqual(await buffer.read(3, { timeoutMs: 60_000 }), []);
      } finally {
        await buffer.close();
      }
    });

    test('a read waits for a write (by another handle) and is woken by it', async () => {
      const path = await backend.fresh();
      const reader = await openSharedBuffer({ path, replay: { reuseCooldownMs: 0 } });
      const writer = await openSharedBuffer({ path });
      try {
        const reading = reader.read(2, { timeoutMs: HANG_GUARD_MS });
        await writer.write([v('p', 0)]);
        await writer.write([v('q', 2)]);
        assert.deepEqual(names(await reading).sort(), ['p#1', 'q#1']);
      } finally {
        await reader.close();
        await writer.close();
      }
    });

    test('killed after a checkpoint, before its commit: the resumed reader reads what an uninterrupted one did', async () => {
      const path = await backend.fresh();
      const policy: PriorityReplayOptions = {
        priorityFn: 'decay_limit_randomization',
        decay: 1,
        useCountLimit: 3,
        sigma: 0.5,
        reuseCooldownMs: 0,
        capacity: 8,
        seed: 3,
      };
      const writer = await openSharedBuffer({ path });
      await writer.write(Array.from({ length: 14 }, (_, i) => v(`r${i}`, (i * 7) % 5)));
      await writer.close();
      // the uninterrupted run: another reader id over the same rows
      const reference = await openSharedBuffer({ path, readerId: 'reference', replay: policy });
      const expected: string[][] = [];
      for (let i = 0; i < 10; i++) expected.push(names((await reference.readBatch(3, now)).experiences));
      await reference.close();
      assert.ok(new Set(expected.flat()).size > 12, 'the reads reach many rows and uses');

      // reads 1..6; commits after read 2; checkpoint after read 4; SIGKILL after read 6
      const { stdout } = await new Promise<{ stdout: string }>((resolve, reject) => {
        const child = execFile(
          process.execPath,
          ['--import', 'tsx', CHILD, path, JSON.stringify(policy), '3', '6', '2', '4'],
          { timeout: HANG_GUARD_MS },
          (error, out, err) => {
            if (child.signalCode === 'SIGKILL') resolve({ stdout: out });
            else reject(new Error(`child did not die by SIGKILL: ${error?.message}\n${err}`));
          },
        );
      });
      const killed = JSON.parse(stdout) as { batches: string[][]; checkpoint: number };
      assert.deepEqual(killed.batches, expected.slice(0, 6));

      // resume from the checkpoint's cursor: reads 5.. again, as the uninterrupted reader
      const resumed = await openSharedBuffer({ path, readerId: 'trainer', replay: policy });
      await resumed.restore(killed.checkpoint);
      const after: string[][] = [];
      for (let i = 4; i < 10; i++) after.push(names((await resumed.readBatch(3, now)).experiences));
      assert.deepEqual(after, expected.slice(4));
      await resumed.close();

      // a reader without a checkpoint starts at the committed revision (after read 2)
      const fresh = await openSharedBuffer({ path, readerId: 'trainer', replay: policy });
      assert.deepEqual(names((await fresh.readBatch(3, now)).experiences), expected[2]);
      // a checkpoint older than the committed revision cannot be restored
      await assert.rejects(async () => fresh.restore(1), /cannot restore replay revision 1 of reader 'trainer'.*committed/);
      await fresh.close();
    });

    test('a checkpoint cursor that is no replay revision is a precise error', async () => {
      const path = await backend.fresh();
      const buffer: SharedExperienceBuffer = await openSharedBuffer({ path, replay: {} });
      try {
        await assert.rejects(
          async () => buffer.restore(40),
          /there is no replay revision 40 of reader 'trainer'.*replay_buffer off/,
        );
      } finally {
        await buffer.close();
      }
    });
  });
}
