// The configuration of a Qwen3-VL model (model_type `qwen3_vl`, Qwen3VLForConditionalGeneration), read from
// config.json: the language model under `text_config` (a Qwen3 decoder: q/k RMSNorms, no q/k/v biases, explicit
// head_dim), its interleaved multimodal RoPE, the vision tower under `vision_config` and the special token ids (the
// same ids and chat-template vision tokens as Qwen2.5-VL: <|vision_start|> <|image_pad|>... <|vision_end|>).
//
// What differs from Qwen2.5-VL (./config.ts), key by key:
//   text_config.rope_parameters.mrope_interleaved   true: frequency j of the rotary half takes the height position
//                                                   when j % 3 == 1 and j < 3 s_h, the width position when j % 3 == 2
//                                                   and j < 3 s_w, the temporal position otherwise (./mrope.ts);
//                                                   transformers always interleaves, so false is refused
//   vision_config.patch_size 16, num_position_embeddings (a learned square grid of positions, side = sqrt(n)),
//   deepstack_visual_indexes (vision blocks whose output, merged, is added to the first language layers' outputs at
//   the image tokens), hidden_act gelu_pytorch_tanh (a plain two-layer MLP); no window_size / fullatt_block_indexes
//   (every block attends over the whole frame).
import { type ModelConfig, ModelConfigError } from '../config.js';
import { checkFamilyKeys, isObject, parseLanguageKeys, readConfigJson, visionConfigOf, visionTokenIds } from './config.js';

export const QWEN3_VL_ARCHITECTURE = 'Qwen3VLForConditionalGeneration';

/** Qwen3VLVisionConfig's keys (defaults: that class's). */
export interface Qwen3VisionConfig {
  depth: number;
  hiddenSize: number;
  intermediateSize: number;
  numHeads: number;
  headDim: number;
  inChannels: number;
  /** Pixels per patch side (16) and frames per patch (2). */
  patchSize: number;
  temporalPatchSize: number;
  spatialMergeSize: number;
  /** hidden_act of the blocks' MLP: 'tanh' for gelu_pytorch_tanh, 'none' for gelu (erf). */
  geluApproximate: 'tanh' | 'none';
  /** num_position_embeddings: a square grid of learned positions, sqrt(n) a side. */
  numPositionEmbeddings: number;
  /** The vision blocks whose output feeds DeepStack merger k (k-th entry), added after language layer k. */
  deepstackVisualIndexes: readonly number[];
  outHiddenSize: number;
  ropeTheta: number;
}

export interface Qwen3VLConfig {
  file: string;
  architecture: typeof QWEN3_VL_ARCHITECTURE;
  /** The language model, a Qwen3 decoder over model.language_model.* / lm_head. */
  text: ModelConfig;
  mropeSection: readonly [number, number, number];
  /** Qwen3-VL's M-RoPE interleaves the three axes' frequencies (see the header). */
  mropeInterleaved: true;
  vision: Qwen3VisionConfig;
  imageTokenId: number;
  videoTokenId: number;
  visionStartTokenId: number;
  visionEndTokenId: number;
  raw: Readonly<Record<string, unknown>>;
}

export const isQwen3VLConfig = (raw: Record<string, unknown>): boolean => raw.model_type === 'qwen3_vl';

/** Reads `<dir>/config.json` (or a path to a .json file) of a Qwen3-VL model. */
export function loadQwen3VLConfig(dirOrFile: string): Qwen3VLConfig {
  const { raw, file } = readConfigJson(dirOrFile);
  return parseQwen3VLConfig(raw, file);
}

