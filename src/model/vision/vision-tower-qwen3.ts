// Qwen3-VL's vision tower, as transformers computes it (Qwen3VLVisionModel): image patches in, one language-model
// embedding per 2 x 2 block of patches out, plus the DeepStack features of a few blocks.
//
//   x = patches W_patch^T + b_patch        [N, hidden]      the Conv3d (kernel = stride = (2, 16, 16), with bias)
//   x = x + pos(r, c)                       learned positions: the square grid pos_embed [side², hidden] (side =
//                                           sqrt(num_position_embeddings)) resampled to the image's h x w patches,
//                                           bilinear with align_corners (F.interpolate's), see positionTaps
//   for each block b:
//     x = x + attn(layernorm1(x))          full attention inside each image frame (no windows), 2-D rotary as
//                                          Qwen2.5-VL's (./vision-tower.ts visionAttention)
//     x = x + fc2(gelu_tanh(fc1(layernorm2(x))))
//     b = deepstack_visual_indexes[k]:  deepstack_k = merger_k(x), its LayerNorm over the merged [N / merge², merge²
//                                       hidden] rows (use_postshuffle_norm)
//   y = fc2(gelu(fc1(layernorm(x) viewed as [N / merge², merge² * hidden])))   the patch merger  [N / merge², out]
//
// LayerNorms have eps 1e-6 and biases. Patches stay in the processor's order throughout (no window reordering).
//
// Weights (transformers' names, under model.visual. in a checkpoint; visual. here): patch_embed.proj.{weight,bias},
// pos_embed.weight, blocks.{i}.{norm1,norm2}.{weight,bias}, .attn.qkv.{weight,bias}, .attn.proj.{weight,bias},
// .mlp.linear_fc{1,2}.{weight,bias}, merger.{norm,linear_fc1,linear_fc2}.{weight,bias},
// deepstack_merger_list.{k}.{norm,linear_fc1,linear_fc2}.{weight,bias}.
import type { Tensor } from '../../torch/index.js';
import * as torch from '../../torch/index.js';
import { type Linear, linear, plainLinear } from '../linear.js';
import type { Qwen3VisionConfig } from './config-qwen3-vl.js';
import type { GridTHW } from './mrope.js';
import {
  checkVisionInputs,
  patchPositions,
  visionAttention,
  visionInverseFrequencies,
  visionRotaryTables,
} from './vision-tower.js';

const VISION_EPS = 1e-6;

/** Every weight of the tower with its shape, in transformers' names (visual. prefix) and order. */
export function expectedQwen3VisionWeights(config: Qwen3VisionConfig): Map<string, number[]> {
  const { hiddenSize: h, intermediateSize: m, spatialMergeSize: merge } = config;
  const out = new Map<string, number[]>();
  const withBias = (name: string, weight: number[]) => {
    out.set(`${name}.weight`, weight);
    out.set(`${name}.bias`, [weight[0] as number]);
  };
  withBias('visual.patch_embed.proj', [h, config.inChannels, config.temporalPatchSize, config.patchSize, config.patchSize]);
  out.set('visual.pos_embed.weight', [config.numPositionEmbeddings, h]);
  for (let i = 0; i < config.depth; i++) {
    const b = `visual.blocks.${i}`;
    withBias(`${b}.norm1`, [h]);
    withBias(`${b}.norm2`, [h]);
    withBias(`${b}.attn.qkv`, [3 * h, h]);
    withBias(`${b}.attn.proj`, [h, h]);
    withBias(`${b}.mlp.linear_fc1`, [m, h]);
    withBias(`${b}.mlp.linear_fc2`, [h, m]);
  }
  const merged = h * merge * merge;
  const merger = (name: string, normWidth: number) => {
    withBias(`${name}.norm`, [normWidth]);
    withBias(`${name}.linear_fc1`, [merged, merged]);
    withBias(`${name}.linear_fc2`, [config.outHiddenSize, merged]);
  };
  merger('visual.merger', h);
  for (let k = 0; k < config.deepstackVisualIndexes.length; k++) merger(`visual.deepstack_merger_list.${k}`, merged);
  return out;
}

