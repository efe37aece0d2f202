// Qwen3-VL against transformers (fixture and references written by scripts/fixtures/hf_qwen3_vl.py): the config's
// keys, the interleaved M-RoPE layout, the learned-position taps, pixel values of the Qwen3-VL processor settings, the
// vision tower's output and DeepStack features, the M-RoPE positions, logits of a text-only batch and of a padded
// batch with three images (float32, 1e-4; bfloat16 within 5% of the logit scale), greedy generation with a KV cache,
// one training step's loss and every gradient (1e-4), and a save that writes transformers' names and loads back. The
// trainer's layer-by-layer pass (DeepStack carried through checkpointing) is test/model/vlm-training.test.ts.
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  type GridTHW,
  loadVisionImageProcessor,
  loadVisionLanguageModel,
  mropeAxes,
  parseQwen3VLConfig,
  positionTaps,
  preprocessImages,
  QWEN3_VL_IMAGE_PROCESSOR,
  Qwen3VLModel,
  ropeIndex,
} from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { disposeAll, fixturesDir, get, maxAbsDiff } from './helpers/fixtures.js';

const TOLERANCE = 1e-4;
const dir = `${fixturesDir}qwen3-vl`;
const rawConfig = JSON.parse(readFileSync(`${dir}/config.json`, 'utf8')) as Record<string, unknown>;

let ref: Map<string, torch.Tensor>;
let grids: GridTHW[];
before(() => {
  ref = torch.loadSafetensors(`${dir}/reference.safetensors`);
  for (const t of ref.values()) torch.keep(t);
  grids = get(ref, 'image_grid_thw').toArray() as unknown as GridTHW[];
});
after(() => disposeAll(ref.values()));

/** transformers' name of one of our parameters (model.language_model.*, model.visual.*). */
const hfName = (name: string) => name.replace(/^model\./, 'model.language_model.').replace(/^visual\./, 'model.visual.');

describe('config', () => {
  test("reads transformers 5's layout: a Qwen3 decoder, interleaved mrope_section, the vision keys, token ids", () => {
    const config = parseQwen3VLConfig(rawConfig, 'c.json');
    assert.deepEqual(config.mropeSection, [2, 3, 3]);
    assert.equal(config.mropeInterleaved, true);
    const { text, vision } = config;
    assert.deepEqual([text.hiddenSize, text.headDim, text.qkNorm, text.qkvBias, text.rope.theta], [64, 16, true, false, 5e6]);
    assert.deepEqual(
      [vision.depth, vision.headDim, vision.patchSize, vision.numPositionEmbeddings, vision.geluApproximate],
      [3, 12, 16, 36, 'tanh'],
    );
    assert.deepEqual(vision.deepstackVisualIndexes, [0, 2]);
    assert.deepEqual([config.imageTokenId, config.visionStartTokenId, config.visionEndTokenId], [120, 118, 119]);
  });

  test("reads the Hub's Qwen3-VL-2B-Instruct layout (transformers 4.57: rope_scaling and rope_theta in text_config)", () => {
    const hub = {
      architectures: ['Qwen3VLForConditionalGeneration'],
      image_token_id: 151655,
      model_type: 'qwen3_vl',
      text_config: {
        attention_bias: false,
        bos_token_id: 151643,
        dtype: 'bfloat16',
        eos_token_id: 151645,
        head_dim: 128,
        hidden_act: 'silu',
        hidden_size: 2048,
        intermediate_size: 6144,
        max_position_embeddings: 262144,
        model_type: 'qwen3_vl_text',
        num_attention_heads: 16,
        num_hidden_layers: 28,
        num_key_value_heads: 8,
        rms_norm_eps: 1e-6,
        rope_scaling: { mrope_interleaved: true, mrope_section: [24, 20, 20], rope_type: 'default' },
        rope_theta: 5000000,
        tie_word_embeddings: true,
        vocab_size: 151936,
      },
      tie_word_embeddings: true,
      video_token_id: 151656,
      vision_config: {
        deepstack_visual_indexes: [5, 11, 17],
        depth: 24,
        hidden_act: 'gelu_pytorch_tanh',
        hidden_size: 1024,
        in_channels: 3,
        intermediate_size: 4096,
        model_type: 'qwen3_vl',
        num_heads: 16,
        num_position_embeddings: 2304,
        out_hidden_size: 2048,
        patch_size: 16,
        spatial_merge_size: 2,
        temporal_patch_size: 2,
      },
      vision_end_token_id: 151653,
      vision_start_token_id: 151652,
    };
    const config = parseQwen3VLConfig(hub, 'hub.json');
    const { text, vision } = config;
    assert.deepEqual(config.mropeSection, [24, 20, 20]);
    assert.deepEqual(
      [text.headDim, text.numKeyValueHeads, text.tieWordEmbeddings, text.rope.theta, text.rope.scaling.type],
      [128, 8, true, 5e6, 'default'],
    );
    assert.deepEqual([vision.headDim, vision.numPositionEmbeddings, vision.ropeTheta], [64, 2304, 10000]);
    assert.deepEqual(vision.deepstackVisualIndexes, [5, 11, 17]);
  });

  test('bad keys are errors naming the key path', () => {
    const withText = (patch: Record<string, unknown>) => () =>
      parseQwen3VLConfig({ ...rawConfig, text_config: { ...(rawConfig.text_config as object), ...patch } }, 'c.json');
    assert.throws(
      withText({ rope_parameters: { rope_type: 'default', mrope_section: [2, 3, 3], mrope_interleaved: false } }),
      /c\.json: key 'text_config\.rope_parameters\.mrope_interleaved': Qwen3-VL's multimodal RoPE is interleaved/,
    );
    assert.throws(
      withText({ rope_parameters: { rope_type: 'default', mrope_section: [2, 3, 4] } }),
      /key 'text_config\.rope_parameters\.mrope_section': expected three non-negative integers summing to head_dim \/ 2 = 8/,
    );
    const withVision = (patch: Record<string, unknown>) => () =>
      parseQwen3VLConfig({ ...rawConfig, vision_config: { ...(rawConfig.vision_config as object), ...patch } }, 'c.json');
    assert.throws(withVision({ num_position_embeddings: 35 }), /key 'vision_config\.num_position_embeddings': expected a square/);
    assert.throws(
      withVision({ deepstack_visual_indexes: [0, 3] }),
      /key 'vision_config\.deepstack_visual_indexes': expected vision block indices in 0\.\.2/,
    );
    assert.throws(
      withVision({ deepstack_visual_indexes: [0, 1, 2, 2] }),
      /key 'vision_config\.deepstack_visual_indexes': 4 DeepStack features for 3 language layers/,
    );
    assert.throws(withVision({ hidden_act: 'silu' }), /key 'vision_config\.hidden_act': supported: "gelu_pytorch_tanh"/);
    assert.throws(() => parseQwen3VLConfig({ ...rawConfig, model_type: 'qwen2_5_vl' }), /key 'model_type': expected "qwen3_vl"/);
  });
});

