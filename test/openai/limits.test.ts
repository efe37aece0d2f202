// checkRequestLimits: each limit answers with its status and names the field that broke it; the completion budget
// defaults to what the server allows and the context still holds.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkRequestLimits, OpenAIHttpError, type RequestLimits, type RequestSize } from '../../src/openai/index.js';

const limits: RequestLimits = { maxBodyBytes: 100, maxPromptTokens: 40, contextLength: 64, maxTokens: 32, maxN: 4 };
const prompt = (tokens: number, param = 'messages') => ({ tokens, param });
const asked = (value: number | null, param = 'max_tokens') => ({ value, param });

function failure(size: RequestSize): OpenAIHttpError {
  try {
    checkRequestLimits(size, limits);
  } catch (error) {
    assert.ok(error instanceof OpenAIHttpError);
    return error;
  }
  assert.fail(`no error for ${JSON.stringify(size)}`);
}

describe('checkRequestLimits', () => {
  it('answers each broken limit with its status, the field and what the limit is', () => {
    const cases: Array<[RequestSize, number, string | null, RegExp]> = [
      [{ bodyBytes: 101 }, 413, null, /101 bytes exceeds the limit of 100/],
      [{ prompt: prompt(41) }, 400, 'messages', /41 tokens; this server accepts at most 40/],
      [{ prompt: prompt(41, 'prompt.2') }, 400, 'prompt.2', /'prompt\.2'/],
      [{ prompt: prompt(10), maxTokens: asked(33) }, 400, 'max_tokens', /33 exceeds this server's limit of 32/],
      [{ prompt: prompt(10), maxTokens: asked(33, 'max_completion_tokens') }, 400, 'max_completion_tokens', /limit of 32/],
      // 40 + 25 = 65 > 64 positions
      [{ prompt: prompt(40), maxTokens: asked(25) }, 400, 'max_tokens', /maximum context length is 64 .* requested 65/],
      [{ prompt: prompt(1), n: 5 }, 400, 'n', /'n' 5 exceeds this server's limit of 4/],
      // the first broken limit in the header's order answers
      [{ bodyBytes: 101, prompt: prompt(41), n: 5 }, 413, null, /bytes/],
      [{ prompt: prompt(41), maxTokens: asked(33), n: 5 }, 400, 'messages', /prompt/],
    ];
    for (const [size, status, param, message] of cases) {
      const error = failure(size);
      assert.equal(error.status, status, JSON.stringify(size));
      assert.equal(error.param, param, JSON.stringify(size));
      assert.match(error.message, message, JSON.stringify(size));
    }
  });

  it('refuses a prompt that fills the context, even under maxPromptTokens', () => {
    const roomy = { ...limits, maxPromptTokens: 1000 };
    assert.throws(
      () => checkRequestLimits({ prompt: prompt(64, 'prompt') }, roomy),
      (error: unknown) =>
        error instanceof OpenAIHttpError &&
        error.status === 400 &&
        error.param === 'prompt' &&
        /fills the model's context of 64/.test(error.message),
    );
    assert.deepEqual(checkRequestLimits({ prompt: prompt(63) }, roomy), { maxTokens: 1 });
  });

  it('returns the budget asked for, else min(maxTokens, context - prompt)', () => {
    assert.deepEqual(checkRequestLimits({ prompt: prompt(10), maxTokens: asked(7) }, limits), { maxTokens: 7 });
    assert.deepEqual(checkRequestLimits({ prompt: prompt(10), maxTokens: asked(null) }, limits), { maxTokens: 32 });
    assert.deepEqual(checkRequestLimits({ prompt: prompt(40), maxTokens: asked(null) }, limits), { maxTokens: 24 });
    // exactly at the limits is allowed
    assert.deepEqual(checkRequestLimits({ bodyBytes: 100, prompt: prompt(32), maxTokens: asked(32), n: 4 }, limits), {
      maxTokens: 32,
    });
    // nothing known: nothing checked, no budget
    assert.deepEqual(checkRequestLimits({ bodyBytes: 10 ** 9, n: 99 }, {}), { maxTokens: null });
  });
});

describe('checkRequestLimits with capTokens (mode serve)', () => {
  const capping: RequestLimits = { ...limits, capTokens: true };
  it('lowers a max_tokens over maxTokens or over the room left in the context instead of refusing it', () => {
    assert.deepEqual(checkRequestLimits({ prompt: prompt(10), maxTokens: asked(500) }, capping), { maxTokens: 32 });
    // 40 and 60 prompt tokens leave 24 and 4 of the context of 64 (refused without capTokens: 60 + 32 > 64)
    assert.deepEqual(checkRequestLimits({ prompt: prompt(40), maxTokens: asked(32) }, { ...capping, maxPromptTokens: 64 }), {
      maxTokens: 24,
    });
    assert.deepEqual(checkRequestLimits({ prompt: prompt(60), maxTokens: asked(32) }, { ...capping, maxPromptTokens: 64 }), {
      maxTokens: 4,
    });
    assert.throws(() => checkRequestLimits({ prompt: prompt(60), maxTokens: asked(32) }, { ...limits, maxPromptTokens: 64 }), {
      status: 400,
    });
    // a smaller budget asked for is kept; none asked: maxTokens, as without capTokens
    assert.deepEqual(checkRequestLimits({ prompt: prompt(10), maxTokens: asked(3) }, capping), { maxTokens: 3 });
    assert.deepEqual(checkRequestLimits({ prompt: prompt(10), maxTokens: asked(null) }, capping), { maxTokens: 32 });
    // the other limits still refuse: the prompt, n; the work limit shrinks the lowered budget as it does a default one
    assert.throws(() => checkRequestLimits({ prompt: prompt(41), maxTokens: asked(5) }, capping), { param: 'messages' });
    assert.throws(() => checkRequestLimits({ prompt: prompt(10), maxTokens: asked(5), n: 5 }, capping), { param: 'n' });
    assert.deepEqual(
      checkRequestLimits({ prompt: prompt(10), maxTokens: asked(500), n: 4 }, { ...capping, maxRequestTokens: 50 }),
      { maxTokens: 10 },
    );
  });
});

describe('checkRequestLimits: work per request', () => {
  const work: RequestLimits = { contextLength: 64, maxTokens: 32, maxN: 8, maxCompletions: 16, maxRequestTokens: 200 };
  const many = (count: number, tokens: number) => ({ count, tokens, param: 'prompt' });

  it('caps completions (prompts × n) and tokens (prompt tokens + completions × budget), naming the field', () => {
    const cases: Array<[RequestSize, string, RegExp, RequestLimits?]> = [
      // the issue's request in small: 1000 short prompts with n 8, each within every per-prompt limit
      [
        { prompt: prompt(3, 'prompt.0'), prompts: many(1000, 3000), maxTokens: asked(16), n: 8 },
        'prompt',
        /'prompt': 1000 prompts × n 8 = 8000 completions; this server allows at most 16 per request/,
      ],
      // one prompt: only n can be lowered (maxN 8 allows it, maxCompletions 4 does not)
      [
        { prompt: prompt(3), maxTokens: asked(1), n: 8 },
        'n',
        /'n': 1 prompt × n 8 = 8 completions; .* at most 4/,
        { ...work, maxCompletions: 4 },
      ],
      // 10 + 4 × 2 × 24 = 202 > 200: max_tokens is what to lower
      [
        { prompt: prompt(3), prompts: many(4, 10), maxTokens: asked(24), n: 2 },
        'max_tokens',
        /up to 202 tokens \(10 prompt tokens \+ 4 prompts × n 2 = 8 completions × 'max_tokens' 24\); .* at most 200 per request/,
      ],
      // 195 + 8 × 1 = 203 > 200 even with one token each: the prompts are what to lower
      [{ prompt: prompt(60), prompts: many(4, 195), maxTokens: asked(1), n: 2 }, 'prompt', /up to 203 tokens/],
      // no budget asked and 199 + 8 × 1 > 200: no budget fits, the prompts are named
      [{ prompt: prompt(60), prompts: many(4, 199), maxTokens: asked(null), n: 2 }, 'prompt', /the default budget 4/],
    ];
    for (const [size, param, message, limits = work] of cases) {
      assert.throws(
        () => checkRequestLimits(size, limits),
        (error: unknown) =>
          error instanceof OpenAIHttpError && error.status === 400 && error.param === param && message.test(error.message),
        JSON.stringify(size),
      );
    }
  });

  it('allows work exactly at the limits; a default budget shrinks to its share of the token limit', () => {
    // 16 completions; 40 + 16 × 10 = 200 tokens
    assert.deepEqual(checkRequestLimits({ prompt: prompt(5), prompts: many(8, 40), maxTokens: asked(10), n: 2 }, work), {
      maxTokens: 10,
    });
    // not asked: min(32, 64 - 10) = 32, but 10 + 4 × 32 = 138 > 100, so ⌊(100 - 10) / 4⌋ = 22
    assert.deepEqual(
      checkRequestLimits({ prompt: prompt(10), maxTokens: asked(null), n: 4 }, { ...work, maxRequestTokens: 100 }),
      {
        maxTokens: 22,
      },
    );
    // the per-prompt limits answer first, in the header's order
    assert.throws(
      () => checkRequestLimits({ prompt: prompt(3), prompts: many(1000, 3000), maxTokens: asked(16), n: 9 }, work),
      (error: unknown) => error instanceof OpenAIHttpError && error.param === 'n' && /'n' 9 exceeds/.test(error.message),
    );
  });
});
