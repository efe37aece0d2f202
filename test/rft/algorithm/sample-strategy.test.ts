// Sample strategies: what each one puts in the training batch, counted by hand.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { arrayReader, overlongPenalty, SAMPLE_STRATEGY } from '../../src/rft/algorithm/index.js';
import type { Experience } from '../../src/rft/experience.js';

const experience = (eid: string, info: Experience['info'], reward = 0, responseLength = 1): Experience => ({
  eid,
  tokens: [1, ...new Array<number>(responseLength).fill(2)],
  promptLength: 1,
  reward,
  info,
});

describe('sample strategies', () => {
  test('default takes the batch as the buffer hands it out', () => {
    const all = [0, 1, 2, 3, 4].map((i) => experience(`e${i}`, {}));
    const read = arrayReader(all);
    const first = SAMPLE_STRATEGY.create('default')({ read, batchSize: 3 });
    assert.deepEqual(
      first.experiences.map((e) => e.eid),
      ['e0', 'e1', 'e2'],
    );
    assert.deepEqual(
      SAMPLE_STRATEGY.create('warmup')({ read, batchSize: 3 }).experiences.map((e) => e.eid),
      ['e3', 'e4'],
    );
  });

  test('staleness_control drops versions older than current − max_staleness, reports them, and reads on', () => {
    // model version 5, max_staleness 2: versions 3, 4, 5 pass; 1 and 2 are stale
    const versions = [5, 1, 4, 2, 3, 5, 5];
    const all = versions.map((v, i) => experience(`e${i}`, { modelVersion: v }));
    const sample = SAMPLE_STRATEGY.create('staleness_control', { max_staleness: 2 });
    const out = sample({ read: arrayReader(all), batchSize: 4, modelVersion: 5 });
    assert.deepEqual(
      out.experiences.map((e) => e.info.modelVersion),
      [5, 4, 3, 5],
    );
    assert.equal(out.metrics['sample/stale_dropped'], 2);
    assert.throws(() => sample({ read: arrayReader(all), batchSize: 4 }), /needs the trainer's current modelVersion/);
    // on-policy only
    const strict = SAMPLE_STRATEGY.create('staleness_control', { max_staleness: 0 })({
      read: arrayReader(all),
      batchSize: 7,
      modelVersion: 5,
    });
    assert.deepEqual([strict.experiences.length, strict.metrics['sample/stale_dropped']], [3, 4]);
  });

  test('mix honours expert_data_ratio and marks expert experiences without touching the sources', () => {
    const usual = Array.from({ length: 10 }, (_, i) => experience(`u${i}`, { isExpert: true }));
    const expert = Array.from({ length: 10 }, (_, i) => experience(`x${i}`, {}));
    const out = SAMPLE_STRATEGY.create('mix', { expert_data_ratio: 0.25 })({
      read: arrayReader(usual),
      batchSize: 8,
      auxiliary: { sft_dataset: arrayReader(expert) },
    });
    // ⌈0.25 · 8⌉ = 2 expert, 6 usual
    assert.equal(out.experiences.filter((e) => e.info.isExpert === true).length, 2);
    assert.equal(out.experiences.filter((e) => e.info.isExpert === false).length, 6);
    assert.ok(out.experiences.filter((e) => e.info.isExpert).every((e) => e.eid.startsWith('x')));
    assert.deepEqual([out.metrics['sample/expert_count'], out.metrics['sample/usual_count']], [2, 6]);
    assert.equal(usual[0]?.info.isExpert, true, 'sources are not mutated');
    assert.equal(expert[0]?.info.isExpert, undefined);
    assert.throws(
      () => SAMPLE_STRATEGY.create('mix')({ read: arrayReader(usual), batchSize: 8, auxiliary: { sft: arrayReader(expert) } }),
      /no auxiliary buffer 'sft_dataset' \(sft_dataset_name\); given: sft/,
    );
    assert.throws(
      () => SAMPLE_STRATEGY.create('mix', { expert_data_ratio: 1.5 })({ read: arrayReader(usual), batchSize: 8 }),
      /expert_data_ratio must be in \[0, 1\], got 1.5/,
    );
  });

  test('dynamic_sampling drops zero-variance groups and refills from the buffer (DAPO)', () => {
    // groups of 2: a (1, 0) informative, b (1, 1) and c (0, 0) flat, d (0, 1) informative, e (1, 0) informative
    const rewards: Record<string, [number, number]> = { a: [1, 0], b: [1, 1], c: [0, 0], d: [0, 1], e: [1, 0] };
    const all = Object.entries(rewards).flatMap(([task, rs]) =>
      rs.map((r, run) => experience(`${task}${run}`, { taskId: task, runId: run }, r)),
    );
    const out = SAMPLE_STRATEGY.create('dynamic_sampling')({ read: arrayReader(all), batchSize: 4 });
    // first read (4): a kept, b dropped; second read (4): c dropped, d kept → full
    assert.deepEqual(
      out.experiences.map((e) => e.eid),
      ['a0', 'a1', 'd0', 'd1'],
    );
    assert.equal(out.metrics['sample/dropped_groups'], 2);
    assert.equal(out.metrics['sample/read_rounds'], 2);
    // the buffer runs dry: a short batch of informative groups
    const short = SAMPLE_STRATEGY.create('dynamic_sampling')({ read: arrayReader(all.slice(0, 6)), batchSize: 4 });
    assert.deepEqual(
      short.experiences.map((e) => e.eid),
      ['a0', 'a1'],
    );
  });

  test("DAPO's soft overlong penalty, and the penalty can make a flat group informative", () => {
    const o = { maxResponseLength: 20, overlongBufferLen: 4, overlongPenaltyFactor: 1 };
    assert.equal(overlongPenalty(16, o), 0); // ≤ L_max − L_cache = 16
    assert.equal(overlongPenalty(18, o), -0.5); // (16 − 18) / 4
    assert.equal(overlongPenalty(20, o), -1);
    assert.equal(overlongPenalty(21, o), -1);
    assert.equal(overlongPenalty(100, { ...o, maxResponseLength: null }), 0);
    const flat = [experience('s', { taskId: 't' }, 1, 2), experience('l', { taskId: 't' }, 1, 7)];
    const out = SAMPLE_STRATEGY.create('dynamic_sampling', { max_response_length: 8, overlong_buffer_len: 4 })({
      read: arrayReader(flat),
      batchSize: 2,
    });
    // length 7: (4 − 7) / 4 = −0.75
    assert.deepEqual(
      out.experiences.map((e) => e.reward),
      [1, 0.25],
    );
    assert.equal(flat[1]?.reward, 1, 'sources are not mutated');
  });

  test('reward_filter keeps the best response of each group above min_reward (RAFT)', () => {
    const all = [
      experience('a0', { taskId: 'a' }, 0.2),
      experience('a1', { taskId: 'a' }, 0.9),
      experience('b0', { taskId: 'b' }, 0.1),
      experience('b1', { taskId: 'b' }, 0.0),
    ];
    const best = SAMPLE_STRATEGY.create('reward_filter')({ read: arrayReader(all), batchSize: 4 });
    assert.deepEqual(
      best.experiences.map((e) => e.eid),
      ['a1', 'b0'],
    );
    const above = SAMPLE_STRATEGY.create('reward_filter', { min_reward: 0.5 })({ read: arrayReader(all), batchSize: 4 });
    assert.deepEqual(
      above.experiences.map((e) => e.eid),
      ['a1'],
    );
  });
});
