// Sample strategies read the experience buffer themselves: the batch sizes they must deliver, what they leave in the
// buffer, deadlines (BufferTimeoutError, never a hang), checkpoint state, and plug-ins getting the same input.
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import {
  AuxiliaryReader,
  createSampleStrategy,
  type ExperienceSource,
  SAMPLE_STRATEGY,
  type SampleInput,
  type SampleStrategyModule,
  sourceFromArray,
} from '../../../src/rft/algorithm/index.js';
import { BufferTimeoutError, QueueBuffer, SqliteBuffer } from '../../../src/rft/buffer/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { tempDir } from '../buffer/helpers.js';

const experience = (eid: string, info: Experience['info'] = {}, reward = 0): Experience => ({
  eid,
  tokens: [1, 2],
  promptLength: 1,
  reward,
  info,
});

const rollouts = (n: number, prefix = 'u') => Array.from({ length: n }, (_, i) => experience(`${prefix}${i}`));

/** Groups of consecutive responses to one task, named by task, with these rewards. */
const groups = (rewards: Record<string, number[]>, step = 1): Experience[] =>
  Object.entries(rewards).flatMap(([task, rs]) =>
    rs.map((r, run) => experience(`${task}${run}`, { taskId: task, runId: run, step }, r)),
  );

const eids = (experiences: readonly Experience[]) => experiences.map((e) => e.eid);

async function queueOf(experiences: readonly Experience[], options: { finished?: boolean } = {}): Promise<QueueBuffer> {
  const queue = new QueueBuffer({ name: 'experiences' });
  if (experiences.length) await queue.write(experiences);
  if (options.finished) await queue.finishWriting();
  return queue;
}

/** Everything the queue still holds (it is finished first, so the read does not wait). */
async function drain(queue: QueueBuffer): Promise<string[]> {
  await queue.finishWriting();
  return queue.size === 0 ? [] : eids(await queue.read(queue.size, { timeoutMs: 0 }));
}

const folders: string[] = [];
after(() => {
  for (const dir of folders) rmSync(dir, { recursive: true, force: true });
});