test("interleaved M-RoPE: the axis of each frequency as transformers' recomposition_frequencies picks it", () => {
  // Qwen3-VL-2B's sections: [24, 20, 20] over 64 frequencies; h at 1, 4, ..., 58; w at 2, 5, ..., 59; t the rest
  const axes = mropeAxes([24, 20, 20], true);
  assert.deepEqual(
    [0, 1, 2, 3, 57, 58, 59, 60, 61, 62, 63].map((j) => axes[j]),
    [0, 1, 2, 0, 0, 1, 2, 0, 0, 0, 0],
  );
  assert.deepEqual(
    [0, 1, 2].map((a) => axes.filter((x) => x === a).length),
    [24, 20, 20],
  );
  assert.deepEqual(mropeAxes([2, 3, 3], true), [0, 1, 2, 0, 1, 2, 0, 1]);
  assert.deepEqual(mropeAxes([2, 3, 3], false), [0, 0, 1, 1, 1, 2, 2, 2], "Qwen2.5-VL's contiguous sections");
});

test('learned positions: bilinear taps with align_corners over the 6 x 6 grid (computed by hand)', () => {
  // a 1 x 4 x 4 grid: rows/cols 0..3 map to 0, 5/3, 10/3, 5 of the grid; patch 0 is (0, 0), patch 3 is (1, 1)
  const { indices, weights } = positionTaps([[1, 4, 4]], 2, 6);
  assert.deepEqual(indices.slice(0, 4), [0, 1, 6, 7]);
  assert.deepEqual(weights.slice(0, 4), [1, 0, 0, 0]);
  const f = Math.fround;
  const frac = f(f(5 / 3) - 1); // src 1.6667: taps 1 and 2
  assert.deepEqual(indices.slice(12, 16), [7, 8, 13, 14]);
  const near = f(1 - frac);
  const far = f(1 - f(Math.abs(f(frac - 1))));
  assert.deepEqual(weights.slice(12, 16), [f(near * near), f(near * far), f(far * near), f(far * far)]);
});

