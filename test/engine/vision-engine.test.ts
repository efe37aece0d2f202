// The rollout engine with a Qwen2.5-VL model (src/engine/vision-requests.ts): greedy tokens equal the model's own
// greedy loop (a full forward over prompt + tokens so far each step, no cache) for two requests with different images
// and a text-only request in one batch, on the slot cache, on a paged cache with prefix caching and preemption and
// with chunked prefill (chunks that end inside an image's run), and the same for a Qwen3-VL model (DeepStack features
// added in the prefill);
// the same prompt with another image is never served from the first image's cached blocks; bad image requests are
// refused as 'invalid', naming what is wrong.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { GenerationError, RolloutEngine, type RolloutEngineOptions } from '../../src/engine/index.js';
import {
  decodeImage,
  type ImageProcessorConfig,
  imageTokenCount,
  loadVisionImageProcessor,
  loadVisionLanguageModel,
  preprocessImages,
  Qwen2_5VLModel,
  QWEN2_VL_IMAGE_PROCESSOR,
  type VisionLanguageModel,
} from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { IMAGE_PAD, QWEN3_VL_FIXTURE, testImageDataUrl, VISION_END, VISION_START, VL_FIXTURE } from './vision-model.js';

const MAX_TOKENS = 8;
let reference: Qwen2_5VLModel;
let images: string[];
let tokenCounts: number[];

before(async () => {
  torch.setNumThreads(1);
  reference = Qwen2_5VLModel.load(VL_FIXTURE);
  // 56 x 56: grid 1 x 4 x 4, 4 tokens; 28 x 56 is scaled up to 56 x 84: grid 1 x 4 x 6, 6 tokens (the Qwen3-VL
  // fixture's processor, 16-pixel patches over 4096..65536 pixels, makes them 64 x 64 and 64 x 96: the same counts)
  images = [await testImageDataUrl(56, 56, 1), await testImageDataUrl(28, 56, 2)];
  tokenCounts = [];
  for (const url of images) {
    const { grids, pixelValues } = preprocessImages([await decodeImage(url, 'test')]);
    pixelValues.dispose();
    tokenCounts.push(imageTokenCount(grids[0] as [number, number, number], 2));
  }
});
after(() => reference.dispose());

/** Text ids, then an image's placeholder run (tokens image tokens) framed by the vision markers, then text. */
const imagePrompt = (tokens: number, text = [9, 10]): number[] => [
  5,
  6,
  7,
  VISION_START,
  ...Array(tokens).fill(IMAGE_PAD),
  VISION_END,
  ...text,
];

/** The model's greedy tokens and each one's log-prob: a full forward over prompt + tokens each step. */
async function referenceGreedy(
  promptIds: number[],
  image: string | null,
  model: VisionLanguageModel = reference,
  processor: ImageProcessorConfig = QWEN2_VL_IMAGE_PROCESSOR,
): Promise<{ tokens: number[]; logprobs: number[] }> {
  const decoded = image === null ? null : preprocessImages([await decodeImage(image, 'test')], processor);
  const tokens: number[] = [];
  const logprobs: number[] = [];
  try {
    for (let step = 0; step < MAX_TOKENS; step++) {
      const [token, logprob] = torch.noGrad(() =>
        torch.scope(() => {
          const ids = torch.tensor([[...promptIds, ...tokens]], { dtype: 'int64' });
          const logits = model.forward(ids, decoded ? { images: decoded } : {});
          const last = logits.select(1, -1).select(0, 0).logSoftmax(-1);
          const id = last.argmax().item();
          return [id, last.select(0, id).item()];
        }),
      );
      tokens.push(token as number);
      logprobs.push(logprob as number);
    }
  } finally {
    decoded?.pixelValues.dispose();
  }
  return { tokens, logprobs };
}

function assertClose(actual: readonly number[], expected: readonly number[]): void {
  assert.equal(actual.length, expected.length);
  for (const [t, value] of actual.entries()) assert.ok(Math.abs(value - (expected[t] as number)) < 1e-4, `log-prob ${t}`);
}

