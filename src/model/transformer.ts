// The Llama / Qwen2 / Qwen3 / Qwen2-MoE / Qwen3-MoE decoder-only transformer, as transformers computes it
// (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM), loading and
// saving Hugging Face model folders.
//
//   x = embed_tokens[ids]                                                     [B, T, H]
//   for each layer:
//     h = rmsnorm(x) ; q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)          [B, heads|kvHeads, T, headDim]
//     (Qwen3) q, k = rmsnorm_headDim(q), rmsnorm_headDim(k)
//     q, k = rope(q), rope(k)                 q*cos + rotate_half(q)*sin, rotate_half(x) = [-x2, x1]
//     (cache) append k, v to the slot; attend over its prefix
//     x = x + softmax(q k^T / sqrt(headDim) + mask) v Wo (+bo)              grouped-query: kvHeads shared by groups
//     x = x + down(silu(gate(rmsnorm(x))) * up(rmsnorm(x)))                 SwiGLU
//       (sparse layers of a mixture of experts: x = x + sparseMoe(rmsnorm(x)), top-k routed experts, ./moe.ts)
//   logits = rmsnorm(x) lm_head^T                                            lm_head = embed_tokens when tied
//
// RMSNorm as transformers: y = weight * (x_f32 * rsqrt(mean(x_f32^2) + eps)).to(x.dtype).
// Padded batches: a 2-d attention mask (1 = real token; left or right padding). Position ids default to
// cumsum(mask) - 1 (what generate() passes; for unpadded rows simply 0..T-1). Pad queries attend only to themselves,
// so no row is fully masked and no NaN can reach real tokens.
//
// Beside this file: ./rope.ts (rotary tables for each rope type), ./hf-weights.ts (weight names, checks, reading and
// writing folders), ./linear.ts (a projection, with adapter and packed kernel), ./inference-layout.ts (fused,
// column-major weights for decoding), ./decoder-layer.ts (a layer: norms, MLP, attention), ./kv-cache.ts,
// ./shared-prefix-attention.ts (GRPO groups packed in one row),
// ./packed-attention.ts (rows packed end to end without pads), ./moe.ts (the sparse expert MLP and its
// load-balancing loss), ./batch-invariant.ts (setBatchInvariant: logits that do not depend on the batch, the same bits
// in a decode step and a training forward).
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { batchInvariantSupported, sequenceStarts } from './batch-invariant.js';
import { causalPadMask } from './attention-mask.js';
import { loadModelConfig, type ModelConfig } from './config.js';
import { type DecoderLayer, expertProjections, layerAttention, mlp, rmsNorm, routerProjections } from './decoder-layer.js';
import { checkWeights, expectedWeights, readModelWeights, type SaveModelOptions, writeModelFolder } from './hf-weights.js';
import { attachPackedWeights, fuseForInference, type WeightLayout } from './inference-layout.js';
import { type CachePlan, type CacheStep, KVCache, type SequenceKVCache } from './kv-cache.js';
import { PagedKVCache } from './paged-kv-cache.js';
import { fixedOrderCopy, type Linear, type LinearAdapter, linear, packedWeight, plainLinear } from './linear.js';
import { type Routing, sparseMoe } from './moe.js';
import { RotaryEmbedding } from './rope.js';
import { type PackedLayout, type PackedPass, packedPass } from './packed-attention.js';
import { type SharedPrefixLayout, sharedPrefixPass } from './shared-prefix-attention.js';

