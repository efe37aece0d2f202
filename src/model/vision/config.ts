// The configuration of a Qwen2.5-VL model (model_type `qwen2_5_vl`, Qwen2_5_VLForConditionalGeneration): the language
// model's keys, its multimodal RoPE sections, the vision tower's keys and the special token ids, read from config.json.
//
// Two layouts of the same keys: transformers 5 writes the language model's keys under `text_config` and
// `rope_parameters: { rope_type: "default", mrope_section, rope_theta }`; the Hub's checkpoints (written by
// transformers 4) keep them at the top level with `rope_scaling: { type: "mrope", mrope_section }` and `rope_theta`.
// Both are read. The language model is a Qwen2 decoder (q/k/v biases, SwiGLU), so its keys go through the dense
// families' parser (../config.ts) as `qwen2`; `mrope` is RoPE's default inverse frequencies with the sections below.
//
//   mrope_section [s_t, s_h, s_w], s_t + s_h + s_w = head_dim / 2: frequency j of the rotary half takes its angle
//   from the temporal position for j < s_t, the height position for j < s_t + s_h, the width position after.
import { join } from 'node:path';
import { fileErrorDetail, readRegularFile } from '../../util/index.js';
import { type ModelConfig, ModelConfigError, parseModelConfig } from '../config.js';

export const QWEN2_5_VL_ARCHITECTURE = 'Qwen2_5_VLForConditionalGeneration';

/** Qwen2_5_VLVisionConfig's keys (defaults: that class's). */
export interface VisionConfig {
  /** depth: the number of vision blocks. */
  depth: number;
  hiddenSize: number;
  intermediateSize: number;
  /** num_heads; each head is hidden_size / num_heads wide. */
  numHeads: number;
  headDim: number;
  inChannels: number;
  /** Pixels per patch side (14) and frames per patch (2): a patch is in_channels * temporal * patch * patch values. */
  patchSize: number;
  temporalPatchSize: number;
  /** Patches merged into one language token per side (2: 2 x 2 patches per token). */
  spatialMergeSize: number;
  /** Window attention's window side in pixels (112: 4 x 4 merged tokens of 28 pixels). */
  windowSize: number;
  /** The blocks that attend over the whole image; the others attend inside windows. */
  fullAttentionBlocks: readonly number[];
  /** The language model's hidden size: the merger's output width. */
  outHiddenSize: number;
  /** The 2-D rotary embedding's theta (rope_parameters.rope_theta, default 10000). */
  ropeTheta: number;
}

export interface Qwen2_5VLConfig {
  /** The config.json this came from (for error messages). */
  file: string;
  architecture: typeof QWEN2_5_VL_ARCHITECTURE;
  /** The language model, a Qwen2 decoder over model.embed_tokens / model.layers / model.norm / lm_head. */
  text: ModelConfig;
  /** [temporal, height, width] frequency counts of the multimodal RoPE (sum: text.headDim / 2). */
  mropeSection: readonly [number, number, number];
  vision: VisionConfig;
  imageTokenId: number;
  videoTokenId: number;
  visionStartTokenId: number;
  visionEndTokenId: number;
  /** The parsed JSON, kept so that save() writes every key back unchanged. */
  raw: Readonly<Record<string, unknown>>;
}

/** Whether a parsed config.json is a Qwen2.5-VL model's. */
export const isQwen2_5VLConfig = (raw: Record<string, unknown>): boolean => raw.model_type === 'qwen2_5_vl';

/** Reads `<dir>/config.json` (or a path to a .json file) of a Qwen2.5-VL model. */
export function loadQwen2_5VLConfig(dirOrFile: string): Qwen2_5VLConfig {
  const { raw, file } = readConfigJson(dirOrFile);
  return parseQwen2_5VLConfig(raw, file);
}

