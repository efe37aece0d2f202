// Images through an OpenAI-compatible rollout server (src/openai/remote-images.ts). The server is a local fake that
// records every request and answers as vLLM does (prompt_token_ids, token_ids, "token_id:<id>" log-probs): behind it
// this project's OpenAIService over an embedded engine of the same tiny random Qwen2.5-VL, so its answers are a real
// engine's; it can be told to report another prompt, or the prompt before its image runs are expanded.
//   - a chat with image parts (a data URL and a file path) reaches the server as /v1/chat/completions with both images
//     as image_url data URLs, never as /v1/completions; the prompt ids, samples and log-probs equal the embedded
//     engine's, and the result keeps the images;
//   - simple_mm_workflow over a pool of the server: the chat with the task's image reaches it; the experiences keep
//     the image, and the trainer's log-probs over those rows (vision tower and M-RoPE over the same pixels) equal the
//     server's (rollout_corr/abs_logprob_diff ~ 0);
//   - an agent's OpenAI client (model.openai()) over a pool of the server: its image chat reaches the server the same
//     way, and the recorded experience keeps the image;
//   - engine_process: a pool of this project's own servers in child processes answers an image chat as the embedded
//     engine does;
//   - Trinity's grpo_vlm config (test/fixtures/trinity-examples/grpo_vlm.yaml) with engine_type openai and the fake's
//     base_url trains 2 steps: every task's image reached the server in a chat, the weights reached it between steps;
//   - a prompt the server read otherwise is a named error; the unexpanded form is accepted; images without their chat
//     (model.generate with images) are refused before anything is sent; a text model folder refuses image parts.
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { imagePromptsOf, RolloutEngine } from '../../src/engine/index.js';
import { encodePng, imageDataUrl, initModel, initVisionLanguageModel, Qwen2_5VLModel } from '../../src/model/index.js';
import { OpenAIRemoteEngine, OpenAIService, RemoteEnginePool, startEngineProcesses } from '../../src/openai/index.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/index.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { runConfig } from '../../src/rft/run/index.js';
import type { Experience } from '../../src/rft/experience.js';
import type { Task } from '../../src/rft/task.js';
import { TrainStep } from '../../src/rft/trainer/train-step.js';
import { TrainerVision, withRowImages } from '../../src/rft/trainer/vision-rows.js';
import { EngineModelHandle, WorkflowRunner } from '../../src/rft/workflow/index.js';
import { type ChatInputMessage, Tokenizer } from '../../src/tokenizer/index.js';
import * as torch from '../../src/torch/index.js';

type Mode = 'serve' | 'other-prompt' | 'unexpanded';

let dir = '';
let imageTokenId = 0;
let square = ''; // 56 x 56: 4 image tokens
let wideFile = ''; // 56 x 84 on disk: 6 image tokens
let engine: RolloutEngine;
let server: Server;
let baseURL = '';
let mode: Mode = 'serve';
const received: { path: string; body: Record<string, unknown> }[] = [];

async function readBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text ? (JSON.parse(text) as Record<string, unknown>) : {};
}

/** The fake vLLM: records the request, answers with the service's body (tampered with as `mode` says). */
async function handle(service: OpenAIService, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const send = (status: number, value: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(value));
  };
  const path = req.url ?? '';
  if (path === '/v1/models') return send(200, service.models());
  const body = await readBody(req);
  received.push({ path, body });
  try {
    const whole = <T>(reply: { stream: false; body: T } | { stream: true }): T => {
      if (reply.stream) throw new Error('the fake answers no streams');
      return reply.body;
    };
    if (path === '/update_weights_from_disk') {
      engine.syncWeightsFromDir(body.model_path as string); // the run's weight syncs (sync_method checkpoint)
      return send(200, { success: true });
    }
    if (path === '/v1/completions') return send(200, whole(await service.completion(body)));
    if (path !== '/v1/chat/completions') return send(404, { error: { message: 'no route' } });
    const reply = whole(await service.chatCompletion(body)) as unknown as { prompt_token_ids: number[] };
    const ids = reply.prompt_token_ids;
    if (mode === 'other-prompt') ids[5] = (ids[5] as number) + 1;
    if (mode === 'unexpanded') reply.prompt_token_ids = ids.filter((id, i) => id !== imageTokenId || ids[i - 1] !== imageTokenId);
    send(200, reply);
  } catch (error) {
    send(400, { error: { message: (error as Error).message } });
  }
}