export { rmsNorm } from './decoder-layer.js';

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
  /** Append the new tokens to this cache (slots or paged) and attend over each row's cached prefix. */
  cache?: SequenceKVCache;
  /**
   * The cache's plan for this forward (cache.plan(slots, T, realTokens, ...)), made by the caller: the forward then
   * makes no tensor from JavaScript data and reads nothing back, so it can be captured (../torch/capture.ts), and on a
   * GPU nothing in it waits for queued work. A plan with real tokens stands for the attention mask (give none).
   * Default: planned here (from the attention mask, read back to the host).
   */
  cachePlan?: CachePlan;
  /** The cache slot of each batch row (distinct; default 0..B-1). */
  slots?: readonly number[];
  /** 'logits' (default): [B, T, vocab]; 'hidden': final normed hidden states [B, T, hidden] for logits() chunk by chunk. */
  output?: 'logits' | 'hidden';
  /** inputIds is a packed batch of shared prompts and their continuations (see SharedPrefixLayout); needs positionIds. */
  sharedPrefix?: SharedPrefixLayout;
  /**
   * inputIds is packed rows without pads (see PackedLayout, ./packed-attention.ts), or their pass made ahead
   * (packedPass); needs positionIds.
   */
  packed?: PackedLayout | PackedPass;
  /**
   * Mixture of experts: called with each sparse layer's routing of the B*T tokens (row-major), for the
   * load-balancing loss and the routed experts. Its tensors belong to the pass's scope (forward() frees them when
   * it returns: use them inside the call, or keep() them).
   */
  onRouting?: (layer: number, routing: Routing) => void;
  /**
   * Mixture of experts, router replay (./moe.ts): per layer index, the experts recorded for the B*T tokens
   * (row-major) [B*T, k] int64, -1 rows routed by the router; a layer without an entry routes every token itself.
   */
  replayRouting?: readonly (Tensor | null | undefined)[];
  /**
   * RoPE tables cos, sin [B, 1, T, headDim] computed by the caller (the multimodal RoPE of ./vision/mrope.ts), used
   * instead of the tables of the token positions.
   */
  rotary?: { cos: Tensor; sin: Tensor };
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
  #embedTokens: Tensor;
  readonly #layers: DecoderLayer[];
  /** The projections of every layer by Hugging Face module name (model.layers.0.self_attn.q_proj ...). */
  readonly #linears = new Map<string, Linear>();
  #norm: Tensor;
  #lmHead: Tensor;
  /** The LM head as a projection (packed in the inference layout, see WeightLayout). */
  readonly #headLinear: Linear;
  /** The projections that have a packed weight (inference layout, CPU with AVX2). */
  readonly #packedLinears: Linear[];
  /** The fused matrices of the inference layout (parameters are views into them). */
  readonly #fused: (Tensor | null)[];
  readonly #rope: RotaryEmbedding;
  #disposed = false;
  #batchInvariant = false;

  /**
   * Builds a model from weights with Hugging Face names, checked against the config; the model takes ownership.
   * `fileOf(tensor)` names the file a tensor came from (null: the weights as a whole) in error messages.
   */
  constructor(
    config: ModelConfig,
    weights: Map<string, Tensor>,
    options: { sourceDir?: string | null; fileOf?: (tensor: string | null) => string; layout?: WeightLayout } = {},
  ) {
    const dtype = checkWeights(config, weights, options.fileOf ?? (() => 'weights'));
    const expected = expectedWeights(config);
    this.config = config;
    this.dtype = dtype;
    this.sourceDir = options.sourceDir ?? null;
    this.#parameters = new Map();
    for (const name of expected.keys()) this.#parameters.set(name, torch.keep(weights.get(name) as Tensor));
    for (const [name, t] of weights) if (!expected.has(name)) t.dispose();
    this.layout = options.layout ?? 'training';
    if (this.layout === 'inference' && [...this.#parameters.values()].some((t) => t.requiresGrad))
      throw new TypeError(`${config.architecture}: the inference layout is for decoding; its parameters cannot require grad`);
    const fused = this.layout === 'inference' ? fuseForInference(config, this.#parameters) : null;
    this.#fused = fused?.flatMap((f) => [f.qkv.weight, f.qkv.bias, f.gateUp?.weight ?? null, f.gateUp?.bias ?? null]) ?? [];

    const p = (name: string) => this.#parameters.get(name) as Tensor;
    const lin = (name: string): Linear => {
      const l = plainLinear(p(`${name}.weight`), this.#parameters.get(`${name}.bias`) ?? null);
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
        mlp: config.moe?.sparseLayers[i]
          ? {
              router: lin(`${l}.mlp.gate`),
              experts: Array.from({ length: config.moe.numExperts }, (_, e) => ({
                gateProj: lin(`${l}.mlp.experts.${e}.gate_proj`),
                upProj: lin(`${l}.mlp.experts.${e}.up_proj`),
                downProj: lin(`${l}.mlp.experts.${e}.down_proj`),
              })),
              topK: config.moe.numExpertsPerTok,
              normTopkProb: config.moe.normTopkProb,
              shared:
                config.moe.sharedExpertIntermediateSize === null
                  ? null
                  : {
                      expert: {
                        gateProj: lin(`${l}.mlp.shared_expert.gate_proj`),
                        upProj: lin(`${l}.mlp.shared_expert.up_proj`),
                        downProj: lin(`${l}.mlp.shared_expert.down_proj`),
                      },
                      gate: lin(`${l}.mlp.shared_expert_gate`),
                    },
            }
          : {
              gateProj: lin(`${l}.mlp.gate_proj`),
              upProj: lin(`${l}.mlp.up_proj`),
              downProj: lin(`${l}.mlp.down_proj`),
              gateUpProj: fused?.[i]?.gateUp ?? null,
            },
        qkvProj: fused?.[i]?.qkv ?? null,
      };
    });
    this.#norm = p('model.norm.weight');
    this.#lmHead = config.tieWordEmbeddings ? this.#embedTokens : p('lm_head.weight');
    this.#headLinear = plainLinear(this.#lmHead);
    const projections = this.#layers.flatMap((l) =>
      'router' in l.mlp
        ? [l.qkvProj, l.oProj, ...expertProjections(l.mlp)]
        : [l.qkvProj, l.mlp.gateUpProj, l.oProj, l.mlp.downProj],
    );
    this.#packedLinears =
      this.layout === 'inference'
        ? attachPackedWeights([...projections.filter((l) => l !== null), this.#headLinear], dtype, this.#lmHead.device)
        : [];
    this.#rope = new RotaryEmbedding(config, this.#embedTokens.device);
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
    const { weights, fileOf } = readModelWeights(dir, config, { dtype, ...(options.device ? { device: options.device } : {}) });
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
   * Swaps parameters for other tensors under the same names (training layout): the model takes `replacements` and
   * hands back the tensors they replace, which the caller then owns. Fully sharded training (../rft/trainer/fsdp.ts)
   * swaps a layer's gathered weights in before the layer runs and empty placeholders in after it; shapes are not
   * checked, so a forward over a placeholder fails at its first product.
   */
  replaceParameters(replacements: ReadonlyMap<string, Tensor>): Map<string, Tensor> {
    this.#checkAlive();
    if (this.layout !== 'training')
      throw new TypeError('replaceParameters: the inference layout fuses its weights into views; use the training layout');
    const previous = new Map<string, Tensor>();
    for (const [name, t] of replacements) {
      const old = this.#parameters.get(name);
      if (old === undefined)
        throw new RangeError(`replaceParameters: '${name}' is not a parameter of this ${this.config.architecture}`);
      this.#bind(name, t);
      previous.set(name, old);
      this.#parameters.set(name, torch.keep(t));
    }
    return previous;
  }

  /** Points the module that reads parameter `name` at `t`. */
  #bind(name: string, t: Tensor): void {
    if (name === 'model.embed_tokens.weight' || name === 'lm_head.weight') {
      if (name === 'model.embed_tokens.weight') this.#embedTokens = t;
      if (name === 'lm_head.weight' || this.config.tieWordEmbeddings) {
        this.#lmHead = t;
        this.#headLinear.weight = t;
      }
      return;
    }
    if (name === 'model.norm.weight') {
      this.#norm = t;
      return;
    }
    const [, module, kind] = /^(.*)\.(weight|bias)$/.exec(name) ?? [];
    const projection = module === undefined ? undefined : this.#linears.get(module);
    if (projection !== undefined) {
      if (kind === 'weight') projection.weight = t;
      else projection.bias = t;
      return;
    }
    const [, index, norm] =
      /^model\.layers\.(\d+)\.(input_layernorm|post_attention_layernorm|self_attn\.q_norm|self_attn\.k_norm)\.weight$/.exec(
        name,
      ) ?? [];
    const layer = index === undefined ? undefined : this.#layers[Number(index)];
    if (layer === undefined) throw new RangeError(`replaceParameters: no module of this model reads '${name}'`);
    if (norm === 'input_layernorm') layer.inputLayernorm = t;
    else if (norm === 'post_attention_layernorm') layer.postAttentionLayernorm = t;
    else if (norm === 'self_attn.q_norm') layer.qNorm = t;
    else layer.kNorm = t;
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

  /**
   * Packs now every packed weight of the inference layout that is missing or older than its weight (otherwise packed
   * on first use): after a weight sync, so that captured decode steps, which hold the packed tensors and run no
   * JavaScript, read the new weights (repacked in place). No-op in the training layout.
   */
  refreshPackedWeights(): void {
    this.#checkAlive();
    for (const l of this.#packedLinears) if (l.packed !== null) packedWeight(l);
  }

  /** Whether forwards run batch-invariant (see setBatchInvariant). */
  get batchInvariant(): boolean {
    return this.#batchInvariant;
  }

  /**
   * Batch-invariant forwards on or off (./batch-invariant.ts): a sequence's logits then do not depend on its batch
   * companions, its row, padding, or a KV cache, and are the same bits in either weight layout (the sampler's
   * log-probs equal the trainer's). On a CPU with AVX2/FMA; the training layout keeps a packed copy of each projection
   * (the weights' size again) while it is on.
   */
  setBatchInvariant(on: boolean): void {
    this.#checkAlive();
    if (on === this.#batchInvariant) return;
    const device = this.#embedTokens.device;
    if (on && !batchInvariantSupported(device))
      throw new Error(
        `the batch-invariant forward runs on a CPU with AVX2 and FMA; this model is on ${device}${device === 'cpu' ? ' (no AVX2/FMA)' : ''}`,
      );
    if (on && this.config.rope.scaling.type === 'dynamic')
      throw new Error('the batch-invariant forward does not take dynamic NTK RoPE (its frequencies follow the batch)');
    this.#batchInvariant = on;
    if (this.layout === 'inference') for (const l of this.#packedLinears) if (l.packed !== null) l.packed.fixedOrder = on;
    // the projections without a packed copy (the training layout's, the inference layout's routers) get one while on
    const routers = this.#layers.flatMap((l) => ('router' in l.mlp ? routerProjections(l.mlp) : []));
    for (const l of this.layout === 'inference' ? routers : [...this.#linears.values(), this.#headLinear]) fixedOrderCopy(l, on);
  }

  /** True when a forward pass draws random numbers (an adapter with dropout in training mode). */
  get isStochastic(): boolean {
    for (const l of this.#linears.values()) if (l.adapter?.stochastic) return true;
    return false;
  }

  /**
   * A KV cache shaped for this model (same dtype and device), per layer (see ./kv-cache.ts):
   *   keys[layer], values[layer]   [slots, kvHeads, maxLength, headDim]   slot s's prefix: [s, :, :length(s), :]
   */
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
   * A paged KV cache shaped for this model (same dtype and device; see ./paged-kv-cache.ts):
   *   keys[layer], values[layer]   [numBlocks · blockSize, kvHeads, headDim]
   */
  createPagedKVCache(options: {
    slots: number;
    maxLength: number;
    numBlocks: number;
    blockSize?: number;
    prefixCaching: boolean;
    decodeCopy?: boolean;
  }): PagedKVCache {
    this.#checkAlive();
    return new PagedKVCache({
      numLayers: this.config.numHiddenLayers,
      numKeyValueHeads: this.config.numKeyValueHeads,
      headDim: this.config.headDim,
      ...options,
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

    const shared = options.sharedPrefix ? sharedPrefixPass(options.sharedPrefix, seqLen) : null;
    const packed =
      options.packed === undefined
        ? null
        : 'buckets' in options.packed
          ? options.packed
          : packedPass(options.packed, seqLen, inputIds.device);
    if (packed !== null && packed.tokens !== seqLen)
      throw new TypeError(`forward: packed lays out ${packed.tokens} tokens, inputIds has ${seqLen}`);
    if (
      (shared !== null || packed !== null) &&
      (batch !== 1 ||
        cache !== undefined ||
        positionIds === undefined ||
        attentionMask !== undefined ||
        (shared !== null && packed !== null))
    ) {
      throw new TypeError(
        'forward: sharedPrefix or packed (one of them) takes inputIds [1, tokens] with positionIds, no attentionMask and no cache',
      );
    }
    const real = attentionMask?.bool() ?? options.cachePlan?.realTokens ?? null; // [B, T]
    const realRows = cache && attentionMask && !options.cachePlan ? ((real as Tensor).toArray() as boolean[][]) : null;
    if (
      options.cachePlan !== undefined &&
      (cache === undefined ||
        options.cachePlan.slots.length !== batch ||
        options.cachePlan.newTokens !== seqLen ||
        attentionMask !== undefined)
    ) {
      throw new TypeError("forward: cachePlan takes a cache, no attentionMask, and must plan inputIds' [batch, seq]");
    }
    const step: CacheStep | null = cache ? cache.begin(options.cachePlan ?? cache.plan(slots, seqLen, realRows)) : null;

    // positions: explicit, or count of real tokens before each one (pads get 1, as generate() does)
    let positions: Tensor;
    if (positionIds !== undefined) positions = positionIds.long();
    else if (real !== null) positions = real.long().cumsum(-1).sub(1).maskedFill(real.logicalNot(), 1);
    else positions = torch.arange(seqLen, { device: inputIds.device }).unsqueeze(0).expand([batch, seqLen]);
    if (step !== null && positionIds === undefined) {
      positions = positions.add(step.plan.tokenOffsets);
    }
    const invariant = this.#batchInvariant;
    // the training layout's packed copies are made again each pass: optimizers update weights in place without
    // always bumping their version (libtorch's fused AdamW), which the inference layout's repacking relies on
    if (invariant && this.layout === 'training')
      for (const l of [...this.#linears.values(), this.#headLinear]) if (l.packed) l.packed.version = -1;
    // the table's bound on the positions: a cache's length, else the sequence's (explicit ids: read back)
    const limit = () => (cache ? cache.maxLength : positionIds ? positions.max().item() + 1 : seqLen);
    const { cos, sin } =
      options.rotary ??
      (invariant ? this.#rope.tableCosSin(positions, this.dtype, limit()) : this.#rope.cosSin(positions, this.dtype));
    if (invariant && shared !== null)
      throw new TypeError('forward: the batch-invariant forward takes no sharedPrefix layout (packed rows it takes)');
    // batch-invariant: each row's attention starts at its first real token (left padding cut off, see rowStarts)
    const rowStarts = invariant && step === null && real !== null ? sequenceStarts(real) : null;

    // attention mask, true = attend: causal, real keys only, plus the diagonal (a pad query sees itself)
    let mask: Tensor | null = null;
    if (step !== null) mask = step.attentionMask;
    else if (real !== null) mask = causalPadMask(real);
    const eps = this.config.rmsNormEps;
    const onePass = invariant ? 'invariant' : this.#cpuDecodeKernels();
    return {
      numLayers: this.#layers.length,
      embed: () => torch.embedding(this.#embedTokens, inputIds),
      layer: (i, x) => {
        const layer = this.#layers[i];
        if (layer === undefined) throw new RangeError(`layer ${i} out of range (${this.#layers.length} layers)`);
        const normed0 = rmsNorm(x, layer.inputLayernorm, eps, onePass);
        const h = x.add(
          layerAttention(layer, i, normed0, {
            ...{ cos, sin, mask, step, packing: shared ?? packed, rowStarts, onePass },
            config: this.config,
            decodeRotary: this.#cpuDecodeKernels(),
            batchInvariant: this.#batchInvariant,
          }),
        );
        const normed = rmsNorm(h, layer.postAttentionLayernorm, eps, onePass);
        if (!('router' in layer.mlp)) return h.add(mlp(layer.mlp, normed));
        const onRouting = options.onRouting;
        const replayed = options.replayRouting?.[i];
        return h.add(sparseMoe(layer.mlp, normed, onRouting && ((routing) => onRouting(i, routing)), replayed));
      },
      norm: (x) => rmsNorm(x, this.#norm, eps, onePass),
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

  /**
   * Writes a Hugging Face folder: config.json (the source keys, dtype updated), model.safetensors or shards + index,
   * and the source folder's generation_config.json and tokenizer files. transformers loads it unchanged.
   */
  save(dir: string, options: SaveModelOptions = {}): string[] {
    this.#checkAlive();
    return writeModelFolder(
      dir,
      { rawConfig: this.config.raw, dtype: this.dtype, parameters: this.#parameters, sourceDir: this.sourceDir },
      options,
    );
  }

  /** Frees every parameter. */
  dispose(): void {
    if (this.#disposed) return;
    this.setBatchInvariant(false); // its packed copies
    this.#disposed = true;
    for (const t of this.#parameters.values()) t.dispose();
    for (const t of this.#fused) t?.dispose();
    for (const l of this.#packedLinears) l.packed?.weight?.dispose();
    this.#rope.dispose();
  }

  get isDisposed(): boolean {
    return this.#disposed;
  }

  #cpuDecodeKernelsHere: boolean | null = null;
  /**
   * Whether the norms and the rotary embedding run the CPU decode kernels (torch.decodeRmsNorm, torch.decodeRotary):
   * the inference layout (which never records gradients: its parameters cannot require grad and its input is token
   * ids), float32 or bfloat16, on a CPU that runs the x86 kernels. decodeRmsNorm differs from ATen's rms_norm by
   * float32 rounding (in bf16, where that rounding flips a bf16 rounding), so the training layout, whose forwards give
   * old and new log-probs alike, keeps ATen's. Decided once: none of it changes.
   */
  #cpuDecodeKernels(): boolean {
    this.#cpuDecodeKernelsHere ??=
      this.layout === 'inference' &&
      (this.dtype === 'float32' || this.dtype === 'bfloat16') &&
      this.#embedTokens.device === 'cpu' &&
      torch.packedLinearSupported();
    return this.#cpuDecodeKernelsHere;
  }

  #checkAlive(): void {
    if (this.#disposed) throw new Error(`${this.config.architecture} was disposed`);
  }
}
