// The model configuration: Hugging Face's config.json for the Llama / Qwen2 / Qwen3 family and the Qwen2-MoE and
// Qwen3-MoE mixtures of experts, read into a typed object.
//
// Every key that shapes the network is checked; a missing or invalid one is an error naming the file and the key.
// Keys that transformers itself defaults (attention_bias, mlp_bias, tie_word_embeddings, hidden_act, rms_norm_eps,
// rope_theta, head_dim where the class derives it) take transformers' default for that model_type. Features this
// implementation does not have (sliding-window layers, rope types other than default/linear/dynamic/llama3/yarn,
// partial rotary, quantized weights) are errors, never silently ignored.
//
// RoPE parameters come in two spellings: transformers ≥ 5 writes `rope_parameters: { rope_type, rope_theta, ... }`;
// older checkpoints (most of the Hub) have `rope_theta` plus `rope_scaling: { rope_type | type, factor, ... } | null`.
import { join } from 'node:path';
import { fileErrorDetail, readRegularFile } from '../util/index.js';

export type ModelType = 'llama' | 'qwen2' | 'qwen3' | 'qwen2_moe' | 'qwen3_moe';

export const SUPPORTED_ARCHITECTURES: Readonly<Record<ModelType, string>> = {
  llama: 'LlamaForCausalLM',
  qwen2: 'Qwen2ForCausalLM',
  qwen3: 'Qwen3ForCausalLM',
  qwen2_moe: 'Qwen2MoeForCausalLM',
  qwen3_moe: 'Qwen3MoeForCausalLM',
};

/**
 * The sparse MLP of a mixture-of-experts model (Qwen2MoeConfig's and Qwen3MoeConfig's keys; defaults: their class
 * defaults). Layer i is sparse when
 * i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0; the others keep a dense SwiGLU MLP of
 * intermediate_size.
 */
export interface MoeConfig {
  /** num_experts (transformers 5 writes it as num_local_experts). */
  numExperts: number;
  /** num_experts_per_tok: the k of the router's top-k. */
  numExpertsPerTok: number;
  /** moe_intermediate_size: each expert's SwiGLU width. */
  moeIntermediateSize: number;
  /** norm_topk_prob: renormalise the k chosen probabilities to sum to 1. */
  normTopkProb: boolean;
  /** router_aux_loss_coef: weight of the load-balancing loss added to the SFT loss (./moe.ts). */
  routerAuxLossCoef: number;
  /** Per layer: true when its MLP is the sparse expert block. */
  sparseLayers: readonly boolean[];
  /**
   * qwen2_moe's shared_expert_intermediate_size: a SwiGLU every token goes through, scaled by
   * sigmoid(shared_expert_gate(h)) and added to the routed experts' sum; null for qwen3_moe (none).
   */
  sharedExpertIntermediateSize: number | null;
}

/** How inverse frequencies are computed (transformers' modeling_rope_utils, same names). */
export type RopeScaling =
  | { type: 'default' }
  /** inv_freq / factor (position interpolation). */
  | { type: 'linear'; factor: number }
  /** NTK-aware: base grows with the sequence length once it passes max_position_embeddings. */
  | { type: 'dynamic'; factor: number }
  /** Llama 3.1: low frequencies / factor, high kept, a smooth ramp between. */
  | { type: 'llama3'; factor: number; lowFreqFactor: number; highFreqFactor: number; originalMaxPositionEmbeddings: number }
  /** YaRN (arXiv 2309.00071): ramp between interpolation and extrapolation, cos/sin scaled by attentionFactor. */
  | {
      type: 'yarn';
      factor: number;
      originalMaxPositionEmbeddings: number;
      /** null: derived from factor (and mscale / mscaleAllDim) as transformers does. */
      attentionFactor: number | null;
      betaFast: number;
      betaSlow: number;
      mscale: number | null;
      mscaleAllDim: number | null;
      truncate: boolean;
    };

export interface RopeConfig {
  theta: number;
  scaling: RopeScaling;
}

export interface ModelConfig {
  /** The config.json this came from (for error messages). */
  file: string;
  modelType: ModelType;
  architecture: string;
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numHiddenLayers: number;
  numAttentionHeads: number;
  numKeyValueHeads: number;
  headDim: number;
  rmsNormEps: number;
  maxPositionEmbeddings: number;
  tieWordEmbeddings: boolean;
  /** Biases on q_proj, k_proj, v_proj (always for Qwen2; attention_bias for Llama and Qwen3). */
  qkvBias: boolean;
  /** Bias on o_proj (attention_bias for Llama and Qwen3; never for Qwen2). */
  outputBias: boolean;
  /** Biases on gate/up/down_proj (Llama's mlp_bias). */
  mlpBias: boolean;
  /** RMSNorm over head_dim on queries and keys before RoPE (Qwen3). */
  qkNorm: boolean;
  rope: RopeConfig;
  /** The experts of a mixture-of-experts model (qwen3_moe); null for dense models. */
  moe: MoeConfig | null;
  /** The parsed JSON, kept so that save() writes every key back unchanged. */
  raw: Readonly<Record<string, unknown>>;
}

