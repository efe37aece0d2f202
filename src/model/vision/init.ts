// A new, randomly initialised Qwen2.5-VL or Qwen3-VL model (options.modelType) as a Hugging Face folder, for tests and
// examples (as ../init.ts is for the text families): config.json (transformers 5's layout, ./config.ts,
// ./config-qwen3-vl.ts), model.safetensors, preprocessor_config.json, generation_config.json and a character tokenizer
// with the vision tokens (the same in both families) and an image-aware chat template.
//
//   tokens: the character tokenizer's (../../tokenizer/char-tokenizer.ts) then <|vision_start|>, <|vision_end|>,
//           <|image_pad|>, <|video_pad|> (the config's vision_start / vision_end / image / video token ids)
//   chat template: ChatML whose message content is text or a list of parts; an image part ({type: 'image'} or
//           OpenAI's {type: 'image_url'}) renders <|vision_start|><|image_pad|><|vision_end|>, as Qwen2.5-VL's
//           template does, and the processor's caller repeats <|image_pad|> once per merged patch (imageTokenCount)
//   weights: linear and embedding weights ~ N(0, 0.02), biases 0, norms 1 (transformers' _init_weights)
//   Qwen3-VL: a Qwen3 decoder (head_dim = hidden / heads), interleaved M-RoPE, 16-pixel patches, a 4 x 4 grid of
//           learned positions and DeepStack from the first min(visionDepth, numLayers, 2) vision blocks
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as torch from '../../torch/index.js';
import { charTokenizerFiles } from '../../tokenizer/char-tokenizer.js';
import { expectedWeights } from '../hf-weights.js';
import { parseQwen2_5VLConfig, QWEN2_5_VL_ARCHITECTURE } from './config.js';
import { parseQwen3VLConfig, QWEN3_VL_ARCHITECTURE } from './config-qwen3-vl.js';
import type { ImageProcessorConfig } from './image-processor.js';
import { QWEN2_VL_IMAGE_PROCESSOR, QWEN3_VL_IMAGE_PROCESSOR } from './image-processor.js';
import { Qwen2_5VLModel } from './qwen2-5-vl.js';
import { Qwen3VLModel } from './qwen3-vl.js';
import { expectedVisionWeights } from './vision-tower.js';
import { expectedQwen3VisionWeights } from './vision-tower-qwen3.js';

/** Qwen2.5-VL's vision tokens, in the order their ids follow the character tokenizer's. */
export const VISION_TOKENS = ['<|vision_start|>', '<|vision_end|>', '<|image_pad|>', '<|video_pad|>'] as const;

/** ChatML over text or content parts (see the header). */
export const VISION_CHAT_TEMPLATE =
  "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}" +
  '{%- if message.content is string %}{{- message.content }}{%- else %}{%- for part in message.content %}' +
  "{%- if part.type == 'image' or part.type == 'image_url' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}" +
  "{%- elif part.type == 'text' %}{{- part.text }}{%- endif %}{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}" +
  "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

export interface VisionModelInitOptions {
  /** The family (default 'qwen2_5_vl'). */
  modelType?: 'qwen2_5_vl' | 'qwen3_vl';
  /** Characters of the tokenizer (default: printable ASCII and newline). */
  alphabet?: string;
  hiddenSize?: number;
  numLayers?: number;
  numHeads?: number;
  /** mrope_section: [temporal, height, width] frequency counts summing to headDim / 2 (default: a near-even split). */
  mropeSection?: [number, number, number];
  visionHiddenSize?: number;
  visionDepth?: number;
  visionHeads?: number;
  /** The image processor's pixel bounds (default: the family's processor's, ./family.ts). */
  minPixels?: number;
  maxPixels?: number;
  seed?: number;
}