before(async () => {
  torch.setNumThreads(1);
  dir = mkdtempSync(join(tmpdir(), 'remote-images-'));
  const model = join(dir, 'model');
  const raw = initVisionLanguageModel(model, {
    hiddenSize: 32,
    numLayers: 1,
    numHeads: 2,
    visionHiddenSize: 16,
    visionDepth: 1,
    visionHeads: 2,
    minPixels: 56 * 56,
    maxPixels: 56 * 84,
    seed: 1,
  });
  imageTokenId = raw.image_token_id as number;
  const pixels = (h: number, w: number, seed: number) => new Uint8Array(h * w * 3).map((_, i) => (i * 31 + seed * 97) % 256);
  square = await imageDataUrl(await encodePng({ data: pixels(56, 56, 1), height: 56, width: 56, channels: 3 }), 'square');
  wideFile = join(dir, 'wide.png');
  writeFileSync(wideFile, await encodePng({ data: pixels(56, 84, 2), height: 56, width: 84, channels: 3 }));
  engine = RolloutEngine.load(model, { slots: 4 });
  const service = new OpenAIService({ modelName: 'vl', backend: engine });
  server = createServer((req, res) => void handle(service, req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  baseURL = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
after(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  await engine?.close();
  rmSync(dir, { recursive: true, force: true });
});

const modelDir = () => join(dir, 'model');
const connection = () => ({
  baseURL,
  model: 'vl',
  tokenizer: Tokenizer.load(modelDir()),
  vision: imagePromptsOf(modelDir()),
});
/** The image_url parts' urls of a recorded chat request, in message order. */
const imageUrls = (body: Record<string, unknown>): string[] =>
  (body.messages as ChatInputMessage[]).flatMap((m) =>
    Array.isArray(m.content) ? m.content.flatMap((p) => (p.type === 'image_url' ? [p.image_url.url] : [])) : [],
  );
const imageTokens = (ids: readonly number[]) => ids.filter((id) => id === imageTokenId).length;

describe('images through an OpenAI-compatible server', () => {
  test("a chat with image parts reaches the server as image_url data URLs; ids and log-probs are the embedded engine's", async () => {
    mode = 'serve';
    received.length = 0;
    const remote = await OpenAIRemoteEngine.connect(connection());
    const messages: ChatInputMessage[] = [
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: square } },
          { type: 'text', text: 'Which is larger?' },
          { type: 'image_url', image_url: { url: wideFile } },
        ],
      },
    ];
    const options = { n: 2, maxTokens: 4, temperature: 1, seed: 3, ignoreEos: true };
    const served = await remote.chat(messages, options);
    const local = await engine.chat(messages, options);
    assert.deepEqual(
      received.map((r) => r.path),
      ['/v1/chat/completions'],
      'one chat request, no text completion',
    );
    const wide = await imageDataUrl(readFileSync(wideFile), 'wide');
    const body = received[0]?.body ?? {};
    assert.deepEqual(imageUrls(body), [square, wide], 'the file path went as its data URL');
    assert.equal(body.return_token_ids, true);
    assert.equal(body.logprobs, true);
    assert.equal(imageTokens(served.promptIds), 4 + 6, "the prompt holds both images' tokens");
    assert.deepEqual(served.promptIds, local.promptIds);
    assert.deepEqual(served.images, [square, wide]);
    assert.deepEqual(
      served.choices.map((c) => c.completionIds),
      local.choices.map((c) => c.completionIds),
    );
    assert.deepEqual(
      served.choices.map((c) => c.logprobs),
      local.choices.map((c) => c.logprobs),
    );
    assert.deepEqual(
      served.choices.map((c) => c.message.content),
      local.choices.map((c) => c.message.content),
    );
  });

  test("simple_mm_workflow over a pool of the server: experiences keep the image; the trainer recomputes the server's log-probs", async () => {
    mode = 'serve';
    received.length = 0;
    const pool = await RemoteEnginePool.connect({ ...connection(), baseURLs: [baseURL], healthIntervalMs: 60_000 });
    const runner = new WorkflowRunner({
      models: new EngineModelHandle(pool),
      retryBackoffMs: 1,
      maxRetryTimes: 0,
      maxTimeout: 60,
    });
    const task: Task = {
      id: 'g1',
      taskset: 'geometry3k',
      index: 0,
      raw: {},
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image_url', image_url: { url: square } },
            { type: 'text', text: 'How many?' },
          ],
        },
      ],
      response: '3',
      workflow: 'simple_mm_workflow',
      rolloutArgs: { temperature: 1, max_tokens: 5 },
    };
    let experiences: Experience[];
    try {
      const result = await runner.runStep([task], { step: 1, repeatTimes: 3 });
      assert.deepEqual(
        result.statuses.map((s) => s.error ?? 'ok'),
        ['ok'],
      );
      experiences = result.experiences;
    } finally {
      runner.close();
      await pool.close();
    }
    assert.deepEqual(
      received.map((r) => r.path),
      ['/v1/chat/completions'],
    );
    assert.deepEqual(imageUrls(received[0]?.body ?? {}), [square]);
    assert.equal(experiences.length, 3);
    for (const e of experiences) {
      assert.deepEqual(e.images, [square], 'the experience keeps the image');
      assert.equal(imageTokens(e.tokens.slice(0, e.promptLength)), 4);
    }
    // the trainer over the same rows: current log-probs through the vision tower, against the server's
    const model = Qwen2_5VLModel.load(modelDir(), { requiresGrad: true });
    const vision = new TrainerVision(model, modelDir(), 'cpu');
    try {
      const optimizer = new torch.SGD([...model.parameters().values()], { lr: 0 });
      const step = new TrainStep({
        model: model.language,
        optimizer,
        algorithm: resolveAlgorithm({ algorithm_type: 'grpo', kl_loss_fn: 'none' }),
        vision,
      });
      const metrics = await withRowImages(vision, experiences, () => step.run(experiences));
      const gap = metrics['rollout_corr/abs_logprob_diff'] as number;
      assert.ok(gap < 1e-4, `the trainer's log-probs differ from the server's by ${gap} per token`);
    } finally {
      vision.forget();
      model.dispose();
    }
  });

  test('a prompt the server read otherwise is a named error; its unexpanded form is accepted', async () => {
    const remote = await OpenAIRemoteEngine.connect(connection());
    const messages: ChatInputMessage[] = [
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: square } },
          { type: 'text', text: 'Hi' },
        ],
      },
    ];
    const options = { maxTokens: 2, temperature: 0, ignoreEos: true };
    try {
      mode = 'other-prompt';
      await assert.rejects(
        remote.chat(messages, options),
        /the server read another prompt than the one rendered here from the rollout model folder .*: token 5 is \d+ there, \d+ here/,
      );
      mode = 'unexpanded';
      const reply = await remote.chat(messages, options);
      assert.equal(imageTokens(reply.promptIds), 4, 'the prompt ids stay the expanded ones');
    } finally {
      mode = 'serve';
    }
  });

  test('images without their chat are refused before anything is sent; a text model folder refuses image parts', async () => {
    received.length = 0;
    const remote = await OpenAIRemoteEngine.connect(connection());
    const promptIds = (
      await engine.chat([{ role: 'user', content: [{ type: 'image_url', image_url: { url: square } }] }], { maxTokens: 1 })
    ).promptIds;
    await assert.rejects(
      remote.generate({ promptIds, images: [square], maxTokens: 2 }),
      /takes images only inside chat messages \(image_url parts\), and this request has images without the chat its prompt was rendered from/,
    );
    assert.equal(received.length, 0, 'nothing reached the server');
    const textDir = join(dir, 'text-model');
    initModel(textDir, { hiddenSize: 16, numLayers: 1, numHeads: 2 });
    const text = new OpenAIRemoteEngine({
      baseURL,
      model: 'vl',
      tokenizer: Tokenizer.load(textDir),
      vision: imagePromptsOf(textDir),
    });
    await assert.rejects(
      text.chat([{ role: 'user', content: [{ type: 'image_url', image_url: { url: square } }] }]),
      /messages\[0\]\.content\[0\]: an image part needs a vision-language model \(config\.json model_type qwen2_5_vl or qwen3_vl\) as the rollout model/,
    );
  });

  test("an agent's OpenAI client (model.openai()) over a pool of the server: the image reaches it; the experience keeps it", async () => {
    mode = 'serve';
    received.length = 0;
    const pool = await RemoteEnginePool.connect({ ...connection(), baseURLs: [baseURL], healthIntervalMs: 60_000 });
    const handle = new EngineModelHandle(pool);
    try {
      const client = await handle.openai();
      const reply = await client.chat.completions.create({
        model: 'any',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image_url', image_url: { url: square } },
              { type: 'text', text: 'Hi' },
            ],
          },
        ],
        max_tokens: 3,
        temperature: 0,
      });
      assert.equal(reply.choices.length, 1);
      assert.deepEqual(
        received.map((r) => r.path),
        ['/v1/chat/completions'],
      );
      assert.deepEqual(imageUrls(received[0]?.body ?? {}), [square]);
      const [experience] = handle.recordedExperiences();
      assert.deepEqual(experience?.images, [square]);
      assert.equal(imageTokens(experience?.tokens.slice(0, experience.promptLength) ?? []), 4);
    } finally {
      await handle.close();
      await pool.close();
    }
  });

  test("engine_process: the children (this project's servers) answer an image chat as the embedded engine", async () => {
    const pool = await startEngineProcesses({
      modelDir: modelDir(),
      engineNum: 1,
      numThreads: 1,
      reloadRoot: dir,
      tokenizer: Tokenizer.load(modelDir()),
      engine: { slots: 2 },
    });
    try {
      const messages: ChatInputMessage[] = [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Look:' },
            { type: 'image_url', image_url: { url: wideFile } },
          ],
        },
      ];
      const options = { maxTokens: 4, temperature: 0, ignoreEos: true };
      const [served, local] = [await pool.chat(messages, options), await engine.chat(messages, options)];
      assert.equal(imageTokens(served.promptIds), 6);
      assert.deepEqual(served.promptIds, local.promptIds);
      assert.deepEqual(served.completionIds, local.completionIds);
      assert.deepEqual(served.images, local.images);
    } finally {
      await pool.close();
    }
  });

  test("Trinity's grpo_vlm config with engine_type openai trains 2 steps on the server's rollouts of the image tasks", async () => {
    mode = 'serve';
    received.length = 0;
    const folder = join(dir, 'examples');
    cpSync(fileURLToPath(new URL('../fixtures/trinity-examples/', import.meta.url)), folder, { recursive: true });
    const file = join(folder, 'grpo_vlm.yaml');
    const header =
      readFileSync(file, 'utf8')
        .split('\n')
        .find((l) => l.startsWith('# run-set:')) ?? '';
    const saved = { model: process.env.TRINITY_MODEL_PATH, root: process.env.TRINITY_CHECKPOINT_ROOT_DIR };
    Object.assign(process.env, { TRINITY_MODEL_PATH: modelDir(), TRINITY_CHECKPOINT_ROOT_DIR: join(dir, 'checkpoints') });
    try {
      const config = loadConfig(file, {
        resolveAlgorithm,
        overrides: [
          ...header.slice('# run-set:'.length).trim().split(/\s+/),
          'explorer.rollout_model.engine_type=openai',
          `explorer.rollout_model.base_url=${baseURL}`,
          'explorer.rollout_model.model_name=vl',
        ],
      });
      await runConfig(config, { log: () => {} });
    } finally {
      for (const [name, value] of [
        ['TRINITY_MODEL_PATH', saved.model],
        ['TRINITY_CHECKPOINT_ROOT_DIR', saved.root],
      ] as const)
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
    }
    const chats = received.filter((r) => r.path === '/v1/chat/completions');
    assert.equal(chats.length, 4, '2 steps of 2 tasks, each one chat');
    assert.ok(
      chats.every((r) => imageUrls(r.body).length === 1 && imageUrls(r.body)[0]?.startsWith('data:image/')),
      "every task's image went as a data URL",
    );
    assert.equal(received.filter((r) => r.path === '/v1/completions').length, 0, 'no prompt went as text');
    assert.ok(
      received.some((r) => r.path === '/update_weights_from_disk'),
      'the trained weights reached the server',
    );
    const metrics = readFileSync(join(dir, 'checkpoints', 'Trinity-RFT', 'grpo_vlm', 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, number>);
    // the trainer (bf16 compute, as the config's dtype maps) over the server's float32 rollouts of the same pixels
    const gaps = metrics.flatMap((m) =>
      m['actor/rollout_corr/abs_logprob_diff'] === undefined ? [] : [m['actor/rollout_corr/abs_logprob_diff']],
    );
    assert.equal(gaps.length, 2, 'two train steps');
    assert.ok(
      gaps.every((gap) => gap < 1e-2),
      `the trainer's log-probs differ from the server's by ${gaps.join(', ')} per token`,
    );
  });
});
