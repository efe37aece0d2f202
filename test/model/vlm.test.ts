// Qwen2.5-VL against transformers (fixture and references written by scripts/fixtures/hf_qwen2_5_vl.py): the config's
// keys in both layouts, the vision tower's output, the multimodal RoPE positions (get_rope_index), logits of a
// text-only batch and of a padded batch with three images (float32, 1e-4), greedy generation with a KV cache, one
// training step's loss and every gradient (1e-4), and a save that loads back to the same logits.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  type GridTHW,
  loadImageProcessorConfig,
  loadQwen2_5VLConfig,
  parseQwen2_5VLConfig,
  preprocessImages,
  QWEN2_VL_IMAGE_PROCESSOR,
  Qwen2_5VLModel,
  resizeBicubic,
  ropeIndex,
  smartResize,
  windowLayout,
} from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { disposeAll, fixturesDir, get, maxAbsDiff } from './helpers/fixtures.js';

const TOLERANCE = 1e-4;
const dir = `${fixturesDir}qwen2_5-vl`;
const rawConfig = JSON.parse(readFileSync(`${dir}/config.json`, 'utf8')) as Record<string, unknown>;

let ref: Map<string, torch.Tensor>;
let grids: GridTHW[];
before(() => {
  ref = torch.loadSafetensors(`${dir}/reference.safetensors`);
  for (const t of ref.values()) torch.keep(t);
  grids = get(ref, 'image_grid_thw').toArray() as unknown as GridTHW[];
});
after(() => disposeAll(ref.values()));

describe('config', () => {
  test("reads transformers 5's text_config layout: Qwen2 decoder keys, mrope_section, vision keys, token ids", () => {
    const config = parseQwen2_5VLConfig(rawConfig, 'c.json');
    assert.deepEqual(config.mropeSection, [2, 3, 3]);
    assert.deepEqual(
      [config.text.hiddenSize, config.text.headDim, config.text.qkvBias, config.text.outputBias, config.text.rope.theta],
      [64, 16, true, false, 1e6],
    );
    assert.equal(config.text.architecture, 'Qwen2_5_VLForConditionalGeneration');
    assert.deepEqual(config.vision.fullAttentionBlocks, [1]);
    assert.deepEqual(
      [config.vision.depth, config.vision.headDim, config.vision.windowSize, config.vision.ropeTheta],
      [3, 16, 56, 10000],
    );
    assert.deepEqual([config.imageTokenId, config.visionStartTokenId, config.visionEndTokenId], [120, 118, 119]);
  });

  test("reads the Hub's transformers 4 layout: text keys at the top level, rope_scaling {type: mrope}", () => {
    const { text_config: text, ...rest } = rawConfig as { text_config: Record<string, unknown> };
    const { rope_parameters: rope, ...textKeys } = text as { rope_parameters: Record<string, unknown> };
    const old = {
      ...rest,
      ...textKeys,
      model_type: 'qwen2_5_vl',
      rope_theta: 1e6,
      rope_scaling: { type: 'mrope', mrope_section: rope.mrope_section },
    };
    const config = parseQwen2_5VLConfig(old, 'old.json');
    assert.deepEqual(config.mropeSection, [2, 3, 3]);
    assert.deepEqual([config.text.numHiddenLayers, config.text.rope.theta, config.text.rope.scaling.type], [2, 1e6, 'default']);
  });

  test('bad keys are errors naming the key path', () => {
    const withText = (patch: Record<string, unknown>) => () =>
      parseQwen2_5VLConfig({ ...rawConfig, text_config: { ...(rawConfig.text_config as object), ...patch } }, 'c.json');
    assert.throws(
      withText({ rope_parameters: { rope_type: 'default', mrope_section: [2, 3, 4] } }),
      /c\.json: key 'text_config\.rope_parameters\.mrope_section': expected three non-negative integers summing to head_dim \/ 2 = 8/,
    );
    assert.throws(withText({ hidden_size: 0 }), /c\.json: key 'text_config\.hidden_size': expected a positive integer/);
    const withVision = (patch: Record<string, unknown>) => () =>
      parseQwen2_5VLConfig({ ...rawConfig, vision_config: { ...(rawConfig.vision_config as object), ...patch } }, 'c.json');
    assert.throws(
      withVision({ fullatt_block_indexes: [3] }),
      /key 'vision_config\.fullatt_block_indexes': expected block indices in 0\.\.2/,
    );
    assert.throws(
      withVision({ out_hidden_size: 32 }),
      /key 'vision_config\.out_hidden_size': 32 differs from the language model's hidden_size 64/,
    );
    assert.throws(
      () => parseQwen2_5VLConfig({ ...rawConfig, image_token_id: 500 }),
      /key 'image_token_id': expected a token id in 0\.\.127/,
    );
  });
});