/** The character tokenizer with the vision tokens added and the image-aware chat template, written to `dir`. */
function writeVisionTokenizer(
  dir: string,
  alphabet: string | undefined,
): { ids: Record<string, number>; vocab: Record<string, number>; vocabSize: number } {
  const { tokenizerJson, tokenizerConfig } = charTokenizerFiles(alphabet);
  const model = tokenizerJson.model as { vocab: Record<string, number> };
  const added = tokenizerJson.added_tokens as { id: number; content: string }[];
  let vocabSize = Object.keys(model.vocab).length;
  const ids: Record<string, number> = {};
  for (const token of VISION_TOKENS) {
    ids[token] = vocabSize;
    model.vocab[token] = vocabSize;
    const entry = {
      id: vocabSize,
      content: token,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    };
    added.push(entry);
    (tokenizerConfig.added_tokens_decoder as Record<string, unknown>)[String(vocabSize)] = { ...entry, id: undefined };
    vocabSize++;
  }
  tokenizerConfig.chat_template = VISION_CHAT_TEMPLATE;
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'tokenizer.json'), `${JSON.stringify(tokenizerJson, null, 2)}\n`);
  writeFileSync(join(dir, 'tokenizer_config.json'), `${JSON.stringify(tokenizerConfig, null, 2)}\n`);

  return { ids, vocab: model.vocab, vocabSize };
}

/** Writes the model folder; returns its config.json object. */
export function initVisionLanguageModel(dir: string, options: VisionModelInitOptions = {}): Record<string, unknown> {
  const { ids, vocab, vocabSize } = writeVisionTokenizer(dir, options.alphabet);
  const hiddenSize = options.hiddenSize ?? 64;
  const numHeads = options.numHeads ?? 4;
  const half = hiddenSize / numHeads / 2;
  const third = Math.floor(half / 3);
  const mropeSection = options.mropeSection ?? [half - 2 * third, third, third];
  const visionHidden = options.visionHiddenSize ?? 32;
  const eos = vocab['<|im_end|>'];
  const pad = vocab['<|endoftext|>'];
  const raw: Record<string, unknown> = {
    architectures: [QWEN2_5_VL_ARCHITECTURE],
    model_type: 'qwen2_5_vl',
    dtype: 'float32',
    image_token_id: ids['<|image_pad|>'],
    video_token_id: ids['<|video_pad|>'],
    vision_start_token_id: ids['<|vision_start|>'],
    vision_end_token_id: ids['<|vision_end|>'],
    tie_word_embeddings: false,
    text_config: {
      model_type: 'qwen2_5_vl_text',
      vocab_size: vocabSize,
      hidden_size: hiddenSize,
      intermediate_size: hiddenSize * 2,
      num_hidden_layers: options.numLayers ?? 2,
      num_attention_heads: numHeads,
      num_key_value_heads: numHeads % 2 === 0 ? numHeads / 2 : numHeads,
      hidden_act: 'silu',
      max_position_embeddings: 4096,
      rms_norm_eps: 1e-6,
      rope_parameters: { rope_type: 'default', rope_theta: 1e6, mrope_section: mropeSection },
      use_sliding_window: false,
      sliding_window: null,
      attention_dropout: 0,
      bos_token_id: null,
      eos_token_id: eos,
      pad_token_id: pad,
    },
    vision_config: {
      model_type: 'qwen2_5_vl_vision',
      depth: options.visionDepth ?? 2,
      hidden_size: visionHidden,
      intermediate_size: visionHidden * 2,
      num_heads: options.visionHeads ?? 2,
      in_channels: 3,
      patch_size: 14,
      spatial_merge_size: 2,
      temporal_patch_size: 2,
      window_size: 56,
      fullatt_block_indexes: [(options.visionDepth ?? 2) - 1],
      out_hidden_size: hiddenSize,
      hidden_act: 'silu',
    },
  };
  const qwen3 = options.modelType === 'qwen3_vl';
  if (qwen3) asQwen3VL(raw, options);
  const file = join(dir, 'config.json');
  const config = qwen3 ? parseQwen3VLConfig(raw, file) : parseQwen2_5VLConfig(raw, file);
  const generator = new torch.Generator(options.seed ?? 0);
  const weights = new Map<string, torch.Tensor>();
  const vision =
    config.architecture === QWEN3_VL_ARCHITECTURE
      ? expectedQwen3VisionWeights(config.vision)
      : expectedVisionWeights(config.vision);
  for (const [name, shape] of [...expectedWeights(config.text), ...vision]) {
    const isNorm = /norm[^.]*\.weight$|ln_q\.weight$/.test(name);
    const value = isNorm
      ? torch.ones(shape)
      : name.endsWith('.bias')
        ? torch.zeros(shape)
        : torch.randn(shape, { generator }).mul_(0.02);
    weights.set(name, value);
  }
  const vl =
    config.architecture === QWEN3_VL_ARCHITECTURE ? new Qwen3VLModel(config, weights) : new Qwen2_5VLModel(config, weights);
  try {
    vl.save(dir);
  } finally {
    vl.dispose();
  }
  writePreprocessorConfig(dir, options);
  writeFileSync(join(dir, 'generation_config.json'), `${JSON.stringify({ eos_token_id: eos, pad_token_id: pad }, null, 2)}\n`);
  return raw;
}

