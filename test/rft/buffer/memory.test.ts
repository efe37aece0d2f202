// The in-memory buffers: FIFO queue (order, back-pressure, timeouts) and priority replay (decay, use limit, cooldown).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { BufferClosedError, BufferTimeoutError, PriorityReplayBuffer, QueueBuffer } from '../../../src/rft/buffer/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { makeExperience } from './helpers.js';

const ids = (xs: { eid: string }[]) => xs.map((x) => x.eid);
const batch = (prefix: string, n: number, extra = {}) =>
  Array.from({ length: n }, (_, i) => makeExperience(`${prefix}${i}`, extra));

describe('QueueBuffer', () => {
  test('reads come out in write order, n at a time', async () => {
    const q = new QueueBuffer({ capacity: 10 });
    await q.write(batch('a', 3));
    await q.write(batch('b', 2));
    assert.deepEqual(ids(await q.read(4, { timeoutMs: 100 })), ['a0', 'a1', 'a2', 'b0']);
    assert.equal(q.size, 1);
  });

  test('a read waits for a full batch written later', async () => {
    const q = new QueueBuffer();
    // read() looks once before it returns its promise: it found 0 of 3 and waits; each write wakes it to look again
    const pending = q.read(3, { timeoutMs: 60_000 });
    await q.write(batch('a', 1));
    await q.write(batch('b', 2));
    assert.deepEqual(ids(await pending), ['a0', 'b0', 'b1']);
  });

  test('a writer waits while full and resumes when a reader makes room', async () => {
    const q = new QueueBuffer({ capacity: 2 });
    const writing = q.write(batch('a', 5));
    let done = false;
    void writing.then(() => {
      done = true;
    });
    // one whole event-loop turn: a write that did not wait for space would have settled by now
    await new Promise((r) => setImmediate(r));
    assert.equal(done, false, 'the writer must block while the queue is full');
    assert.equal(q.size, 2);
    const got: string[] = [];
    while (got.length < 5) got.push(...ids(await q.read(1, { timeoutMs: 500 })));
    assert.equal(await writing, 5);
    assert.deepEqual(got, ['a0', 'a1', 'a2', 'a3', 'a4']);
  });

  test('a full queue times out the writer with an error naming the buffer and the wait', async () => {
    const q = new QueueBuffer({ name: 'explorer-out', capacity: 2 });
    await assert.rejects(q.write(batch('a', 3), { timeoutMs: 30 }), (error: unknown) => {
      assert.ok(error instanceof BufferTimeoutError);
      assert.match(
        error.message,
        /buffer 'explorer-out'.*timed out after 30 ms waiting for free space to write \(2 of 3 experiences written; 2\/2 full\)/,
      );
      return true;
    });
  });

  test('a short read times out naming what it waited for, or returns the partial batch when minCount allows', async () => {
    const q = new QueueBuffer({ name: 'exp' });
    await q.write(batch('a', 2));
    await assert.rejects(
      q.read(4, { timeoutMs: 30 }),
      /buffer 'exp': timed out after 30 ms waiting for 4 experiences \(2 available/,
    );
    assert.deepEqual(ids(await q.read(4, { timeoutMs: 30, minCount: 2 })), ['a0', 'a1']);
  });

  test('after finishWriting readers drain what is left, then get empty batches; close fails pending waits', async () => {
    const q = new QueueBuffer();
    await q.write(batch('a', 3));
    const pending = q.read(5, { timeoutMs: 1000 });
    await q.finishWriting();
    assert.deepEqual(ids(await pending), ['a0', 'a1', 'a2']);
    assert.deepEqual(await q.read(2, { timeoutMs: 1000 }), []);
    await assert.rejects(q.write(batch('b', 1)), /write after finishWriting/);
    const q2 = new QueueBuffer({ name: 'q2' });
    const waiting = q2.read(1, { timeoutMs: 1000 });
    await q2.close();
    await assert.rejects(waiting, BufferClosedError);
  });
});

describe('PriorityReplayBuffer', () => {
  test('linear_decay: newest model version first; each use lowers priority by decay', async () => {
    // priority = model_version − decay·use_count with decay 2: v3 → 3, then 1 after a use; v2 → 2.
    const buffer = new PriorityReplayBuffer({ decay: 2, reuseCooldownMs: 0 });
    await buffer.write([
      makeExperience('v1', { info: { modelVersion: 1, useCount: 0 } }),
      makeExperience('v3', { info: { modelVersion: 3, useCount: 0 } }),
      makeExperience('v2', { info: { modelVersion: 2, useCount: 0 } }),
    ]);
    const first = await buffer.read(1, { timeoutMs: 100 });
    assert.deepEqual(ids(first), ['v3']);
    assert.equal(first[0]?.info.useCount, 1);
    // Now v3 has priority 1, v2 has 2, v1 has 1 (v1 was written earlier than v3's re-entry: oldest first on ties).
    assert.deepEqual(ids(await buffer.read(3, { timeoutMs: 100 })), ['v2', 'v1', 'v3']);
    assert.equal(buffer.priorityOf(3, 1), 1);
  });

  test('without reuse an experience is read once; with a use limit it leaves after that many uses', async () => {
    const once = new PriorityReplayBuffer();
    await once.write(batch('a', 2));
    assert.equal((await once.read(2, { timeoutMs: 50 })).length, 2);
    assert.equal(once.size, 0);

    const limited = new PriorityReplayBuffer({ useCountLimit: 3, reuseCooldownMs: 0 });
    await limited.write([makeExperience('x')]);
    const uses: number[] = [];
    for (let i = 0; i < 3; i++) uses.push((await limited.read(1, { timeoutMs: 50 }))[0]?.info.useCount ?? -1);
    assert.deepEqual(uses, [1, 2, 3]);
    assert.equal(limited.size, 0, 'used 3 times: gone');
    await assert.rejects(limited.read(1, { timeoutMs: 20 }), BufferTimeoutError);
  });

  test('reuse cooldown: a read experience comes back exactly when the cooldown has passed', async (t) => {
    // A mocked clock (Date and setTimeout) that moves only on tick(): the buffer sees exactly the times we set.
    t.mock.timers.enable({ apis: ['Date', 'setTimeout'], now: 0 });
    const turn = () => new Promise((r) => setImmediate(r)); // setImmediate is real: it lets settled promises run
    const buffer = new PriorityReplayBuffer({ name: 'replay', reuseCooldownMs: 150 });
    await buffer.write([makeExperience('x')]);
    await buffer.read(1, { timeoutMs: 50 }); // at t = 0: x is available again at t = 150
    assert.equal(buffer.size, 1);
    assert.equal(buffer.availableCount, 0);
    const short = assert.rejects(
      buffer.read(1, { timeoutMs: 30 }),
      /buffer 'replay'.*1 experiences \(0 available, 1 cooling down/,
    );
    t.mock.timers.tick(30);
    await short;
    let again: Experience[] | undefined;
    const reading = buffer.read(1, { timeoutMs: 1000 }).then((got) => {
      again = got;
    });
    const readSoFar = () => again; // (a call: TypeScript keeps no narrowing of `again` across the awaits)
    t.mock.timers.tick(119); // t = 149
    await turn();
    assert.equal(readSoFar(), undefined, 'came back before the cooldown');
    assert.equal(buffer.availableCount, 0);
    t.mock.timers.tick(1); // t = 150
    await turn();
    assert.equal(readSoFar()?.length, 1, 'not back when the cooldown had passed');
    await reading;
    assert.equal(readSoFar()?.[0]?.info.useCount, 2);
  });

  test('when full, a higher-priority experience evicts the lowest; a lower one is dropped', async () => {
    const buffer = new PriorityReplayBuffer({ capacity: 2 });
    const v = (eid: string, modelVersion: number) => makeExperience(eid, { info: { modelVersion, useCount: 0 } });
    assert.equal(await buffer.write([v('a', 1), v('b', 2)]), 2);
    assert.equal(await buffer.write([v('c', 0)]), 0, 'lower than everything: dropped');
    assert.equal(await buffer.write([v('d', 5)]), 1, 'evicts a (priority 1)');
    assert.deepEqual(ids(await buffer.read(2, { timeoutMs: 50 })), ['d', 'b']);
  });

  test('finishWriting stops reuse so a reader drains the buffer', async () => {
    const buffer = new PriorityReplayBuffer({ reuseCooldownMs: 0 });
    await buffer.write(batch('a', 2));
    await buffer.finishWriting();
    assert.equal((await buffer.read(4, { timeoutMs: 100 })).length, 2);
    assert.deepEqual(await buffer.read(4, { timeoutMs: 100 }), []);
  });
});