test("the window layout: transformers' window order and segment lengths (the window side in merged tokens is 2)", () => {
  // image 0: 4 x 6 patches = 2 x 3 merged tokens → windows [0 1 | 3 4], [2 | 5]: 4 and 2 tokens of 4 patches
  const layout = windowLayout([[1, 4, 6]], { spatialMergeSize: 2, windowSize: 56, patchSize: 14 });
  assert.deepEqual(layout.order, [0, 1, 3, 4, 2, 5]);
  assert.deepEqual(layout.windows, [16, 8]);
  assert.deepEqual(layout.frames, [24]);
  assert.deepEqual(layout.rows.slice(0, 8), [0, 0, 1, 1, 0, 0, 1, 1]);
  assert.deepEqual(layout.cols.slice(0, 8), [0, 1, 0, 1, 2, 3, 2, 3]);
});

test('get_rope_index: the 3-D positions and rope deltas of the padded image batch, and errors naming the row', () => {
  const config = parseQwen2_5VLConfig(rawConfig);
  const ids = get(ref, 'mm.ids').toArray() as number[][];
  const mask = get(ref, 'mm.mask').toArray() as number[][];
  const { positions, ropeDeltas } = ropeIndex(ids, mask, grids, config);
  assert.deepEqual(positions, get(ref, 'mm.positions').toArray());
  assert.deepEqual(
    ropeDeltas,
    (get(ref, 'mm.rope_deltas').toArray() as number[][]).map((r) => r[0]),
  );
  assert.throws(
    () => ropeIndex(ids, mask, grids.slice(0, 2), config),
    /row 1: image tokens at position 24, but only 2 image grid\(s\) were given/,
  );
  assert.throws(
    () => ropeIndex(ids, mask, [grids[1] as GridTHW, ...grids.slice(1)], config),
    /row 0: a run of 6 image tokens at position 3, but image 0 \(grid 1x8x8\) makes 16/,
  );
  assert.throws(
    () => ropeIndex(ids, mask, [...grids, [1, 2, 2]], config),
    /4 image grids given, but the token ids hold 3 image\(s\)/,
  );
});