const greedy = { temperature: 0, maxTokens: MAX_TOKENS, ignoreEos: true };

describe('vision-language models in the rollout engine', () => {
  const layouts: [string, RolloutEngineOptions][] = [
    ['slot cache', { slots: 4, maxLength: 48 }],
    // 5 sequences of 11-17 prompt + 8 tokens in 4-position blocks, 14 blocks: some are preempted and recomputed
    [
      'paged cache, prefix caching, preemption',
      { slots: 5, maxLength: 48, kvBlockSize: 4, kvBlocks: 15, enablePrefixCaching: true },
    ],
    // prompts prefilled in chunks of a few tokens between decode steps: chunks end inside the image runs
    [
      'chunked prefill, paged cache, prefix caching',
      { slots: 5, maxLength: 48, kvBlockSize: 4, enablePrefixCaching: true, chunkedPrefill: true, maxPrefillTokens: 8 },
    ],
  ];
  for (const [family, fixture] of [
    ['Qwen2.5-VL', VL_FIXTURE],
    ['Qwen3-VL', QWEN3_VL_FIXTURE],
  ] as const)
    for (const [name, options] of layouts) {
      test(`${family}, ${name}: greedy tokens equal the model's own greedy loop, two images and a text request in one batch`, async () => {
        const engine = RolloutEngine.load(fixture, options);
        const model = family === 'Qwen2.5-VL' ? reference : loadVisionLanguageModel(fixture);
        const processor = loadVisionImageProcessor(fixture);
        const vlModel = engine.vision?.model as VisionLanguageModel;
        const features = vlModel.imageFeatures.bind(vlModel);
        let encoded = 0;
        vlModel.imageFeatures = (pixelValues, grids) => {
          encoded += grids.length;
          return features(pixelValues, grids);
        };
        try {
          const requests = [
            { promptIds: imagePrompt(tokenCounts[0] as number), image: images[0] as string, n: 2 },
            { promptIds: imagePrompt(tokenCounts[1] as number, [9, 10, 11, 12, 13, 14]), image: images[1] as string, n: 1 },
            { promptIds: [5, 6, 7, 8, 9], image: null, n: 2 },
          ];
          // the images go decoded (as chat() sends them): every request is then queued before the engine's first
          // step, so which sequences run together (and that the small paged cache preempts) does not depend on when
          // a decode on libuv's thread pool finishes
          const decoded = async (url: string) => ({ dataUrl: url, pixels: await decodeImage(url, 'test') });
          const sent = await Promise.all(requests.map((r) => (r.image ? decoded(r.image) : null)));
          const results = await Promise.all(
            requests.map((r, i) => {
              const image = sent[i];
              return engine.generate({ ...greedy, promptIds: r.promptIds, n: r.n, ...(image ? { images: [image] } : {}) });
            }),
          );
          for (const [i, r] of requests.entries()) {
            const expected = await referenceGreedy(r.promptIds, r.image, model, processor);
            const result = results[i];
            assert.equal(result?.completions.length, r.n);
            for (const completion of result?.completions ?? []) {
              assert.deepEqual(completion.tokenIds, expected.tokens, `request ${i} sample ${completion.index}`);
              assertClose(completion.logprobs, expected.logprobs);
            }
          }
          assert.equal(encoded, 2, 'the vision tower ran once per image per request (n samples, recomputes reuse it)');
          // decode steps with M-RoPE positions as inputs are captured and replayed
          if (options.kvBlocks === undefined) assert.ok((engine.decodeStepStats?.replays ?? 0) > 0);
          if (options.kvBlocks !== undefined) assert.ok(engine.stats.preemptions > 0, 'the small paged cache preempted');
          if (options.chunkedPrefill) assert.ok((engine.stats.prefillChunks ?? 0) > 2, 'prompts ran in chunks');
        } finally {
          await engine.close();
          if (model !== reference) model.dispose();
        }
      });
    }

  test('the prefix cache never serves one image for another: same ids, other image, other tokens', async () => {
    const engine = RolloutEngine.load(VL_FIXTURE, { slots: 2, maxLength: 48, kvBlockSize: 2, enablePrefixCaching: true });
    try {
      const promptIds = imagePrompt(tokenCounts[0] as number, [9, 10, 11, 12]);
      const first = await referenceGreedy(promptIds, images[0] as string);
      // the second image resized to the first one's grid: the same token ids, other pixels
      const other = await testImageDataUrl(56, 56, 3);
      const second = await referenceGreedy(promptIds, other);
      assert.notDeepEqual(first.logprobs, second.logprobs, 'the images give different distributions');
      const run = (image: string) => engine.generate({ ...greedy, promptIds, images: [image] });
      const a = await run(images[0] as string);
      const hitsBefore = engine.stats.kvCache?.hits ?? 0;
      const b = await run(other);
      const hitsOther = engine.stats.kvCache?.hits ?? 0;
      const c = await run(images[0] as string);
      const hitsSame = engine.stats.kvCache?.hits ?? 0;
      assert.deepEqual(a.completions[0]?.tokenIds, first.tokens);
      assert.deepEqual(b.completions[0]?.tokenIds, second.tokens);
      assert.deepEqual(c.completions[0]?.tokenIds, first.tokens);
      assertClose(b.completions[0]?.logprobs ?? [], second.logprobs);
      assert.ok(hitsSame > hitsOther, 'the same image again reuses its blocks');
      assert.equal(
        hitsOther - hitsBefore,
        2,
        'the other image reuses only the two blocks before it ([5, 6], [7, <|vision_start|>])',
      );
      assert.equal(hitsSame - hitsOther, 6, 'the same image again: every full block');
    } finally {
      await engine.close();
    }
  });

  test("weight syncs: a VL model's parameters (checkpoint or transformers 5 names) and a VL folder", async () => {
    // the fixture with every weight scaled by 1.5: another model, saved as a folder
    const scaled = Qwen2_5VLModel.load(VL_FIXTURE);
    torch.noGrad(() => {
      for (const t of scaled.parameters().values()) torch.scope(() => t.copy_(t.mul(1.5)));
    });
    const dir = mkdtempSync(join(tmpdir(), 'vl-sync-'));
    scaled.save(dir);
    const promptIds = imagePrompt(tokenCounts[0] as number);
    const expected = await referenceGreedy(promptIds, images[0] as string, scaled);
    const before = await referenceGreedy(promptIds, images[0] as string);
    assert.notDeepEqual(expected.logprobs, before.logprobs);
    const inMemoryNames = new Map(
      [...scaled.parameters()].map(([name, t]) => [
        name.startsWith('visual.') ? `model.${name}` : name.replace(/^model\./, 'model.language_model.'),
        t,
      ]),
    );
    const engine = RolloutEngine.load(VL_FIXTURE, { slots: 2, maxLength: 48 });
    try {
      const run = () => engine.generate({ ...greedy, promptIds, images: [images[0] as string] });
      for (const sync of [() => engine.syncWeights(scaled.parameters()), () => engine.syncWeights(inMemoryNames)]) {
        engine.syncWeightsFromDir(VL_FIXTURE); // back to the fixture's weights
        assertClose((await run()).completions[0]?.logprobs ?? [], before.logprobs);
        assert.equal(sync(), scaled.parameters().size);
        assertClose((await run()).completions[0]?.logprobs ?? [], expected.logprobs);
      }
      engine.syncWeightsFromDir(VL_FIXTURE);
      engine.syncWeightsFromDir(dir);
      assert.deepEqual((await run()).completions[0]?.tokenIds, expected.tokens);
      // a wrong vision tensor changes nothing
      const wrong = new Map(scaled.parameters());
      wrong.set('visual.merger.ln_q.weight', torch.zeros([3]));
      assert.throws(
        () => engine.syncWeights(wrong),
        /tensor 'visual\.merger\.ln_q\.weight' has shape \[3\], expected \[32\] \(nothing was copied\)/,
      );
      assertClose((await run()).completions[0]?.logprobs ?? [], expected.logprobs);
    } finally {
      await engine.close();
      scaled.dispose();
    }
  });

  test("Qwen3-VL weight syncs: its parameters and a saved folder (transformers' model.language_model.* / model.visual.*)", async () => {
    const scaled = loadVisionLanguageModel(QWEN3_VL_FIXTURE);
    const processor = loadVisionImageProcessor(QWEN3_VL_FIXTURE);
    torch.noGrad(() => {
      for (const t of scaled.parameters().values()) torch.scope(() => t.copy_(t.mul(1.5)));
    });
    const dir = mkdtempSync(join(tmpdir(), 'vl3-sync-'));
    scaled.save(dir);
    const promptIds = imagePrompt(tokenCounts[0] as number);
    const expected = await referenceGreedy(promptIds, images[0] as string, scaled, processor);
    const engine = RolloutEngine.load(QWEN3_VL_FIXTURE, { slots: 2, maxLength: 48 });
    try {
      const run = () => engine.generate({ ...greedy, promptIds, images: [images[0] as string] });
      const before = (await run()).completions[0]?.logprobs ?? [];
      assert.notDeepEqual(before, expected.logprobs);
      assert.equal(engine.syncWeights(scaled.parameters()), scaled.parameters().size);
      assertClose((await run()).completions[0]?.logprobs ?? [], expected.logprobs);
      engine.syncWeightsFromDir(QWEN3_VL_FIXTURE);
      assertClose((await run()).completions[0]?.logprobs ?? [], before);
      engine.syncWeightsFromDir(dir);
      assertClose((await run()).completions[0]?.logprobs ?? [], expected.logprobs);
    } finally {
      await engine.close();
      scaled.dispose();
    }
  });

  test('bad requests are refused as invalid, naming what is wrong', async () => {
    const engine = RolloutEngine.load(VL_FIXTURE, { slots: 2, maxLength: 48 });
    try {
      const refused = async (request: Parameters<RolloutEngine['generate']>[0], pattern: RegExp) => {
        const error = await engine.generate({ ...greedy, ...request }).then(
          () => null,
          (e: unknown) => e,
        );
        assert.ok(error instanceof GenerationError, String(error));
        assert.equal(error.reason, 'invalid');
        assert.match(error.message, pattern);
      };
      const promptIds = imagePrompt(tokenCounts[0] as number);
      await refused({ promptIds }, /the prompt holds image tokens \(id 120, first at position 4\) but the request has no images/);
      await refused(
        { promptIds, images: [images[1] as string] },
        /a run of 4 image tokens at position 4, but image 0 \(grid 1x4x6\) makes 6/,
      );
      await refused({ promptIds, images: ['data:image/png;base64,AAAA'] }, /images\[0\]: not a decodable image/);
      await refused({ promptIds, images: ['https://example.com/cat.png'] }, /images\[0\]: remote image URLs are not fetched/);
      await assert.rejects(
        engine.score(promptIds),
        /score: the token ids hold image tokens \(id 120\); score\(\) takes no images/,
      );
      assert.equal((await engine.score([5, 6, 7])).logprobs.length, 3, 'text scores as on a text model');
      assert.throws(
        () => RolloutEngine.load(VL_FIXTURE, { batchInvariant: true }),
        /batchInvariant is not available for Qwen2_5_VLForConditionalGeneration \(M-RoPE\)/,
      );
      // the engine goes on serving
      const ok = await engine.generate({ ...greedy, promptIds, images: [images[0] as string] });
      assert.equal(ok.completions[0]?.tokenIds.length, MAX_TOKENS);
    } finally {
      await engine.close();
    }
  });
});
