// A request the engine refuses is a GenerationError with reason 'invalid' whose message names the field, in-process
// and across the worker boundary: there an error's class does not survive (a RangeError used to arrive as a plain
// Error "tensor worker 'generate' failed", which the HTTP server answered 500), so the reason travels as data. Token
// ids are checked against the model's vocabulary (config.json vocab_size), which both engines expose as vocabSize
// and which can exceed the tokenizer's.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  GenerationError,
  type GenerateRequest,
  RolloutEngine,
  SamplingParamsError,
  WorkerRolloutEngine,
} from '../../src/engine/index.js';
import { fixtureModelWithTokenizer } from './helpers.js';
import { BEYOND_MODEL_CHAR, PADDED_VOCAB, paddedVocabModel, TOKENIZER_VOCAB, widerTokenizerModel } from './vocab-models.js';

const isInvalid = (message: RegExp) => (e: unknown) => {
  assert.ok(e instanceof GenerationError, `expected a GenerationError, got ${String(e)}`);
  assert.equal(e.reason, 'invalid', e.message);
  assert.match(e.message, message);
  return true;
};

// qwen2-tied: vocabulary 128, engine maxLength 32 (so a 30-token prompt leaves room for 2 tokens)
const cases: [label: string, request: GenerateRequest, message: RegExp, cause: new (message: string) => Error][] = [
  ['an empty prompt', { promptIds: [] }, /the prompt is empty/, RangeError],
  ['no prompt', {}, /needs promptIds or prompt/, TypeError],
  ['promptIds and prompt', { promptIds: [5], prompt: 'a' }, /promptIds or prompt, not both/, TypeError],
  [
    'a prompt id at the vocabulary',
    { promptIds: [5, 128] },
    /prompt\[1\] = 128 is not a token id \(vocabulary size 128\)/,
    RangeError,
  ],
  ['a negative prompt id', { promptIds: [-1] }, /prompt\[0\] = -1 is not a token id/, RangeError],
  ['a fractional prompt id', { promptIds: [5, 6, 1.5] }, /prompt\[2\] = 1.5 is not a token id/, RangeError],
  ['a stop id past the vocabulary', { promptIds: [5], stopTokenIds: [2, 1000] }, /stopTokenIds\[1\] = 1000/, RangeError],
  ['a negative seed', { promptIds: [5], seed: -1 }, /seed must be a non-negative integer below 2\^64, got -1/, RangeError],
  ['a seed of 2^64', { promptIds: [5], seed: 1n << 64n }, /seed must be .* below 2\^64/, RangeError],
  ['maxTokens 0', { promptIds: [5], maxTokens: 0 }, /maxTokens must be a positive integer, got 0/, RangeError],
  ['maxTokens past the context', { promptIds: Array(30).fill(5), maxTokens: 3 }, /\+ maxTokens \(3\) exceeds .* 32/, RangeError],
  ['a prompt filling the context', { promptIds: Array(32).fill(5) }, /leaves no room for a completion/, RangeError],
  ['n 0', { promptIds: [5], n: 0 }, /n must be a positive integer, got 0/, RangeError],
  ['an empty stop string', { promptIds: [5], stop: ['a', ''] }, /stop strings must be non-empty strings/, TypeError],
  [
    'topLogprobs past the vocabulary',
    { promptIds: [5], topLogprobs: 129 },
    /topLogprobs must be an integer in \[0, 128\]/,
    RangeError,
  ],
  ['temperature -1', { promptIds: [5], temperature: -1 }, /temperature must be a finite number >= 0/, SamplingParamsError],
  ['topP 0', { promptIds: [5], topP: 0 }, /topP must be in \(0, 1\], got 0/, SamplingParamsError],
  ['minP 2', { promptIds: [5], minP: 2 }, /minP must be in \[0, 1\], got 2/, SamplingParamsError],
  ['timeoutMs 0', { promptIds: [5], timeoutMs: 0 }, /timeoutMs must be > 0/, RangeError],
];

