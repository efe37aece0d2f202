// The served model's chat template failing is the server's error (500, code chat_template_failed), not the
// client's; its raise_exception (it declines these messages) stays a 400. A template that loops for ever stops at
// its render budget, and the server keeps answering: a /health sent while the request renders succeeds. Before, the
// render held the event loop until the heap ran out (issue 49).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { GenerateRequest, GenerateResult } from '../../src/engine/index.js';
import { OpenAIService, type OpenAIServer, startOpenAIServer } from '../../src/openai/index.js';
import { checkChatTemplate, Tokenizer } from '../../src/tokenizer/index.js';
import { writeFixtureTokenizer } from '../engine/helpers.js';

const MODEL = 'tiny';

/** The fixture tokenizer with `template` as its chat template. */
function tokenizerWithTemplate(template: string): Tokenizer {
  const dir = mkdtempSync(join(tmpdir(), 'served-tmpl-'));
  writeFixtureTokenizer(dir);
  const configFile = join(dir, 'tokenizer_config.json');
  const config = JSON.parse(readFileSync(configFile, 'utf8')) as Record<string, unknown>;
  writeFileSync(configFile, JSON.stringify({ ...config, chat_template: template }));
  return Tokenizer.load(dir);
}

// fine for one message (it passes the load-time probe), endless from two on; raise_exception on a 'tool' message
const TEMPLATE = [
  "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('tool messages are not supported') }}{% endif %}",
  '{{ m.content }}{% endfor %}',
  '{% if messages|length > 1 %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{% endif %}',
  '{% if messages[0].content == "break" %}{{ messages[0].content.no_such_method() }}{% endif %}',
].join('');

describe('chat template failures over HTTP', () => {
  let server: OpenAIServer;
  before(async () => {
    const tokenizer = tokenizerWithTemplate(TEMPLATE);
    checkChatTemplate(tokenizer, 'served-tmpl');
    const backend = {
      tokenizer,
      generate: async (request: GenerateRequest): Promise<GenerateResult> => ({
        promptIds: [...(request.promptIds ?? [])],
        completions: [{ index: 0, tokenIds: [5], logprobs: [-1], text: 'a', finishReason: 'length', stopReason: null }],
      }),
    };
    server = await startOpenAIServer({ service: new OpenAIService({ modelName: MODEL, backend, maxTokens: 4 }) });
  });
  after(async () => {
    await server?.close();
  });

  const chat = (messages: { role: string; content: string }[]) =>
    fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages, max_tokens: 1 }),
    });

  it('a looping template: the request fails with the named budget error while a concurrent /health succeeds', async () => {
    const events: string[] = [];
    const request = chat([
      { role: 'user', content: 'a' },
      { role: 'assistant', content: 'b' },
    ]).then(async (res) => {
      events.push('chat');
      return { status: res.status, body: (await res.json()) as { error: { message: string; code: string; type: string } } };
    });
    const health = fetch(`${server.url}/health`).then((res) => {
      events.push('health');
      return res.status;
    });
    const [answer, healthStatus] = await Promise.all([request, health]);
    assert.equal(healthStatus, 200);
    assert.equal(answer.status, 500);
    assert.equal(answer.body.error.code, 'chat_template_failed');
    assert.equal(answer.body.error.type, 'server_error');
    assert.match(answer.body.error.message, /chat template .*ran past its budget of/);
    assert.deepEqual(events.sort(), ['chat', 'health']);
    // and the server still answers chats afterwards
    const ok = await chat([{ role: 'user', content: 'a' }]);
    assert.equal(ok.status, 200, await ok.text());
  });

  it("the template's raise_exception is the client's 400; its own failure is the server's 500", async () => {
    const refused = await chat([{ role: 'tool', content: 'x' }]);
    assert.equal(refused.status, 400);
    assert.match(((await refused.json()) as { error: { message: string } }).error.message, /tool messages are not supported/);
    const broken = await chat([{ role: 'user', content: 'break' }]);
    const body = (await broken.json()) as { error: { message: string; code: string } };
    assert.equal(broken.status, 500, body.error.message);
    assert.equal(body.error.code, 'chat_template_failed');
    assert.match(
      body.error.message,
      /^the served model's chat template cannot render these messages: the chat template failed: /,
    );
  });
});