describe('mix reads exactly its share of rollouts', () => {
  test('a batch of B is exactly B: B − ⌈ratio·B⌉ rollouts and ⌈ratio·B⌉ expert rows, the rest stays in the buffer', async () => {
    const queue = await queueOf(rollouts(20));
    const expert = new AuxiliaryReader('sft_dataset', rollouts(3, 'x'));
    const mix = createSampleStrategy('mix', { expert_data_ratio: 0.25 });
    const batches: string[][] = [];
    for (let step = 0; step < 3; step++) {
      const out = await mix.sample({ source: queue, batchSize: 8, timeoutMs: 1000, auxiliary: { sft_dataset: expert } });
      assert.equal(out.experiences.length, 8);
      assert.deepEqual([out.metrics['sample/usual_count'], out.metrics['sample/expert_count']], [6, 2]);
      batches.push(eids(out.experiences));
    }
    assert.deepEqual(batches, [
      ['u0', 'u1', 'u2', 'u3', 'u4', 'u5', 'x0', 'x1'],
      ['u6', 'u7', 'u8', 'u9', 'u10', 'u11', 'x2', 'x0'],
      ['u12', 'u13', 'u14', 'u15', 'u16', 'u17', 'x1', 'x2'],
    ]);
    // nothing was thrown away: the two rollouts not yet used are still in the buffer, in order
    assert.deepEqual(await drain(queue), ['u18', 'u19']);
    assert.deepEqual(expert.state(), { position: 6, size: 3 });
  });

  test('odd sizes and the extreme ratios', async () => {
    const cases: [number, number, number, number][] = [
      // batch, ratio, usual, expert
      [5, 0.5, 2, 3],
      [7, 0.3, 4, 3],
      [4, 0, 4, 0],
      [4, 1, 0, 4],
    ];
    for (const [batchSize, ratio, usual, expertCount] of cases) {
      const queue = await queueOf(rollouts(10));
      const expert = new AuxiliaryReader('sft_dataset', rollouts(10, 'x'));
      const out = await createSampleStrategy('mix', { expert_data_ratio: ratio }).sample({
        source: queue,
        batchSize,
        timeoutMs: 1000,
        auxiliary: { sft_dataset: expert },
      });
      const what = `batch ${batchSize}, ratio ${ratio}`;
      assert.equal(out.experiences.length, batchSize, what);
      assert.equal(out.experiences.filter((e) => e.info.isExpert === false).length, usual, what);
      assert.equal(out.experiences.filter((e) => e.info.isExpert === true).length, expertCount, what);
      assert.equal(queue.size, 10 - usual, `${what}: rollouts left in the buffer`);
      assert.equal(expert.position, expertCount, `${what}: expert rows read`);
    }
  });

  test('over the SQLite buffer the unread rollouts stay after the reader position', async () => {
    const dir = tempDir('mix-sqlite');
    folders.push(dir);
    const path = join(dir, 'buffer.db');
    const writer = new SqliteBuffer({ path, readerId: 'writer' });
    await writer.write(rollouts(10));
    await writer.finishWriting();
    const reader = new SqliteBuffer({ path });
    const out = await createSampleStrategy('mix').sample({
      source: reader,
      batchSize: 4,
      timeoutMs: 1000,
      auxiliary: { sft_dataset: new AuxiliaryReader('sft_dataset', rollouts(2, 'x')) },
    });
    assert.deepEqual(eids(out.experiences), ['u0', 'u1', 'x0', 'x1']);
    reader.commit();
    const rest = await reader.readBatch(10, { timeoutMs: 0 });
    assert.deepEqual(
      eids(rest.experiences),
      rollouts(10)
        .slice(2)
        .map((e) => e.eid),
    );
    await Promise.all([reader.close(), writer.close()]);
  });

  test('a timeout reads no expert rows; minCount accepts a short batch; a drained source gives an empty batch', async () => {
    const expert = new AuxiliaryReader('sft_dataset', rollouts(4, 'x'));
    const mix = createSampleStrategy('mix');
    const queue = await queueOf(rollouts(3));
    const input = { source: queue, batchSize: 8, timeoutMs: 20, auxiliary: { sft_dataset: expert } };
    await assert.rejects(mix.sample(input), BufferTimeoutError);
    assert.equal(expert.position, 0, 'no expert rows consumed');
    assert.equal(queue.size, 3, 'no rollouts consumed');
    const short = await mix.sample({ ...input, minCount: 2 });
    assert.deepEqual(eids(short.experiences), ['u0', 'u1', 'u2', 'x0', 'x1', 'x2', 'x3']);
    await queue.finishWriting();
    const empty = await mix.sample(input);
    assert.deepEqual([empty.experiences.length, empty.metrics['sample/read'], expert.position], [0, 0, 4]);
  });
});

