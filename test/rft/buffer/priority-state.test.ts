// PriorityReplayBuffer.state() / loadState(): a buffer loaded from a (JSON round-tripped) state hands out the same
// reads as the one the state was taken from — use counts, priority decay, cooldowns (run on from the new clock),
// eviction and the priority noise included. The clock is mocked (Date and setTimeout move only on tick()).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type PriorityReplayOptions, type PriorityReplayState, PriorityReplayBuffer } from '../../../src/rft/buffer/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { makeExperience } from './helpers.js';

const exp = (eid: string, modelVersion: number, step: number): Experience =>
  makeExperience(eid, { info: { taskId: `task-${eid}`, modelVersion, step, useCount: 0 } });
const reads = (xs: Experience[]) => xs.map((x) => `${x.eid}#${x.info.useCount}`);
/** What a checkpoint does with the state: written as JSON, read back. */
const throughJson = (state: PriorityReplayState): PriorityReplayState => JSON.parse(JSON.stringify(state));
const now = (ms = 0) => ({ timeoutMs: ms, minCount: 0 });

describe('PriorityReplayBuffer state', () => {
  test('linear_decay with a cooldown: the state holds steps <= throughStep; the loaded buffer reads as computed by hand', async (t) => {
    t.mock.timers.enable({ apis: ['Date', 'setTimeout'], now: 0 });
    const options: PriorityReplayOptions = { name: 'replay', decay: 2, reuseCooldownMs: 100 };
    const original = new PriorityReplayBuffer(options);
    // priority = model_version − 2·use_count: a 1, b 2, c 2, d 3 (seq 0..3)
    await original.write([exp('a', 1, 1), exp('b', 2, 1), exp('c', 2, 2), exp('d', 3, 3)]);
    // t = 0: d (3) and b (2; before c on the tie: older) → d: use 1, priority 1, seq 4; b: use 1, priority 0, seq 5;
    // both readable again at t = 100
    assert.deepEqual(reads(await original.read(2, now())), ['d#1', 'b#1']);
    t.mock.timers.tick(60);
    const state = throughJson(original.state({ throughStep: 2 }));
    // d was explored at step 3: a checkpoint at step 2 leaves it to be explored again
    assert.deepEqual(
      state.entries.map((e) => [e.experience.eid, e.seq, e.useCount, e.priority, e.cooldownMs]),
      [
        ['a', 0, 0, 1, 0],
        ['c', 2, 0, 2, 0],
        ['b', 5, 1, 0, 40],
      ],
    );
    assert.equal(state.nextSeq, 6);

    t.mock.timers.tick(940); // the resumed run's clock: t = 1000; b's 40 ms of cooldown run from here
    const loaded = new PriorityReplayBuffer(options);
    loaded.loadState(state);
    assert.equal(loaded.size, 3);
    assert.equal(loaded.availableCount, 2, 'b still cools down');
    // t = 1000: c (2), a (1) → c: use 1, priority 0, seq 6; a: use 1, priority −1, seq 7; back at t = 1100
    assert.deepEqual(reads(await loaded.read(3, now())), ['c#1', 'a#1']);
    t.mock.timers.tick(39); // t = 1039
    assert.deepEqual(await loaded.read(3, now()), [], 'b came back before its cooldown ran out');
    t.mock.timers.tick(1); // t = 1040: b (use 2, priority −2, seq 8; back at t = 1140)
    assert.deepEqual(reads(await loaded.read(3, now())), ['b#2']);
    // a read that waits: c (0) and a (−1) come back at t = 1100
    const waiting = loaded.read(2, { timeoutMs: 1000 });
    t.mock.timers.tick(60);
    assert.deepEqual(reads(await waiting), ['c#2', 'a#2']);
    // c: use 2, priority −2, seq 9; a: use 2, priority −3, seq 10; both back at t = 1200
    await loaded.write([exp('e', -4, 4)]); // priority −4, seq 11
    t.mock.timers.tick(100); // t = 1200: everything is back: b −2 (seq 8), c −2 (seq 9), a −3, e −4
    assert.deepEqual(reads(await loaded.read(4, now())), ['b#3', 'c#3', 'a#3', 'e#1']);
  });

  test('decay_limit_randomization with noise, a use limit, eviction and cooldowns: the loaded buffer reads as the original', async (t) => {
    t.mock.timers.enable({ apis: ['Date', 'setTimeout'], now: 0 });
    const options: PriorityReplayOptions = {
      name: 'replay',
      capacity: 6,
      priorityFn: 'decay_limit_randomization',
      decay: 1,
      useCountLimit: 3,
      sigma: 0.75,
      reuseCooldownMs: 50,
      seed: 11,
    };
    const original = new PriorityReplayBuffer(options);
    // before the state: writes past the capacity (evictions), reads (uses, noise draws on re-entry), cooldowns
    await original.write([0, 1, 2, 3, 4, 5, 6, 7].map((i) => exp(`p${i}`, i % 3, 1)));
    assert.equal((await original.read(3, now())).length, 3);
    t.mock.timers.tick(20);
    assert.equal((await original.read(2, now())).length, 2);
    t.mock.timers.tick(40); // t = 60: the first three are back, the next two are not (until t = 70)
    const state = throughJson(original.state());
    assert.ok(
      state.entries.some((e) => e.cooldownMs > 0) && state.entries.some((e) => e.useCount > 0),
      'the state holds cooling and used entries',
    );
    assert.ok(state.noise.draws > 0, 'the noise generator has been drawn from');

    /** The same reads, writes and clock moves, from the state's moment on. */
    const script = async (buffer: PriorityReplayBuffer): Promise<string[][]> => {
      const log: string[][] = [];
      for (let round = 0; round < 6; round++) {
        log.push(reads(await buffer.read(2, now())));
        log.push([`kept ${await buffer.write([exp(`n${round}a`, round % 3, 2), exp(`n${round}b`, 2, 2)])}`]);
        t.mock.timers.tick(9);
        const waiting = buffer.read(3, { timeoutMs: 200, minCount: 1 });
        t.mock.timers.tick(200);
        log.push(reads(await waiting));
      }
      return log;
    };
    const expected = await script(original);
    const expectedState = original.state();

    t.mock.timers.tick(100_000); // a resumed run, much later
    const loaded = new PriorityReplayBuffer(options);
    loaded.loadState(state);
    assert.deepEqual(await script(loaded), expected);
    // priorities (noise included), use counts, sequence numbers and cooldowns all the same
    assert.deepEqual(loaded.state(), expectedState);

    // the check above sees the noise: a buffer whose generator starts over reads differently
    t.mock.timers.tick(100_000);
    const restarted = new PriorityReplayBuffer(options);
    restarted.loadState({ ...state, noise: { seed: state.noise.seed, draws: 0 } });
    await script(restarted);
    assert.notDeepEqual(restarted.state(), expectedState);
  });

  test('a smaller capacity on load keeps what writing into it would; a malformed state is refused naming the field', async () => {
    const written = [exp('a', 1, 1), exp('b', 3, 1), exp('c', 2, 1), exp('d', 2, 1)];
    const original = new PriorityReplayBuffer({ decay: 2 });
    await original.write(written);
    const state = throughJson(original.state());
    // capacity 2: a (1) leaves first, then c, the older of c and d (2 each), as when the four are written into it
    const small = new PriorityReplayBuffer({ decay: 2, capacity: 2 });
    small.loadState(state);
    assert.deepEqual(
      small.state().entries.map((e) => e.experience.eid),
      ['b', 'd'],
    );
    const direct = new PriorityReplayBuffer({ decay: 2, capacity: 2 });
    await direct.write(written);
    assert.deepEqual(
      direct.state().entries.map((e) => e.experience.eid),
      ['b', 'd'],
    );
    const loaded = new PriorityReplayBuffer({ name: 'replay' });
    const bad = (change: (s: PriorityReplayState) => void) => {
      const copy = throughJson(state);
      change(copy);
      return () => loaded.loadState(copy);
    };
    assert.throws(
      bad((s) => {
        (s.entries[1] as { useCount: number }).useCount = -1;
      }),
      /buffer 'replay': replay state\.entries\[1\]\.useCount must be an integer >= 0, got -1/,
    );
    assert.throws(
      bad((s) => {
        (s.entries[2] as { seq: number }).seq = 0;
      }),
      /replay state\.entries\[2\]\.seq 0 is taken by an earlier entry/,
    );
    assert.throws(
      bad((s) => {
        s.nextSeq = 2;
      }),
      /replay state\.entries\[2\]\.seq must be an integer in \[0, nextSeq 2\), got 2/,
    );
    assert.throws(
      bad((s) => {
        (s.entries[0] as { cooldownMs: unknown }).cooldownMs = null;
      }),
      /replay state\.entries\[0\]\.cooldownMs must be a finite number >= 0, got null/,
    );
    assert.equal(loaded.size, 0, 'a refused state leaves the buffer as it was');
  });
});
