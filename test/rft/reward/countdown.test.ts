// countdown_reward on hand-worked cases: upstream's row forms (the answer as JSON text; TinyZero's target/nums
// fields), the answer's place (the last <answer> of the last line), the number check, Python's arithmetic, and
// precise errors for rows without a target or numbers.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  evaluateArithmetic,
  extractCountdownEquation,
  REWARD_FUNCTIONS,
  scoreResponse,
  usesExactlyNumbers,
} from '../../../src/rft/reward/index.js';
import type { Task } from '../../../src/rft/task.js';

const jsonTask: Task = {
  id: 'countdown:0',
  taskset: 'countdown',
  index: 0,
  raw: { question: 'Using 4, 6, 1 make 24', answer: '{"target": 24, "numbers": [4, 6, 1]}' },
  response: '{"target": 24, "numbers": [4, 6, 1]}',
};
const fieldsTask: Task = { id: 'cd:1', taskset: 'cd', index: 1, raw: { target: 10, nums: [2, 3, 4] } };

async function reward(response: string, task: Task = jsonTask): Promise<number> {
  const fn = await REWARD_FUNCTIONS.resolve('countdown_reward');
  return (await scoreResponse(fn, { response, task, args: {} }, 'countdown_reward')).reward;
}

describe('countdown_reward', () => {
  test('is registered under its upstream name', () => {
    assert.ok(REWARD_FUNCTIONS.names().includes('countdown_reward'));
  });

  test('1 for a correct equation, 0.1 for a wrong one, 0 without an answer', async () => {
    assert.equal(await reward('<think>4*6=24, times 1</think>\n<answer>4 * 6 * 1</answer>'), 1);
    assert.equal(await reward('<answer>(6 - 1) * 4</answer>'), 0.1); // 5 * 4 = 20
    assert.equal(await reward('the answer is 4*6*1'), 0);
    // TinyZero's rows: target and nums as fields; 2 * 3 + 4 = 10, 4 * 3 - 2 = 10, 2 + 3 + 4 = 9
    assert.equal(await reward('<answer>2 * 3 + 4</answer>', fieldsTask), 1);
    assert.equal(await reward('<answer>4*3-2</answer>', fieldsTask), 1);
    assert.equal(await reward('<answer>2+3+4</answer>', fieldsTask), 0.1);
  });

  test('the numbers must be used exactly once each', async () => {
    assert.equal(await reward('<answer>4 * 6</answer>'), 0.1); // 24, but 1 unused
    assert.equal(await reward('<answer>4 * 6 * 1 * 1</answer>'), 0.1); // 1 used twice
    assert.equal(usesExactlyNumbers('(6/1)*4', [4, 6, 1]), true);
    assert.equal(usesExactlyNumbers('24', [4, 6, 1]), false);
    assert.equal(usesExactlyNumbers('46 - 1', [4, 6, 1]), false); // 46 is one number
  });

  test('only the last line counts, and its last <answer>', () => {
    assert.equal(extractCountdownEquation('<answer>1+2</answer>\nthinking more'), null);
    assert.equal(extractCountdownEquation('x <answer>1+2</answer> then <answer> 3*4 </answer>'), '3*4');
    assert.equal(extractCountdownEquation('<answer></answer>'), '');
  });

  test("equations are evaluated as Python's eval does", () => {
    assert.equal(evaluateArithmetic('4 * 6 * 1'), 24);
    assert.equal(evaluateArithmetic('(6 - 1) * 4'), 20);
    assert.equal(evaluateArithmetic('7 / 2'), 3.5); // true division
    assert.equal(evaluateArithmetic('7 // 2'), 3); // floor division
    assert.equal(evaluateArithmetic('-7 // 2'), -4); // floors toward −∞
    assert.equal(evaluateArithmetic('2 ** 3 ** 2'), 512); // right-associative: 2^9
    assert.equal(evaluateArithmetic('-2 ** 2'), -4); // -(2^2)
    assert.equal(evaluateArithmetic('2 ** -1'), 0.5);
    assert.equal(evaluateArithmetic('1 - 2 - 3'), -4); // left-associative
    assert.equal(evaluateArithmetic('8 / 4 / 2'), 1);
    assert.equal(evaluateArithmetic('.5 + 1.'), 1.5);
    assert.equal(evaluateArithmetic('00 + 3'), 3); // Python accepts all-zero literals
    for (const bad of ['1 / 0', '5 // 0', '0 ** -1', '01 + 2', '2 3', '(2)(3)', '(1 + 2', '1 + ', '2 % 3', 'x + 1', ''])
      assert.equal(evaluateArithmetic(bad), null, bad);
  });

  test('a division by zero or a syntax error with the right numbers scores the format score', async () => {
    assert.equal(
      await reward('<answer>4 * 6 / (1 - 1)</answer>', { ...jsonTask, response: '{"target": 0, "numbers": [4, 6, 1, 1]}' }),
      0.1,
    );
    assert.equal(await reward('<answer>4 6 1</answer>'), 0.1);
    // within 1e-5 of the target: 24.000001 counts
    assert.equal(
      await reward('<answer>4 * 6 * 1</answer>', { ...jsonTask, response: '{"target": 24.000001, "numbers": [1, 4, 6]}' }),
      1,
    );
  });

  test('rows without a target or numbers are errors naming the task and the key', async () => {
    await assert.rejects(
      reward('<answer>1</answer>', { ...jsonTask, response: 'twenty-four' }),
      /countdown_reward: task countdown:0: its answer \(response_key\) must be JSON text/,
    );
    await assert.rejects(
      reward('<answer>1</answer>', { ...jsonTask, response: '{"numbers": [1]}' }),
      /task countdown:0: its answer \(response_key\) has no numeric 'target'/,
    );
    await assert.rejects(
      reward('<answer>1</answer>', { ...fieldsTask, raw: { target: 3 } }),
      /task cd:1 has no 'numbers' \(or 'nums'\)/,
    );
    await assert.rejects(
      reward('<answer>1</answer>', { ...fieldsTask, raw: { nums: [1, 2] } }),
      /task cd:1 has no numeric 'target'/,
    );
  });
});