/**
 * The learned positions' taps: for each patch (processor order) of images of these grids, the 4 rows of pos_embed
 * it mixes and their weights, as transformers' get_vision_interpolation_indices_and_weights (bilinear,
 * align_corners) computes them in float32:
 *   src_r = r (side - 1) / max(h - 1, 1), taps floor(src_r) and floor(src_r) + 1 (clamped to side - 1), weights
 *   1 - |src_r - tap| (at least 0); the same over columns; tap (i, j) is row i * side + j, weight w_r(i) * w_c(j).
 */
export function positionTaps(grids: readonly GridTHW[], merge: number, side: number): { indices: number[]; weights: number[] } {
  const f = Math.fround;
  const { rows, cols } = patchPositions(grids, merge);
  const indices: number[] = [];
  const weights: number[] = [];
  const axis = (index: number, size: number): [number, number, number, number] => {
    const src = f((index * (side - 1)) / Math.max(size - 1, 1));
    const floor = Math.floor(src);
    const weight = (offset: number) => Math.max(f(1 - Math.abs(f(f(src - floor) - offset))), 0);
    return [floor, Math.min(floor + 1, side - 1), weight(0), weight(1)];
  };
  let n = 0;
  for (const [t, h, w] of grids)
    for (let p = 0; p < t * h * w; p++, n++) {
      const [r0, r1, wr0, wr1] = axis(rows[n] as number, h);
      const [c0, c1, wc0, wc1] = axis(cols[n] as number, w);
      indices.push(r0 * side + c0, r0 * side + c1, r1 * side + c0, r1 * side + c1);
      weights.push(f(wr0 * wc0), f(wr0 * wc1), f(wr1 * wc0), f(wr1 * wc1));
    }
  return { indices, weights };
}

interface LayerNorm {
  weight: Tensor;
  bias: Tensor;
}

interface Qwen3VisionBlock {
  norm1: LayerNorm;
  norm2: LayerNorm;
  qkv: Linear;
  proj: Linear;
  fc1: Linear;
  fc2: Linear;
}

interface PatchMerger {
  norm: LayerNorm;
  fc1: Linear;
  fc2: Linear;
  /** DeepStack's mergers normalise the merged rows (merge² hidden wide), the final one each patch first. */
  postShuffleNorm: boolean;
}

/** The images' language tokens and the DeepStack features, each [image tokens, out_hidden_size], image after image. */
export interface ImageFeatures {
  embeds: Tensor;
  deepstack: Tensor[];
}

/** The Qwen3-VL vision tower over weights named as expectedQwen3VisionWeights says (owned by the caller). */
export class Qwen3VisionTower {
  readonly config: Qwen3VisionConfig;
  /** The Conv3d's weight [hidden, C, temporal, patch, patch] (viewed as a linear map when it runs) and bias. */
  readonly #patchWeight: Tensor;
  readonly #patchBias: Tensor;
  readonly #posEmbed: Tensor;
  readonly #blocks: Qwen3VisionBlock[];
  readonly #merger: PatchMerger;
  readonly #deepstackMergers: PatchMerger[];
  readonly #invFreq: Tensor;