/** Qwen3-VL's keys in place of Qwen2.5-VL's in a config.json object built for the same sizes. */
function asQwen3VL(raw: Record<string, unknown>, options: VisionModelInitOptions): void {
  // Qwen3VLTextConfig has no sliding-window keys
  const { use_sliding_window: _, sliding_window: __, ...text } = raw.text_config as Record<string, unknown>;
  const vision = raw.vision_config as Record<string, unknown>;
  const rope = text.rope_parameters as Record<string, unknown>;
  const depth = vision.depth as number;
  const layers = text.num_hidden_layers as number;
  Object.assign(raw, { architectures: [QWEN3_VL_ARCHITECTURE], model_type: 'qwen3_vl' });
  raw.text_config = {
    ...text,
    model_type: 'qwen3_vl_text',
    head_dim: (text.hidden_size as number) / (text.num_attention_heads as number),
    attention_bias: false,
    rope_parameters: { ...rope, rope_theta: 5e6, mrope_interleaved: true },
  };
  raw.vision_config = {
    model_type: 'qwen3_vl_vision',
    depth,
    hidden_size: vision.hidden_size,
    intermediate_size: vision.intermediate_size,
    num_heads: options.visionHeads ?? 2,
    in_channels: 3,
    patch_size: 16,
    spatial_merge_size: 2,
    temporal_patch_size: 2,
    num_position_embeddings: 16,
    deepstack_visual_indexes: Array.from({ length: Math.min(depth, layers, 2) }, (_, i) => i),
    out_hidden_size: vision.out_hidden_size,
    hidden_act: 'gelu_pytorch_tanh',
  };
}

/** preprocessor_config.json: the family's processor defaults, with the options' pixel bounds. */
function writePreprocessorConfig(dir: string, options: VisionModelInitOptions): void {
  const defaults = options.modelType === 'qwen3_vl' ? QWEN3_VL_IMAGE_PROCESSOR : QWEN2_VL_IMAGE_PROCESSOR;
  const processor: ImageProcessorConfig = {
    ...defaults,
    minPixels: options.minPixels ?? defaults.minPixels,
    maxPixels: options.maxPixels ?? defaults.maxPixels,
  };
  const preprocessor = {
    image_processor_type: 'Qwen2VLImageProcessor',
    do_resize: true,
    do_rescale: true,
    do_normalize: true,
    do_convert_rgb: true,
    resample: 3,
    rescale_factor: 1 / 255,
    image_mean: processor.imageMean,
    image_std: processor.imageStd,
    min_pixels: processor.minPixels,
    max_pixels: processor.maxPixels,
    patch_size: processor.patchSize,
    temporal_patch_size: processor.temporalPatchSize,
    merge_size: processor.mergeSize,
  };
  writeFileSync(join(dir, 'preprocessor_config.json'), `${JSON.stringify(preprocessor, null, 2)}\n`);
}
