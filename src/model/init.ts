// `trinity model init`: a new, randomly initialised model as a Hugging Face folder — config.json,
// model.safetensors, generation_config.json and a tokenizer (a character tokenizer, or one copied from a folder).
// Initialisation follows transformers' _init_weights for these models: linear and embedding weights ~ N(0, 0.02),
// biases 0, RMSNorm weights 1. The folder is the starting point for tests and for the quickstart.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as torch from '../torch/index.js';
import { Tokenizer } from '../tokenizer/tokenizer.js';
import { writeCharTokenizer } from '../tokenizer/char-tokenizer.js';
import { copyRegularFile, pathExists } from '../util/index.js';
import { type ModelType, parseModelConfig, SUPPORTED_ARCHITECTURES } from './config.js';
import { expectedWeights } from './hf-weights.js';
import { CausalLM, type ModelDType } from './transformer.js';

export interface ModelInitOptions {
  architecture?: ModelType;
  hiddenSize?: number;
  numLayers?: number;
  numHeads?: number;
  numKeyValueHeads?: number;
  /** Default: hiddenSize * 8 / 3 rounded up to a multiple of 32 (SwiGLU's usual width). */
  intermediateSize?: number;
  /** Default: hiddenSize / numHeads. */
  headDim?: number;
  maxPositionEmbeddings?: number;
  ropeTheta?: number;
  tieWordEmbeddings?: boolean;
  /** 'char' (default) writes a character tokenizer; a folder path copies its tokenizer files. */
  tokenizer?: string;
  /** Characters of the char tokenizer (default: printable ASCII and newline). */
  alphabet?: string;
  seed?: number;
  dtype?: ModelDType;
  initializerRange?: number;
  /** qwen2_moe / qwen3_moe: experts per sparse layer (default 8). */
  numExperts?: number;
  /** qwen2_moe / qwen3_moe: experts each token is routed to (default 2). */
  numExpertsPerTok?: number;
  /** qwen2_moe / qwen3_moe: each expert's SwiGLU width (default intermediateSize / numExpertsPerTok, at least 1). */
  moeIntermediateSize?: number;
}

const TOKENIZER_FILES = [
  'tokenizer.json',
  'tokenizer_config.json',
  'chat_template.jinja',
  'chat_template.json',
  'special_tokens_map.json',
  'vocab.json',
  'merges.txt',
];