describe('dynamic_sampling refills from the buffer (DAPO)', () => {
  test('exactly B from informative groups, the rest left in the buffer', async () => {
    // groups of 4 (repeat_times 4); flat groups: b, c, e
    const queue = await queueOf(
      groups({
        a: [1, 0, 0, 0],
        b: [1, 1, 1, 1],
        c: [0, 0, 0, 0],
        d: [0, 1, 1, 0],
        e: [1, 1, 1, 1],
        f: [1, 0, 1, 0],
        g: [0, 0, 0, 1],
        h: [1, 0, 0, 0],
      }),
    );
    const dapo = createSampleStrategy('dynamic_sampling');
    const first = await dapo.sample({ source: queue, batchSize: 8, repeatTimes: 4, timeoutMs: 1000 });
    // read 8 (a kept, b dropped), 4 (c dropped), 4 (d kept): exactly 8
    assert.deepEqual(eids(first.experiences), ['a0', 'a1', 'a2', 'a3', 'd0', 'd1', 'd2', 'd3']);
    assert.deepEqual(
      [first.metrics['sample/read'], first.metrics['sample/read_rounds'], first.metrics['sample/dropped_groups']],
      [16, 3, 2],
    );
    assert.deepEqual(
      [first.metrics['sample/held'], first.metrics['sample/timed_out'], first.metrics['sample/max_rounds_reached']],
      [0, 0, 0],
    );
    const second = await dapo.sample({ source: queue, batchSize: 8, repeatTimes: 4, timeoutMs: 1000 });
    assert.deepEqual(eids(second.experiences), ['f0', 'f1', 'f2', 'f3', 'g0', 'g1', 'g2', 'g3']);
    assert.deepEqual(await drain(queue), ['h0', 'h1', 'h2', 'h3']);
  });

  test('groups are never split: a group that does not fit is held for the next step', async () => {
    // repeat_times 4, but one run of task a failed: a has 3 responses. Reads ask for whole groups.
    const source = sourceFromArray(groups({ a: [1, 0, 1], b: [1, 0, 0, 0], c: [0, 0, 1, 1] }));
    const dapo = createSampleStrategy('dynamic_sampling');
    const first = await dapo.sample({ source, batchSize: 4, repeatTimes: 4, timeoutMs: 1000 });
    // read 4 = a0 a1 a2 b0 (a complete: b follows), then b's 3 missing: b does not fit next to a
    assert.deepEqual(eids(first.experiences), ['a0', 'a1', 'a2']);
    assert.deepEqual(
      [first.metrics['sample/read'], first.metrics['sample/held'], first.metrics['sample/kept_groups']],
      [7, 4, 1],
    );
    const second = await dapo.sample({ source, batchSize: 4, repeatTimes: 4, timeoutMs: 1000 });
    assert.deepEqual(eids(second.experiences), ['b0', 'b1', 'b2', 'b3']);
    assert.deepEqual([second.metrics['sample/read'], source.remaining], [0, 4]);
    const third = await dapo.sample({ source, batchSize: 4, repeatTimes: 4, timeoutMs: 1000 });
    assert.deepEqual(eids(third.experiences), ['c0', 'c1', 'c2', 'c3']);
  });

  test('max_read_rounds ends the step with what it has, and says so', async () => {
    const flat = groups({ a: [1, 1], b: [0, 0], c: [1, 1], d: [0, 0], e: [0, 1] });
    const source = sourceFromArray(flat);
    const out = await createSampleStrategy('dynamic_sampling', { max_read_rounds: 2 }).sample({
      source,
      batchSize: 2,
      repeatTimes: 2,
      timeoutMs: 1000,
    });
    assert.deepEqual(out.experiences, []);
    assert.deepEqual(
      [out.metrics['sample/read_rounds'], out.metrics['sample/max_rounds_reached'], out.metrics['sample/timed_out']],
      [3, 1, 0],
    );
    assert.equal(source.remaining, 4, 'd and e were never read');
  });

  test('at the deadline: a short batch down to minCount, else BufferTimeoutError holding what was read', async () => {
    const queue = await queueOf(groups({ a: [1, 0], b: [0, 0] }));
    const dapo = createSampleStrategy('dynamic_sampling');
    const input: SampleInput = { source: queue, batchSize: 4, repeatTimes: 2, timeoutMs: 25, minCount: 2 };
    const short = await dapo.sample(input);
    assert.deepEqual(eids(short.experiences), ['a0', 'a1']);
    assert.deepEqual([short.metrics['sample/timed_out'], short.metrics['sample/dropped_groups']], [1, 1]);

    await queue.write(groups({ c: [1, 0] }));
    const error = await dapo.sample({ ...input, minCount: 4 }).then(
      () => assert.fail('resolved'),
      (e: unknown) => e,
    );
    assert.ok(error instanceof BufferTimeoutError);
    assert.equal(error.name, 'BufferTimeoutError');
    assert.equal(error.buffer, 'experiences');
    assert.match(
      error.message,
      /4 experiences from groups with reward std > 0 \(2 after 1 reads, 0 groups dropped; at least 4 accepted\)/,
    );
    // c was read before the deadline and is held, not lost: the next step starts with it
    assert.deepEqual(dapo.state(), { strategy: 'dynamic_sampling', state: { held: groups({ c: [1, 0] }) } });
    await queue.write(groups({ d: [0, 1] }));
    const next = await dapo.sample({ ...input, minCount: 4 });
    assert.deepEqual(eids(next.experiences), ['c0', 'c1', 'd0', 'd1']);
  });
});

