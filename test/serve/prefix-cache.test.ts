// `trinity serve --enable-prefix-caching` (serveModel's enablePrefixCaching): a multi-turn conversation through the
// OpenAI API resends its history each turn; the engine's paged cache finds the earlier turns' blocks (GET /metrics
// counts the hits and the prefill tokens), and the replies are those of a server without the cache. With
// --enable-chunked-prefill and a small --max-num-batched-tokens the prompts run in chunks, with the same replies.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { type ServeModelOptions, serveModel } from '../../src/serve/index.js';
import { makeJob } from '../rft/run/helpers.js';

type Message = { role: 'user' | 'assistant'; content: string };

/** Four turns of one conversation (greedy); the replies and the server's metrics after them. */
async function converse(modelDir: string, options: Partial<ServeModelOptions>) {
  const served = await serveModel({ modelDir, port: 0, slots: 2, numThreads: 1, ...options });
  try {
    const messages: Message[] = [];
    const replies: string[] = [];
    for (const question of ['what is two plus two, said plainly?', 'and three plus three?', 'and four?', 'and five?']) {
      messages.push({ role: 'user', content: question });
      const res = await fetch(`${served.server.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages, max_tokens: 12, temperature: 0 }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      const reply = ((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content ?? '';
      replies.push(reply);
      messages.push({ role: 'assistant', content: reply });
    }
    const metrics = (await (await fetch(`${served.server.url}/metrics`)).json()) as Record<string, number>;
    return { replies, metrics };
  } finally {
    await served.close();
  }
}

describe('trinity serve with the prefix cache', () => {
  it('a conversation finds its earlier turns in the cache (GET /metrics) and gets the same replies', async () => {
    const modelDir = join(makeJob({ totalSteps: 1, saveInterval: 1 }).root, 'model');
    const off = await converse(modelDir, {});
    const on = await converse(modelDir, { enablePrefixCaching: true });
    assert.deepEqual(on.replies, off.replies);
    assert.equal(off.metrics['prefix_cache/hits_total'], undefined); // the slot layout has no prefix cache
    assert.ok((on.metrics['prefix_cache/hits_total'] ?? 0) > 0, JSON.stringify(on.metrics));
    assert.ok(
      (on.metrics['engine/prefill_tokens_total'] as number) < (off.metrics['engine/prefill_tokens_total'] as number),
      `prefilled ${on.metrics['engine/prefill_tokens_total']} with the cache, ${off.metrics['engine/prefill_tokens_total']} without`,
    );
    assert.equal(on.metrics['kv_cache/blocks_held'], 0);
  });

  it('--enable-chunked-prefill with a small step budget: the prompts run in chunks (GET /metrics), the replies the same', async () => {
    const modelDir = join(makeJob({ totalSteps: 1, saveInterval: 1 }).root, 'model');
    const whole = await converse(modelDir, {});
    const chunked = await converse(modelDir, { enablePrefixCaching: true, chunkedPrefill: true, maxNumBatchedTokens: 8 });
    assert.deepEqual(chunked.replies, whole.replies);
    assert.equal(whole.metrics['engine/prefill_chunks_total'], 0);
    assert.ok((chunked.metrics['engine/prefill_chunks_total'] ?? 0) > 4, JSON.stringify(chunked.metrics));
  });
});
