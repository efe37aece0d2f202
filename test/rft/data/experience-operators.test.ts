// Each experience operator against hand-computed expectations (the arithmetic is written beside each assertion),
// and what a filter that drops part of a group does to the group advantages the trainer computes afterwards.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { computeGrpoAdvantages } from '../../../src/rft/algorithm/index.js';
import { ExperiencePipeline } from '../../../src/rft/data/experience-pipeline/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import * as torch from '../../../src/torch/index.js';

let counter = 0;
/** An experience of `task` with `reward` and a response of `responseTokens` tokens after a 2-token prompt. */
function exp(
  task: string,
  reward: number | undefined,
  extra: Partial<Experience> & { responseTokens?: number } = {},
): Experience {
  const { responseTokens = 2, ...rest } = extra;
  return {
    eid: `e${counter++}`,
    tokens: Array.from({ length: 2 + responseTokens }, (_, i) => i + 1),
    promptLength: 2,
    ...(reward === undefined ? {} : { reward }),
    ...rest,
    info: { taskId: task, step: 1, ...rest.info },
  };
}

/** One operator run as a pipeline of one: the kept experiences and its metrics without the prefix. */
async function run(name: string, args: Record<string, unknown>, experiences: Experience[]) {
  const pipeline = await ExperiencePipeline.create({ operators: [{ name, args }], inputSavePath: null });
  const result = await pipeline.process(experiences, { step: 1, repeatTimes: 4 });
  await pipeline.close();
  const prefix = `experience_pipeline/${name}/`;
  const metrics = Object.fromEntries(
    Object.entries(result.metrics)
      .filter(([k]) => k.startsWith(prefix) && !k.endsWith('/seconds'))
      .map(([k, v]) => [k.slice(prefix.length), v]),
  );
  return { kept: result.experiences, metrics, feedback: result.taskFeedback };
}

const rewards = (es: readonly Experience[]) => es.map((e) => e.reward);
const near = (a: number | undefined, b: number, tol = 1e-9) => assert.ok(Math.abs((a ?? Number.NaN) - b) < tol, `${a} vs ${b}`);

