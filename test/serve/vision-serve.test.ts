// `trinity serve` with a Qwen2.5-VL model folder: the official `openai` client sends a chat message with an image
// part (a data URL, or a local file path) and gets the reply the embedded engine gives the same messages; a bad image
// is a 400 naming the message and part.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import OpenAI from 'openai';
import { RolloutEngine } from '../../src/engine/index.js';
import { encodePng } from '../../src/model/index.js';
import { serveModel } from '../../src/serve/index.js';
import type { ChatInputMessage } from '../../src/tokenizer/index.js';
import { IMAGE_PAD, testImage, testImageDataUrl, visionModelDir } from '../engine/vision-model.js';

describe('trinity serve with a vision-language model', () => {
  it('answers an image_url message from the openai client as the embedded engine does; bad images are 400s', async () => {
    const modelDir = visionModelDir();
    const image = await testImageDataUrl(56, 56, 5);
    const file = join(mkdtempSync(join(tmpdir(), 'vl-serve-')), 'image.png');
    writeFileSync(file, await encodePng(testImage(56, 56, 5)));
    const messages = (url: string): ChatInputMessage[] => [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'what is in the picture?' },
          { type: 'image_url', image_url: { url } },
        ],
      },
    ];
    const engine = RolloutEngine.load(modelDir, { slots: 1, maxLength: 64 });
    const expected = await engine.chat(messages(image), { temperature: 0, maxTokens: 6, ignoreEos: true });
    await engine.close();

    const served = await serveModel({ modelDir, port: 0, slots: 2, numThreads: 1 });
    try {
      const client = new OpenAI({ baseURL: served.server.baseURL, apiKey: 'unused', maxRetries: 0 });
      for (const url of [image, file]) {
        const reply = await client.chat.completions.create({
          model: 'vl',
          messages: messages(url) as OpenAI.Chat.Completions.ChatCompletionMessageParam[],
          max_tokens: 6,
          temperature: 0,
          // vLLM's extension: the prompt and completion ids
          ...({ return_token_ids: true, ignore_eos: true } as object),
        });
        const body = reply as unknown as { prompt_token_ids: number[]; choices: { token_ids: number[] }[] };
        assert.deepEqual(body.prompt_token_ids, expected.promptIds);
        assert.equal(body.prompt_token_ids.filter((id) => id === IMAGE_PAD).length, 4);
        assert.deepEqual(body.choices[0]?.token_ids, expected.completionIds);
        assert.equal(reply.choices[0]?.message.content, expected.message.content);
      }
      const stream = await client.chat.completions.create({
        model: 'vl',
        messages: messages(image) as OpenAI.Chat.Completions.ChatCompletionMessageParam[],
        max_tokens: 6,
        temperature: 0,
        stream: true,
        ...({ ignore_eos: true } as object),
      });
      let streamed = '';
      for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ?? '';
      assert.equal(streamed, expected.message.content, 'streamed');
      for (const [url, pattern] of [
        ['https://example.com/cat.png', /messages\[0\]\.content\[1\]: remote image URLs are not fetched/],
        ['data:image/png;base64,AAAA', /messages\[0\]\.content\[1\]: not a decodable image/],
      ] as const) {
        const error = await client.chat.completions
          .create({ model: 'vl', messages: messages(url) as OpenAI.Chat.Completions.ChatCompletionMessageParam[] })
          .then(
            () => null,
            (e: unknown) => e,
          );
        assert.ok(error instanceof OpenAI.APIError, String(error));
        assert.equal(error.status, 400);
        assert.match(error.message, pattern);
        assert.equal((error as { param?: string }).param, 'messages[0].content[1]');
      }
    } finally {
      await served.close();
    }
  });
});
