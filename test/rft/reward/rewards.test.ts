// Reward functions on hand-written responses: answer extraction, number normalisation, exact comparison, format
// checks, the registry (argument checks, names) and user functions loaded by module path.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import {
  answersMatch,
  extractAnswer,
  extractBoxed,
  extractReference,
  hasThinkBlock,
  matchesFormat,
  mathAccuracy,
  normaliseAnswer,
  parseRational,
  REWARD_FUNCTIONS,
  scoreResponse,
} from '../../../src/rft/reward/index.js';
import type { Task } from '../../../src/rft/task.js';

const task = (response: string, extra: Partial<Task> = {}): Task => ({
  id: 't:0',
  taskset: 't',
  index: 0,
  raw: {},
  response,
  ...extra,
});

describe('answer extraction', () => {
  test('\\boxed{} wins, nested braces balanced, the last one taken', () => {
    assert.equal(extractAnswer('first \\boxed{1} then \\boxed{\\frac{3}{4}} done'), '\\frac{3}{4}');
    assert.equal(extractBoxed('x = \\boxed{{a}+{b}}.'), '{a}+{b}');
    assert.equal(extractBoxed('\\boxed 7 is it'), '7');
    assert.equal(extractBoxed('no box'), null);
  });
  test('<answer> tags, "answer is", "####", then the last number', () => {
    assert.equal(extractAnswer('<think>2+2</think> <answer> 4 </answer>'), '4');
    assert.equal(extractAnswer('So the answer is $1,234$.'), '1,234');
    assert.equal(extractAnswer('Final Answer: -3/4.'), '-3/4');
    assert.equal(extractAnswer('blah\n#### 72'), '72');
    assert.equal(extractAnswer('I get 3 apples, then 5 more, total 8 apples'), '8');
    assert.equal(extractAnswer('price 1,000,000.50 dollars'), '1,000,000.50');
    assert.equal(extractAnswer('no digits here'), null);
  });
  test('the reference: after "####", else \\boxed, else the text', () => {
    assert.equal(extractReference('Natalia sold 48/2 = 24 clips.\n#### 72'), '72');
    assert.equal(extractReference('\\boxed{5}'), '5');
    assert.equal(extractReference(' 12 '), '12');
  });
});

describe('normalisation and exact comparison', () => {
  test('numbers compare as exact rationals', () => {
    assert.deepEqual(parseRational('1,000'), { numerator: 1000n, denominator: 1n });
    assert.deepEqual(parseRational('-0.50'), { numerator: -1n, denominator: 2n });
    assert.deepEqual(parseRational('\\frac{6}{8}'), { numerator: 3n, denominator: 4n });
    assert.deepEqual(parseRational('\\dfrac{-2}{4}'), { numerator: -1n, denominator: 2n });
    assert.deepEqual(parseRational('$12$.'), { numerator: 12n, denominator: 1n });
    assert.equal(parseRational('x+1'), null);
    assert.equal(parseRational('1/0'), null);
    assert.ok(answersMatch('0.75', '\\frac{3}{4}'));
    assert.ok(answersMatch('1000', '1,000.0'));
    assert.ok(answersMatch('−3', '-3'));
    assert.ok(answersMatch('50\\%', '50'));
    assert.ok(!answersMatch('0.3333', '1/3'));
    assert.ok(!answersMatch('12', '13'));
  });
  test('text answers compare after normalisation', () => {
    assert.equal(normaliseAnswer('$\\text{ Yes }$.'), 'yes');
    assert.ok(answersMatch('\\left( 1, 2 \\right)', '(1,2)'));
    assert.ok(!answersMatch('\\frac{x+1}{2}', 'x+1/2'));
    assert.ok(!answersMatch('', ''));
  });
  test('mathAccuracy: 1 for the right final answer, 0 otherwise', () => {
    assert.equal(mathAccuracy('so 24 + 48 = 72. The answer is 72.', 'work\n#### 72'), 1);
    assert.equal(mathAccuracy('The answer is 71.', '#### 72'), 0);
    assert.equal(mathAccuracy('nothing', '72'), 0);
  });
});

describe('format checks', () => {
  test("Trinity-RFT's <think>/<answer> pattern, Python re.match semantics", () => {
    assert.ok(matchesFormat('<think>a\nb</think>\n<answer>4</answer>\n'));
    assert.ok(matchesFormat('preamble <think>x</think><answer>4</answer>'));
    assert.ok(!matchesFormat('<answer>4</answer>'));
    assert.ok(!matchesFormat('<think>x</think><answer>4</answer> trailing words'));
    assert.ok(matchesFormat('ABC', 'A.C'));
    assert.ok(!matchesFormat('xABC', 'A'), 'anchored at the start like re.match');
    assert.throws(() => matchesFormat('x', '('), /not a valid regular expression/);
  });
  test('hasThinkBlock: one <think> before one </think>', () => {
    assert.ok(hasThinkBlock('<think>a</think> b'));
    assert.ok(!hasThinkBlock('</think><think>'));
    assert.ok(!hasThinkBlock('<think>a</think><think>b</think>'));
    assert.ok(!hasThinkBlock('no think'));
  });
});