describe('a refused request is GenerationError(invalid) naming the field', () => {
  const dir = fixtureModelWithTokenizer('qwen2-tied');
  let local: RolloutEngine;
  let worker: WorkerRolloutEngine;
  before(async () => {
    local = RolloutEngine.load(dir, { slots: 2, maxLength: 32 });
    worker = await WorkerRolloutEngine.start(dir, { slots: 2, maxLength: 32, numThreads: 1 });
  });
  after(async () => {
    await local?.close();
    await worker?.close();
  });

  for (const [label, request, message, cause] of cases) {
    test(label, async () => {
      let inProcess: GenerationError | undefined;
      await assert.rejects(local.generate(request), (e: unknown) => {
        isInvalid(message)(e);
        inProcess = e as GenerationError;
        // the check's own error stays reachable as the cause
        assert.ok(inProcess.cause instanceof cause, `cause: ${String(inProcess.cause)}`);
        return true;
      });
      // across the worker: the same reason and message, not "tensor worker 'generate' failed"
      await assert.rejects(worker.generate(request), (e: unknown) => {
        isInvalid(message)(e);
        assert.equal((e as Error).message, inProcess?.message);
        return true;
      });
    });
  }

  test('the engines still serve afterwards, with nothing left queued', async () => {
    const request = { promptIds: [5, 9], maxTokens: 3, temperature: 0 };
    assert.deepEqual(await worker.generate(request), await local.generate(request));
    assert.equal((await worker.stats()).requests, 0);
    assert.equal(local.stats.requests, 0);
  });
});

describe('vocabSize is the model config vocab_size, which can exceed the tokenizer', () => {
  const dir = paddedVocabModel();
  let local: RolloutEngine;
  let worker: WorkerRolloutEngine;
  before(async () => {
    local = RolloutEngine.load(dir, { slots: 2, maxLength: 32 });
    worker = await WorkerRolloutEngine.start(dir, { slots: 2, maxLength: 32, numThreads: 1 });
  });
  after(async () => {
    await local?.close();
    await worker?.close();
  });

  test('both engines report 160 while the tokenizer has 128 ids', () => {
    assert.equal(local.tokenizer?.vocabSize, TOKENIZER_VOCAB);
    assert.equal(worker.tokenizer?.vocabSize, TOKENIZER_VOCAB);
    assert.equal(local.vocabSize, PADDED_VOCAB);
    assert.equal(worker.vocabSize, PADDED_VOCAB);
  });

  test('an id between the two is accepted (prompt and stop ids), one at vocab_size is refused', async () => {
    const between = { promptIds: [5, 140], stopTokenIds: [159], maxTokens: 2, temperature: 0 };
    const [a, b] = [await local.generate(between), await worker.generate(between)];
    assert.deepEqual(a.promptIds, [5, 140]);
    assert.deepEqual(b, a);
    for (const engine of [local, worker]) {
      await assert.rejects(
        engine.generate({ promptIds: [5, PADDED_VOCAB] }),
        isInvalid(/prompt\[1\] = 160 is not a token id \(vocabulary size 160\)/),
      );
      await assert.rejects(
        engine.generate({ promptIds: [5], stopTokenIds: [PADDED_VOCAB] }),
        isInvalid(/stopTokenIds\[0\] = 160/),
      );
    }
  });
});

test('text that the tokenizer encodes past the model vocabulary is refused as invalid, across the worker too', async () => {
  const dir = widerTokenizerModel();
  const worker = await WorkerRolloutEngine.start(dir, { slots: 1, maxLength: 32, numThreads: 1 });
  try {
    assert.equal(worker.vocabSize, 128);
    assert.deepEqual(worker.tokenizer?.encode(`a${BEYOND_MODEL_CHAR}`).at(-1), 128);
    await assert.rejects(
      worker.generate({ prompt: `a${BEYOND_MODEL_CHAR}`, maxTokens: 1 }),
      isInvalid(/prompt\[1\] = 128 is not a token id \(vocabulary size 128\)/),
    );
    assert.equal((await worker.generate({ prompt: 'ab', maxTokens: 1, temperature: 0 })).completions.length, 1);
  } finally {
    await worker.close();
  }
});