/** Writes the model folder and returns its config and parameter count. */
export function initModel(dir: string, options: ModelInitOptions = {}): { parameters: number; config: Record<string, unknown> } {
  const architecture = options.architecture ?? 'qwen2';
  if (!Object.hasOwn(SUPPORTED_ARCHITECTURES, architecture)) {
    throw new RangeError(`unknown architecture '${architecture}'; supported: ${Object.keys(SUPPORTED_ARCHITECTURES).join(', ')}`);
  }
  const hiddenSize = options.hiddenSize ?? 128;
  const numHeads = options.numHeads ?? 4;
  const numKeyValueHeads = options.numKeyValueHeads ?? (numHeads % 2 === 0 ? numHeads / 2 : numHeads);
  const headDim = options.headDim ?? hiddenSize / numHeads;
  for (const [key, value] of Object.entries({ hiddenSize, numHeads, numKeyValueHeads, headDim })) {
    if (!Number.isInteger(value) || value < 1)
      throw new RangeError(`model init: ${key} must be a positive integer, got ${value}`);
  }
  if (numHeads % numKeyValueHeads !== 0) {
    throw new RangeError(`model init: numHeads (${numHeads}) must be a multiple of numKeyValueHeads (${numKeyValueHeads})`);
  }
  if (headDim % 2 !== 0) throw new RangeError(`model init: headDim must be even for rotary embeddings, got ${headDim}`);

  // tokenizer first: it fixes the vocabulary
  mkdirSync(dir, { recursive: true });
  const tokenizerSource = options.tokenizer ?? 'char';
  if (tokenizerSource === 'char') writeCharTokenizer(dir, options.alphabet);
  else {
    if (!existsSync(join(tokenizerSource, 'tokenizer.json'))) {
      throw new Error(`model init: --tokenizer ${tokenizerSource} has no tokenizer.json (use 'char' or a model folder)`);
    }
    for (const name of TOKENIZER_FILES) {
      if (pathExists(join(tokenizerSource, name))) copyRegularFile(join(tokenizerSource, name), join(dir, name));
    }
  }
  const tokenizer = Tokenizer.load(dir);
  const eos = tokenizer.eosTokenIds[0] ?? null;
  const pad = tokenizer.padTokenId ?? eos;

  const isQwen = architecture !== 'llama';
  const intermediateSize = options.intermediateSize ?? Math.ceil((hiddenSize * 8) / 3 / 32) * 32;
  const numExpertsPerTok = options.numExpertsPerTok ?? 2;
  const raw: Record<string, unknown> = {
    architectures: [SUPPORTED_ARCHITECTURES[architecture]],
    model_type: architecture,
    vocab_size: tokenizer.vocabSize,
    hidden_size: hiddenSize,
    intermediate_size: intermediateSize,
    num_hidden_layers: options.numLayers ?? 2,
    num_attention_heads: numHeads,
    num_key_value_heads: numKeyValueHeads,
    head_dim: headDim,
    hidden_act: 'silu',
    max_position_embeddings: options.maxPositionEmbeddings ?? 2048,
    rms_norm_eps: 1e-6,
    rope_theta: options.ropeTheta ?? (isQwen ? 1e6 : 5e5),
    rope_scaling: null,
    tie_word_embeddings: options.tieWordEmbeddings ?? true,
    attention_dropout: 0,
    initializer_range: options.initializerRange ?? 0.02,
    use_cache: true,
    bos_token_id: tokenizer.bosTokenId,
    eos_token_id: eos,
    pad_token_id: pad,
    dtype: options.dtype ?? 'float32',
    ...(architecture === 'qwen2' ? { use_sliding_window: false, sliding_window: null } : {}),
    ...(architecture === 'qwen3' ? { attention_bias: false, use_sliding_window: false, sliding_window: null } : {}),
    ...(architecture === 'llama' ? { attention_bias: false, mlp_bias: false } : {}),
    ...(architecture === 'qwen3_moe' || architecture === 'qwen2_moe'
      ? {
          use_sliding_window: false,
          sliding_window: null,
          num_experts: options.numExperts ?? 8,
          num_experts_per_tok: numExpertsPerTok,
          moe_intermediate_size: options.moeIntermediateSize ?? Math.max(1, Math.floor(intermediateSize / numExpertsPerTok)),
          decoder_sparse_step: 1,
          mlp_only_layers: [],
          router_aux_loss_coef: 0.001,
          output_router_logits: false,
          // as the released checkpoints: Qwen3-MoE renormalises the top-k weights, Qwen1.5-MoE has a shared expert
          ...(architecture === 'qwen3_moe'
            ? { attention_bias: false, norm_topk_prob: true }
            : { qkv_bias: true, norm_topk_prob: false, shared_expert_intermediate_size: intermediateSize }),
        }
      : {}),
  };
  const config = parseModelConfig(raw, join(dir, 'config.json'));

  const generator = new torch.Generator(options.seed ?? 0);
  const dtype = options.dtype ?? 'float32';
  const std = options.initializerRange ?? 0.02;
  const weights = new Map<string, torch.Tensor>();
  let parameters = 0;
  for (const [name, shape] of expectedWeights(config)) {
    const isNorm = name.endsWith('norm.weight');
    const isBias = name.endsWith('.bias');
    const t = isNorm ? torch.ones(shape) : isBias ? torch.zeros(shape) : torch.randn(shape, { generator }).mul_(std);
    if (dtype === 'float32') weights.set(name, t);
    else {
      weights.set(name, t.to({ dtype }));
      t.dispose();
    }
    parameters += shape.reduce((a, b) => a * b, 1);
  }
  const model = new CausalLM(config, weights);
  try {
    model.save(dir);
  } finally {
    model.dispose();
  }
  const generationConfig = {
    ...(tokenizer.bosTokenId === null ? {} : { bos_token_id: tokenizer.bosTokenId }),
    eos_token_id: tokenizer.eosTokenIds.length === 1 ? tokenizer.eosTokenIds[0] : tokenizer.eosTokenIds,
    pad_token_id: pad,
  };
  writeFileSync(join(dir, 'generation_config.json'), `${JSON.stringify(generationConfig, null, 2)}\n`);
  return { parameters, config: raw };
}
