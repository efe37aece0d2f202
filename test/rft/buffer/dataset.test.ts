// SFT datasets with multi-turn conversations: by default only the last assistant turn is trained; with
// enableConcatenatedMultiTurn (Trinity's enable_concatenated_multi_turn) every assistant turn is, laid out exactly as
// a multi-turn rollout of the same conversation.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { ConversationTracker, conversationTokens } from '../../../src/engine/index.js';
import { concatenatedConversationTokens, loadSftDataset } from '../../../src/rft/buffer/dataset.js';
import { Tokenizer, writeCharTokenizer } from '../../../src/tokenizer/index.js';

const dir = mkdtempSync(join(tmpdir(), 'sft-multi-turn-'));
writeCharTokenizer(dir);
const tokenizer = Tokenizer.load(dir);

const conversation = [
  { role: 'system', content: 'Play.' },
  { role: 'user', content: 'P_G' },
  { role: 'assistant', content: 'Right' },
  { role: 'user', content: '_PG' },
  { role: 'assistant', content: 'Right' },
];

function writeRows(rows: object[]): string {
  const file = join(mkdtempSync(join(tmpdir(), 'sft-rows-')), 'sft.jsonl');
  writeFileSync(file, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  return file;
}

describe('multi-turn SFT rows', () => {
  test('concatenated: the whole conversation, mask 1 on every assistant turn and its end token only', async () => {
    const file = writeRows([{ messages: conversation }]);
    const [row] = await loadSftDataset(file, tokenizer, { messagesKey: 'messages', enableConcatenatedMultiTurn: true });
    assert.ok(row);
    // ChatML: the rendered conversation without the final "\n" after the last <|im_end|>
    const rendered = tokenizer.applyChatTemplate(conversation as never, { addGenerationPrompt: false });
    assert.deepEqual(row.tokens, tokenizer.encode(rendered.slice(0, -1)));
    assert.equal(row.promptLength, tokenizer.encodeChat(conversation.slice(0, 2) as never, { addGenerationPrompt: true }).length);
    const response = row.tokens.slice(row.promptLength);
    const mask = row.actionMask ?? [];
    const decode = (ids: number[]) => tokenizer.decode(ids, { skipSpecialTokens: false });
    assert.equal(decode(response.filter((_, i) => mask[i] === 1)), 'Right<|im_end|>Right<|im_end|>');
    assert.equal(decode(response.filter((_, i) => mask[i] === 0)), '\n<|im_start|>user\n_PG<|im_end|>\n<|im_start|>assistant\n');
    assert.deepEqual(row.messages, conversation);
  });

  test('default: only the last assistant turn is the response (earlier turns are prompt)', async () => {
    const file = writeRows([{ messages: conversation }]);
    const [row] = await loadSftDataset(file, tokenizer, { messagesKey: 'messages' });
    assert.ok(row);
    assert.deepEqual(
      row.tokens.slice(0, row.promptLength),
      tokenizer.encodeChat(conversation.slice(0, 4) as never, { addGenerationPrompt: true }),
    );
    assert.equal(tokenizer.decode(row.tokens.slice(row.promptLength), { skipSpecialTokens: false }), 'Right<|im_end|>');
    assert.deepEqual(row.actionMask, [1, 1, 1, 1, 1, 1]);
  });

  test('the layout equals a rollout: a ConversationTracker continuing generated ids turn by turn', () => {
    const tracker = new ConversationTracker(tokenizer);
    const eos = tokenizer.eosTokenIds[0] as number;
    let turn = null;
    for (const i of [2, 4]) {
      const reply = conversation[i] as { role: 'assistant'; content: string };
      const ids = [...tokenizer.encode(reply.content), eos];
      turn = tracker.record(tracker.prompt(conversation.slice(0, i) as never), {
        completionIds: ids,
        logprobs: ids.map(() => -1),
        finishReason: 'stop',
        reply,
      });
    }
    assert.ok(turn);
    const rollout = conversationTokens(turn);
    assert.deepEqual(concatenatedConversationTokens(conversation, tokenizer), {
      tokens: rollout.tokens,
      promptLength: rollout.promptLength,
      actionMask: rollout.actionMask,
    });
  });

  test('tool turns are masked out; assistant tool calls are trained as the template renders them', () => {
    const withTools = [
      { role: 'user', content: '2+3?' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'add', arguments: { a: 2, b: 3 } } }],
      },
      { role: 'tool', content: '5', tool_call_id: 'c1' },
      { role: 'assistant', content: '5' },
    ];
    const { tokens, promptLength, actionMask } = concatenatedConversationTokens(withTools, tokenizer);
    const response = tokens.slice(promptLength);
    const trained = tokenizer.decode(
      response.filter((_, i) => actionMask[i] === 1),
      { skipSpecialTokens: false },
    );
    assert.equal(trained, '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>5<|im_end|>');
    assert.match(
      tokenizer.decode(
        response.filter((_, i) => actionMask[i] === 0),
        { skipSpecialTokens: false },
      ),
      /tool\n5/,
    );
  });

  test('bad conversations get precise errors', async () => {
    assert.throws(() => concatenatedConversationTokens([{ role: 'user', content: 'hi' }], tokenizer), /no assistant turn/);
    assert.throws(
      () => concatenatedConversationTokens([{ role: 'assistant', content: 'hi' }], tokenizer),
      /starts with an assistant turn/,
    );
    const file = writeRows([{ messages: [conversation[1], conversation[2], conversation[3]] }]);
    await assert.rejects(
      loadSftDataset(file, tokenizer, { messagesKey: 'messages', enableConcatenatedMultiTurn: true }),
      /sft\.jsonl:1: the last turn of 'messages' must be the assistant's/,
    );
  });
});
