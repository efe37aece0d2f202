// Chat with images on a Qwen2.5-VL engine (src/engine/vision-chat.ts): OpenAI content parts through the chat template,
// each image's <|image_pad|> expanded to its token count (t*h*w / merge² of the processor's grid), the images sent
// with the request decoded once (the engine and the OpenAI service do not decode them again); the same tokens as
// generate() with the expanded ids; a workflow's chat yields an experience whose images and image tokens match; bad
// images are errors naming the message and part.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  type Completion,
  ConversationTracker,
  type ConversationTurn,
  expandImagePads,
  RolloutEngine,
} from '../../src/engine/index.js';
import { encodePng, ImageInputError, imageDecodes } from '../../src/model/index.js';
import { OpenAIService } from '../../src/openai/index.js';
import { validateExperience } from '../../src/rft/experience.js';
import { EngineModelHandle } from '../../src/rft/workflow/model-handle.js';
import type { ChatInputMessage, Tokenizer } from '../../src/tokenizer/index.js';
import * as torch from '../../src/torch/index.js';
import { modelDir } from './helpers.js';
import { IMAGE_PAD, testImage, testImageDataUrl, VISION_END, VISION_START, visionModelDir } from './vision-model.js';

const greedy = { temperature: 0, maxTokens: 6, ignoreEos: true };
let engine: RolloutEngine;
let square: string;
let wide: string;

before(async () => {
  torch.setNumThreads(1);
  engine = RolloutEngine.load(visionModelDir(), { slots: 4, maxLength: 96 });
  square = await testImageDataUrl(56, 56, 1); // grid 1 x 4 x 4: 4 tokens
  wide = await testImageDataUrl(28, 56, 2); // resized to 56 x 84, grid 1 x 4 x 6: 6 tokens
});
after(() => engine.close());

const imageRuns = (ids: readonly number[]): number[] => {
  const runs: number[] = [];
  ids.forEach((id, t) => {
    if (id !== IMAGE_PAD) return;
    if (ids[t - 1] === IMAGE_PAD) runs[runs.length - 1] = (runs.at(-1) as number) + 1;
    else runs.push(1);
  });
  return runs;
};