  constructor(config: Qwen3VisionConfig, weights: ReadonlyMap<string, Tensor>) {
    this.config = config;
    const p = (name: string) => weights.get(name) as Tensor;
    const lin = (name: string) => plainLinear(p(`${name}.weight`), p(`${name}.bias`));
    const norm = (name: string): LayerNorm => ({ weight: p(`${name}.weight`), bias: p(`${name}.bias`) });
    this.#patchWeight = p('visual.patch_embed.proj.weight');
    this.#patchBias = p('visual.patch_embed.proj.bias');
    this.#posEmbed = p('visual.pos_embed.weight');
    this.#blocks = Array.from({ length: config.depth }, (_, i) => {
      const b = `visual.blocks.${i}`;
      return {
        norm1: norm(`${b}.norm1`),
        norm2: norm(`${b}.norm2`),
        qkv: lin(`${b}.attn.qkv`),
        proj: lin(`${b}.attn.proj`),
        fc1: lin(`${b}.mlp.linear_fc1`),
        fc2: lin(`${b}.mlp.linear_fc2`),
      };
    });
    const merger = (name: string, postShuffleNorm: boolean): PatchMerger => ({
      norm: norm(`${name}.norm`),
      fc1: lin(`${name}.linear_fc1`),
      fc2: lin(`${name}.linear_fc2`),
      postShuffleNorm,
    });
    this.#merger = merger('visual.merger', false);
    this.#deepstackMergers = config.deepstackVisualIndexes.map((_, k) => merger(`visual.deepstack_merger_list.${k}`, true));
    this.#invFreq = torch.keep(visionInverseFrequencies(config.headDim, config.ropeTheta));
  }

  /** The DeepStack features features() makes (deepstack_visual_indexes' length). */
  get deepstackCount(): number {
    return this.config.deepstackVisualIndexes.length;
  }

  /** The values of one patch: in_channels * temporal_patch_size * patch_size² (pixel_values' row width). */
  get patchWidth(): number {
    const c = this.config;
    return c.inChannels * c.temporalPatchSize * c.patchSize * c.patchSize;
  }

  /** pixel_values [N, patchWidth] and the images' grids → their merged tokens (what forward's embeds hold). */
  forward(pixelValues: Tensor, grids: readonly GridTHW[]): Tensor {
    return torch.scope(() => this.features(pixelValues, grids).embeds);
  }

  /** pixel_values [N, patchWidth] and the images' grids → the merged tokens and the DeepStack features. */
  features(pixelValues: Tensor, grids: readonly GridTHW[]): ImageFeatures {
    const merge = this.config.spatialMergeSize;
    const patches = checkVisionInputs(pixelValues, grids, merge, this.patchWidth);
    return torch.scope((): ImageFeatures => {
      const dtype = this.#posEmbed.dtype;
      const device = this.#posEmbed.device;
      const hidden = this.config.hiddenSize;
      const patchEmbed = plainLinear(this.#patchWeight.reshape([hidden, -1]), this.#patchBias);
      let x = linear(pixelValues.to({ dtype }), patchEmbed);
      const side = Math.round(Math.sqrt(this.config.numPositionEmbeddings));
      const taps = positionTaps(grids, merge, side);
      const index = torch.tensor(taps.indices, { dtype: 'int64', device });
      const weights = torch.tensor(taps.weights, { dtype: 'float32', device }).reshape([patches, 4, 1]);
      const positions = torch.embedding(this.#posEmbed, index).reshape([patches, 4, hidden]).mul(weights).sum(1);
      x = x.add(positions.to({ dtype }));
      const rotary = visionRotaryTables(this.#invFreq, patchPositions(grids, merge));
      const frames = grids.flatMap(([t, h, w]) => Array.from({ length: t }, () => h * w));
      const layerNorm = (t: Tensor, n: LayerNorm) => torch.layerNorm(t, [t.size(-1)], n.weight, n.bias, VISION_EPS);
      const deepstack: Tensor[] = [];
      this.#blocks.forEach((block, i) => {
        x = x.add(visionAttention(layerNorm(x, block.norm1), block.qkv, block.proj, this.config.numHeads, rotary, frames));
        const h = layerNorm(x, block.norm2);
        x = x.add(linear(linear(h, block.fc1).gelu(this.config.geluApproximate), block.fc2));
        const k = this.config.deepstackVisualIndexes.indexOf(i);
        if (k >= 0) deepstack.push(this.#merge(x, this.#deepstackMergers[k] as PatchMerger, layerNorm));
      });
      return { embeds: this.#merge(x, this.#merger, layerNorm), deepstack };
    });
  }

  #merge(x: Tensor, merger: PatchMerger, layerNorm: (t: Tensor, n: LayerNorm) => Tensor): Tensor {
    const unit = this.config.spatialMergeSize ** 2;
    const rows = x.size(0) / unit;
    const merged = merger.postShuffleNorm
      ? layerNorm(x.reshape([rows, -1]), merger.norm)
      : layerNorm(x, merger.norm).reshape([rows, -1]);
    return linear(linear(merged, merger.fc1).gelu(), merger.fc2);
  }

  dispose(): void {
    this.#invFreq.dispose();
  }
}
