// Qwen2.5-VL's vision tower, as transformers computes it (Qwen2_5_VisionTransformerPretrainedModel): image patches in,
// one language-model embedding per 2 x 2 block of patches out.
//
//   x = patches W_patch^T                  [N, hidden]     the Conv3d with kernel = stride = (2, 14, 14) over each
//                                                          flattened patch (C * 2 * 14 * 14 values) is this product
//   reorder x by windows (groups of merge² patches stay together; see windowLayout)
//   for each block b:
//     x = x + attn(rmsnorm(x))             full attention inside each image frame when b is in fullatt_block_indexes,
//                                          else inside each window of window_size pixels
//     x = x + down(silu(gate(rmsnorm(x))) * up(rmsnorm(x)))   (with biases)
//   y = mlp2(gelu(mlp0(rmsnorm(x) viewed as [N / merge², merge² * hidden])))   the patch merger  [N / merge², out]
//   undo the window order on y
//
// attn: qkv = x W_qkv^T + b, 2-D rotary on q and k (in float32), softmax(q k^T / sqrt(d)) v per segment, proj.
// 2-D rotary: patch (r, c) has angles [r * inv_freq, c * inv_freq] (inv_freq_i = theta^(-2i / (d/2)), i < d/4),
// laid out as ordinary RoPE's half (../rope.ts cosSinOfAngles). RMSNorm eps is 1e-6 (fixed in transformers).
//
// Weights (transformers' names): visual.patch_embed.proj.weight [hidden, C, temporal, patch, patch],
// visual.blocks.{i}.{norm1,norm2}.weight, .attn.qkv.{weight,bias} [3 hidden, hidden], .attn.proj.{weight,bias},
// .mlp.{gate,up,down}_proj.{weight,bias}, visual.merger.ln_q.weight, visual.merger.mlp.{0,2}.{weight,bias}.
import type { Tensor } from '../../torch/index.js';
import * as torch from '../../torch/index.js';
import { attention } from '../attention.js';
import { type Linear, linear, plainLinear } from '../linear.js';
import { applyRotary, cosSinOfAngles } from '../rope.js';
import { rmsNorm } from '../transformer.js';
import type { VisionConfig } from './config.js';
import type { GridTHW } from './mrope.js';

const VISION_EPS = 1e-6;

/** Every weight of the vision tower with its shape, in transformers' names and order. */
export function expectedVisionWeights(config: VisionConfig): Map<string, number[]> {
  const { hiddenSize: h, intermediateSize: m, spatialMergeSize: merge } = config;
  const out = new Map<string, number[]>([
    ['visual.patch_embed.proj.weight', [h, config.inChannels, config.temporalPatchSize, config.patchSize, config.patchSize]],
  ]);
  const linearWeights = (name: string, outFeatures: number, inFeatures: number) => {
    out.set(`${name}.weight`, [outFeatures, inFeatures]);
    out.set(`${name}.bias`, [outFeatures]);
  };
  for (let i = 0; i < config.depth; i++) {
    const b = `visual.blocks.${i}`;
    out.set(`${b}.norm1.weight`, [h]);
    out.set(`${b}.norm2.weight`, [h]);
    linearWeights(`${b}.attn.qkv`, 3 * h, h);
    linearWeights(`${b}.attn.proj`, h, h);
    linearWeights(`${b}.mlp.gate_proj`, m, h);
    linearWeights(`${b}.mlp.up_proj`, m, h);
    linearWeights(`${b}.mlp.down_proj`, h, m);
  }
  const merged = h * merge * merge;
  out.set('visual.merger.ln_q.weight', [h]);
  linearWeights('visual.merger.mlp.0', merged, merged);
  linearWeights('visual.merger.mlp.2', config.outHiddenSize, merged);
  return out;
}

/**
 * The order the tower runs patches in and its attention segments, for images of these grids (transformers'
 * get_vision_window_index, get_vision_cu_seqlens, get_vision_position_ids):
 *   order[g]         the merge group (merge² consecutive patches) that runs g-th: each image's merged-token grid cut
 *                    into windows of window_size / merge / patch tokens a side (the last ones partial), window by
 *                    window, row-major inside
 *   windows, frames  segment lengths in patches over the reordered sequence (window attention; full attention: each
 *                    image frame)
 *   rows, cols       each patch's row and column in its image (the 2-D rotary's positions), in the processor's order
 */
