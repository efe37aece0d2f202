// Mode serve: an external agent (the openai client) calls the endpoint, rewards arrive by response id at /feedback,
// experiences (exact ids, multi-turn action mask) land in the shared SQLite buffer, a train process consumes them and
// publishes weights, and the serving engine picks the new version up.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, test } from 'node:test';
import OpenAI from 'openai';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { SqliteBuffer } from '../../src/rft/buffer/index.js';
import { loadConfig, resolveStages } from '../../src/rft/run/config/index.js';
import { runConfig, stageSettings } from '../../src/rft/run/index.js';
import { type ServeStage, startServeStage } from '../../src/serve/index.js';
import { makeJob } from '../rft/run/helpers.js';

const job = makeJob({ totalSteps: 1, saveInterval: 1 });
const shared = [
  'buffer.trainer_input.experience_buffer.storage_type=sql',
  'buffer.train_batch_size=2',
  'synchronizer.sync_method=checkpoint',
  'explorer.proxy_port=0',
  'explorer.api_key=serve-key',
  'model.max_prompt_tokens=96',
  'model.max_response_tokens=8',
];
let stage: ServeStage | null = null;
after(async () => {
  await stage?.stop();
});

async function post(path: string, body: unknown) {
  const res = await fetch(`${stage?.server.url}${path}`, {
    method: 'POST',
    headers: { authorization: 'Bearer serve-key', 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

test('serve mode records agents, takes rewards by response id, and follows the train process', { timeout: 240_000 }, async () => {
  const config = loadConfig(job.configFile, { resolveAlgorithm, overrides: ['mode=serve', ...shared] });
  const [serveConfig] = resolveStages(config);
  assert.ok(serveConfig);
  const settings = stageSettings(serveConfig, join(job.root, 'model'), job.root);
  // the stage's log lines, as events: the test waits on "now serving weights version 1" below
  let onLog = (_line: string) => {};
  stage = await startServeStage(settings, { log: (line) => onLog(line) });
  const client = new OpenAI({ baseURL: stage.server.baseURL, apiKey: 'serve-key', maxRetries: 0 });

  // Two samples of one question: a GRPO group (same task id by default), rewards 1 and 0.
  const reply = await client.chat.completions.create({
    model: 'e2e',
    messages: [{ role: 'user', content: '2+3=' }],
    n: 2,
    max_tokens: 4,
    temperature: 0.8,
    seed: 5,
  });
  assert.equal((await post('/feedback', { response_id: reply.id, reward: 1 })).status, 200);
  assert.equal((await post('/feedback', { response_id: reply.id, choice_index: 1, reward: 0 })).status, 200);
  // Bad feedback: precise 4xx, nothing written.
  assert.equal((await post('/feedback', { response_id: reply.id, reward: 1 })).status, 409);
  assert.equal((await post('/feedback', { response_id: 'chatcmpl-nope', reward: 1 })).status, 404);
  assert.equal((await post('/feedback', { response_id: reply.id, reward: 'high' })).status, 400);
  assert.equal((await post('/feedback', { response_id: reply.id, choice_index: 7, reward: 1 })).status, 400);

  // A two-turn conversation: its feedback covers both turns, the second user turn masked out.
  const first = await client.chat.completions.create({
    model: 'e2e',
    messages: [{ role: 'user', content: '1+1=' }],
    max_tokens: 3,
  });
  const second = await client.chat.completions.create({
    model: 'e2e',
    messages: [
      { role: 'user', content: '1+1=' },
      first.choices[0]?.message as OpenAI.ChatCompletionMessageParam,
      { role: 'user', content: '2+2=' },
    ],
    max_tokens: 3,
  });
  assert.equal((await post('/feedback', { response_id: second.id, reward: 0.5, task_id: 'conv' })).status, 200);

  const buffer = new SqliteBuffer({ path: settings.buffer.path as string, table: 'experience_buffer' });
  const stored = buffer.peek({ limit: 10 }).map((s) => s.experience);
  await buffer.close();
  assert.equal(stored.length, 3);
  assert.deepEqual(
    stored.map((e) => [e.reward, e.info.taskId, e.info.runId]),
    [
      [1, reply.id, 0],
      [0, reply.id, 1],
      [0.5, 'conv', 0],
    ],
  );
  // the τ each reply's logprobs were taken at reaches its experience (the trainer recomputes them at it); unset: 1
  assert.deepEqual(
    stored.map((e) => e.temperature ?? 1),
    [0.8, 0.8, 1],
  );
  const conv = stored[2] as (typeof stored)[number];
  const mask = conv.actionMask ?? [];
  assert.ok(mask.includes(0) && mask[0] === 1 && mask.at(-1) === 1, `mask ${mask.join('')}`);
  assert.equal(
    mask.filter((m) => m === 1).length,
    (first.usage?.completion_tokens ?? 0) + (second.usage?.completion_tokens ?? 0),
  );

  // The train process (same buffer, same job folder) trains one step on the rewarded group and publishes weights.
  // The stage reports each weight load (or failed load) it does; listen before the train process can publish.
  const loaded = new Promise<void>((resolve, reject) => {
    onLog = (line) => {
      if (/now serving weights version 1 /.test(line)) resolve();
      else if (/weight sync from .* failed/.test(line)) reject(new Error(line));
    };
  });
  const trainConfig = loadConfig(job.configFile, { resolveAlgorithm, overrides: ['mode=train', ...shared] });
  await runConfig(trainConfig, { log: () => {} });
  await loaded;
  assert.equal(stage.modelVersion, 1, 'the server loaded the trained weights');
  const status = await fetch(`${stage.server.url}/v1/trinity/status`, { headers: { authorization: 'Bearer serve-key' } });
  assert.deepEqual(await status.json(), { model_version: 1, recorded_turns: 4, experiences_written: 3 });
});