describe('experience operators', () => {
  test('reward_filter keeps reward >= threshold, one experience at a time', async () => {
    const { kept, metrics } = await run('reward_filter', { threshold: 0.5 }, [exp('a', 0.2), exp('a', 0.5), exp('b', 0.9)]);
    assert.deepEqual(rewards(kept), [0.5, 0.9]); // 0.2 < 0.5 dropped; 0.5 >= 0.5 kept
    assert.deepEqual(metrics, { kept: 2, dropped: 1, filtered_count: 1 });
    await assert.rejects(run('reward_filter', {}, [exp('a', undefined)]), /has no reward; put invalid_reward_filter before it/);
  });

  test('reward_std_filter drops whole groups with population std <= threshold, and groups of one', async () => {
    const step = [
      ...[1, 1, 1].map((r) => exp('same', r)), // std 0
      ...[0, 0, 1, 1].map((r) => exp('half', r)), // mean 0.5, std sqrt(4·0.25/4) = 0.5
      ...[0, 0, 0, 1].map((r) => exp('quarter', r)), // mean 0.25, var (3·0.0625 + 0.5625)/4 = 0.1875, std 0.4330
      exp('lone', 3), // a group of one carries no relative signal
    ];
    const zero = await run('reward_std_filter', {}, step);
    assert.deepEqual(
      zero.kept.map((e) => e.info.taskId),
      ['half', 'half', 'half', 'half', 'quarter', 'quarter', 'quarter', 'quarter'],
    );
    assert.deepEqual(zero.metrics, { kept: 8, dropped: 4, filtered_count: 4, kept_groups: 2, dropped_groups: 2 });
    // threshold 0.45: 0.5 > 0.45 kept, 0.4330 <= 0.45 dropped; threshold 0.5: 0.5 <= 0.5 dropped too
    assert.deepEqual(
      [...new Set((await run('reward_std_filter', { threshold: 0.45 }, step)).kept.map((e) => e.info.taskId))],
      ['half'],
    );
    assert.deepEqual((await run('reward_std_filter', { threshold: 0.5 }, step)).kept, []);
  });

  test('invalid_reward_filter drops missing and non-finite rewards', async () => {
    const { kept, metrics } = await run('invalid_reward_filter', {}, [
      exp('a', undefined),
      exp('a', Number.NaN),
      exp('a', Number.POSITIVE_INFINITY),
      exp('a', 0),
      exp('a', -2),
    ]);
    assert.deepEqual(rewards(kept), [0, -2]);
    assert.equal(metrics.filtered_count, 3);
  });

  test('mask_response_truncated zeroes the action mask of responses cut off at the length limit, keeping them', async () => {
    const truncated = exp('a', 1, { responseTokens: 3, truncateStatus: 'response_truncated', actionMask: [1, 1, 1] });
    const unmasked = exp('a', 0, { responseTokens: 2, truncateStatus: 'response_truncated' }); // no mask: all tokens
    const whole = exp('a', 0, { responseTokens: 2, actionMask: [1, 0] });
    const promptCut = exp('a', 0, { responseTokens: 1, truncateStatus: 'prompt_truncated', actionMask: [0] });
    const { kept, metrics } = await run('mask_response_truncated', {}, [truncated, unmasked, whole, promptCut]);
    assert.deepEqual(
      kept.map((e) => e.actionMask),
      [[0, 0, 0], [0, 0], [1, 0], [0]],
    );
    assert.deepEqual(rewards(kept), [1, 0, 0, 0], 'rewards stay for the group statistics');
    assert.equal(metrics.masked_truncated_count, 2);
  });

  test('reward_shaping_mapper: ADD, SUB, MUL, DIV with weights, stats from info then metrics', async () => {
    const configs = [
      { stats_key: 'quality', op_type: 'ADD', weight: 0.5 },
      { stats_key: 'len_ratio', op_type: 'MUL', weight: 2 },
    ];
    const { kept, metrics } = await run('reward_shaping_mapper', { reward_shaping_configs: configs }, [
      exp('a', 1, { info: { quality: 0.4 }, metrics: { len_ratio: 0.25 } }), // (1 + 0.5·0.4) · (2·0.25) = 1.2 · 0.5 = 0.6
      exp('a', 2, { metrics: { len_ratio: 1 } }), // no quality: 2 · (2·1) = 4 (one missing stat)
      exp('a', undefined, { info: { quality: 1 } }), // no reward: dropped (Trinity skips it)
    ]);
    near(kept[0]?.reward, 0.6);
    near(kept[1]?.reward, 4);
    assert.equal(kept.length, 2);
    assert.equal(metrics.no_reward, 1);
    assert.equal(metrics.missing_stats, 1);
    near(metrics['reward_diff/mean'], (-0.4 + 2) / 2); // diffs 0.6 − 1 = −0.4 and 4 − 2 = 2
    near(metrics['reward_diff/min'], -0.4);
    near(metrics['reward_diff/max'], 2);

    const one = async (op_type: string, weight: number, stat: number) =>
      (
        await run('reward_shaping_mapper', { reward_shaping_configs: [{ stats_key: 's', op_type, weight }] }, [
          exp('a', 3, { info: { s: stat } }),
        ])
      ).kept[0]?.reward;
    near(await one('SUB', 0.5, 2), 2); // 3 − 0.5·2
    near(await one('DIV', 0.5, 4), 1.5); // 3 / (0.5·4)
    near(await one('DIV', 2, 0), 3); // divisor 2·0 = 0: unchanged
    near(await one('ADD', 1, -1), 2); // 3 + 1·(−1)

    await assert.rejects(
      run('reward_shaping_mapper', { reward_shaping_configs: [{ stats_key: 's', op_type: 'POW' }] }, []),
      /operators\[0\] 'reward_shaping_mapper'.*reward_shaping_configs\[0\]\.op_type must be one of ADD, SUB, MUL, DIV/,
    );
    await assert.rejects(
      run('reward_shaping_mapper', { reward_shaping_configs: [{ stats_key: 's' }] }, [exp('a', 1, { info: { s: 'high' } })]),
      /has s = "high", not a finite number/,
    );
  });

  test('pass_rate_calculator: per-task mean rewards as selector feedback; experiences unchanged', async () => {
    const step = [exp('a', 1), exp('a', 0), exp('a', 1), exp('b', 0), exp('b', 0)];
    const { kept, metrics, feedback } = await run('pass_rate_calculator', {}, step);
    assert.deepEqual(kept, step);
    assert.deepEqual(
      [...(feedback ?? new Map())],
      [
        ['a', [1, 0, 1]],
        ['b', [0, 0]],
      ],
    );
    near(metrics['pass_rate/mean'], (2 / 3 + 0) / 2); // tasks a: 2/3, b: 0
    assert.equal(metrics.tasks, 2);
  });

  test('dapo_dynamic_sampling keeps groups with some but not all correct (accuracy metric, else reward)', async () => {
    const step = [
      exp('allRight', 0.5, { metrics: { accuracy: 1 } }), // rewards differ, but every answer is correct
      exp('allRight', 0.9, { metrics: { accuracy: 1 } }),
      exp('allWrong', 0.3, { metrics: { accuracy: 0 } }),
      exp('allWrong', 0.1, { metrics: { accuracy: 0 } }),
      exp('mixed', 1, { metrics: { accuracy: 1 } }),
      exp('mixed', 0, { metrics: { accuracy: 0 } }),
      exp('byReward', 1), // no accuracy metric: the reward decides (1 > 0 correct, 0 not)
      exp('byReward', 0),
      exp('lone', 1, { metrics: { accuracy: 1 } }),
    ];
    const { kept, metrics } = await run('dapo_dynamic_sampling', {}, step);
    assert.deepEqual(
      kept.map((e) => e.info.taskId),
      ['mixed', 'mixed', 'byReward', 'byReward'],
    );
    assert.deepEqual(metrics, { kept: 4, dropped: 5, filtered_count: 5, dropped_all_correct: 2, dropped_all_wrong: 2 });
    // correct_threshold 0.5 on accuracy 0.5: 0.5 > 0.5 is false, so [0.5, 1] is mixed
    const half = [exp('t', 0, { metrics: { accuracy: 0.5 } }), exp('t', 0, { metrics: { accuracy: 1 } })];
    assert.equal((await run('dapo_dynamic_sampling', { correct_threshold: 0.5 }, half)).kept.length, 2);
    assert.equal((await run('dapo_dynamic_sampling', { correct_threshold: 0.4 }, half)).kept.length, 0);
  });

  test('overlong_reward_shaping: DAPO soft punishment over the last overlong_buffer_len tokens', async () => {
    const args = { max_response_length: 10, overlong_buffer_len: 4 };
    const step = [6, 7, 8, 10, 11].map((n) => exp('a', 1, { responseTokens: n }));
    const { kept, metrics } = await run('overlong_reward_shaping', args, step);
    // L ≤ 10 − 4 = 6: 0; L = 7: (6 − 7)/4 = −0.25; L = 8: −0.5; L = 10: −1; L = 11 > 10: −1
    assert.deepEqual(rewards(kept), [1, 0.75, 0.5, 0, 0]);
    assert.equal(kept[2]?.info.overlongPenalty, -0.5);
    assert.equal(metrics.penalised, 4);
    near(metrics.penalty_sum, -2.75);
    const doubled = await run('overlong_reward_shaping', { ...args, overlong_penalty_factor: 2 }, [
      exp('a', 1, { responseTokens: 8 }),
    ]);
    assert.deepEqual(rewards(doubled.kept), [0]); // 1 + 2·(−0.5)
    await assert.rejects(run('overlong_reward_shaping', {}, []), /max_response_length must be a positive integer, got null/);
    await assert.rejects(
      run('overlong_reward_shaping', { max_response_length: 4, overlong_buffer_len: 8 }, []),
      /overlong_buffer_len/,
    );
  });

  test('operators never change their input experiences', async () => {
    const input = [exp('a', 1, { info: { q: 1 }, responseTokens: 9 }), exp('a', 0, { info: { q: 1 } })];
    const copy = structuredClone(input);
    const pipeline = await ExperiencePipeline.create({
      operators: [
        { name: 'reward_shaping_mapper', args: { reward_shaping_configs: [{ stats_key: 'q', op_type: 'ADD', weight: 1 }] } },
        { name: 'overlong_reward_shaping', args: { max_response_length: 8, overlong_buffer_len: 2 } },
      ],
      inputSavePath: null,
    });
    const { experiences } = await pipeline.process(input, { step: 1, repeatTimes: 2 });
    assert.deepEqual(rewards(experiences), [1, 1]); // (1 + 1) − 1 (9 > 8 tokens), 0 + 1
    assert.deepEqual(input, copy);
  });
});