export function windowLayout(
  grids: readonly GridTHW[],
  config: Pick<VisionConfig, 'spatialMergeSize' | 'windowSize' | 'patchSize'>,
): { order: number[]; windows: number[]; frames: number[]; rows: number[]; cols: number[] } {
  const merge = config.spatialMergeSize;
  const unit = merge * merge;
  const side = Math.floor(Math.floor(config.windowSize / merge) / config.patchSize);
  if (side < 1) throw new RangeError(`vision window_size ${config.windowSize} is under one merged patch`);
  const order: number[] = [];
  const windows: number[] = [];
  const frames: number[] = [];
  let offset = 0;
  for (const [t, h, w] of grids) {
    const [lh, lw] = [h / merge, w / merge];
    for (let f = 0; f < t; f++) {
      frames.push(h * w);
      for (let wy = 0; wy < lh; wy += side)
        for (let wx = 0; wx < lw; wx += side) {
          let count = 0;
          for (let y = wy; y < Math.min(wy + side, lh); y++)
            for (let x = wx; x < Math.min(wx + side, lw); x++, count++) order.push(offset + f * lh * lw + y * lw + x);
          windows.push(count * unit);
        }
    }
    offset += t * lh * lw;
  }
  return { order, windows, frames, ...patchPositions(grids, merge) };
}

/**
 * Each patch's row and column in its image, in the processor's order (merge blocks row-major, patches row-major
 * inside each block; a video's frames in turn), for images of these grids (transformers' get_vision_position_ids).
 */
export function patchPositions(grids: readonly GridTHW[], merge: number): { rows: number[]; cols: number[] } {
  const rows: number[] = [];
  const cols: number[] = [];
  for (const [t, h, w] of grids)
    for (let f = 0; f < t; f++)
      for (let by = 0; by < h / merge; by++)
        for (let bx = 0; bx < w / merge; bx++)
          for (let i = 0; i < merge; i++)
            for (let j = 0; j < merge; j++) {
              rows.push(by * merge + i);
              cols.push(bx * merge + j);
            }
  return { rows, cols };
}

/** The 2-D rotary's inverse frequencies: inv_freq_i = theta^(-2i / (d/2)), i < d/4, in float32 step by step. */
export function visionInverseFrequencies(headDim: number, theta: number): Tensor {
  const spatial = headDim / 2;
  return torch.scope(() =>
    torch
      .full([spatial / 2], theta)
      .pow(torch.arange(0, spatial, 2).float().div(spatial))
      .reciprocal(),
  );
}

/** cos, sin [N, 1, d] float32 of the 2-D rotary for patches at (rows[n], cols[n]), `order` picking the rows. */
export function visionRotaryTables(
  invFreq: Tensor,
  positions: { rows: readonly number[]; cols: readonly number[] },
  reorder: (t: Tensor) => Tensor = (t) => t,
): { cos: Tensor; sin: Tensor } {
  const device = invFreq.device;
  const rows = torch.tensor([...positions.rows], { dtype: 'float32', device }).unsqueeze(-1);
  const cols = torch.tensor([...positions.cols], { dtype: 'float32', device }).unsqueeze(-1);
  const angles = reorder(torch.cat([rows.mul(invFreq), cols.mul(invFreq)], -1)); // [N, d/2]
  return cosSinOfAngles(angles.unsqueeze(1), 1, 'float32');
}

/**
 * Vision self-attention of every segment (a window or a frame) over itself, no mask inside a segment, none across:
 * qkv = h W_qkv^T + b, the 2-D rotary on q and k in float32, softmax(q k^T / sqrt(d)) v, proj.
 */
export function visionAttention(
  h: Tensor,
  qkv: Linear,
  proj: Linear,
  numHeads: number,
  rotary: { cos: Tensor; sin: Tensor },
  segments: readonly number[],
): Tensor {
  const [patches, hidden] = h.shape as [number, number];
  const headDim = hidden / numHeads;
  const [q, k, v] = linear(h, qkv).reshape([patches, 3, numHeads, headDim]).unbind(1) as [Tensor, Tensor, Tensor];
  const rotate = (t: Tensor) =>
    applyRotary(t.float(), rotary.cos, rotary.sin).to({ dtype: h.dtype }).transpose(0, 1).unsqueeze(0);
  const [qr, kr, vr] = [rotate(q), rotate(k), v.transpose(0, 1).unsqueeze(0)]; // [1, heads, N, d]
  const outputs: Tensor[] = [];
  let start = 0;
  for (const length of segments) {
    const all = torch.ones([1, 1, length, length], { dtype: 'bool', device: h.device });
    const part = (t: Tensor) => t.narrow(2, start, length);
    outputs.push(attention(part(qr), part(kr), part(vr), all));
    start += length;
  }
  const out = torch.cat(outputs, 2).squeeze(0).transpose(0, 1).reshape([patches, hidden]);
  return linear(out, proj);
}

interface VisionBlock {
  norm1: Tensor;
  norm2: Tensor;
  qkv: Linear;
  proj: Linear;
  gateProj: Linear;
  upProj: Linear;
  downProj: Linear;
}

/** The vision tower over weights named as expectedVisionWeights says (owned by the caller). */
export class VisionTower {
  readonly config: VisionConfig;
  readonly #patchEmbed: Tensor;
  readonly #blocks: VisionBlock[];
  readonly #mergerNorm: Tensor;
  readonly #merger0: Linear;
  readonly #merger2: Linear;
  readonly #invFreq: Tensor;