describe('expandImagePads', () => {
  test('a single placeholder becomes its token count; a run that has it stays; parallel arrays get zeros', () => {
    const { ids, parallel } = expandImagePads([1, 9, 2, 9, 9, 9, 3], 9, [2, 3], [[1, 1, 1, 1, 1, 1, 1]]);
    assert.deepEqual(ids, [1, 9, 9, 2, 9, 9, 9, 3]);
    assert.deepEqual(parallel, [[1, 1, 0, 1, 1, 1, 1, 1]]);
  });
  test('runs that do not match the images are errors', () => {
    assert.throws(() => expandImagePads([9, 1, 9], 9, [4]), /more image placeholders than the messages have images \(1\)/);
    assert.throws(() => expandImagePads([1, 2], 9, [4]), /wrote 0 image placeholder\(s\) for 1 image\(s\)/);
    assert.throws(() => expandImagePads([9, 9], 9, [4]), /image 0's placeholder run has 2 tokens: expected 1 \(to expand\) or 4/);
  });
});

describe('chat with image parts', () => {
  test('each image becomes its placeholder run; the tokens are those of generate() with the ids and images', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'vl-image-')), 'wide.png');
    writeFileSync(file, await encodePng(testImage(28, 56, 2)));
    const messages: ChatInputMessage[] = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look ' },
          { type: 'image_url', image_url: { url: square } },
          { type: 'text', text: ' and ' },
          { type: 'image_url', image_url: { url: file } },
        ],
      },
    ];
    const result = await engine.chat(messages, greedy);
    assert.deepEqual(imageRuns(result.promptIds), [4, 6]);
    const first = result.promptIds.indexOf(IMAGE_PAD);
    assert.equal(result.promptIds[first - 1], VISION_START);
    assert.equal(result.promptIds[first + 4], VISION_END);
    // the file comes back as a data URL of its bytes: the experience does not depend on the file
    assert.deepEqual(result.images, [square, await testImageDataUrl(28, 56, 2)]);
    const direct = await engine.generate({ ...greedy, promptIds: result.promptIds, images: [square, file] });
    assert.deepEqual(result.completionIds, direct.completions[0]?.tokenIds);
    // another image in the same place: other ids after the placeholders are the same, the reply is not
    const swapped = await engine.chat(
      [{ role: 'user', content: [{ type: 'image_url', image_url: { url: await testImageDataUrl(56, 56, 7) } }] }],
      greedy,
    );
    const original = await engine.chat([{ role: 'user', content: [{ type: 'image_url', image_url: { url: square } }] }], greedy);
    assert.deepEqual(swapped.promptIds, original.promptIds);
    assert.notDeepEqual(swapped.logprobs, original.logprobs);
  });

  test('each image is decoded once: chat() and the OpenAI service size it and the engine reuses the pixels', async () => {
    const parts = [
      { type: 'image_url' as const, image_url: { url: square } },
      { type: 'image_url' as const, image_url: { url: wide } },
      { type: 'text' as const, text: 'which is wider?' },
    ];
    let before = imageDecodes();
    const result = await engine.chat([{ role: 'user', content: parts }], greedy);
    assert.equal(imageDecodes() - before, 2, 'two images, two decodes');
    assert.deepEqual(result.images, [square, wide]);
    const service = new OpenAIService({ modelName: 'vl', backend: engine });
    before = imageDecodes();
    const reply = await service.chatCompletion({
      model: 'vl',
      messages: [{ role: 'user', content: parts }],
      temperature: 0,
      max_tokens: 6,
      ignore_eos: true,
      return_token_ids: true,
    });
    assert.equal(imageDecodes() - before, 2, 'two images, two decodes');
    assert.equal(reply.stream, false);
    assert.deepEqual((reply.body as { choices: { token_ids: number[] }[] }).choices[0]?.token_ids, result.completionIds);
  });

  test('a decoded image handed to generate() is checked, naming it', async () => {
    const promptIds = [5, VISION_START, IMAGE_PAD, IMAGE_PAD, IMAGE_PAD, IMAGE_PAD, VISION_END];
    const pixels = { data: new Uint8Array(10), height: 56, width: 56, channels: 3 };
    await assert.rejects(
      engine.generate({ ...greedy, promptIds, images: [{ pixels, dataUrl: square }] }),
      /images\[0\]: decoded pixels must be height x width x 3 bytes of RGB, got 56 x 56 x 3 with 10 bytes/,
    );
    const good = { pixels: testImage(56, 56, 1), dataUrl: square };
    const direct = await engine.generate({ ...greedy, promptIds, images: [square] });
    const reused = await engine.generate({ ...greedy, promptIds, images: [good] });
    assert.deepEqual(reused.completions[0]?.tokenIds, direct.completions[0]?.tokenIds);
  });

  test("a workflow's chat yields an experience with the images and their placeholder tokens", async () => {
    const handle = new EngineModelHandle(engine);
    const messages: ChatInputMessage[] = [
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: wide } },
          { type: 'text', text: 'how many squares?' },
        ],
      },
    ];
    const result = await handle.chat(messages, { ...greedy, n: 2 });
    const experiences = result.choices.map((choice) => handle.toExperience(choice, { reward: 1 }));
    for (const experience of experiences) {
      assert.deepEqual(experience.images, [wide]);
      assert.deepEqual(imageRuns(experience.tokens.slice(0, experience.promptLength)), [6]);
      assert.deepEqual(experience.tokens.slice(0, experience.promptLength), result.promptIds);
      assert.deepEqual(validateExperience(experience), []);
    }
  });

  test("a conversation continued with another image keeps the first turn's ids and adds the new image", async () => {
    const conversation = new ConversationTracker(engine.tokenizer as Tokenizer);
    const first: ChatInputMessage[] = [{ role: 'user', content: [{ type: 'image_url', image_url: { url: square } }] }];
    const one = await engine.chat(first, { ...greedy, conversation });
    const next: ChatInputMessage[] = [
      ...first,
      one.message,
      { role: 'user', content: [{ type: 'image_url', image_url: { url: wide } }] },
    ];
    const two = await engine.chat(next, { ...greedy, conversation });
    assert.deepEqual(two.promptIds.slice(0, one.promptIds.length + one.completionIds.length), [
      ...one.promptIds,
      ...one.completionIds,
    ]);
    assert.deepEqual(imageRuns(two.promptIds), [4, 6]);
    assert.deepEqual(two.images, [square, wide]);
    const turn = two.turn as ConversationTurn;
    assert.deepEqual(turn.prompt.images, [square, wide]);
    assert.equal(turn.prompt.rootPromptLength, one.promptIds.length, 'the first prompt, its placeholders expanded');
    assert.equal(turn.prompt.generatedMask.length, two.promptIds.length);
    assert.equal(turn.prompt.generatedMask.filter((m) => m === 1).length, one.completionIds.length);
  });

  test("a workflow's generate() with images (a file) yields experiences with them as data URLs", async () => {
    const handle = new EngineModelHandle(engine);
    const file = join(mkdtempSync(join(tmpdir(), 'vl-image-')), 'square.png');
    writeFileSync(file, await encodePng(testImage(56, 56, 1)));
    const promptIds = [5, 6, VISION_START, IMAGE_PAD, IMAGE_PAD, IMAGE_PAD, IMAGE_PAD, VISION_END, 7];
    const result = await handle.generate({ ...greedy, promptIds, images: [file] });
    const experience = handle.toExperience(result.completions[0] as Completion);
    assert.deepEqual(experience.images, [square]);
    assert.deepEqual(validateExperience(experience), []);
  });

  test('bad images are errors naming the message and part', async () => {
    const part = (url: string): ChatInputMessage[] => [
      { role: 'system', content: 'be brief' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'see' },
          { type: 'image_url', image_url: { url } },
        ],
      },
    ];
    await assert.rejects(engine.chat(part('http://example.com/a.png'), greedy), (error: unknown) => {
      assert.ok(error instanceof ImageInputError);
      assert.match(error.message, /^messages\[1\]\.content\[1\]: remote image URLs are not fetched/);
      return true;
    });
    await assert.rejects(engine.chat(part('/no/such/image.png'), greedy), /messages\[1\]\.content\[1\]: cannot read image file/);
    await assert.rejects(
      engine.chat(part('data:image/png;base64,AAAA'), greedy),
      /messages\[1\]\.content\[1\]: not a decodable image/,
    );
    const textModel = RolloutEngine.load(modelDir('qwen2-tied'), { slots: 1, maxLength: 32 });
    try {
      await assert.rejects(
        textModel.chat(part(square), greedy),
        /messages\[1\]\.content\[1\]: an image part needs a vision-language model/,
      );
      await assert.rejects(
        textModel.generate({ ...greedy, promptIds: [1, 2], images: [square] }),
        /images need a vision-language model/,
      );
    } finally {
      await textModel.close();
    }
  });
});
