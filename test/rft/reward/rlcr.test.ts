// rlcr_reward (src/rft/reward/rlcr.ts): RLCR's five weighted parts by hand-computed values — the Brier term of the
// stated confidence for right and wrong answers, the strict terminal tag chain, the two small confidence terms that
// read the last closed <confidence> even when the chain is malformed, weights matched by name, and the precise errors
// for a bad weights mapping (also from `config check`'s argument check) and a task without a reference.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { REWARD_FUNCTIONS, scoreResponse } from '../../../src/rft/reward/registry.js';
import { lastStatedConfidence, parseRlcrChain, rlcrParts } from '../../../src/rft/reward/rlcr.js';
import type { Task } from '../../../src/rft/task.js';

const task = (over: Partial<Task> = {}): Task => ({ id: 'm0', prompt: '6*7?', response: '42', ...over }) as Task;
const chain = (answer = '42', confidence = '0.8', { prefix = '', separator = '' } = {}): string =>
  `${prefix}<think>work</think>${separator}<answer>${answer}</answer>${separator}<analysis>check</analysis>${separator}` +
  `<confidence>${confidence}</confidence>`;

async function score(response: string, args: Record<string, unknown> = {}, over: Partial<Task> = {}) {
  return scoreResponse(REWARD_FUNCTIONS.get('rlcr_reward'), { response, task: task(over), args }, 'rlcr_reward');
}

const close = (actual: number, expected: number, what: string) =>
  assert.ok(Math.abs(actual - expected) < 1e-12, `${what}: ${actual} != ${expected}`);

