// Sample strategies: what each one puts in the training batch, counted by hand. (Reading against batch sizes,
// deadlines and checkpoint state: sample-strategy-reading.test.ts.)
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  AuxiliaryReader,
  consecutiveGroups,
  createSampleStrategy,
  mixSplit,
  overlongPenalty,
  type SampleInput,
  sourceFromArray,
} from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';

const experience = (eid: string, info: Experience['info'], reward = 0, responseLength = 1): Experience => ({
  eid,
  tokens: [1, ...new Array<number>(responseLength).fill(2)],
  promptLength: 1,
  reward,
  info,
});

/** Groups of consecutive responses to one task, named by task, with these rewards. */
const groups = (rewards: Record<string, number[]>, step = 1): Experience[] =>
  Object.entries(rewards).flatMap(([task, rs]) =>
    rs.map((r, run) => experience(`${task}${run}`, { taskId: task, runId: run, step }, r)),
  );

const input = (experiences: readonly Experience[], extra: Partial<SampleInput> & { batchSize: number }): SampleInput => ({
  source: sourceFromArray(experiences),
  timeoutMs: 1000,
  ...extra,
});

const eids = (experiences: readonly Experience[]) => experiences.map((e) => e.eid);

describe('sample strategies', () => {
  test('default takes the batch as the source hands it out; a finished source gives a short batch', async () => {
    const all = [0, 1, 2, 3, 4].map((i) => experience(`e${i}`, {}));
    const source = sourceFromArray(all);
    const first = await createSampleStrategy('default').sample({ source, batchSize: 3, timeoutMs: 1000 });
    assert.deepEqual(eids(first.experiences), ['e0', 'e1', 'e2']);
    const second = await createSampleStrategy('warmup').sample({ source, batchSize: 3, timeoutMs: 1000 });
    assert.deepEqual(eids(second.experiences), ['e3', 'e4']);
    assert.deepEqual([second.metrics['sample/count'], second.metrics['sample/read']], [2, 2]);
  });

  test('staleness_control drops versions older than current − max_staleness, reports them, and reads on', async () => {
    // model version 5, max_staleness 2: versions 3, 4, 5 pass; 1 and 2 are stale
    const versions = [5, 1, 4, 2, 3, 5, 5];
    const all = versions.map((v, i) => experience(`e${i}`, { modelVersion: v }));
    const source = sourceFromArray(all);
    const sample = createSampleStrategy('staleness_control', { max_staleness: 2 });
    const out = await sample.sample({ source, batchSize: 4, modelVersion: 5, timeoutMs: 1000 });
    assert.deepEqual(
      out.experiences.map((e) => e.info.modelVersion),
      [5, 4, 3, 5],
    );
    // read 4 (2 stale), then the 2 missing: exactly 6 read, the last one left in the source
    assert.deepEqual(
      [out.metrics['sample/stale_dropped'], out.metrics['sample/read'], out.metrics['sample/read_rounds']],
      [2, 6, 2],
    );
    assert.equal(source.remaining, 1);
    await assert.rejects(sample.sample(input(all, { batchSize: 4 })), /needs the trainer's current modelVersion/);
    // on-policy only; the source runs dry
    const strict = await createSampleStrategy('staleness_control', { max_staleness: 0 }).sample(
      input(all, { batchSize: 7, modelVersion: 5 }),
    );
    assert.deepEqual(
      [strict.experiences.length, strict.metrics['sample/stale_dropped'], strict.metrics['sample/source_finished']],
      [3, 4, 1],
    );
    // max_read_rounds: one read after the first, then a short batch that says why
    const capped = await createSampleStrategy('staleness_control', { max_staleness: 0, max_read_rounds: 1 }).sample(
      input(
        [1, 1, 1, 5, 1, 5, 5, 5].map((v, i) => experience(`v${i}`, { modelVersion: v })),
        { batchSize: 4, modelVersion: 5 },
      ),
    );
    // read 4 (v3 fresh), then the 3 missing (v5, v6 fresh): v7 is never read
    assert.deepEqual(eids(capped.experiences), ['v3', 'v5', 'v6']);
    assert.deepEqual([capped.metrics['sample/read_rounds'], capped.metrics['sample/max_rounds_reached']], [2, 1]);
  });

  test('mix honours expert_data_ratio and marks expert experiences without touching the sources', async () => {
    const usual = Array.from({ length: 10 }, (_, i) => experience(`u${i}`, { isExpert: true }));
    const expert = Array.from({ length: 10 }, (_, i) => experience(`x${i}`, {}));
    const out = await createSampleStrategy('mix', { expert_data_ratio: 0.25 }).sample(
      input(usual, { batchSize: 8, auxiliary: { sft_dataset: new AuxiliaryReader('sft_dataset', expert) } }),
    );
    // ⌈0.25 · 8⌉ = 2 expert, 6 usual
    assert.deepEqual(mixSplit(8, 0.25), { usual: 6, expert: 2 });
    assert.deepEqual(mixSplit(5, 0.5), { usual: 2, expert: 3 }); // Trinity-RFT rounds the expert share up
    assert.equal(out.experiences.filter((e) => e.info.isExpert === true).length, 2);
    assert.equal(out.experiences.filter((e) => e.info.isExpert === false).length, 6);
    assert.ok(out.experiences.filter((e) => e.info.isExpert).every((e) => e.eid.startsWith('x')));
    assert.deepEqual([out.metrics['sample/expert_count'], out.metrics['sample/usual_count']], [2, 6]);
    assert.equal(usual[0]?.info.isExpert, true, 'sources are not mutated');
    assert.equal(expert[0]?.info.isExpert, undefined);
    await assert.rejects(
      createSampleStrategy('mix').sample(input(usual, { batchSize: 8, auxiliary: { sft: new AuxiliaryReader('sft', expert) } })),
      /no auxiliary buffer 'sft_dataset' \(sft_dataset_name\); given: sft/,
    );
    assert.throws(
      () => createSampleStrategy('mix', { expert_data_ratio: 1.5 }),
      /expert_data_ratio must be in \[0, 1\], got 1.5/,
    );
  });

  test("mix ends training, reading nothing, once the expert data's total_epochs leave less than a batch's share", async () => {
    const usual = Array.from({ length: 30 }, (_, i) => experience(`u${i}`, {}));
    const expert = Array.from({ length: 3 }, (_, i) => experience(`x${i}`, {}));
    // 6 usual rows per batch; 2 epochs of 3 rows: 6 expert rows in all; ⌈0.25 · 8⌉ = 2 per batch, so 3 batches, then the end
    const reader = new AuxiliaryReader('SFT_data', expert, 2);
    const source = sourceFromArray(usual);
    const mix = createSampleStrategy('mix', { expert_data_ratio: 0.25 });
    const batch = () => mix.sample({ source, batchSize: 8, timeoutMs: 1000, auxiliary: { sft_dataset: reader } });
    assert.equal((await batch()).experiences.length, 8);
    assert.equal(reader.remaining(), 4);
    const second = await batch();
    assert.deepEqual(eids(second.experiences.filter((e) => e.info.isExpert)), ['x2', 'x0'], 'the second epoch wraps');
    await batch();
    const last = await batch();
    assert.deepEqual(last.experiences, []);
    assert.match(last.ended ?? '', /the expert data 'sft_dataset' has 0 row\(s\) left of its total_epochs/);
    assert.equal((await source.read(30, { timeoutMs: 0 })).length, 12, 'the ending batch consumed no usual experience');
    assert.throws(() => reader.read(1), /auxiliary buffer 'SFT_data': 1 rows asked, 0 left of its total_epochs \(2 × 3 rows\)/);
    assert.equal(new AuxiliaryReader('cycled', expert).remaining(), Number.POSITIVE_INFINITY);
  });

  test('dynamic_sampling drops zero-variance groups and refills from the source (DAPO)', async () => {
    // groups of 2: a (1, 0) informative, b (1, 1) and c (0, 0) flat, d (0, 1) informative, e (1, 0) informative
    const all = groups({ a: [1, 0], b: [1, 1], c: [0, 0], d: [0, 1], e: [1, 0] });
    const source = sourceFromArray(all);
    const out = await createSampleStrategy('dynamic_sampling').sample({ source, batchSize: 4, repeatTimes: 2, timeoutMs: 1000 });
    // read 4 (a kept, b dropped), then 2 (c dropped), then 2 (d kept): full; e stays in the source
    assert.deepEqual(eids(out.experiences), ['a0', 'a1', 'd0', 'd1']);
    assert.deepEqual(
      [out.metrics['sample/dropped_groups'], out.metrics['sample/read_rounds'], out.metrics['sample/read']],
      [2, 3, 8],
    );
    assert.equal(source.remaining, 2);
    // the source runs dry: a short batch of informative groups
    const short = await createSampleStrategy('dynamic_sampling').sample(input(all.slice(0, 6), { batchSize: 4, repeatTimes: 2 }));
    assert.deepEqual(eids(short.experiences), ['a0', 'a1']);
    assert.equal(short.metrics['sample/source_finished'], 1);
    await assert.rejects(
      createSampleStrategy('dynamic_sampling').sample(input(all, { batchSize: 4 })),
      /needs repeatTimes \(algorithm.repeat_times\)/,
    );
  });

  test('groups are consecutive responses to one task at one explorer step (the next epoch is a new group)', () => {
    const twice = [...groups({ a: [1, 0] }, 1), ...groups({ a: [0, 0] }, 2)];
    assert.deepEqual(
      consecutiveGroups('t', twice).map((g) => g.map((e) => `${e.eid}@${e.info.step}`)),
      [
        ['a0@1', 'a1@1'],
        ['a0@2', 'a1@2'],
      ],
    );
  });

  test("DAPO's soft overlong penalty, and the penalty can make a flat group informative", async () => {
    const o = { maxResponseLength: 20, overlongBufferLen: 4, overlongPenaltyFactor: 1 };
    assert.equal(overlongPenalty(16, o), 0); // ≤ L_max − L_cache = 16
    assert.equal(overlongPenalty(18, o), -0.5); // (16 − 18) / 4
    assert.equal(overlongPenalty(20, o), -1);
    assert.equal(overlongPenalty(21, o), -1);
    assert.equal(overlongPenalty(100, { ...o, maxResponseLength: null }), 0);
    const flat = [experience('s', { taskId: 't' }, 1, 2), experience('l', { taskId: 't' }, 1, 7)];
    const out = await createSampleStrategy('dynamic_sampling', { max_response_length: 8, overlong_buffer_len: 4 }).sample(
      input(flat, { batchSize: 2, repeatTimes: 2 }),
    );
    // length 7: (4 − 7) / 4 = −0.75
    assert.deepEqual(
      out.experiences.map((e) => e.reward),
      [1, 0.25],
    );
    assert.equal(out.metrics['sample/overlong_penalised'], 1);
    assert.equal(flat[1]?.reward, 1, 'sources are not mutated');
  });

  test('reward_filter keeps the best response of each group above min_reward (RAFT)', async () => {
    const all = [
      experience('a0', { taskId: 'a' }, 0.2),
      experience('a1', { taskId: 'a' }, 0.9),
      experience('b0', { taskId: 'b' }, 0.1),
      experience('b1', { taskId: 'b' }, 0.0),
    ];
    const best = await createSampleStrategy('reward_filter').sample(input(all, { batchSize: 4 }));
    assert.deepEqual(eids(best.experiences), ['a1', 'b0']);
    const above = await createSampleStrategy('reward_filter', { min_reward: 0.5 }).sample(input(all, { batchSize: 4 }));
    assert.deepEqual(eids(above.experiences), ['a1']);
  });

  test('inputs and arguments are checked, naming the strategy', async () => {
    const strategy = createSampleStrategy('default');
    const source = sourceFromArray([]);
    await assert.rejects(
      strategy.sample({ source, batchSize: 0, timeoutMs: 1 }),
      /'default': batchSize must be a positive integer/,
    );
    await assert.rejects(strategy.sample({ source, batchSize: 2, timeoutMs: -1 }), /timeoutMs must be a number of milliseconds/);
    await assert.rejects(strategy.sample({ source, batchSize: 2, timeoutMs: 2 ** 31 }), /timeoutMs must be/);
    await assert.rejects(
      strategy.sample({ source, batchSize: 2, timeoutMs: 1, minCount: 3 }),
      /minCount must be an integer in \[0, batchSize = 2\]/,
    );
    assert.throws(
      () => createSampleStrategy('dynamic_sampling', { max_read_round: 2 }),
      /unknown argument 'max_read_round'; did you mean 'max_read_rounds'\?/,
    );
    assert.throws(() => createSampleStrategy('mixx'), /unknown sample_strategy 'mixx'; did you mean 'mix'\?/);
  });
});