describe('registered reward functions', () => {
  const score = (name: string, response: string, reference: string, args: Record<string, unknown> = {}) =>
    scoreResponse(REWARD_FUNCTIONS.get(name), { response, task: task(reference), args }, name);

  test('math_reward = accuracy ± 0.1 format (MathRewardFn)', async () => {
    assert.deepEqual(await score('math_reward', '<think>2+2</think><answer>4</answer>', '4'), {
      reward: 1.1,
      metrics: { accuracy: 1, format_score: 0.1 },
    });
    assert.deepEqual(await score('math_reward', 'It is 4', '4'), { reward: 0.9, metrics: { accuracy: 1, format_score: -0.1 } });
    assert.deepEqual(await score('math_reward', '<think>x</think><answer>5</answer>', '4', { format_score: 0.5 }), {
      reward: 0.5,
      metrics: { accuracy: 0, format_score: 0.5 },
    });
  });
  test('math_boxed_reward reads only \\boxed{}, with_think penalises a missing think block', async () => {
    assert.equal((await score('math_boxed_reward', 'so \\boxed{4}', '4')).reward, 1);
    assert.equal((await score('math_boxed_reward', 'the answer is 4', '4')).reward, 0);
    const penalised = await score('math_boxed_reward', '\\boxed{4}', '4', { with_think: true, format_score_coef: 0.2 });
    assert.deepEqual(penalised, { reward: 0.8, metrics: { accuracy: 1, format_score: -0.2 } });
    assert.equal((await score('math_boxed_reward', '<think>t</think>\\boxed{4}', '4', { with_think: true })).reward, 1);
  });
  test('format_reward and accuracy_reward', async () => {
    assert.equal((await score('format_reward', 'DONE', '', { pattern: 'D.NE$', score: 1 })).reward, 1);
    assert.equal((await score('format_reward', 'nope', '', { pattern: 'D.NE$', score: 1 })).reward, -1);
    assert.equal((await score('accuracy_reward', 'answer: 1/2', '0.5')).reward, 1);
  });
  test('bad arguments, unknown names and missing references are precise errors', async () => {
    await assert.rejects(
      score('math_reward', 'x', '4', { format_scor: 1 }),
      /math_reward.*unknown argument 'format_scor'.*did you mean 'format_score'/,
    );
    await assert.rejects(score('math_reward', 'x', '4', { format_score: 'big' }), /argument 'format_score' must be a number/);
    assert.throws(() => REWARD_FUNCTIONS.get('math_rewrd'), /unknown reward function 'math_rewrd'; did you mean 'math_reward'/);
    await assert.rejects(score('math_reward', 'x', ' '), /task t:0 has no reference answer/);
  });
  test('scoreResponse rejects non-finite rewards and metrics', async () => {
    await assert.rejects(
      scoreResponse(() => Number.NaN, { response: '', task: task('1'), args: {} }, 'nan_fn'),
      /nan_fn returned NaN for task t:0: not a finite number/,
    );
    await assert.rejects(
      scoreResponse(
        () => ({ reward: 1, metrics: { x: Number.POSITIVE_INFINITY } }),
        { response: '', task: task('1'), args: {} },
        'f',
      ),
      /metric x = Infinity/,
    );
  });
  test("scoreResponse's error quotes what the function returned, not the value it was coerced to", async () => {
    const scoreWith = (output: unknown) =>
      scoreResponse(() => output as number, { response: '', task: task('1'), args: {} }, 'f');
    await assert.rejects(scoreWith({ score: 1 }), /^Error: f returned \{"score":1\} for task t:0: reward undefined is not/);
    await assert.rejects(scoreWith('0.5'), /^Error: f returned "0\.5" for task t:0: expected a finite number or \{ reward/);
    await assert.rejects(scoreWith(undefined), /^Error: f returned undefined for task t:0/);
    await assert.rejects(scoreWith(null), /^Error: f returned null for task t:0/);
    await assert.rejects(scoreWith({ reward: Number.NaN, metrics: {} }), /f returned \{"reward":NaN,"metrics":\{\}\}/);
    // a long output is quoted in part, with its length
    await assert.rejects(scoreWith({ text: 'x'.repeat(10_000) }), (error: Error) => {
      assert.match(error.message, /^f returned \{"text":"x+… \(10011 chars\) for task t:0/);
      assert.ok(error.message.length < 400, error.message);
      return true;
    });
  });
});

describe('user reward functions by module path', () => {
  const dir = mkdtempSync(join(tmpdir(), 'reward-module-'));
  writeFileSync(
    join(dir, 'my-reward.ts'),
    [
      "import type { RewardFn } from '" + new URL('../../../src/rft/workflow/types.ts', import.meta.url).pathname + "';",
      'export const lengthReward: RewardFn = async ({ response, args }) => ({ reward: response.length * Number(args.scale ?? 1), metrics: { chars: response.length } });',
      'export const notAFunction = 3;',
      'export default ({ response }: { response: string }) => (response === "yes" ? 1 : 0);',
    ].join('\n'),
  );

  test('file.ts#export and a default export load, relative to baseDir', async () => {
    const fn = await REWARD_FUNCTIONS.resolve('my-reward.ts#lengthReward', dir);
    assert.deepEqual(await scoreResponse(fn, { response: 'abcd', task: task('x'), args: { scale: 2 } }), {
      reward: 8,
      metrics: { chars: 4 },
    });
    const byDefault = await REWARD_FUNCTIONS.resolve(join(dir, 'my-reward.ts'));
    assert.equal((await scoreResponse(byDefault, { response: 'yes', task: task('x'), args: {} })).reward, 1);
  });
  test('errors name the path and the export', async () => {
    await assert.rejects(REWARD_FUNCTIONS.resolve('my-reward.ts#missing', dir), (error: Error) => {
      assert.match(error.message, /reward function 'my-reward.ts#missing'/);
      assert.match(error.message, /has no export 'missing'; its exports: .*lengthReward/);
      return true;
    });
    await assert.rejects(REWARD_FUNCTIONS.resolve('my-reward.ts#notAFunction', dir), /the export is a number, not a function/);
    await assert.rejects(REWARD_FUNCTIONS.resolve('nowhere/file.ts#f', dir), /module file .*nowhere\/file.ts does not exist/);
  });
});
