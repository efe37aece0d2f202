// modelBoundsProblem: an experience the trained model cannot take is named precisely (the explorer rejects it).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Experience, modelBoundsProblem } from '../../src/rft/experience.js';

const bounds = { vocabSize: 100, maxLength: 8 };
const experience = (fields: Partial<Experience>): Experience => ({
  eid: 'e',
  tokens: [1, 2, 3],
  promptLength: 1,
  info: {},
  ...fields,
});

test('an experience within the vocabulary and the context length passes', () => {
  assert.equal(modelBoundsProblem(experience({}), bounds), null);
  assert.equal(modelBoundsProblem(experience({ tokens: [0, 99, 5, 6, 7, 8, 9, 10] }), bounds), null);
});

test('token ids past the vocabulary, sequences past the context, and malformed shapes are named', () => {
  const cases: [Partial<Experience>, RegExp][] = [
    [{ tokens: [1, 100] }, /^tokens: token id 100 is outside the vocabulary \[0, 100\)$/],
    [{ tokens: [1, 1_000_000] }, /token id 1000000/],
    [{ tokens: Array.from({ length: 9 }, () => 1) }, /^tokens: 9 tokens exceed the model's max length 8$/],
    [{ chosen: [3, 250] }, /^chosen: token id 250/],
    [{ rejected: [-1] }, /^rejected: token id -1/],
    [{ tokens: [1, 2.5] }, /tokens must be an array of non-negative integers/],
    [{ promptLength: 7 }, /promptLength 7/],
    [{ logprobs: [0] }, /logprobs must have one entry per response token \(2\)/],
  ];
  for (const [fields, message] of cases) assert.match(modelBoundsProblem(experience(fields), bounds) ?? '', message);
});