/** Validates a parsed Qwen3-VL config.json; `file` names it in errors. */
export function parseQwen3VLConfig(raw: Record<string, unknown>, file = 'config.json'): Qwen3VLConfig {
  checkFamilyKeys(raw, file, 'qwen3_vl', QWEN3_VL_ARCHITECTURE);
  if (!isObject(raw.text_config))
    throw new ModelConfigError(file, 'text_config', `expected an object, got ${JSON.stringify(raw.text_config)}`);
  const { text, mropeSection, rope, ropePath, tokenId } = parseLanguageKeys(raw, file, 'qwen3', QWEN3_VL_ARCHITECTURE);
  const interleaved = rope.mrope_interleaved ?? true;
  if (interleaved !== true)
    throw new ModelConfigError(
      file,
      `${ropePath}.mrope_interleaved`,
      `Qwen3-VL's multimodal RoPE is interleaved (transformers ignores this key), got ${JSON.stringify(interleaved)}`,
    );
  const visionRaw = visionConfigOf(raw, file);
  return {
    file,
    architecture: QWEN3_VL_ARCHITECTURE,
    text,
    mropeSection,
    mropeInterleaved: true,
    vision: parseQwen3VisionConfig(visionRaw, file, text),
    ...visionTokenIds(tokenId),
    raw,
  };
}

function parseQwen3VisionConfig(raw: Record<string, unknown>, file: string, text: ModelConfig): Qwen3VisionConfig {
  const fail = (key: string, detail: string): never => {
    throw new ModelConfigError(file, `vision_config.${key}`, detail);
  };
  const int = (key: string, fallback: number): number => {
    const v = raw[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0)
      fail(key, `expected a positive integer, got ${JSON.stringify(v)}`);
    return v as number;
  };
  const hiddenSize = int('hidden_size', 1152);
  const numHeads = int('num_heads', 16);
  const headDim = hiddenSize / numHeads;
  if (!Number.isInteger(headDim) || headDim % 4 !== 0)
    fail('num_heads', `hidden_size ${hiddenSize} / num_heads ${numHeads} must be a multiple of 4 (2-D rotary)`);
  const act = raw.hidden_act ?? 'gelu_pytorch_tanh';
  if (act !== 'gelu_pytorch_tanh' && act !== 'gelu')
    fail('hidden_act', `supported: "gelu_pytorch_tanh", "gelu", got ${JSON.stringify(act)}`);
  const depth = int('depth', 27);
  const numPositionEmbeddings = int('num_position_embeddings', 2304);
  const side = Math.floor(Math.sqrt(numPositionEmbeddings));
  if (side * side !== numPositionEmbeddings)
    fail('num_position_embeddings', `expected a square number (a grid of positions), got ${numPositionEmbeddings}`);
  const deepstack = raw.deepstack_visual_indexes ?? [8, 16, 24];
  if (!Array.isArray(deepstack) || deepstack.some((i) => !Number.isInteger(i) || i < 0 || i >= depth))
    fail('deepstack_visual_indexes', `expected vision block indices in 0..${depth - 1}, got ${JSON.stringify(deepstack)}`);
  if ((deepstack as number[]).length > text.numHiddenLayers)
    fail(
      'deepstack_visual_indexes',
      `${(deepstack as number[]).length} DeepStack features for ${text.numHiddenLayers} language layers (one layer each)`,
    );
  const outHiddenSize = int('out_hidden_size', 3584);
  if (outHiddenSize !== text.hiddenSize)
    fail('out_hidden_size', `${outHiddenSize} differs from the language model's hidden_size ${text.hiddenSize}`);
  const rope = isObject(raw.rope_parameters) ? raw.rope_parameters : {};
  const ropeType = rope.rope_type ?? 'axial';
  if (ropeType !== 'axial') fail('rope_parameters.rope_type', `supported: "axial", got ${JSON.stringify(ropeType)}`);
  const theta = rope.rope_theta ?? 10000;
  if (typeof theta !== 'number' || !(theta > 0))
    fail('rope_parameters.rope_theta', `expected a positive number, got ${JSON.stringify(theta)}`);
  return {
    depth,
    hiddenSize,
    intermediateSize: int('intermediate_size', 4304),
    numHeads,
    headDim,
    inChannels: int('in_channels', 3),
    patchSize: int('patch_size', 16),
    temporalPatchSize: int('temporal_patch_size', 2),
    spatialMergeSize: int('spatial_merge_size', 2),
    geluApproximate: act === 'gelu' ? 'none' : 'tanh',
    numPositionEmbeddings,
    deepstackVisualIndexes: deepstack as number[],
    outHiddenSize,
    ropeTheta: theta as number,
  };
}
