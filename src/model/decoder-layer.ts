// One decoder layer of CausalLM (./transformer.ts) and its parts: the layer's weights under Hugging Face's names, the
// RMSNorm, the dense SwiGLU MLP and the attention block (q/k/v projections, q/k norms, RoPE, then the cache's keys,
// the shared-prefix or packed-rows layouts, or plain causal attention; the output projection).
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { attention } from './attention.js';
import { activation, invariantAttention, invariantPackedAttention, invariantRmsNorm } from './batch-invariant.js';
import type { ModelConfig } from './config.js';
import type { CacheStep } from './kv-cache.js';
import { type Linear, linear } from './linear.js';
import type { SparseMoeBlock } from './moe.js';
import { type PackedPass, packedAttention } from './packed-attention.js';
import { applyRotary } from './rope.js';
import { type SharedPrefixPass, sharedPrefixAttention } from './shared-prefix-attention.js';

/** One decoder layer: model.layers.{i}.* under Hugging Face's names (input_layernorm, self_attn.q_proj, ...). */
export interface DecoderLayer {
  inputLayernorm: Tensor;
  qProj: Linear;
  kProj: Linear;
  vProj: Linear;
  oProj: Linear;
  qNorm: Tensor | null;
  kNorm: Tensor | null;
  postAttentionLayernorm: Tensor;
  /** The dense SwiGLU MLP, or a mixture of experts' sparse block (model.layers.{i}.mlp.gate + mlp.experts.{e}). */
  mlp: DenseMlp | SparseMoeBlock;
  /** Inference layout only: q|k|v as one projection (q/k/v_proj are views into it). */
  qkvProj: Linear | null;
}

/** model.layers.{i}.mlp.{gate,up,down}_proj. */
export interface DenseMlp {
  gateProj: Linear;
  upProj: Linear;
  downProj: Linear;
  /** Inference layout only: gate|up as one projection (gate/up_proj are views into it). */
  gateUpProj: Linear | null;
}

/**
 * transformers' RMSNorm; float32 runs ATen's fused kernel (equal to the formula), bf16 rounds before the weight.
 * `onePass` (see CausalLM.#cpuDecodeKernels): torch.decodeRmsNorm, one native pass instead of ATen's ~10 ops a call
 * (~1.5 vs ~10 us: a sizeable share of a small model's decode step).
 */
export function rmsNorm(x: Tensor, weight: Tensor, eps: number, onePass: boolean | 'invariant'): Tensor {
  if (onePass === 'invariant') return invariantRmsNorm(x, weight, eps, () => rmsNorm(x, weight, eps, false));
  if (onePass) return torch.decodeRmsNorm(x, weight, eps);
  return x.dtype === 'float32'
    ? torch.rmsNorm(x, weight.shape, weight, eps)
    : weight.mul(torch.rmsNorm(x, weight.shape, null, eps)); // weight * (x_f32 * rsqrt(...)).to(x.dtype)
}

/** SwiGLU: down(silu(gate(h)) * up(h)); gate and up in one product when the layout fused them. */
export function mlp(layer: DenseMlp, h: Tensor): Tensor {
  const fused = layer.gateUpProj;
  const invariant = layer.downProj.packed?.fixedOrder === true; // the model's batch-invariant mode
  const silu = (x: Tensor) => activation(x, 'silu', invariant);
  if (fused === null || layer.gateProj.adapter !== null || layer.upProj.adapter !== null)
    return linear(silu(linear(h, layer.gateProj)).mul(linear(h, layer.upProj)), layer.downProj);
  const gateUp = linear(h, fused);
  const width = layer.upProj.weight.size(0);
  return linear(silu(gateUp.narrow(-1, 0, width)).mul(gateUp.narrow(-1, width, width)), layer.downProj);
}

/** What one layer's attention reads of its pass (see CausalLM.beginPass). */
export interface AttentionPass {
  cos: Tensor;
  sin: Tensor;
  mask: Tensor | null;
  step: CacheStep | null;
  /** Shared prompts packed with their continuations, or rows packed without pads. */
  packing: SharedPrefixPass | PackedPass | null;
  /** Batch-invariant forwards without a cache: each row's first real token (null: all 0). */
  rowStarts: readonly number[] | null;
  onePass: boolean | 'invariant';
  config: ModelConfig;
  /** torch.decodeRotary instead of applyRotary (the CPU decode kernels, see CausalLM.#cpuDecodeKernels). */
  decodeRotary: boolean;
  /** The batch-invariant attention (./batch-invariant.ts). */
  batchInvariant: boolean;
}

/** A sparse block's expert projections (each expert's run of a decode step is a few rows: the packed kernel's case). */
export const expertProjections = (block: SparseMoeBlock): Linear[] =>
  [...block.experts, ...(block.shared ? [block.shared.expert] : [])].flatMap((e) => [e.gateProj, e.upProj, e.downProj]);

/** A sparse block's gates: its router and (qwen2_moe) the shared expert's gate (no packed copy in the inference layout). */
export const routerProjections = (block: SparseMoeBlock): Linear[] => [
  block.router,
  ...(block.shared ? [block.shared.gate] : []),
];

export function layerAttention(layer: DecoderLayer, index: number, h: Tensor, pass: AttentionPass): Tensor {
  const { cos, sin, mask, step, packing, rowStarts, onePass } = pass;
  const [batch, seqLen] = h.shape as [number, number, number];
  const { numAttentionHeads: heads, numKeyValueHeads: kvHeads, headDim, rmsNormEps: eps } = pass.config;
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
    q = rmsNorm(q, layer.qNorm, eps, onePass);
    k = rmsNorm(k, layer.kNorm, eps, onePass);
  }
  // [B, heads, T, headDim], [B, kvHeads, T, headDim]; torch.decodeRotary gives applyRotary's bits in one native call
  const rotary = pass.decodeRotary ? torch.decodeRotary : applyRotary;
  q = rotary(q.transpose(1, 2), cos, sin);
  k = rotary(k.transpose(1, 2), cos, sin);
  // prefixes attend among themselves; each continuation to its prefix's keys and values, then to its own
  if (packing !== null && 'buckets' in packing) {
    const packed = () => packedAttention(q, k, v, packing);
    return linear(pass.batchInvariant ? invariantPackedAttention(q, k, v, packing, packed) : packed(), layer.oProj);
  }
  if (packing !== null) return linear(sharedPrefixAttention(q, k, v, packing), layer.oProj);
  let keys = k;
  let values = v;
  if (step !== null) ({ keys, values } = step.update(index, k, v));
  const out = pass.batchInvariant
    ? invariantAttention(q, keys, values, mask, rowStarts, () => attention(q, keys, values, mask))
    : attention(q, keys, values, mask);
  return linear(out.transpose(1, 2).reshape([batch, seqLen, heads * headDim]), layer.oProj);
}