describe('group advantages after a filter', () => {
  const grpo = (kept: Experience[]) =>
    torch.scope(() => {
      const { advantages } = computeGrpoAdvantages(
        {
          actionMask: torch.ones([kept.length, 1], { dtype: 'float64' }),
          rewards: torch.tensor(
            kept.map((e) => e.reward as number),
            { dtype: 'float64' },
          ),
          groupIds: kept.map((e) => e.info.taskId as string),
        },
        { epsilon: 0 },
      );
      return (advantages.toArray() as number[][]).map((row) => row[0] as number);
    });

  test('a per-experience filter: the survivors are the group (their mean and std), a lone survivor is a group of one', async () => {
    const step = [...[1, 0.6, 0.2, 0].map((r) => exp('a', r)), ...[0.9, 0.1, 0.1, 0.1].map((r) => exp('b', r))];
    const { kept } = await run('reward_filter', { threshold: 0.5 }, step);
    assert.deepEqual(rewards(kept), [1, 0.6, 0.9]);
    const advantages = grpo(kept);
    // a: survivors [1, 0.6]: mean 0.8, std sqrt((0.2² + 0.2²)/1) = 0.28284 → ±0.2/0.28284 = ±0.70711
    // b: survivor [0.9] alone: GRPO's group of one (mean 0, std 1) → 0.9
    for (const [i, want] of [Math.SQRT1_2, -Math.SQRT1_2, 0.9].entries()) near(advantages[i], want, 1e-9);
  });

  test('a group filter: the kept groups get exactly the advantages of the unfiltered step', async () => {
    const step = [
      ...[1, 0, 1, 1].map((r) => exp('a', r)),
      ...[1, 1, 1, 1].map((r) => exp('b', r)),
      ...[0, 1].map((r) => exp('c', r)),
    ];
    const { kept } = await run('reward_std_filter', {}, step);
    assert.deepEqual(
      kept.map((e) => e.info.taskId),
      ['a', 'a', 'a', 'a', 'c', 'c'],
    );
    const all = grpo(step);
    const filtered = grpo(kept);
    assert.deepEqual(filtered, [...all.slice(0, 4), ...all.slice(8)]);
    // a: mean 0.75, std sqrt((3·0.0625 + 0.5625)/3) = 0.5 → [0.5, −1.5, 0.5, 0.5]
    for (const [i, want] of [0.5, -1.5, 0.5, 0.5].entries()) near(filtered[i], want, 1e-9);
  });
});