describe('deadlines', () => {
  const never: ExperienceSource = new QueueBuffer({ name: 'never' });
  const input = (): SampleInput => ({
    source: never,
    batchSize: 4,
    timeoutMs: 15,
    modelVersion: 3,
    repeatTimes: 2,
    auxiliary: { sft_dataset: new AuxiliaryReader('sft_dataset', rollouts(2, 'x')) },
  });
  for (const name of SAMPLE_STRATEGY.names()) {
    // Rejecting at all is what shows it did not hang; the test's timeout only turns a hang into a failure.
    test(`${name}: a source that never delivers is a BufferTimeoutError at the deadline, not a hang`, {
      timeout: 60_000,
    }, async () => {
      await assert.rejects(createSampleStrategy(name).sample(input()), (error: unknown) => {
        assert.ok(error instanceof BufferTimeoutError, String(error));
        assert.equal(error.name, 'BufferTimeoutError');
        assert.equal(error.buffer, 'never');
        return true;
      });
    });
  }

  test('staleness_control at the deadline keeps the fresh experiences it read for the next call', async () => {
    const queue = await queueOf([experience('old', { modelVersion: 0 }), experience('new', { modelVersion: 5 })]);
    const strategy = createSampleStrategy('staleness_control', { max_staleness: 1 });
    const input: SampleInput = { source: queue, batchSize: 3, timeoutMs: 15, modelVersion: 5, minCount: 2 };
    await assert.rejects(
      strategy.sample(input),
      /3 experiences of model version >= 4 \(1 after 1 reads, 1 stale dropped; at least 2 accepted\)/,
    );
    await queue.write([experience('newer', { modelVersion: 5 })]);
    const out = await strategy.sample(input);
    assert.deepEqual(eids(out.experiences), ['new', 'newer']);
    assert.equal(out.metrics['sample/timed_out'], 1);
  });
});

describe('checkpoint state', () => {
  test('dynamic_sampling resumed from state() continues exactly like the run that was not interrupted', async () => {
    const data = groups({
      a: [1, 0, 1],
      b: [1, 0, 0, 0],
      c: [0, 0, 0, 0],
      d: [0, 1, 1, 0],
      e: [1, 0, 0, 1],
      f: [0, 0, 1, 1],
    });
    const input = (source: ExperienceSource): SampleInput => ({ source, batchSize: 4, repeatTimes: 4, timeoutMs: 1000 });
    const source = sourceFromArray(data);
    const uninterrupted = createSampleStrategy('dynamic_sampling');
    const first = await uninterrupted.sample(input(source));
    // the checkpoint: strategy state as JSON, and the source's read position
    const saved = JSON.parse(JSON.stringify(uninterrupted.state()));
    assert.deepEqual(saved.state.held.length, 4, 'b was read and held');
    const position = data.length - source.remaining;
    const rest: string[][] = [];
    for (let step = 0; step < 3; step++) rest.push(eids((await uninterrupted.sample(input(source))).experiences));

    const resumed = createSampleStrategy('dynamic_sampling');
    resumed.loadState(saved);
    const resumedSource = sourceFromArray(data.slice(position));
    const again: string[][] = [];
    for (let step = 0; step < 3; step++) again.push(eids((await resumed.sample(input(resumedSource))).experiences));
    assert.deepEqual(eids(first.experiences), ['a0', 'a1', 'a2']);
    assert.deepEqual(again, rest);
    assert.deepEqual(rest, [
      ['b0', 'b1', 'b2', 'b3'],
      ['d0', 'd1', 'd2', 'd3'],
      ['e0', 'e1', 'e2', 'e3'],
    ]);
  });

  test('state is checked on load: same strategy, well-formed experiences; stateless strategies hold null', () => {
    const dapo = createSampleStrategy('dynamic_sampling');
    assert.throws(
      () => dapo.loadState({ strategy: 'mix', state: null }),
      /'dynamic_sampling': the checkpoint holds the state of sample_strategy 'mix'/,
    );
    assert.throws(
      () =>
        dapo.loadState({ strategy: 'dynamic_sampling', state: { held: [{ eid: 'x', tokens: [1], promptLength: 3, info: {} }] } }),
      /checkpoint state 'held': experience 0: promptLength 3 must be an integer in \[0, 1\]/,
    );
    assert.throws(() => dapo.loadState(7), /bad checkpoint state 7/);
    const mix = createSampleStrategy('mix');
    assert.deepEqual(mix.state(), { strategy: 'mix', state: null });
    mix.loadState({ strategy: 'mix', state: null });
    assert.throws(() => mix.loadState({ strategy: 'mix', state: { held: [] } }), /'mix': keeps no state/);
  });

  test('AuxiliaryReader cycles in order and resumes at its position', () => {
    const rows = rollouts(3, 'x');
    const reader = new AuxiliaryReader('sft_dataset', rows);
    assert.deepEqual(eids(reader.read(2)), ['x0', 'x1']);
    assert.deepEqual(eids(reader.read(4)), ['x2', 'x0', 'x1', 'x2']);
    assert.deepEqual([reader.position, reader.epoch], [6, 2]);
    const state = JSON.parse(JSON.stringify(reader.state()));
    const resumed = new AuxiliaryReader('sft_dataset', rows);
    resumed.loadState(state);
    assert.deepEqual(eids(resumed.read(2)), eids(reader.read(2)));
    assert.throws(
      () => new AuxiliaryReader('sft_dataset', rows.slice(1)).loadState(state),
      /taken with 3 rows, the dataset now has 2/,
    );
    assert.throws(() => resumed.loadState({ position: -1, size: 3 }), /bad checkpoint state/);
    assert.throws(() => new AuxiliaryReader('empty', []).read(1), /auxiliary buffer 'empty' is empty/);
    assert.deepEqual(new AuxiliaryReader('empty', []).read(0), []);
  });
});

