// The external engine against this project's own server (`trinity serve`'s serveModel): exact token ids and the
// server's log-probs through /v1/completions, chat rendered locally, weight reload by checkpoint folder, and a
// GRPO run whose explorer samples from the server while the trainer's checkpoints are reloaded into it.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import { OpenAIRemoteEngine } from '../../src/openai/index.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { runConfig } from '../../src/rft/run/index.js';
import { type ServedModel, serveModel } from '../../src/serve/index.js';
import { Tokenizer } from '../../src/tokenizer/index.js';
import * as torch from '../../src/torch/index.js';
import { makeJob } from '../rft/run/helpers.js';

const job = makeJob({ totalSteps: 2, saveInterval: 2 });
const modelDir = join(job.root, 'model');
let served: ServedModel;
let remote: OpenAIRemoteEngine;

before(async () => {
  torch.setNumThreads(1);
  served = await serveModel({ modelDir, port: 0, modelName: 'tiny', apiKey: 'k', reloadRoot: job.root, slots: 8, numThreads: 1 });
  remote = await OpenAIRemoteEngine.connect({
    baseURL: served.server.baseURL,
    model: 'tiny',
    apiKey: 'k',
    tokenizer: Tokenizer.load(modelDir),
  });
});
after(async () => {
  await served?.close();
});

describe('OpenAIRemoteEngine', () => {
  test('generate and chat give the same ids and log-probs as the embedded engine', async () => {
    const local = RolloutEngine.load(modelDir, { slots: 2 });
    try {
      const request = { promptIds: [3, 4, 5, 6], maxTokens: 6, temperature: 0, ignoreEos: true };
      const a = await remote.generate(request);
      const b = await local.generate(request);
      assert.deepEqual(a.completions[0]?.tokenIds, b.completions[0]?.tokenIds);
      const diff = Math.max(
        ...(a.completions[0]?.logprobs ?? []).map((v, i) => Math.abs(v - (b.completions[0]?.logprobs[i] ?? 0))),
      );
      assert.ok(diff < 1e-4, `logprob diff ${diff}`);
      const messages = [{ role: 'user' as const, content: '1+2=' }];
      const chatA = await remote.chat(messages, { maxTokens: 4, temperature: 0 });
      const chatB = await local.chat(messages, { maxTokens: 4, temperature: 0 });
      assert.deepEqual(chatA.promptIds, chatB.promptIds);
      assert.deepEqual(chatA.completionIds, chatB.completionIds);
      assert.equal(chatA.message.content, chatB.message.content);
      const sampled = await remote.generate({ promptIds: [3, 4], n: 3, maxTokens: 3, temperature: 1, seed: 1 });
      assert.equal(sampled.completions.length, 3);
    } finally {
      await local.close();
    }
  });

  test('topLogprobs: the server top_logprobs, as the embedded engine gives them', async () => {
    const local = RolloutEngine.load(modelDir, { slots: 2 });
    try {
      const request = { promptIds: [3, 4, 5, 6], maxTokens: 4, temperature: 0.8, seed: 5, ignoreEos: true, topLogprobs: 3 };
      const [a, b] = [(await remote.generate(request)).completions[0], (await local.generate(request)).completions[0]];
      assert.deepEqual(a?.tokenIds, b?.tokenIds);
      assert.equal(a?.topLogprobs?.length, 4);
      assert.deepEqual(
        a?.topLogprobs?.map((position) => position.map((t) => t.tokenId)),
        b?.topLogprobs?.map((position) => position.map((t) => t.tokenId)),
      );
      const diff = Math.max(
        ...(a?.topLogprobs ?? []).flatMap((position, i) =>
          position.map((t, j) => Math.abs(t.logprob - (b?.topLogprobs?.[i]?.[j]?.logprob ?? 0))),
        ),
      );
      assert.ok(diff < 1e-4, `top logprob diff ${diff}`);
      // without topLogprobs a completion has none
      assert.equal((await remote.generate({ ...request, topLogprobs: 0 })).completions[0]?.topLogprobs, undefined);
      // more than the server's /v1/completions allows (logprobs <= 5): its 400, named
      await assert.rejects(remote.generate({ ...request, topLogprobs: 6 }), /HTTP 400: 'logprobs'/);
    } finally {
      await local.close();
    }
  });

  test('errors name the server: unknown model, bad key, unreachable', async () => {
    await assert.rejects(
      OpenAIRemoteEngine.connect({ baseURL: served.server.baseURL, model: 'other', apiKey: 'k', tokenizer: null }),
      /does not serve model 'other'/,
    );
    const wrongKey = new OpenAIRemoteEngine({ baseURL: served.server.baseURL, model: 'tiny', apiKey: 'bad', tokenizer: null });
    await assert.rejects(wrongKey.generate({ promptIds: [1] }), /HTTP 401/);
    const nowhere = new OpenAIRemoteEngine({ baseURL: 'http://127.0.0.1:9/v1', model: 'tiny', tokenizer: null });
    await assert.rejects(nowhere.generate({ promptIds: [1] }), /127\.0\.0\.1:9\/v1\/completions failed/);
  });

  test('a GRPO run explores on the server and reloads the trainer checkpoints into it', { timeout: 240_000 }, async () => {
    const config = loadConfig(job.configFile, {
      resolveAlgorithm,
      overrides: [
        'explorer.rollout_model.engine_type=openai',
        `explorer.rollout_model.base_url=${served.server.baseURL}`,
        'explorer.rollout_model.model_name=tiny',
        'explorer.rollout_model.api_key=k',
      ],
    });
    assert.equal(config.synchronizer.sync_method, 'checkpoint');
    const result = await runConfig(config, { log: () => {} });
    assert.ok(result.finalModelDir);
    const metrics = readFileSync(join(job.jobDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.deepEqual(
      metrics.map((m: Record<string, number>) => m['explorer/model_version']),
      [0, 1],
    );
    // The server now holds the trainer's last synced weights (version 1): its greedy answer is that model's.
    const synced = join(job.jobDir, 'sync');
    const pointer = JSON.parse(readFileSync(join(synced, 'latest.json'), 'utf8')) as { dir: string };
    const reference = RolloutEngine.load(pointer.dir, { slots: 1 });
    try {
      const request = { promptIds: [3, 4, 5], maxTokens: 5, temperature: 0, ignoreEos: true };
      const [a, b] = [await remote.generate(request), await reference.generate(request)];
      assert.deepEqual(a.completions[0]?.tokenIds, b.completions[0]?.tokenIds);
      const diff = Math.max(
        ...(a.completions[0]?.logprobs ?? []).map((v, i) => Math.abs(v - (b.completions[0]?.logprobs[i] ?? 0))),
      );
      assert.ok(diff < 1e-4);
    } finally {
      await reference.close();
    }
  });
});