/** The JSON object of `<dir>/config.json` (or a path to a .json file), and the file's path. */
export function readConfigJson(dirOrFile: string): { raw: Record<string, unknown>; file: string } {
  const file = dirOrFile.endsWith('.json') ? dirOrFile : join(dirOrFile, 'config.json');
  let raw: unknown;
  try {
    raw = JSON.parse(readRegularFile(file, 'utf8'));
  } catch (error) {
    throw new ModelConfigError(file, null, `cannot read the model config: ${fileErrorDetail(error)}`);
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw new ModelConfigError(file, null, 'expected a JSON object');
  return { raw: raw as Record<string, unknown>, file };
}

export const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Validates a parsed Qwen2.5-VL config.json; `file` names it in errors. */
export function parseQwen2_5VLConfig(raw: Record<string, unknown>, file = 'config.json'): Qwen2_5VLConfig {
  checkFamilyKeys(raw, file, 'qwen2_5_vl', QWEN2_5_VL_ARCHITECTURE);
  const { text, mropeSection, tokenId } = parseLanguageKeys(raw, file, 'qwen2', QWEN2_5_VL_ARCHITECTURE);
  return {
    file,
    architecture: QWEN2_5_VL_ARCHITECTURE,
    text,
    mropeSection,
    vision: parseVisionConfig(visionConfigOf(raw, file), file, text.hiddenSize),
    ...visionTokenIds(tokenId),
    raw,
  };
}

/** model_type and architectures (absent, or exactly [architecture]) of either family's config.json. */
export function checkFamilyKeys(raw: Record<string, unknown>, file: string, modelType: string, architecture: string): void {
  if (raw.model_type !== modelType)
    throw new ModelConfigError(file, 'model_type', `expected "${modelType}", got ${JSON.stringify(raw.model_type)}`);
  const architectures = raw.architectures;
  if (
    architectures !== undefined &&
    architectures !== null &&
    (!Array.isArray(architectures) || architectures.length !== 1 || architectures[0] !== architecture)
  )
    throw new ModelConfigError(file, 'architectures', `expected ["${architecture}"], got ${JSON.stringify(architectures)}`);
}

/** The config's vision_config object (either family). */
export function visionConfigOf(raw: Record<string, unknown>, file: string): Record<string, unknown> {
  const visionRaw = raw.vision_config;
  if (!isObject(visionRaw))
    throw new ModelConfigError(file, 'vision_config', `expected an object, got ${JSON.stringify(visionRaw)}`);
  return visionRaw;
}

/** The image/video/vision-marker token ids (both families' defaults are Qwen2-VL's vocabulary's). */
export function visionTokenIds(tokenId: (key: string, fallback: number) => number) {
  return {
    imageTokenId: tokenId('image_token_id', 151655),
    videoTokenId: tokenId('video_token_id', 151656),
    visionStartTokenId: tokenId('vision_start_token_id', 151652),
    visionEndTokenId: tokenId('vision_end_token_id', 151653),
  };
}

/**
 * The language half of a vision-language config.json (both layouts, see the header) as a dense `modelType` decoder,
 * its mrope_section, and a reader of the top-level token ids (checked against the vocabulary). Errors name the key
 * where this file has it (text_config.x). The rope dict's M-RoPE keys (mrope_section, mrope_interleaved) are the
 * caller's: returned in `rope`, taken off before the decoder's keys are parsed.
 */
export function parseLanguageKeys(
  raw: Record<string, unknown>,
  file: string,
  modelType: 'qwen2' | 'qwen3',
  architecture: string,
): {
  text: ModelConfig;
  mropeSection: [number, number, number];
  /** The rope dict as the file has it, and where (rope_scaling / rope_parameters, under text_config. or not). */
  rope: Record<string, unknown>;
  ropePath: string;
  tokenId: (key: string, fallback: number) => number;
} {
  const nested = isObject(raw.text_config);
  const textRaw: Record<string, unknown> = nested ? (raw.text_config as Record<string, unknown>) : raw;
  const prefix = nested ? 'text_config.' : '';
  const ropeKey = isObject(textRaw.rope_scaling) ? 'rope_scaling' : 'rope_parameters';
  const rope = isObject(textRaw[ropeKey]) ? (textRaw[ropeKey] as Record<string, unknown>) : {};
  const section = rope.mrope_section;
  const ropeType = rope.rope_type ?? rope.type;
  // transformers: an `mrope` type is the default inverse frequencies; the sections only say which axis each takes
  const { mrope_section: _, mrope_interleaved: __, type: ___, ...ropeRest } = rope;
  const textOnly: Record<string, unknown> = {
    ...textRaw,
    model_type: modelType,
    architectures: undefined,
    tie_word_embeddings: raw.tie_word_embeddings ?? textRaw.tie_word_embeddings ?? false,
    // Qwen3VLTextConfig: num_key_value_heads defaults to num_attention_heads
    num_key_value_heads: textRaw.num_key_value_heads ?? textRaw.num_attention_heads,
    [ropeKey]: { ...ropeRest, rope_type: ropeType === 'mrope' || ropeType === undefined ? 'default' : ropeType },
  };
  let parsed: ModelConfig;
  try {
    parsed = parseModelConfig(textOnly, file);
  } catch (error) {
    // name the key where this file has it (text_config.x)
    if (error instanceof ModelConfigError) error.message = error.message.replace(`${file}: key '`, `${file}: key '${prefix}`);
    throw error;
  }
  const text: ModelConfig = { ...parsed, architecture };
  if (text.rope.scaling.type !== 'default')
    throw new ModelConfigError(
      file,
      `${prefix}${ropeKey}`,
      `multimodal RoPE takes the default rope type, got ${JSON.stringify(ropeType)}`,
    );
  const half = text.headDim / 2;
  if (
    !Array.isArray(section) ||
    section.length !== 3 ||
    section.some((s) => !Number.isInteger(s) || s < 0) ||
    section.reduce((a: number, b: number) => a + b, 0) !== half
  ) {
    throw new ModelConfigError(
      file,
      `${prefix}${ropeKey}.mrope_section`,
      `expected three non-negative integers summing to head_dim / 2 = ${half}, got ${JSON.stringify(section)}`,
    );
  }
  const tokenId = (key: string, fallback: number): number => {
    const v = raw[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= text.vocabSize)
      throw new ModelConfigError(file, key, `expected a token id in 0..${text.vocabSize - 1}, got ${JSON.stringify(v)}`);
    return v;
  };
  return { text, mropeSection: section as [number, number, number], rope, ropePath: `${prefix}${ropeKey}`, tokenId };
}

function parseVisionConfig(raw: Record<string, unknown>, file: string, textHidden: number): VisionConfig {
  const int = (key: string, fallback: number): number => {
    const v = raw[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0)
      throw new ModelConfigError(file, `vision_config.${key}`, `expected a positive integer, got ${JSON.stringify(v)}`);
    return v;
  };
  const hiddenSize = int('hidden_size', 3584);
  const numHeads = int('num_heads', 16);
  const headDim = hiddenSize / numHeads;
  if (!Number.isInteger(headDim) || headDim % 4 !== 0)
    throw new ModelConfigError(
      file,
      'vision_config.num_heads',
      `hidden_size ${hiddenSize} / num_heads ${numHeads} must be a multiple of 4 (2-D rotary)`,
    );
  const act = raw.hidden_act ?? 'silu';
  if (act !== 'silu')
    throw new ModelConfigError(file, 'vision_config.hidden_act', `supported: "silu", got ${JSON.stringify(act)}`);
  const depth = int('depth', 32);
  const full = raw.fullatt_block_indexes ?? [7, 15, 23, 31];
  if (!Array.isArray(full) || full.some((i) => !Number.isInteger(i) || i < 0 || i >= depth))
    throw new ModelConfigError(
      file,
      'vision_config.fullatt_block_indexes',
      `expected block indices in 0..${depth - 1}, got ${JSON.stringify(full)}`,
    );
  const outHiddenSize = int('out_hidden_size', 3584);
  if (outHiddenSize !== textHidden)
    throw new ModelConfigError(
      file,
      'vision_config.out_hidden_size',
      `${outHiddenSize} differs from the language model's hidden_size ${textHidden}`,
    );
  const rope = isObject(raw.rope_parameters) ? raw.rope_parameters : {};
  const ropeType = rope.rope_type ?? 'axial';
  if (ropeType !== 'axial' && ropeType !== 'default')
    throw new ModelConfigError(
      file,
      'vision_config.rope_parameters.rope_type',
      `supported: "axial", got ${JSON.stringify(ropeType)}`,
    );
  const theta = rope.rope_theta ?? 10000;
  if (typeof theta !== 'number' || !(theta > 0))
    throw new ModelConfigError(
      file,
      'vision_config.rope_parameters.rope_theta',
      `expected a positive number, got ${JSON.stringify(theta)}`,
    );
  return {
    depth,
    hiddenSize,
    intermediateSize: int('intermediate_size', 3420),
    numHeads,
    headDim,
    inChannels: int('in_channels', 3),
    patchSize: int('patch_size', 14),
    temporalPatchSize: int('temporal_patch_size', 2),
    spatialMergeSize: int('spatial_merge_size', 2),
    windowSize: int('window_size', 112),
    fullAttentionBlocks: full as number[],
    outHiddenSize,
    ropeTheta: theta,
  };
}