export class ModelConfigError extends Error {
  constructor(file: string, key: string | null, detail: string) {
    super(key === null ? `${file}: ${detail}` : `${file}: key '${key}': ${detail}`);
    this.name = 'ModelConfigError';
  }
}

/** Reads `<dir>/config.json` (or a path to a .json file) and validates it. */
export function loadModelConfig(dirOrFile: string): ModelConfig {
  const file = dirOrFile.endsWith('.json') ? dirOrFile : join(dirOrFile, 'config.json');
  let text: string;
  try {
    text = readRegularFile(file, 'utf8');
  } catch (error) {
    throw new ModelConfigError(file, null, `cannot read the model config: ${fileErrorDetail(error)}`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new ModelConfigError(file, null, `not valid JSON: ${(error as Error).message}`);
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw new ModelConfigError(file, null, 'expected a JSON object');
  return parseModelConfig(raw as Record<string, unknown>, file);
}

/** Validates a parsed config.json object; `file` names it in errors. */
export function parseModelConfig(raw: Record<string, unknown>, file = 'config.json'): ModelConfig {
  const read = new Reader(raw, file);
  const modelType = read.value('model_type');
  if (typeof modelType !== 'string' || !Object.hasOwn(SUPPORTED_ARCHITECTURES, modelType)) {
    throw new ModelConfigError(
      file,
      'model_type',
      `unsupported model type ${JSON.stringify(modelType)}; supported: ${Object.keys(SUPPORTED_ARCHITECTURES).join(', ')}`,
    );
  }
  const type = modelType as ModelType;
  const architecture = SUPPORTED_ARCHITECTURES[type];
  const architectures = raw.architectures;
  if (architectures !== undefined && architectures !== null) {
    if (!Array.isArray(architectures) || architectures.length !== 1 || architectures[0] !== architecture) {
      throw new ModelConfigError(
        file,
        'architectures',
        `unsupported architectures ${JSON.stringify(architectures)} for model_type '${type}'; expected ["${architecture}"]`,
      );
    }
  }

  const hiddenSize = read.positiveInt('hidden_size');
  const numAttentionHeads = read.positiveInt('num_attention_heads');
  // Llama: a missing num_key_value_heads means multi-head attention; Qwen's class defaults are model-size specific.
  const numKeyValueHeads =
    type === 'llama' ? read.positiveInt('num_key_value_heads', numAttentionHeads) : read.positiveInt('num_key_value_heads');
  if (numAttentionHeads % numKeyValueHeads !== 0) {
    throw new ModelConfigError(
      file,
      'num_key_value_heads',
      `${numKeyValueHeads} does not divide num_attention_heads ${numAttentionHeads}`,
    );
  }
  // Qwen3Config's head_dim defaults to 128; Llama, Qwen2 and the MoEs (getattr(config, "head_dim", ...)) derive it.
  const derivedHeadDim = type === 'qwen3' ? 128 : hiddenSize / numAttentionHeads;
  if (raw.head_dim === undefined || raw.head_dim === null) {
    if (!Number.isInteger(derivedHeadDim)) {
      throw new ModelConfigError(
        file,
        'head_dim',
        `missing, and hidden_size ${hiddenSize} is not a multiple of num_attention_heads ${numAttentionHeads}`,
      );
    }
  }
  const headDim = read.positiveInt('head_dim', derivedHeadDim);
  if (headDim % 2 !== 0) throw new ModelConfigError(file, 'head_dim', `must be even for rotary embeddings, got ${headDim}`);

  const hiddenAct = read.value('hidden_act') ?? 'silu';
  if (hiddenAct !== 'silu')
    throw new ModelConfigError(file, 'hidden_act', `unsupported activation ${JSON.stringify(hiddenAct)}; supported: "silu"`);
  if (read.value('use_sliding_window') === true) {
    throw new ModelConfigError(file, 'use_sliding_window', 'sliding-window attention is not supported');
  }
  const layerTypes = read.value('layer_types');
  if (layerTypes !== undefined && layerTypes !== null) {
    if (!Array.isArray(layerTypes) || layerTypes.some((t) => t !== 'full_attention')) {
      throw new ModelConfigError(
        file,
        'layer_types',
        `only "full_attention" layers are supported, got ${JSON.stringify(layerTypes)}`,
      );
    }
  }
  if (read.value('quantization_config') !== undefined) {
    throw new ModelConfigError(file, 'quantization_config', 'quantized checkpoints are not supported');
  }
  const partialRotary = read.value('partial_rotary_factor');
  if (partialRotary !== undefined && partialRotary !== null && partialRotary !== 1) {
    throw new ModelConfigError(
      file,
      'partial_rotary_factor',
      `partial rotary embeddings are not supported (got ${JSON.stringify(partialRotary)})`,
    );
  }

  const maxPositionEmbeddings = read.positiveInt('max_position_embeddings');
  const attentionBias = read.bool('attention_bias', false);
  const numHiddenLayers = read.positiveInt('num_hidden_layers');
  const config: ModelConfig = {
    file,
    modelType: type,
    architecture,
    vocabSize: read.positiveInt('vocab_size'),
    hiddenSize,
    intermediateSize: read.positiveInt('intermediate_size'),
    numHiddenLayers,
    numAttentionHeads,
    numKeyValueHeads,
    headDim,
    rmsNormEps: read.positiveNumber('rms_norm_eps', 1e-6),
    maxPositionEmbeddings,
    tieWordEmbeddings: read.bool('tie_word_embeddings', false),
    qkvBias: type === 'qwen2' ? true : type === 'qwen2_moe' ? read.bool('qkv_bias', true) : attentionBias,
    outputBias: type === 'qwen2' || type === 'qwen2_moe' ? false : attentionBias,
    mlpBias: type === 'llama' ? read.bool('mlp_bias', false) : false,
    qkNorm: type === 'qwen3' || type === 'qwen3_moe',
    rope: parseRope(raw, file, maxPositionEmbeddings),
    moe: type === 'qwen3_moe' || type === 'qwen2_moe' ? parseMoe(read, type, numHiddenLayers) : null,
    raw,
  };
  return config;
}

/** The class defaults of the expert keys (transformers' Qwen2MoeConfig, Qwen3MoeConfig). */
const MOE_DEFAULTS = {
  qwen2_moe: { numExperts: 60, numExpertsPerTok: 4, moeIntermediateSize: 1408, sharedExpertIntermediateSize: 5632 },
  qwen3_moe: { numExperts: 128, numExpertsPerTok: 8, moeIntermediateSize: 768, sharedExpertIntermediateSize: null },
} as const;

/** The expert keys of a qwen2_moe / qwen3_moe config. */
function parseMoe(read: Reader, type: 'qwen2_moe' | 'qwen3_moe', numHiddenLayers: number): MoeConfig {
  const defaults = MOE_DEFAULTS[type];
  const expertsKey = read.has('num_experts') ? 'num_experts' : 'num_local_experts';
  const numExperts = read.positiveInt(expertsKey, defaults.numExperts);
  const numExpertsPerTok = read.positiveInt('num_experts_per_tok', defaults.numExpertsPerTok);
  if (numExpertsPerTok > numExperts) {
    throw new ModelConfigError(read.file, 'num_experts_per_tok', `${numExpertsPerTok} exceeds ${expertsKey} ${numExperts}`);
  }
  const sparseStep = read.positiveInt('decoder_sparse_step', 1);
  const mlpOnly = read.value('mlp_only_layers') ?? [];
  if (!Array.isArray(mlpOnly) || mlpOnly.some((i) => !Number.isInteger(i) || i < 0 || i >= numHiddenLayers)) {
    throw new ModelConfigError(
      read.file,
      'mlp_only_layers',
      `expected a list of layer indices in 0..${numHiddenLayers - 1}, got ${JSON.stringify(mlpOnly)}`,
    );
  }
  const auxCoef = read.value('router_aux_loss_coef') ?? 0.001;
  if (typeof auxCoef !== 'number' || !Number.isFinite(auxCoef) || auxCoef < 0) {
    throw new ModelConfigError(read.file, 'router_aux_loss_coef', `expected a number >= 0, got ${JSON.stringify(auxCoef)}`);
  }
  return {
    numExperts,
    numExpertsPerTok,
    moeIntermediateSize: read.positiveInt('moe_intermediate_size', defaults.moeIntermediateSize),
    normTopkProb: read.bool('norm_topk_prob', false),
    routerAuxLossCoef: auxCoef,
    sparseLayers: Array.from({ length: numHiddenLayers }, (_, i) => !mlpOnly.includes(i) && (i + 1) % sparseStep === 0),
    sharedExpertIntermediateSize:
      defaults.sharedExpertIntermediateSize === null
        ? null
        : read.positiveInt('shared_expert_intermediate_size', defaults.sharedExpertIntermediateSize),
  };
}

function parseRope(raw: Record<string, unknown>, file: string, maxPositionEmbeddings: number): RopeConfig {
  // transformers: rope_scaling (old spelling) wins over rope_parameters; rope_theta may sit beside either.
  const key = raw.rope_scaling !== undefined && raw.rope_scaling !== null ? 'rope_scaling' : 'rope_parameters';
  const params = raw[key] ?? {};
  if (typeof params !== 'object' || params === null || Array.isArray(params)) {
    throw new ModelConfigError(file, key, `expected an object or null, got ${JSON.stringify(params)}`);
  }
  const p = new Reader(params as Record<string, unknown>, file, `${key}.`);
  const outer = new Reader(raw, file);
  const theta = p.has('rope_theta') ? p.positiveNumber('rope_theta') : outer.positiveNumber('rope_theta', 10000);
  const typeKey = p.has('rope_type') ? 'rope_type' : 'type';
  const type = p.value(typeKey) ?? 'default';
  if (typeof type !== 'string')
    throw new ModelConfigError(file, `${key}.${typeKey}`, `expected a string, got ${JSON.stringify(type)}`);
  const partial = p.value('partial_rotary_factor');
  if (partial !== undefined && partial !== null && partial !== 1) {
    throw new ModelConfigError(
      file,
      `${key}.partial_rotary_factor`,
      `partial rotary embeddings are not supported (got ${JSON.stringify(partial)})`,
    );
  }
  // transformers moves a top-level original_max_position_embeddings into the rope parameters (Phi-3 style).
  const originalMax = (): number =>
    outer.has('original_max_position_embeddings')
      ? outer.positiveInt('original_max_position_embeddings')
      : p.positiveInt('original_max_position_embeddings', maxPositionEmbeddings);
  switch (type) {
    case 'default':
      return { theta, scaling: { type: 'default' } };
    case 'linear':
    case 'dynamic':
      return { theta, scaling: { type, factor: p.positiveNumber('factor') } };
    case 'llama3':
      return {
        theta,
        scaling: {
          type,
          factor: p.positiveNumber('factor'),
          lowFreqFactor: p.positiveNumber('low_freq_factor'),
          highFreqFactor: p.positiveNumber('high_freq_factor'),
          originalMaxPositionEmbeddings: originalMax(),
        },
      };
    case 'yarn':
      return {
        theta,
        scaling: {
          type,
          factor: p.positiveNumber('factor'),
          originalMaxPositionEmbeddings: originalMax(),
          attentionFactor: p.has('attention_factor') ? p.positiveNumber('attention_factor') : null,
          // transformers: `get("beta_fast") or 32`, so 0 and null also mean the default
          betaFast: p.has('beta_fast') && p.value('beta_fast') !== 0 ? p.positiveNumber('beta_fast') : 32,
          betaSlow: p.has('beta_slow') && p.value('beta_slow') !== 0 ? p.positiveNumber('beta_slow') : 1,
          mscale: p.has('mscale') ? p.number('mscale') : null,
          mscaleAllDim: p.has('mscale_all_dim') ? p.number('mscale_all_dim') : null,
          truncate: p.bool('truncate', true),
        },
      };
    default:
      throw new ModelConfigError(
        file,
        `${key}.${typeKey}`,
        `unsupported rope type ${JSON.stringify(type)}; supported: default, linear, dynamic, llama3, yarn`,
      );
  }
}

/** Typed access to a JSON object's keys, with errors that name the file and the key. Null counts as missing. */
class Reader {
  constructor(
    readonly raw: Record<string, unknown>,
    readonly file: string,
    readonly prefix = '',
  ) {}

  has(key: string): boolean {
    return this.raw[key] !== undefined && this.raw[key] !== null;
  }

  value(key: string): unknown {
    return this.raw[key] ?? undefined;
  }

  #fail(key: string, expected: string): never {
    const got = this.raw[key];
    const detail =
      got === undefined || got === null ? `missing (expected ${expected})` : `expected ${expected}, got ${JSON.stringify(got)}`;
    throw new ModelConfigError(this.file, this.prefix + key, detail);
  }

  positiveInt(key: string, fallback?: number): number {
    const v = this.value(key) ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) this.#fail(key, 'a positive integer');
    return v;
  }

  positiveNumber(key: string, fallback?: number): number {
    const v = this.value(key) ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) this.#fail(key, 'a positive number');
    return v;
  }

  number(key: string): number {
    const v = this.value(key);
    if (typeof v !== 'number' || !Number.isFinite(v)) this.#fail(key, 'a number');
    return v;
  }

  bool(key: string, fallback: boolean): boolean {
    const v = this.value(key) ?? fallback;
    if (typeof v !== 'boolean') this.#fail(key, 'true or false');
    return v;
  }
}