describe('image processor', () => {
  test("smart_resize: multiples of 28 by Python's round (halves to even), within min_pixels and max_pixels", () => {
    assert.deepEqual(smartResize(50, 90, 28, 3136, 1003520), [56, 84]);
    assert.deepEqual(smartResize(70, 70, 28, 3136, 1003520), [56, 56], '70 / 28 = 2.5 rounds to 2');
    assert.deepEqual(smartResize(98, 98, 28, 3136, 1003520), [112, 112], '98 / 28 = 3.5 rounds to 4');
    assert.deepEqual(smartResize(20, 30, 28, 3136, 1003520), [56, 84], 'scaled up to min_pixels');
    assert.deepEqual(smartResize(1000, 2000, 28, 3136, 28 * 28 * 64), [140, 308], 'scaled down to max_pixels');
    assert.throws(() => smartResize(10, 2100, 28, 3136, 1003520), /aspect ratio must be smaller than 200/);
  });

  test("bicubic resizing gives Pillow's bytes: downscaling (antialiased), upscaling, one axis at a time", () => {
    const source = get(ref, 'resize.source');
    const image = { data: Uint8Array.from(source.reshape([-1]).toArray() as number[]), height: 37, width: 203, channels: 3 };
    for (const [height, width] of [
      [19, 61],
      [50, 300],
      [37, 50],
      [11, 203],
    ] as const) {
      const ours = resizeBicubic(image, height, width);
      const pillow = get(ref, `resize.${height}x${width}`).reshape([-1]).toArray() as number[];
      const differing = pillow.filter((v, i) => v !== ours.data[i]).length;
      assert.equal(differing, 0, `${height}x${width}: ${differing} bytes differ from Pillow's`);
    }
  });

  test("preprocessor_config.json (or processor_config.json's image_processor): its keys are read, and steps not implemented are refused naming the key", () => {
    const folder = mkdtempSync(join(tmpdir(), 'vlm-processor-'));
    try {
      const write = (config: Record<string, unknown>) =>
        writeFileSync(join(folder, 'preprocessor_config.json'), JSON.stringify(config));
      assert.equal(loadImageProcessorConfig(folder).maxPixels, 28 * 28 * 1280, 'no file: the defaults');
      assert.deepEqual(loadImageProcessorConfig(dir), QWEN2_VL_IMAGE_PROCESSOR, "the fixture's file: transformers' defaults");
      write({ size: { shortest_edge: 3136, longest_edge: 12845056 }, patch_size: 14, merge_size: 2, resample: 3 });
      assert.deepEqual(
        [loadImageProcessorConfig(folder).minPixels, loadImageProcessorConfig(folder).maxPixels],
        [3136, 12845056],
      );
      write({ min_pixels: 100, max_pixels: 200 });
      assert.deepEqual([loadImageProcessorConfig(folder).minPixels, loadImageProcessorConfig(folder).maxPixels], [100, 200]);
      write({ resample: 2 });
      assert.throws(
        () => loadImageProcessorConfig(folder),
        /preprocessor_config\.json: key 'resample': only 3 \(bicubic\) is supported, got 2/,
      );
      write({ do_normalize: false });
      assert.throws(() => loadImageProcessorConfig(folder), /key 'do_normalize': false is not supported/);
      write({ image_mean: [0.5, 0.5] });
      assert.throws(() => loadImageProcessorConfig(folder), /key 'image_mean': expected three numbers/);
      // transformers 5's processor.save_pretrained writes processor_config.json with the image processor nested
      // (processing_utils.py to_dict); transformers reads that before preprocessor_config.json
      // (image_processing_base.py get_image_processor_dict), so do we
      write({ min_pixels: 100, max_pixels: 200 });
      const processorFile = join(folder, 'processor_config.json');
      writeFileSync(
        processorFile,
        JSON.stringify({ image_processor: { min_pixels: 300, max_pixels: 400 }, processor_class: 'Qwen2_5_VLProcessor' }),
      );
      assert.deepEqual([loadImageProcessorConfig(folder).minPixels, loadImageProcessorConfig(folder).maxPixels], [300, 400]);
      writeFileSync(processorFile, JSON.stringify({ image_processor: { resample: 2 } }));
      assert.throws(
        () => loadImageProcessorConfig(folder),
        /processor_config\.json \(image_processor\): key 'resample': only 3 \(bicubic\) is supported, got 2/,
      );
      writeFileSync(processorFile, JSON.stringify({ processor_class: 'Qwen2_5_VLProcessor' })); // older: not nested
      assert.deepEqual([loadImageProcessorConfig(folder).minPixels, loadImageProcessorConfig(folder).maxPixels], [100, 200]);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });

  test("pixel values and grids equal transformers' Qwen2-VL processor on the same RGB bytes (1e-5)", () => {
    torch.scope(() => {
      const images = [0, 1, 2].map((i) => {
        const t = get(ref, `image.${i}`);
        const [height, width] = t.shape as [number, number, number];
        return { data: Uint8Array.from(t.reshape([-1]).toArray() as number[]), height, width, channels: 3 };
      });
      const { pixelValues, grids: ours } = preprocessImages(images);
      assert.deepEqual(ours, grids);
      const diff = maxAbsDiff(pixelValues, get(ref, 'pixel_values'));
      assert.ok(diff < 1e-5, `max |ours - transformers| = ${diff}`);
    });
  });
});

test('weights that do not fit the config are refused, naming the tensor', () => {
  const config = loadQwen2_5VLConfig(dir);
  const attempt = (edit: (weights: Map<string, torch.Tensor>) => void) => () => {
    const weights = torch.loadModelWeights(dir, { dtype: 'float32' });
    for (const t of weights.values()) torch.keep(t);
    edit(weights);
    new Qwen2_5VLModel(config, weights, { fileOf: () => 'model.safetensors' }).dispose();
  };
  assert.throws(
    attempt((w) => w.delete('visual.blocks.2.attn.qkv.bias')),
    /model\.safetensors: missing tensor 'visual\.blocks\.2\.attn\.qkv\.bias' \(expected shape \[96\]\)/,
  );
  assert.throws(
    attempt((w) => w.set('visual.merger.ln_q.weight', torch.keep(torch.ones([31])))),
    /tensor 'visual\.merger\.ln_q\.weight' has shape \[31\], expected \[32\]/,
  );
  assert.throws(
    attempt((w) => w.set('visual.blocks.3.norm1.weight', torch.keep(torch.ones([32])))),
    /unexpected tensors 'visual\.blocks\.3\.norm1\.weight' \(not part of this config's vision tower\)/,
  );
  assert.throws(
    attempt((w) => w.delete('model.norm.weight')),
    /missing tensor 'model\.norm\.weight'/,
  );
});

describe('float32 model', () => {
  let model: Qwen2_5VLModel;
  before(() => {
    model = Qwen2_5VLModel.load(dir);
  });
  after(() => model.dispose());

  test("the vision tower's merged output equals transformers' image features", () => {
    torch.scope(() => {
      const embeds = model.encodeImages(get(ref, 'pixel_values'), grids);
      const diff = maxAbsDiff(embeds, get(ref, 'vision.embeds'));
      assert.ok(diff < TOLERANCE, `max |ours - transformers| = ${diff}`);
    });
  });

  test('text-only logits equal transformers (M-RoPE reduces to ordinary positions)', () => {
    torch.scope(() => {
      const diff = maxAbsDiff(model.forward(get(ref, 'plain.ids')), get(ref, 'plain.logits'));
      assert.ok(diff < TOLERANCE, `max |ours - transformers| = ${diff}`);
      const dense = model.language.forward(get(ref, 'plain.ids'));
      assert.ok(maxAbsDiff(dense, get(ref, 'plain.logits')) < TOLERANCE, 'the language model alone');
    });
  });

  test('logits of a padded batch with three images equal transformers; precomputed image embeds give the same', () => {
    torch.scope(() => {
      const mask = get(ref, 'mm.mask');
      const pixelValues = get(ref, 'pixel_values');
      const logits = model.forward(get(ref, 'mm.ids'), { attentionMask: mask, images: { grids, pixelValues } });
      const diff = maxAbsDiff(logits, get(ref, 'mm.logits'), mask.unsqueeze(-1));
      assert.ok(diff < TOLERANCE, `max |ours - transformers| over real tokens = ${diff}`);
      const embeds = model.encodeImages(pixelValues, grids);
      const again = model.forward(get(ref, 'mm.ids'), { attentionMask: mask, images: { grids, embeds } });
      assert.equal(maxAbsDiff(again, logits, mask.unsqueeze(-1)), 0);
      assert.throws(
        () => model.forward(get(ref, 'mm.ids'), { attentionMask: mask }),
        /the token ids hold 26 image tokens \(id 120\), the 0 image\(s\) make 0/,
      );
      assert.throws(
        () =>
          model.forward(get(ref, 'mm.ids'), { attentionMask: mask, images: { grids, pixelValues: pixelValues.narrow(0, 0, 8) } }),
        /pixel_values has shape \[8, 1176\], expected \[104, 1176\]/,
      );
    });
  });

  test("greedy decoding with a KV cache equals transformers' generate() (decode positions: n + rope delta)", () => {
    torch.scope(() => {
      const prompt = get(ref, 'generate.ids');
      const promptLength = prompt.size(1);
      const images = { grids: grids.slice(0, 2), pixelValues: get(ref, 'pixel_values').narrow(0, 0, 24 + 64) };
      const { ropeDeltas } = model.ropeIndex(prompt, null, images.grids);
      const delta = ropeDeltas[0] as number;
      const cache = model.language.createKVCache({ slots: 1, maxLength: 64 });
      try {
        let logits = model.forward(prompt, { images, cache });
        const tokens: number[] = [];
        for (let step = 0; step < 8; step++) {
          const next = logits
            .select(1, logits.size(1) - 1)
            .argmax(-1)
            .item();
          tokens.push(next);
          const position = promptLength + step + delta;
          logits = model.forward(torch.tensor([[next]], { dtype: 'int64' }), {
            cache,
            positionIds: torch.full([3, 1, 1], position, { dtype: 'int64' }),
          });
        }
        assert.deepEqual(tokens, (get(ref, 'generate.tokens').toArray() as number[][])[0]);
        assert.throws(() => model.forward(prompt.narrow(1, 0, 1), { cache }), /needs positionIds/);
      } finally {
        cache.dispose();
      }
    });
  });

  test('save writes a folder that loads back to the same logits, with the image processor config', () => {
    const tmp = mkdtempSync(join(tmpdir(), 'vlm-'));
    try {
      model.save(tmp);
      assert.deepEqual(loadImageProcessorConfig(tmp), loadImageProcessorConfig(dir));
      assert.equal(
        readFileSync(join(tmp, 'preprocessor_config.json'), 'utf8'),
        readFileSync(join(dir, 'preprocessor_config.json'), 'utf8'),
      );
      const again = Qwen2_5VLModel.load(tmp);
      try {
        torch.scope(() => {
          const ids = get(ref, 'plain.ids');
          assert.equal(maxAbsDiff(again.forward(ids), model.forward(ids)), 0);
        });
      } finally {
        again.dispose();
      }
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});

test('bfloat16: logits of the image batch close to the float32 reference', () => {
  const model = Qwen2_5VLModel.load(dir, { dtype: 'bfloat16' });
  try {
    torch.scope(() => {
      const mask = get(ref, 'mm.mask');
      const logits = model.forward(get(ref, 'mm.ids'), {
        attentionMask: mask,
        images: { grids, pixelValues: get(ref, 'pixel_values') },
      });
      assert.equal(logits.dtype, 'bfloat16');
      const expected = get(ref, 'mm.logits');
      const scale = expected.abs().max().item();
      const diff = maxAbsDiff(logits, expected, mask.unsqueeze(-1));
      assert.ok(diff < 0.05 * scale, `bf16 differs by ${diff} (logit scale ${scale})`);
    });
  } finally {
    model.dispose();
  }
});

test('one training step over the image batch: loss and every gradient (vision tower included) equal transformers (1e-4)', () => {
  const model = Qwen2_5VLModel.load(dir, { requiresGrad: true });
  try {
    torch.scope(() => {
      const mask = get(ref, 'mm.mask');
      const logits = model.forward(get(ref, 'mm.ids'), {
        attentionMask: mask,
        images: { grids, pixelValues: get(ref, 'pixel_values') },
      });
      // transformers' causal LM loss: logits[:, :-1] predict labels[:, 1:], mean over labels != -100
      const [, seq, vocab] = logits.shape as [number, number, number];
      const loss = torch.crossEntropy(
        logits.narrow(1, 0, seq - 1).reshape([-1, vocab]),
        get(ref, 'train.labels')
          .narrow(1, 1, seq - 1)
          .reshape([-1]),
      );
      assert.ok(Math.abs(loss.item() - get(ref, 'train.loss').item()) < TOLERANCE, `loss ${loss.item()}`);
      loss.backward();
      let compared = 0;
      for (const [name, p] of model.parameters()) {
        const expected =
          ref.get(`grad.${name}`) ??
          ref.get(`grad.${name.replace(/^model\./, 'model.language_model.').replace(/^visual\./, 'model.visual.')}`);
        assert.ok(expected !== undefined, `transformers has a gradient for ${name}`);
        const grad = p.grad;
        assert.ok(grad !== null, `${name} has a gradient`);
        const diff = maxAbsDiff(grad, expected);
        assert.ok(diff < TOLERANCE, `${name}: max |grad diff| = ${diff}`);
        compared++;
      }
      assert.equal(compared, [...ref.keys()].filter((k) => k.startsWith('grad.')).length);
    });
  } finally {
    model.dispose();
  }
});
