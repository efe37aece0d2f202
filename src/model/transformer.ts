// The Llama / Qwen2 / Qwen3 decoder-only transformer, as transformers computes it (LlamaForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM), loading and saving Hugging Face model folders.
//
//   x = embed_tokens[ids]                                                     [B, T, H]
//   for each layer:
//     h = rmsnorm(x) ; q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)          [B, heads|kvHeads, T, headDim]
//     (Qwen3) q, k = rmsnorm_headDim(q), rmsnorm_headDim(k)
//     q, k = rope(q), rope(k)                 q*cos + rotate_half(q)*sin, rotate_half(x) = [-x2, x1]
//     (cache) append k, v to the slot; attend over its prefix
//     x = x + softmax(q k^T / sqrt(headDim) + mask) v Wo (+bo)              grouped-query: kvHeads shared by groups
//     x = x + down(silu(gate(rmsnorm(x))) * up(rmsnorm(x)))                 SwiGLU
//   logits = rmsnorm(x) lm_head^T                                            lm_head = embed_tokens when tied
//
// RMSNorm as transformers: y = weight * (x_f32 * rsqrt(mean(x_f32^2) + eps)).to(x.dtype).
// Padded batches: a 2-d attention mask (1 = real token; left or right padding). Position ids default to
// cumsum(mask) - 1 (what generate() passes; for unpadded rows simply 0..T-1). Pad queries attend only to themselves,
// so no row is fully masked and no NaN can reach real tokens.
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { DType, Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { loadModelConfig, type ModelConfig, type RopeConfig } from './config.js';
import { type CacheStep, KVCache } from './kv-cache.js';

// ---------------------------------------------------------------------------------------------------------------
// weights: Hugging Face names and shapes

/** Something added to a projection's output, e.g. a LoRA adapter (./lora.ts): y = adapter.forward(x, x W^T + b). */
export interface LinearAdapter {
  forward(x: Tensor, base: Tensor): Tensor;
  /** True while forward() draws random numbers (dropout in training): recomputation would then differ. */
  readonly stochastic: boolean;
}

interface Linear {
  weight: Tensor;
  bias: Tensor | null;
  adapter: LinearAdapter | null;
  /** Inference layout on a CPU that runs torch.packedLinear: the weight packed for it (see packedWeight). */
  packed: PackedWeight | null;
}

/** A weight packed for torch.packedLinear, made on first use and again after the weight was written (its version). */
interface PackedWeight {
  weight: Tensor | null;
  version: number;
  /** Products of more rows go to BLAS (prefill); Infinity for bfloat16 where libtorch's bf16 product is slow. */
  maxRows: number;
}

/** Rows per product up to which a packed weight is used (decoding; see WeightLayout). */
const PACKED_MAX_ROWS = 64;

interface DecoderLayer {
  inputLayernorm: Tensor;
  qProj: Linear;
  kProj: Linear;
  vProj: Linear;
  oProj: Linear;
  qNorm: Tensor | null;
  kNorm: Tensor | null;
  postAttentionLayernorm: Tensor;
  gateProj: Linear;
  upProj: Linear;
  downProj: Linear;
  /** Inference layout only: q|k|v and gate|up as one projection each (the separate ones are views into them). */
  qkvProj: Linear | null;
  gateUpProj: Linear | null;
}

/** Every weight the config implies, in Hugging Face's names and order, with its shape. */
export function expectedWeights(config: ModelConfig): Map<string, number[]> {
  const { hiddenSize: h, intermediateSize: m, numAttentionHeads: heads, numKeyValueHeads: kv, headDim: d } = config;
  const out = new Map<string, number[]>([['model.embed_tokens.weight', [config.vocabSize, h]]]);
  const linear = (name: string, outFeatures: number, inFeatures: number, bias: boolean) => {
    out.set(`${name}.weight`, [outFeatures, inFeatures]);
    if (bias) out.set(`${name}.bias`, [outFeatures]);
  };
  for (let i = 0; i < config.numHiddenLayers; i++) {
    const p = `model.layers.${i}`;
    out.set(`${p}.input_layernorm.weight`, [h]);
    linear(`${p}.self_attn.q_proj`, heads * d, h, config.qkvBias);
    linear(`${p}.self_attn.k_proj`, kv * d, h, config.qkvBias);
    linear(`${p}.self_attn.v_proj`, kv * d, h, config.qkvBias);
    linear(`${p}.self_attn.o_proj`, h, heads * d, config.outputBias);
    if (config.qkNorm) {
      out.set(`${p}.self_attn.q_norm.weight`, [d]);
      out.set(`${p}.self_attn.k_norm.weight`, [d]);
    }
    out.set(`${p}.post_attention_layernorm.weight`, [h]);
    linear(`${p}.mlp.gate_proj`, m, h, config.mlpBias);
    linear(`${p}.mlp.up_proj`, m, h, config.mlpBias);
    linear(`${p}.mlp.down_proj`, h, m, config.mlpBias);
  }
  out.set('model.norm.weight', [h]);
  if (!config.tieWordEmbeddings) out.set('lm_head.weight', [config.vocabSize, h]);
  return out;
}

/** Buffers that old checkpoints carry and that are recomputed here. */
const IGNORABLE_WEIGHT = /(^|\.)rotary_emb\.inv_freq$/;

export class ModelWeightsError extends Error {
  constructor(file: string, detail: string) {
    super(`${file}: ${detail}`);
    this.name = 'ModelWeightsError';
  }
}

// Files of a model folder besides config and weights that save() carries over, so transformers loads the result.
const COPIED_FILES = [
  'generation_config.json',
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'added_tokens.json',
  'vocab.json',
  'merges.txt',
  'tokenizer.model',
  'chat_template.jinja',
  'chat_template.json',
];

// ---------------------------------------------------------------------------------------------------------------
// rotary embeddings (transformers' modeling_rope_utils, step by step in float32 so inv_freq matches bit for bit)

/** Inverse frequencies [headDim/2] (float32) and the cos/sin scale, for sequences up to `seqLen` (dynamic only). */
export function ropeInverseFrequencies(
  rope: RopeConfig,
  headDim: number,
  maxPositionEmbeddings: number,
  seqLen?: number,
): { invFreq: Tensor; attentionScaling: number } {
  return torch.scope(() => {
    const dim = headDim;
    const exponents = torch.arange(0, dim, 2).float().div(dim); // [dim/2]: 0, 2/dim, 4/dim, ...
    const powerOf = (base: number) => torch.full(exponents.shape, base).pow(exponents); // base ** exponents
    const s = rope.scaling;
    switch (s.type) {
      case 'default':
        return { invFreq: powerOf(rope.theta).reciprocal(), attentionScaling: 1 };
      case 'linear':
        return { invFreq: powerOf(rope.theta).reciprocal().div(s.factor), attentionScaling: 1 };
      case 'dynamic': {
        // base' = base * (factor * L / maxPos - (factor - 1)) ** (dim / (dim - 2)), L = max(seqLen, maxPos)
        const length = Math.max(seqLen ?? maxPositionEmbeddings, maxPositionEmbeddings);
        const base = rope.theta * ((s.factor * length) / maxPositionEmbeddings - (s.factor - 1)) ** (dim / (dim - 2));
        return { invFreq: powerOf(base).reciprocal(), attentionScaling: 1 };
      }
      case 'llama3': {
        // wavelengths above original/lowFreqFactor are divided by factor, below original/highFreqFactor kept,
        // and in between interpolated by smooth = (original / wavelen - low) / (high - low).
        const invFreq = powerOf(rope.theta).reciprocal();
        const lowFreqWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
        const highFreqWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
        const wavelen = invFreq.reciprocal().mul(2 * Math.PI);
        const scaled = torch.where(wavelen.gt(lowFreqWavelen), invFreq.div(s.factor), invFreq);
        const smooth = wavelen
          .reciprocal()
          .mul(s.originalMaxPositionEmbeddings)
          .sub(s.lowFreqFactor)
          .div(s.highFreqFactor - s.lowFreqFactor);
        const smoothed = smooth.neg().add(1).mul(scaled).div(s.factor).add(smooth.mul(scaled));
        const medium = wavelen.lt(highFreqWavelen).logicalNot().logicalAnd(wavelen.gt(lowFreqWavelen).logicalNot());
        return { invFreq: torch.where(medium, smoothed, scaled), attentionScaling: 1 };
      }
      case 'yarn': {
        const mscale = (scale: number, m = 1) => (scale <= 1 ? 1 : 0.1 * m * Math.log(scale) + 1);
        const attentionScaling =
          s.attentionFactor ??
          (s.mscale && s.mscaleAllDim ? mscale(s.factor, s.mscale) / mscale(s.factor, s.mscaleAllDim) : mscale(s.factor));
        // dimension index at which a wavelength completes `rotations` turns over the original context
        const correctionDim = (rotations: number) =>
          (dim * Math.log(s.originalMaxPositionEmbeddings / (rotations * 2 * Math.PI))) / (2 * Math.log(rope.theta));
        let low = correctionDim(s.betaFast);
        let high = correctionDim(s.betaSlow);
        if (s.truncate) {
          low = Math.floor(low);
          high = Math.ceil(high);
        }
        low = Math.max(low, 0);
        high = Math.min(high, dim - 1);
        if (low === high) high += 0.001;
        const posFreqs = powerOf(rope.theta);
        const extrapolation = posFreqs.reciprocal();
        const interpolation = posFreqs.mul(s.factor).reciprocal();
        const ramp = torch
          .arange(0, dim / 2, 1, { dtype: 'float32' })
          .sub(low)
          .div(high - low)
          .clamp(0, 1);
        const extrapolationFactor = ramp.neg().add(1);
        const invFreq = interpolation.mul(extrapolationFactor.neg().add(1)).add(extrapolation.mul(extrapolationFactor));
        return { invFreq, attentionScaling };
      }
    }
  });
}

/**
 * cos, sin [B, 1, T, headDim] for integer positions [B, T]: emb = cat(freqs, freqs), freqs = pos * inv_freq; sin comes
 * with its first half negated, so that rotate_half(x) * sin(emb) = roll(x, headDim/2) * sin (see applyRotary).
 */
function rotaryCosSin(invFreq: Tensor, attentionScaling: number, positions: Tensor, dtype: DType): { cos: Tensor; sin: Tensor } {
  const freqs = positions.float().unsqueeze(-1).mul(invFreq).unsqueeze(1); // [B, 1, T, headDim/2], float32
  const scale = (t: Tensor) => (attentionScaling === 1 ? t : t.mul(attentionScaling));
  const cos = scale(freqs.cos());
  const sin = scale(freqs.sin());
  return { cos: torch.cat([cos, cos], -1).to(dtype), sin: torch.cat([sin.neg(), sin], -1).to(dtype) };
}

/** x * cos + rotate_half(x) * sin(emb), rotate_half(x) = [-x2, x1] = roll(x, half) * [-1, 1] (the sign is in `sin`). */
function applyRotary(x: Tensor, cos: Tensor, sin: Tensor): Tensor {
  return x.mul(cos).add(x.roll(x.size(-1) / 2, -1).mul(sin));
}

/** transformers' RMSNorm; float32 runs ATen's fused kernel (equal to the formula), bf16 rounds before the weight. */
function rmsNorm(x: Tensor, weight: Tensor, eps: number): Tensor {
  return x.dtype === 'float32'
    ? torch.rmsNorm(x, weight.shape, weight, eps)
    : weight.mul(torch.rmsNorm(x, weight.shape, null, eps)); // weight * (x_f32 * rsqrt(...)).to(x.dtype)
}

function linear(x: Tensor, l: Linear): Tensor {
  // the kernel has no autograd: a forward that records it (trainable LoRA on an inference-layout model) takes BLAS
  const y =
    l.packed !== null && x.numel / x.size(-1) <= l.packed.maxRows && !x.requiresGrad
      ? torch.packedLinear(x, packedWeight(l), l.bias, l.weight.size(0))
      : torch.linear(x, l.weight, l.bias);
  return l.adapter === null ? y : l.adapter.forward(x, y);
}

/** l's packed weight, packed again when l.weight's storage was written since (a weight sync, a LoRA merge). */
function packedWeight(l: Linear): Tensor {
  const packed = l.packed as PackedWeight;
  const version = l.weight.version;
  if (packed.weight === null || packed.version !== version) {
    packed.weight?.dispose();
    packed.weight = null; // not left pointing at a freed tensor if packing throws (out of memory)
    packed.weight = torch.noGrad(() => torch.keep(torch.packLinear(l.weight)));
    packed.version = version;
  }
  return packed.weight;
}

/** SwiGLU: down(silu(gate(h)) * up(h)); gate and up in one product when the layout fused them. */
function mlp(layer: DecoderLayer, h: Tensor): Tensor {
  const fused = layer.gateUpProj;
  if (fused === null || layer.gateProj.adapter !== null || layer.upProj.adapter !== null)
    return linear(linear(h, layer.gateProj).silu().mul(linear(h, layer.upProj)), layer.downProj);
  const gateUp = linear(h, fused);
  const width = layer.upProj.weight.size(0);
  return linear(
    gateUp
      .narrow(-1, 0, width)
      .silu()
      .mul(gateUp.narrow(-1, width, width)),
    layer.downProj,
  );
}

/**
 * How parameters sit in memory. 'training': one contiguous tensor per Hugging Face weight. 'inference': each layer's
 * q|k|v weights are one matrix and gate|up another, and every projection matrix (and an untied lm_head) is stored
 * transposed, i.e. column-major; the parameters stay views with Hugging Face names, shapes and values (save, copy_
 * and LoRA work unchanged). A layer then runs 4 matmuls instead of 7, and a product with one row per sequence
 * (decoding) reads the weights in storage order: ~2x faster with CPU BLAS for the LM head (MKL on AVX2, measured
 * with bench/model-profile.ts). On a CPU with AVX2, products of 1 to 64 rows (decoding) run torch.packedLinear
 * instead, on a packed copy of each fused matrix and of the LM head (native/src/kernels.cpp: for 8 float32 rows MKL
 * streams a weight at ~5 GB/s, the kernel at ~10 GB/s a thread); prefill (more rows) stays with BLAS, except in
 * bfloat16 on CPUs without AVX512, where libtorch's bf16 product runs at ~1 GFLOP/s and every product goes to the
 * kernel. The copies cost the weights' size again, made on first use.
 */
export type WeightLayout = 'training' | 'inference';

/** Column-major copy [out, in] of row-major weights stacked along dim 0 (one matrix for several projections). */
const columnMajor = (weights: Tensor[]): Tensor =>
  (weights.length === 1 ? (weights[0] as Tensor) : torch.cat(weights, 0)).t().contiguous().t();

/**
 * Rewrites `parameters` (Hugging Face names) in the inference layout (see WeightLayout); returns, per layer, the
 * fused q|k|v and gate|up weights and biases. The replaced tensors are disposed.
 */
function inferenceLayout(config: ModelConfig, parameters: Map<string, Tensor>): { qkv: Linear; gateUp: Linear }[] {
  const get = (name: string) => parameters.get(name) as Tensor;
  /** One column-major matrix for `modules`; each module's weight (and bias) becomes a view into it. */
  const fuse = (modules: string[]): Linear =>
    torch.noGrad(() => {
      const weights = modules.map((m) => get(`${m}.weight`));
      const weight = torch.keep(columnMajor(weights));
      const hasBias = parameters.has(`${modules[0]}.bias`);
      const bias = hasBias ? torch.keep(torch.cat(modules.map((m) => get(`${m}.bias`)))) : null;
      let offset = 0;
      modules.forEach((m, i) => {
        const rows = (weights[i] as Tensor).size(0);
        for (const [suffix, fused] of [
          ['weight', weight],
          ['bias', bias],
        ] as const) {
          if (fused === null) continue;
          const old = get(`${m}.${suffix}`);
          parameters.set(`${m}.${suffix}`, torch.keep(fused.narrow(0, offset, rows)));
          old.dispose();
        }
        offset += rows;
      });
      return { weight, bias, adapter: null, packed: null };
    });
  const layers = Array.from({ length: config.numHiddenLayers }, (_, i) => {
    const l = `model.layers.${i}`;
    const qkv = fuse([`${l}.self_attn.q_proj`, `${l}.self_attn.k_proj`, `${l}.self_attn.v_proj`]);
    const gateUp = fuse([`${l}.mlp.gate_proj`, `${l}.mlp.up_proj`]);
    for (const single of [`${l}.self_attn.o_proj`, `${l}.mlp.down_proj`]) fuse([single]).weight.dispose();
    return { qkv, gateUp };
  });
  // the LM head reads its matrix in storage order too; a tied one is the embedding, whose lookups then gather
  // strided columns (~8 us per token at hidden 512, against ~4 ms saved per decoded row at vocabulary 49k)
  fuse([config.tieWordEmbeddings ? 'model.embed_tokens' : 'lm_head']).weight.dispose();
  return layers;
}

// ---------------------------------------------------------------------------------------------------------------
// the model

export type ModelDType = 'float32' | 'bfloat16';

export interface LoadModelOptions {
  /** Parameter and compute dtype (default float32). RMSNorm and RoPE still compute in float32 inside. */
  dtype?: ModelDType;
  device?: string;
  /** Mark parameters as requiring gradients (for training). */
  requiresGrad?: boolean;
  /** Parameter memory layout (default 'training'); 'inference' for decoding, see WeightLayout. */
  layout?: WeightLayout;
}

export interface ForwardOptions {
  /** [B, T] (int or bool), 1 = real token, 0 = padding (left or right). With a cache: the new tokens only. */
  attentionMask?: Tensor;
  /** [B, T] int64 RoPE positions. Default: cumsum(mask) - 1, offset by the tokens already in each row's cache slot. */
  positionIds?: Tensor;
  /** Append the new tokens to this cache and attend over each row's cached prefix. */
  cache?: KVCache;
  /** The cache slot of each batch row (distinct; default 0..B-1). */
  slots?: readonly number[];
  /** 'logits' (default): [B, T, vocab]; 'hidden': final normed hidden states [B, T, hidden] for logits() chunk by chunk. */
  output?: 'logits' | 'hidden';
  /** inputIds is a packed batch of shared prompts and their continuations (see SharedPrefixLayout); needs positionIds. */
  sharedPrefix?: SharedPrefixLayout;
}

/**
 * A packed batch in which many rows continue a few shared prompts (GRPO's groups: one prompt, n responses), so each
 * prompt runs through the trunk once. inputIds is [1, G*P + B*S]: G prefixes of P tokens, then B continuations of S
 * tokens; continuation b attends to all of prefix rowPrefix[b] (its real tokens) and causally to itself. Everything
 * but attention is per token, so the layers run on the packed tokens unchanged (./training.ts builds it).
 */
export interface SharedPrefixLayout {
  /** [G, P] 1 = real prefix token (left padding). */
  prefixMask: Tensor;
  /** [B, S] 1 = real continuation token (right padding). */
  suffixMask: Tensor;
  /** [B] int64: the prefix each continuation row extends. */
  rowPrefix: Tensor;
}

/** The packed layout's sizes and attention masks (true = attend), made once per pass. */
interface PackedAttention {
  groups: number;
  prefixLength: number;
  rows: number;
  suffixLength: number;
  rowPrefix: Tensor;
  /** [G, 1, P, P] causal over real prefix keys (and the diagonal). */
  prefixMask: Tensor;
  /** [B, 1, S, P + S]: the row's prefix (real keys), then causal over its own real keys (and the diagonal). */
  suffixMask: Tensor;
}

/** true = attend: causal over real keys, plus the diagonal (a pad query sees itself, so no row is all-masked). */
function causalPadMask(real: Tensor): Tensor {
  const [batch, seqLen] = real.shape as [number, number];
  const index = torch.arange(seqLen, { device: real.device });
  const query = index.view([seqLen, 1]);
  const causal = index.view([1, seqLen]).le(query); // [T, T]
  return real
    .view([batch, 1, 1, seqLen])
    .logicalAnd(causal)
    .logicalOr(index.view([1, seqLen]).eq(query));
}

function packedAttention(layout: SharedPrefixLayout, tokens: number): PackedAttention {
  const { prefixMask, suffixMask, rowPrefix } = layout;
  if (prefixMask.ndim !== 2 || suffixMask.ndim !== 2 || rowPrefix.ndim !== 1 || rowPrefix.size(0) !== suffixMask.size(0)) {
    throw new TypeError(
      `forward: sharedPrefix needs prefixMask [G, P], suffixMask [B, S] and rowPrefix [B], got ` +
        `[${prefixMask.shape.join(', ')}], [${suffixMask.shape.join(', ')}] and [${rowPrefix.shape.join(', ')}]`,
    );
  }
  const [groups, prefixLength] = prefixMask.shape as [number, number];
  const [rows, suffixLength] = suffixMask.shape as [number, number];
  if (groups * prefixLength + rows * suffixLength !== tokens) {
    throw new TypeError(
      `forward: sharedPrefix packs ${groups}×${prefixLength} + ${rows}×${suffixLength} tokens, inputIds has ${tokens}`,
    );
  }
  const prefixReal = prefixMask.bool();
  const suffixReal = suffixMask.bool();
  const rowIndex = rowPrefix.long();
  const toPrefix = prefixReal
    .indexSelect(0, rowIndex)
    .view([rows, 1, 1, prefixLength])
    .expand([rows, 1, suffixLength, prefixLength]);
  return {
    groups,
    prefixLength,
    rows,
    suffixLength,
    rowPrefix: rowIndex,
    prefixMask: causalPadMask(prefixReal),
    suffixMask: torch.cat([toPrefix, causalPadMask(suffixReal)], -1),
  };
}

/** Packed [1, h, G*P + B*S, d] → prefixes [G, h, P, d] and continuations [B, h, S, d]. */
function splitPacked(t: Tensor, p: PackedAttention): { prefix: Tensor; suffix: Tensor } {
  const [, h, , d] = t.shape as [number, number, number, number];
  const part = (start: number, n: number, length: number) =>
    t
      .narrow(2, start, n * length)
      .reshape([h, n, length, d])
      .transpose(0, 1);
  return {
    prefix: part(0, p.groups, p.prefixLength),
    suffix: part(p.groups * p.prefixLength, p.rows, p.suffixLength),
  };
}

export interface SaveModelOptions {
  /** Largest safetensors shard in bytes (default 5 GB, as transformers); more weights give a sharded index. */
  maxShardBytes?: number;
}

/** forward() taken apart: see CausalLM.beginPass. */
export interface ForwardPass {
  readonly numLayers: number;
  /** Token embeddings [B, T, hidden]. */
  embed(): Tensor;
  /** Decoder layer i: residual attention then residual SwiGLU MLP. */
  layer(index: number, x: Tensor): Tensor;
  /** The final RMSNorm: hidden states for the LM head. */
  norm(x: Tensor): Tensor;
  /** Marks the new tokens as cached (cache passes only; call after the last layer). */
  commit(): void;
}

export class CausalLM {
  readonly config: ModelConfig;
  readonly dtype: ModelDType;
  readonly layout: WeightLayout;
  /** The folder this model was loaded from (save() copies tokenizer and generation files from it). */
  readonly sourceDir: string | null;
  readonly #parameters: Map<string, Tensor>;
  readonly #embedTokens: Tensor;
  readonly #layers: DecoderLayer[];
  /** The projections of every layer by Hugging Face module name (model.layers.0.self_attn.q_proj ...). */
  readonly #linears = new Map<string, Linear>();
  readonly #norm: Tensor;
  readonly #lmHead: Tensor;
  /** The LM head as a projection (packed in the inference layout, see WeightLayout). */
  readonly #headLinear: Linear;
  /** The projections that have a packed weight (inference layout, CPU with AVX2). */
  readonly #packedLinears: Linear[] = [];
  /** The fused matrices of the inference layout (parameters are views into them). */
  readonly #fused: (Tensor | null)[];
  #rope: { invFreq: Tensor; attentionScaling: number } | null = null;
  #disposed = false;

  /**
   * Builds a model from weights with Hugging Face names, checked against the config; the model takes ownership.
   * `fileOf(tensor)` names the file a tensor came from (null: the weights as a whole) in error messages.
   */
  constructor(
    config: ModelConfig,
    weights: Map<string, Tensor>,
    options: { sourceDir?: string | null; fileOf?: (tensor: string | null) => string; layout?: WeightLayout } = {},
  ) {
    const fileOf = options.fileOf ?? (() => 'weights');
    const file = fileOf(null);
    const expected = expectedWeights(config);
    for (const [name, shape] of expected) {
      const t = weights.get(name);
      if (t === undefined) throw new ModelWeightsError(file, `missing tensor '${name}' (expected shape [${shape.join(', ')}])`);
      if (t.shape.length !== shape.length || t.shape.some((s, i) => s !== shape[i])) {
        throw new ModelWeightsError(
          fileOf(name),
          `tensor '${name}' has shape [${t.shape.join(', ')}], expected [${shape.join(', ')}]`,
        );
      }
      if (!torch.isFloatingPoint(t.dtype))
        throw new ModelWeightsError(fileOf(name), `tensor '${name}' has dtype ${t.dtype}, expected floating point`);
    }
    const dtypes = new Set([...expected.keys()].map((n) => (weights.get(n) as Tensor).dtype));
    if (dtypes.size !== 1)
      throw new ModelWeightsError(file, `weights mix dtypes ${[...dtypes].join(', ')}: load them with one dtype`);
    const dtype = [...dtypes][0] as DType;
    if (dtype !== 'float32' && dtype !== 'bfloat16')
      throw new ModelWeightsError(file, `weights are ${dtype}; supported: float32, bfloat16`);
    const unexpected = [...weights.keys()].filter((n) => !expected.has(n) && !IGNORABLE_WEIGHT.test(n));
    if (unexpected.length > 0) {
      const tiedHead = config.tieWordEmbeddings && unexpected.length === 1 && unexpected[0] === 'lm_head.weight';
      if (!tiedHead || !sameValues(weights.get('lm_head.weight') as Tensor, weights.get('model.embed_tokens.weight') as Tensor)) {
        throw new ModelWeightsError(
          fileOf(unexpected[0] ?? null),
          `unexpected tensors ${unexpected.map((n) => `'${n}'`).join(', ')} (not part of a ${config.architecture} with this config${
            config.tieWordEmbeddings && unexpected.includes('lm_head.weight')
              ? '; tie_word_embeddings is true but lm_head.weight differs from embed_tokens'
              : ''
          })`,
        );
      }
    }
    this.config = config;
    this.dtype = dtype;
    this.sourceDir = options.sourceDir ?? null;
    this.#parameters = new Map();
    for (const name of expected.keys()) this.#parameters.set(name, torch.keep(weights.get(name) as Tensor));
    for (const [name, t] of weights) if (!expected.has(name)) t.dispose();
    this.layout = options.layout ?? 'training';
    if (this.layout === 'inference' && [...this.#parameters.values()].some((t) => t.requiresGrad))
      throw new TypeError(`${config.architecture}: the inference layout is for decoding; its parameters cannot require grad`);
    const fused = this.layout === 'inference' ? inferenceLayout(config, this.#parameters) : null;
    this.#fused = fused?.flatMap((f) => [f.qkv.weight, f.qkv.bias, f.gateUp.weight, f.gateUp.bias]) ?? [];

    const p = (name: string) => this.#parameters.get(name) as Tensor;
    const lin = (name: string): Linear => {
      const l: Linear = {
        weight: p(`${name}.weight`),
        bias: this.#parameters.get(`${name}.bias`) ?? null,
        adapter: null,
        packed: null,
      };
      this.#linears.set(name, l);
      return l;
    };
    this.#embedTokens = p('model.embed_tokens.weight');
    this.#layers = Array.from({ length: config.numHiddenLayers }, (_, i) => {
      const l = `model.layers.${i}`;
      return {
        inputLayernorm: p(`${l}.input_layernorm.weight`),
        qProj: lin(`${l}.self_attn.q_proj`),
        kProj: lin(`${l}.self_attn.k_proj`),
        vProj: lin(`${l}.self_attn.v_proj`),
        oProj: lin(`${l}.self_attn.o_proj`),
        qNorm: config.qkNorm ? p(`${l}.self_attn.q_norm.weight`) : null,
        kNorm: config.qkNorm ? p(`${l}.self_attn.k_norm.weight`) : null,
        postAttentionLayernorm: p(`${l}.post_attention_layernorm.weight`),
        gateProj: lin(`${l}.mlp.gate_proj`),
        upProj: lin(`${l}.mlp.up_proj`),
        downProj: lin(`${l}.mlp.down_proj`),
        qkvProj: fused?.[i]?.qkv ?? null,
        gateUpProj: fused?.[i]?.gateUp ?? null,
      };
    });
    this.#norm = p('model.norm.weight');
    this.#lmHead = config.tieWordEmbeddings ? this.#embedTokens : p('lm_head.weight');
    this.#headLinear = { weight: this.#lmHead, bias: null, adapter: null, packed: null };
    if (this.layout === 'inference' && this.#lmHead.device === 'cpu' && torch.packedLinearSupported()) {
      const maxRows = dtype === 'bfloat16' && !torch.cpuHasBf16Matmul() ? Number.POSITIVE_INFINITY : PACKED_MAX_ROWS;
      const projections = this.#layers.flatMap((l) => [l.qkvProj, l.gateUpProj, l.oProj, l.downProj]);
      for (const l of [...projections, this.#headLinear]) {
        if (l === null) continue;
        l.packed = { weight: null, version: -1, maxRows };
        this.#packedLinears.push(l);
      }
    }
  }

  /** Loads a Hugging Face folder: config.json and model.safetensors (or a sharded index). */
  static load(dir: string, options: LoadModelOptions = {}): CausalLM {
    const config = loadModelConfig(dir);
    const dtype = options.dtype ?? 'float32';
    if (dtype !== 'float32' && dtype !== 'bfloat16')
      throw new TypeError(`CausalLM.load: dtype must be float32 or bfloat16, got ${String(dtype)}`);
    const layout = options.layout ?? 'training';
    if (layout !== 'training' && layout !== 'inference')
      throw new TypeError(`CausalLM.load: layout must be training or inference, got ${String(layout)}`);
    if (layout === 'inference' && options.requiresGrad)
      throw new TypeError('CausalLM.load: the inference layout is for decoding; requiresGrad needs the training layout');
    const weights = torch.loadModelWeights(dir, { dtype, ...(options.device ? { device: options.device } : {}) });
    for (const t of weights.values()) torch.keep(t); // parameters outlive any enclosing scope
    // loadModelWeights validated the index; here it only names the shard of a tensor in errors
    const indexFile = join(dir, 'model.safetensors.index.json');
    const weightMap = existsSync(indexFile) ? (JSON.parse(readFileSync(indexFile, 'utf8')) as torch.ShardIndex).weight_map : null;
    const fileOf = (tensor: string | null): string => {
      if (weightMap === null) return join(dir, 'model.safetensors');
      const shard = tensor === null ? undefined : weightMap[tensor];
      return shard === undefined ? indexFile : join(dir, shard);
    };
    try {
      const model = new CausalLM(config, weights, { sourceDir: dir, fileOf, layout });
      if (options.requiresGrad) for (const t of model.#parameters.values()) t.requiresGrad_(true);
      return model;
    } catch (error) {
      for (const t of weights.values()) t.dispose();
      throw error;
    }
  }

  /** The parameters under Hugging Face names (a tied lm_head is embed_tokens, listed once). Owned by the model. */
  parameters(): Map<string, Tensor> {
    this.#checkAlive();
    return new Map(this.#parameters);
  }

  /**
   * Adds `adapter` to projection `module` (a Hugging Face module name such as `model.layers.0.self_attn.q_proj`), or
   * removes it (null). Adapters own their tensors; ./lora.ts attaches LoRA this way.
   */
  setAdapter(module: string, adapter: LinearAdapter | null): void {
    this.#checkAlive();
    const l = this.#linears.get(module);
    if (l === undefined) throw new RangeError(`setAdapter: '${module}' is not a projection of this ${this.config.architecture}`);
    l.adapter = adapter;
  }

  /** True when a forward pass draws random numbers (an adapter with dropout in training mode). */
  get isStochastic(): boolean {
    for (const l of this.#linears.values()) if (l.adapter?.stochastic) return true;
    return false;
  }

  /** A KV cache shaped for this model (same dtype and device). */
  createKVCache(options: { slots: number; maxLength: number }): KVCache {
    this.#checkAlive();
    return new KVCache({
      numLayers: this.config.numHiddenLayers,
      numKeyValueHeads: this.config.numKeyValueHeads,
      headDim: this.config.headDim,
      slots: options.slots,
      maxLength: options.maxLength,
      dtype: this.dtype,
      device: this.#embedTokens.device,
    });
  }

  /**
   * inputIds [B, T] int64 → logits [B, T, vocab] in the model dtype (or final hidden states, see options.output).
   * Records autograd when grad mode is on and parameters require grad (the cache path is inference-only).
   */
  forward(inputIds: Tensor, options: ForwardOptions = {}): Tensor {
    return torch.scope(() => {
      const pass = this.beginPass(inputIds, options);
      let x = pass.embed();
      for (let i = 0; i < pass.numLayers; i++) x = pass.layer(i, x);
      pass.commit();
      const hidden = pass.norm(x);
      return options.output === 'hidden' ? hidden : this.#head(hidden);
    });
  }

  /**
   * The pieces of forward() one at a time — embed, each decoder layer, final norm — for training passes that run
   * layer by layer (activation checkpointing in ./training.ts). Tensors it makes belong to the enclosing scope.
   */
  beginPass(inputIds: Tensor, options: ForwardOptions = {}): ForwardPass {
    this.#checkAlive();
    if (inputIds.ndim !== 2 || inputIds.dtype !== 'int64') {
      throw new TypeError(`forward: inputIds must be a [batch, seq] int64 tensor, got ${inputIds.toString()}`);
    }
    const [batch, seqLen] = inputIds.shape as [number, number];
    const { attentionMask, positionIds, cache } = options;
    for (const [name, t] of [
      ['attentionMask', attentionMask],
      ['positionIds', positionIds],
    ] as const) {
      if (t !== undefined && (t.ndim !== 2 || t.size(0) !== batch || t.size(1) !== seqLen)) {
        throw new TypeError(`forward: ${name} must have shape [${batch}, ${seqLen}] like inputIds, got [${t.shape.join(', ')}]`);
      }
    }
    const slots = options.slots ?? Array.from({ length: batch }, (_, b) => b);
    if (options.slots !== undefined && cache === undefined) throw new TypeError('forward: slots given without a cache');
    if (slots.length !== batch) throw new RangeError(`forward: ${slots.length} slots for ${batch} batch rows`);

    const packed = options.sharedPrefix ? packedAttention(options.sharedPrefix, seqLen) : null;
    if (packed !== null && (batch !== 1 || cache !== undefined || positionIds === undefined || attentionMask !== undefined)) {
      throw new TypeError('forward: sharedPrefix takes inputIds [1, tokens] with positionIds, no attentionMask and no cache');
    }
    const real = attentionMask?.bool() ?? null; // [B, T]
    const realRows = cache && real ? (real.toArray() as boolean[][]) : null;
    const step: CacheStep | null = cache ? cache.begin(slots, seqLen, realRows) : null;

    // positions: explicit, or count of real tokens before each one (pads get 1, as generate() does)
    let positions: Tensor;
    if (positionIds !== undefined) positions = positionIds.long();
    else if (real !== null) positions = real.long().cumsum(-1).sub(1).maskedFill(real.logicalNot(), 1);
    else positions = torch.arange(seqLen, { device: inputIds.device }).unsqueeze(0).expand([batch, seqLen]);
    if (step !== null && positionIds === undefined) {
      positions = positions.add(
        torch.tensor(BigInt64Array.from(step.tokenOffsets, BigInt), { shape: [batch, 1], device: inputIds.device }),
      );
    }
    const { invFreq, attentionScaling } = this.#rotary(positions);
    const { cos, sin } = rotaryCosSin(invFreq, attentionScaling, positions, this.dtype);

    // attention mask, true = attend: causal, real keys only, plus the diagonal (a pad query sees itself)
    let mask: Tensor | null = null;
    if (step !== null) mask = step.attentionMask;
    else if (real !== null) mask = causalPadMask(real);
    const eps = this.config.rmsNormEps;
    return {
      numLayers: this.#layers.length,
      embed: () => torch.embedding(this.#embedTokens, inputIds),
      layer: (i, x) => {
        const layer = this.#layers[i];
        if (layer === undefined) throw new RangeError(`layer ${i} out of range (${this.#layers.length} layers)`);
        const h = x.add(this.#attention(layer, i, rmsNorm(x, layer.inputLayernorm, eps), cos, sin, mask, step, packed));
        return h.add(mlp(layer, rmsNorm(h, layer.postAttentionLayernorm, eps)));
      },
      norm: (x) => rmsNorm(x, this.#norm, eps),
      commit: () => step?.commit(),
    };
  }

  /** The LM head: hidden states [..., hidden] → logits [..., vocab] (for chunked log-probs over forward(..., {output: 'hidden'})). */
  logits(hidden: Tensor): Tensor {
    this.#checkAlive();
    return this.#head(hidden);
  }

  /** The LM head (the inference layout's packed copy for 1 to 64 rows, see WeightLayout). */
  #head(hidden: Tensor): Tensor {
    return linear(hidden, this.#headLinear);
  }

  #attention(
    layer: DecoderLayer,
    index: number,
    h: Tensor,
    cos: Tensor,
    sin: Tensor,
    mask: Tensor | null,
    step: CacheStep | null,
    packed: PackedAttention | null = null,
  ): Tensor {
    const [batch, seqLen] = h.shape as [number, number, number];
    const { numAttentionHeads: heads, numKeyValueHeads: kvHeads, headDim, rmsNormEps: eps } = this.config;
    const fused = layer.qkvProj;
    let q: Tensor;
    let k: Tensor;
    let v: Tensor;
    if (fused !== null && layer.qProj.adapter === null && layer.kProj.adapter === null && layer.vProj.adapter === null) {
      const qkv = linear(h, fused); // [B, T, (heads + 2 kvHeads) headDim]
      q = qkv.narrow(-1, 0, heads * headDim);
      k = qkv.narrow(-1, heads * headDim, kvHeads * headDim);
      v = qkv.narrow(-1, (heads + kvHeads) * headDim, kvHeads * headDim);
    } else [q, k, v] = [linear(h, layer.qProj), linear(h, layer.kProj), linear(h, layer.vProj)];
    q = q.view([batch, seqLen, heads, headDim]);
    k = k.view([batch, seqLen, kvHeads, headDim]);
    v = v.view([batch, seqLen, kvHeads, headDim]).transpose(1, 2);
    if (layer.qNorm !== null && layer.kNorm !== null) {
      q = rmsNorm(q, layer.qNorm, eps);
      k = rmsNorm(k, layer.kNorm, eps);
    }
    q = applyRotary(q.transpose(1, 2), cos, sin); // [B, heads, T, headDim]
    k = applyRotary(k.transpose(1, 2), cos, sin); // [B, kvHeads, T, headDim]
    if (packed !== null) {
      // prefixes attend among themselves; each continuation to its prefix's keys and values, then to its own
      const [qs, ks, vs] = [splitPacked(q, packed), splitPacked(k, packed), splitPacked(v, packed)];
      const ofRow = (t: Tensor) => t.indexSelect(0, packed.rowPrefix);
      const prefixOut = torch.scaledDotProductAttention(qs.prefix, ks.prefix, vs.prefix, { mask: packed.prefixMask });
      const suffixOut = torch.scaledDotProductAttention(
        qs.suffix,
        torch.cat([ofRow(ks.prefix), ks.suffix], 2),
        torch.cat([ofRow(vs.prefix), vs.suffix], 2),
        { mask: packed.suffixMask },
      );
      const merge = (t: Tensor) => t.transpose(1, 2).reshape([1, -1, heads * headDim]);
      return linear(torch.cat([merge(prefixOut), merge(suffixOut)], 1), layer.oProj);
    }
    let keys = k;
    let values = v;
    if (step !== null) ({ keys, values } = step.update(index, k, v));
    const out =
      mask === null
        ? torch.scaledDotProductAttention(q, keys, values, { causal: true })
        : torch.scaledDotProductAttention(q, keys, values, { mask });
    return linear(out.transpose(1, 2).reshape([batch, seqLen, heads * headDim]), layer.oProj);
  }

  /** inv_freq for these positions: fixed, except dynamic NTK which grows with the longest position (as transformers). */
  #rotary(positions: Tensor): { invFreq: Tensor; attentionScaling: number } {
    const { rope, headDim, maxPositionEmbeddings } = this.config;
    const compute = (seqLen?: number) => {
      const r = ropeInverseFrequencies(rope, headDim, maxPositionEmbeddings, seqLen);
      const device = this.#embedTokens.device;
      return device === 'cpu' ? r : { invFreq: r.invFreq.to({ device }), attentionScaling: r.attentionScaling };
    };
    if (rope.scaling.type === 'dynamic') {
      const seqLen = positions.max().item() + 1;
      if (seqLen > maxPositionEmbeddings) return compute(seqLen);
    }
    if (this.#rope === null) {
      const r = compute();
      this.#rope = { invFreq: torch.keep(r.invFreq), attentionScaling: r.attentionScaling };
    }
    return this.#rope;
  }

  /**
   * Writes a Hugging Face folder: config.json (the source keys, dtype updated), model.safetensors or shards + index,
   * and the source folder's generation_config.json and tokenizer files. transformers loads it unchanged.
   */
  save(dir: string, options: SaveModelOptions = {}): string[] {
    this.#checkAlive();
    mkdirSync(dir, { recursive: true });
    // stale weights from an earlier save would shadow or mix with the new ones
    for (const name of readdirSync(dir)) {
      if (
        name === 'model.safetensors' ||
        name === 'model.safetensors.index.json' ||
        /^model-\d+-of-\d+\.safetensors$/.test(name)
      ) {
        rmSync(join(dir, name));
      }
    }
    const config: Record<string, unknown> = { ...this.config.raw, dtype: this.dtype };
    if ('torch_dtype' in config) config.torch_dtype = this.dtype;
    const written = [join(dir, 'config.json')];
    writeFileSync(written[0] as string, `${JSON.stringify(config, null, 2)}\n`);
    written.push(
      ...torch.saveModelWeights(
        dir,
        this.#parameters,
        options.maxShardBytes === undefined ? {} : { maxShardBytes: options.maxShardBytes },
      ),
    );
    if (this.sourceDir !== null && resolve(this.sourceDir) !== resolve(dir)) {
      for (const name of COPIED_FILES) {
        const source = join(this.sourceDir, name);
        if (existsSync(source)) {
          copyFileSync(source, join(dir, name));
          written.push(join(dir, name));
        }
      }
    }
    return written;
  }

  /** Frees every parameter. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const t of this.#parameters.values()) t.dispose();
    for (const t of this.#fused) t?.dispose();
    for (const l of this.#packedLinears) l.packed?.weight?.dispose();
    this.#rope?.invFreq.dispose();
    this.#rope = null;
  }

  get isDisposed(): boolean {
    return this.#disposed;
  }

  #checkAlive(): void {
    if (this.#disposed) throw new Error(`${this.config.architecture} was disposed`);
  }
}

function sameValues(a: Tensor, b: Tensor): boolean {
  if (a.shape.length !== b.shape.length || a.shape.some((s, i) => s !== b.shape[i])) return false;
  return torch.scope(() => a.eq(b).all().item() === 1);
}