describe('rlcr_reward', () => {
  test('a right answer at q = 0.8: 0.5 + 0.5 + 0.5·(1 − 0.2²) + 1e-5·0.8 = 1.480008', async () => {
    const { reward, metrics } = await score(chain());
    close(metrics.format as number, 0.5, 'format');
    close(metrics.accuracy as number, 0.5, 'accuracy');
    close(metrics.brier as number, 0.5 * (1 - 0.2 ** 2), 'brier'); // 0.48
    close(metrics.mean_confidence as number, 0.8e-5, 'mean_confidence');
    close(metrics.confidence_one_or_zero as number, 0, 'confidence_one_or_zero');
    close(reward, 1.480008, 'reward');
  });

  test('a wrong answer is scored by the same Brier formula: q = 0.2 → 0.5·(1 − (0 − 0.2)²) = 0.48', async () => {
    const { reward, metrics } = await score(chain('41', '0.2'));
    close(metrics.accuracy as number, 0, 'accuracy');
    close(metrics.brier as number, 0.48, 'brier');
    close(reward, 0.5 + 0.48 + 0.2e-5, 'reward');
    // confident and wrong costs the whole Brier term: q = 1 → 1 − (0 − 1)² = 0
    const sure = await score(chain('41', '1'));
    close(sure.metrics.brier as number, 0, 'brier at q = 1');
    close(sure.metrics.confidence_one_or_zero as number, 1e-5, 'confidence_one_or_zero at q = 1');
  });

  test('answers compare as math_reward compares them: \\boxed{}, fractions, the reference after ####', async () => {
    close((await score(chain('\\boxed{0.75}'), {}, { response: 'so #### 3/4' })).metrics.accuracy as number, 0.5, 'boxed');
    close((await score(chain(' $\\frac{3}{4}$ '), {}, { response: '0.75' })).metrics.accuracy as number, 0.5, 'frac');
    close((await score(chain('0.7'), {}, { response: '0.75' })).metrics.accuracy as number, 0, 'different');
  });

  test('earlier complete blocks and whitespace between the blocks are allowed; the last chain counts', () => {
    const prefix = 'draft <think>old</think><answer>wrong</answer><analysis>x</analysis><confidence>0.1</confidence> again: ';
    assert.deepEqual(parseRlcrChain(chain('42', '0.8', { prefix, separator: ' \n\t' })), { answer: '42', confidence: 0.8 });
    assert.deepEqual(parseRlcrChain(`${chain()} \r\n\t`), { answer: '42', confidence: 0.8 });
  });

  test('a malformed chain zeroes format, accuracy and brier', () => {
    const malformed = [
      'work</think><answer>42</answer><analysis>x</analysis><confidence>0.8</confidence>', // no <think>
      '<think>x</think><analysis>x</analysis><answer>42</answer><confidence>0.8</confidence>', // order
      '<think>x</think><answer>42</answer><analysis>x</analysis><confidence>0.8</confidence', // truncated
      `${chain()} trailing`,
      `<think>x<answer>nested</answer></think>${chain()}`,
      '<think>x</answer><answer>42</think><analysis>x</analysis><confidence>0.8</confidence>', // crossed
      `<answer>unclosed ${chain()}`,
      '<Think>x</Think><answer>42</answer><analysis>x</analysis><confidence>0.8</confidence>', // case
      chain('42', '0.8', { separator: ' text ' }),
    ];
    for (const response of malformed) {
      assert.equal(parseRlcrChain(response), null, response);
      const parts = rlcrParts(response, '42');
      assert.deepEqual([parts.format, parts.accuracy, parts.brier], [0, 0, 0], response);
    }
  });

  test('confidences that are not a number in [0, 1] zero every part', () => {
    for (const q of ['', 'high', 'NaN', 'Inf', '-inf', '-0.01', '1.01']) {
      assert.deepEqual(Object.values(rlcrParts(chain('42', q), '42')), [0, 0, 0, 0, 0], q);
    }
    // a later, unclosed <confidence> makes the stated confidence unreadable too
    assert.deepEqual(Object.values(rlcrParts(`${chain()}<confidence>0.1`, '42')), [0, 0, 0, 0, 0]);
  });

  test('the confidence terms read the last closed <confidence> even when the chain is malformed', async () => {
    const { reward, metrics } = await score('<answer>42</answer><analysis>x</analysis><confidence>1</confidence>');
    assert.deepEqual(metrics, { format: 0, accuracy: 0, brier: 0, mean_confidence: 1e-5, confidence_one_or_zero: 1e-5 });
    close(reward, 2e-5, 'reward');
    assert.equal(lastStatedConfidence('<confidence><answer>1</answer></confidence>'), null, 'a tag inside the payload');
  });

  test('confidence_one_or_zero: strictly below 0.01 or above 0.99', () => {
    const extreme = (q: string) => rlcrParts(chain('42', q), '42').confidence_one_or_zero;
    assert.deepEqual(['0', '0.009', '0.01', '0.99', '0.991', '1', '1e-3'].map(extreme), [1, 1, 0, 0, 1, 1, 1]);
  });

  test('weights are matched by name and scale each part; all five must be given, finite', async () => {
    const weights = { confidence_one_or_zero: 5, mean_confidence: 4, brier: 3, accuracy: 2, format: 1 };
    const { reward, metrics } = await score(chain('42', '1'), { weights });
    assert.deepEqual(metrics, { format: 1, accuracy: 2, brier: 3, mean_confidence: 4, confidence_one_or_zero: 5 });
    assert.equal(reward, 15);
    const full = { format: 1, accuracy: 1, brier: 1, mean_confidence: 1, confidence_one_or_zero: 1 };
    const { confidence_one_or_zero: _, ...four } = full;
    await assert.rejects(score(chain(), { weights: four }), /'weights' must name exactly .*; missing confidence_one_or_zero$/);
    await assert.rejects(score(chain(), { weights: { ...full, extra: 1 } }), /; unknown extra$/);
    await assert.rejects(
      score(chain(), { weights: { ...full, format: '0.5' } }),
      /weights\.format must be a finite number, got "0\.5"/,
    );
    await assert.rejects(score(chain(), { weights: { ...full, brier: Number.NaN } }), /weights\.brier must be a finite number/);
    await assert.rejects(score(chain(), { weights: [1, 2] }), /'weights' must be a mapping/);
    await assert.rejects(score(chain(), { weights: 0.5 }), /argument 'weights' must be a object, got 0\.5/);
    await assert.rejects(score(chain(), { weight: full }), /unknown argument 'weight'; did you mean 'weights'\?/);
    assert.throws(() => REWARD_FUNCTIONS.checkArgs('rlcr_reward', { weights: four }), /missing confidence_one_or_zero/);
  });

  test('a task without a reference answer is an error naming the task', async () => {
    await assert.rejects(score(chain(), {}, { response: undefined }), /rlcr_reward: task m0 has no reference answer/);
  });
});
