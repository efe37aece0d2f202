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