test("pixel values and grids equal transformers' processor with Qwen3-VL's settings (patch 16, mean = std = 0.5)", () => {
  const processor = loadVisionImageProcessor(dir);
  assert.deepEqual(processor, { ...QWEN3_VL_IMAGE_PROCESSOR, minPixels: 4096, maxPixels: 65536 });
  torch.scope(() => {
    const images = [0, 1, 2].map((i) => {
      const t = get(ref, `image.${i}`);
      const [height, width] = t.shape as [number, number, number];
      return { data: Uint8Array.from(t.reshape([-1]).toArray() as number[]), height, width, channels: 3 };
    });
    const { pixelValues, grids: ours } = preprocessImages(images, processor);
    assert.deepEqual(ours, grids);
    const diff = maxAbsDiff(pixelValues, get(ref, 'pixel_values'));
    assert.ok(diff < 1e-5, `max |ours - transformers| = ${diff}`);
  });
});

test("the processor's defaults: Qwen3-VL's without preprocessor_config.json, and the Hub's file gives the same", () => {
  const folder = mkdtempSync(join(tmpdir(), 'qwen3-vl-processor-'));
  try {
    copyFileSync(join(dir, 'config.json'), join(folder, 'config.json'));
    assert.deepEqual(loadVisionImageProcessor(folder), QWEN3_VL_IMAGE_PROCESSOR);
    const hub = {
      size: { longest_edge: 16777216, shortest_edge: 65536 },
      patch_size: 16,
      temporal_patch_size: 2,
      merge_size: 2,
      image_mean: [0.5, 0.5, 0.5],
      image_std: [0.5, 0.5, 0.5],
      processor_class: 'Qwen3VLProcessor',
      image_processor_type: 'Qwen2VLImageProcessorFast',
    };
    writeFileSync(join(folder, 'preprocessor_config.json'), JSON.stringify(hub));
    assert.deepEqual(loadVisionImageProcessor(folder), QWEN3_VL_IMAGE_PROCESSOR);
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
});

test('get_rope_index: the 3-D positions and rope deltas of the padded image batch', () => {
  const config = parseQwen3VLConfig(rawConfig);
  const { positions, ropeDeltas } = ropeIndex(
    get(ref, 'mm.ids').toArray() as number[][],
    get(ref, 'mm.mask').toArray() as number[][],
    grids,
    config,
  );
  assert.deepEqual(positions, get(ref, 'mm.positions').toArray());
  assert.deepEqual(
    ropeDeltas,
    (get(ref, 'mm.rope_deltas').toArray() as number[][]).map((r) => r[0]),
  );
});

test('weights that do not fit the config are refused, naming the tensor', () => {
  const config = parseQwen3VLConfig(rawConfig);
  const attempt = (edit: (weights: Map<string, torch.Tensor>) => void) => () => {
    const loaded = torch.loadModelWeights(dir, { dtype: 'float32' });
    const weights = new Map(
      [...loaded].map(([name, t]) => [
        name.replace(/^model\.language_model\./, 'model.').replace(/^model\.visual\./, 'visual.'),
        torch.keep(t),
      ]),
    );
    edit(weights);
    new Qwen3VLModel(config, weights, { fileOf: () => 'model.safetensors' }).dispose();
  };
  assert.throws(
    attempt((w) => w.delete('visual.deepstack_merger_list.1.norm.bias')),
    /model\.safetensors: missing tensor 'visual\.deepstack_merger_list\.1\.norm\.bias' \(expected shape \[96\]\)/,
  );
  assert.throws(
    attempt((w) => w.set('visual.pos_embed.weight', torch.keep(torch.zeros([49, 24])))),
    /tensor 'visual\.pos_embed\.weight' has shape \[49, 24\], expected \[36, 24\]/,
  );
  assert.throws(
    attempt((w) => w.delete('model.layers.1.self_attn.q_norm.weight')),
    /missing tensor 'model\.layers\.1\.self_attn\.q_norm\.weight'/,
  );
});

describe('float32 model', () => {
  let model: Qwen3VLModel;
  before(() => {
    const loaded = loadVisionLanguageModel(dir);
    assert.ok(loaded instanceof Qwen3VLModel, 'model_type qwen3_vl loads a Qwen3VLModel');
    model = loaded;
  });
  after(() => model.dispose());

  test("the vision tower's merged output and DeepStack features equal transformers'", () => {
    torch.scope(() => {
      const { embeds, deepstack } = model.imageFeatures(get(ref, 'pixel_values'), grids);
      assert.ok(
        maxAbsDiff(embeds, get(ref, 'vision.embeds')) < TOLERANCE,
        `embeds ${maxAbsDiff(embeds, get(ref, 'vision.embeds'))}`,
      );
      assert.equal(deepstack.length, 2);
      deepstack.forEach((feature, k) => {
        const diff = maxAbsDiff(feature, get(ref, `vision.deepstack.${k}`));
        assert.ok(diff < TOLERANCE, `deepstack ${k}: max |ours - transformers| = ${diff}`);
      });
    });
  });

  test('text-only logits equal transformers (M-RoPE reduces to ordinary positions)', () => {
    torch.scope(() => {
      const diff = maxAbsDiff(model.forward(get(ref, 'plain.ids')), get(ref, 'plain.logits'));
      assert.ok(diff < TOLERANCE, `max |ours - transformers| = ${diff}`);
    });
  });

  test('logits of a padded batch with three images equal transformers (DeepStack included)', () => {
    torch.scope(() => {
      const mask = get(ref, 'mm.mask');
      const logits = model.forward(get(ref, 'mm.ids'), {
        attentionMask: mask,
        images: { grids, pixelValues: get(ref, 'pixel_values') },
      });
      const diff = maxAbsDiff(logits, get(ref, 'mm.logits'), mask.unsqueeze(-1));
      assert.ok(diff < TOLERANCE, `max |ours - transformers| over real tokens = ${diff}`);
      // precomputed features give the same logits; image tokens without their DeepStack features are refused
      const { embeds, deepstack } = model.imageFeatures(get(ref, 'pixel_values'), grids);
      const again = model.forward(get(ref, 'mm.ids'), { attentionMask: mask, images: { grids, embeds, deepstack } });
      assert.equal(maxAbsDiff(again, logits, mask.unsqueeze(-1)), 0);
      assert.throws(
        () => model.forward(get(ref, 'mm.ids'), { attentionMask: mask, images: { grids, embeds } }),
        /0 DeepStack features given with the image embeds, Qwen3VLForConditionalGeneration adds 2 \(imageFeatures gives them\)/,
      );
    });
  });

  test("greedy decoding with a KV cache equals transformers' generate()", () => {
    torch.scope(() => {
      const prompt = get(ref, 'generate.ids');
      const promptLength = prompt.size(1);
      const patches = grids.slice(0, 2).reduce((n, [t, h, w]) => n + t * h * w, 0);
      const images = { grids: grids.slice(0, 2), pixelValues: get(ref, 'pixel_values').narrow(0, 0, patches) };
      const delta = model.ropeIndex(prompt, null, images.grids).ropeDeltas[0] as number;
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
          logits = model.forward(torch.tensor([[next]], { dtype: 'int64' }), {
            cache,
            positionIds: torch.full([3, 1, 1], promptLength + step + delta, { dtype: 'int64' }),
          });
        }
        assert.deepEqual(tokens, (get(ref, 'generate.tokens').toArray() as number[][])[0]);
      } finally {
        cache.dispose();
      }
    });
  });

  test("save writes transformers' names and loads back to the same logits", () => {
    const tmp = mkdtempSync(join(tmpdir(), 'qwen3-vl-'));
    try {
      model.save(tmp);
      const names = [...torch.loadModelWeights(tmp, { dtype: 'float32' }).keys()].sort();
      const expected = [...torch.loadModelWeights(dir, { dtype: 'float32' }).keys()].sort();
      assert.deepEqual(names, expected);
      const again = Qwen3VLModel.load(tmp);
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
  const model = Qwen3VLModel.load(dir, { dtype: 'bfloat16' });
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

/** The causal LM loss of transformers over the image batch, from logits [B, T, V]. */
function referenceLoss(logits: torch.Tensor): torch.Tensor {
  const [, seq, vocab] = logits.shape as [number, number, number];
  return torch.crossEntropy(
    logits.narrow(1, 0, seq - 1).reshape([-1, vocab]),
    get(ref, 'train.labels')
      .narrow(1, 1, seq - 1)
      .reshape([-1]),
  );
}

function assertGradients(model: Qwen3VLModel): void {
  let compared = 0;
  for (const [name, p] of model.parameters()) {
    const expected = ref.get(`grad.${hfName(name)}`);
    assert.ok(expected !== undefined, `transformers has a gradient for ${name}`);
    assert.ok(p.grad !== null, `${name} has a gradient`);
    const diff = maxAbsDiff(p.grad, expected);
    assert.ok(diff < TOLERANCE, `${name}: max |grad diff| = ${diff}`);
    compared++;
  }
  assert.equal(compared, [...ref.keys()].filter((k) => k.startsWith('grad.')).length);
}

test('one training step over the image batch: loss and every gradient (vision tower, DeepStack) equal transformers', () => {
  const model = Qwen3VLModel.load(dir, { requiresGrad: true });
  try {
    torch.scope(() => {
      const mask = get(ref, 'mm.mask');
      const logits = model.forward(get(ref, 'mm.ids'), {
        attentionMask: mask,
        images: { grids, pixelValues: get(ref, 'pixel_values') },
      });
      const loss = referenceLoss(logits);
      assert.ok(Math.abs(loss.item() - get(ref, 'train.loss').item()) < TOLERANCE, `loss ${loss.item()}`);
      loss.backward();
      assertGradients(model);
    });
  } finally {
    model.dispose();
  }
});