  constructor(config: VisionConfig, weights: ReadonlyMap<string, Tensor>) {
    this.config = config;
    const p = (name: string) => weights.get(name) as Tensor;
    const lin = (name: string) => plainLinear(p(`${name}.weight`), p(`${name}.bias`));
    this.#patchEmbed = p('visual.patch_embed.proj.weight');
    this.#blocks = Array.from({ length: config.depth }, (_, i) => {
      const b = `visual.blocks.${i}`;
      return {
        norm1: p(`${b}.norm1.weight`),
        norm2: p(`${b}.norm2.weight`),
        qkv: lin(`${b}.attn.qkv`),
        proj: lin(`${b}.attn.proj`),
        gateProj: lin(`${b}.mlp.gate_proj`),
        upProj: lin(`${b}.mlp.up_proj`),
        downProj: lin(`${b}.mlp.down_proj`),
      };
    });
    this.#mergerNorm = p('visual.merger.ln_q.weight');
    this.#merger0 = lin('visual.merger.mlp.0');
    this.#merger2 = lin('visual.merger.mlp.2');
    this.#invFreq = torch.keep(visionInverseFrequencies(config.headDim, config.ropeTheta));
  }

  /** Qwen2.5-VL has no DeepStack. */
  readonly deepstackCount = 0;

  /** The values of one patch: in_channels * temporal_patch_size * patch_size² (pixel_values' row width). */
  get patchWidth(): number {
    const c = this.config;
    return c.inChannels * c.temporalPatchSize * c.patchSize * c.patchSize;
  }

  /**
   * pixel_values [N, patchWidth] (the processor's rows, every image's patches in turn) and the images' grids →
   * [N / merge², out_hidden_size] in the weights' dtype: each image's language tokens, image after image.
   */
  forward(pixelValues: Tensor, grids: readonly GridTHW[]): Tensor {
    const merge = this.config.spatialMergeSize;
    const patches = checkVisionInputs(pixelValues, grids, merge, this.patchWidth);
    return torch.scope(() => {
      const unit = merge * merge;
      const dtype = this.#patchEmbed.dtype;
      const device = this.#patchEmbed.device;
      const layout = windowLayout(grids, this.config);
      const order = torch.tensor(layout.order, { dtype: 'int64', device });
      const byWindow = (t: Tensor) =>
        t
          .reshape([patches / unit, unit, -1])
          .indexSelect(0, order)
          .reshape([patches, -1]);
      let x = byWindow(pixelValues.to({ dtype }).matmul(this.#patchEmbed.reshape([this.config.hiddenSize, -1]).t()));
      const rotary = visionRotaryTables(this.#invFreq, layout, byWindow);
      const heads = this.config.numHeads;
      this.#blocks.forEach((block, i) => {
        const segments = this.config.fullAttentionBlocks.includes(i) ? layout.frames : layout.windows;
        const h0 = rmsNorm(x, block.norm1, VISION_EPS, false);
        x = x.add(visionAttention(h0, block.qkv, block.proj, heads, rotary, segments));
        const h = rmsNorm(x, block.norm2, VISION_EPS, false);
        x = x.add(linear(linear(h, block.gateProj).silu().mul(linear(h, block.upProj)), block.downProj));
      });
      const merged = rmsNorm(x, this.#mergerNorm, VISION_EPS, false).reshape([patches / unit, -1]);
      const y = linear(linear(merged, this.#merger0).gelu(), this.#merger2);
      return y.indexSelect(0, order.argsort());
    });
  }

  /** forward()'s tokens; Qwen2.5-VL has no DeepStack features. */
  features(pixelValues: Tensor, grids: readonly GridTHW[]): { embeds: Tensor; deepstack: Tensor[] } {
    return { embeds: this.forward(pixelValues, grids), deepstack: [] };
  }

  dispose(): void {
    this.#invFreq.dispose();
  }
}

/**
 * A vision tower's inputs checked (both families): every grid [t, h, w] positive with h and w multiples of `merge`,
 * pixel_values [Σ t·h·w, patchWidth]. Returns the patch count.
 */
export function checkVisionInputs(pixelValues: Tensor, grids: readonly GridTHW[], merge: number, patchWidth: number): number {
  const patches = grids.reduce((n, [t, h, w]) => n + t * h * w, 0);
  grids.forEach((g, i) => {
    if (g.some((v) => !Number.isInteger(v) || v <= 0) || g[1] % merge !== 0 || g[2] % merge !== 0)
      throw new RangeError(
        `image_grid_thw[${i}] = [${g.join(', ')}]: expected positive t, h, w with h and w multiples of ${merge}`,
      );
  });
  if (pixelValues.ndim !== 2 || pixelValues.size(0) !== patches || pixelValues.size(1) !== patchWidth)
    throw new RangeError(
      `pixel_values has shape [${pixelValues.shape.join(', ')}], expected [${patches}, ${patchWidth}] for image grids ${JSON.stringify(grids)}`,
    );
  return patches;
}