describe('plug-in strategies', () => {
  test('a strategy registered by name gets the same checked input and keeps state through the wrapper', async () => {
    const seen: SampleInput[] = [];
    const plugin: SampleStrategyModule<{ take: number }> = {
      name: 'test_take_n',
      description: 'reads `take`, counts its calls',
      defaults: { take: 1 },
      run: (init, options = {}) => {
        let calls = 0;
        return {
          async sample(input) {
            seen.push(input);
            calls++;
            const experiences = await input.source.read(options.take ?? 1, { timeoutMs: input.timeoutMs });
            return { experiences, metrics: { 'sample/count': experiences.length, [`${init.name}/calls`]: calls } };
          },
          state: () => ({ calls }),
          loadState: (state) => {
            calls = (state as { calls: number }).calls;
          },
        };
      },
    };
    SAMPLE_STRATEGY.register(plugin);
    const auxiliary = { sft_dataset: new AuxiliaryReader('sft_dataset', rollouts(1, 'x')) };
    const input: SampleInput = { source: sourceFromArray(rollouts(5)), batchSize: 2, timeoutMs: 50, modelVersion: 1, auxiliary };
    const strategy = createSampleStrategy('test_take_n', { take: 2 });
    const out = await strategy.sample(input);
    assert.deepEqual(eids(out.experiences), ['u0', 'u1']);
    assert.equal(seen[0], input);
    const resumed = createSampleStrategy('test_take_n', { take: 2 });
    resumed.loadState(JSON.parse(JSON.stringify(strategy.state())));
    assert.equal((await resumed.sample(input)).metrics['test_take_n/calls'], 2);
    await assert.rejects(resumed.sample({ ...input, batchSize: 1.5 }), /'test_take_n': batchSize must be a positive integer/);

    SAMPLE_STRATEGY.register({ name: 'test_bad', description: '', defaults: {}, run: () => ({}) as never });
    assert.throws(() => createSampleStrategy('test_bad'), /run\(init, options\) must return \{ sample\(input\)/);
  });

  test('one sample() at a time', async () => {
    const queue = new QueueBuffer();
    const strategy = createSampleStrategy('default');
    const first = strategy.sample({ source: queue, batchSize: 1, timeoutMs: 1000 });
    await assert.rejects(
      strategy.sample({ source: queue, batchSize: 1, timeoutMs: 1000 }),
      /sample\(\) called while sample\(\) is running/,
    );
    assert.throws(() => strategy.state(), /state\(\) called while sample\(\) is running/);
    await queue.write([experience('e0')]);
    assert.deepEqual(eids((await first).experiences), ['e0']);
  });
});
