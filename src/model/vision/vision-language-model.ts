// A vision-language model as transformers computes Qwen2.5-VL and Qwen3-VL (Qwen2_5_VLForConditionalGeneration,
// Qwen3VLForConditionalGeneration): a vision tower turns each image into language tokens, which replace the image
// placeholder tokens' embeddings, and the language model (../transformer.ts, unchanged) runs over them with the
// multimodal RoPE (./mrope.ts). The families differ in their tower (./vision-tower.ts, ./vision-tower-qwen3.ts), their
// decoder (Qwen2 / Qwen3, a CausalLM either way), M-RoPE's frequency layout and DeepStack; ./qwen2-5-vl.ts and
// ./qwen3-vl.ts each name theirs (a VisionLanguageFamily).
//
//   x = embed_tokens[ids]; x[ids == image_token_id] = visual(pixel_values, image_grid_thw)   in order, image by image
//   positions = get_rope_index(ids, mask, image_grid_thw)                                      [3, B, T]
//   for layer i: x = layer_i(x, M-RoPE(positions)); i < K: x[image tokens] += deepstack_i      (DeepStack, Qwen3-VL)
//   logits = lm_head(norm(x))
//
// DeepStack (Qwen3-VL): the tower also merges the output of K of its blocks (deepstack_visual_indexes); feature k is
// added to the output of language layer k at the image tokens. Training carries them through the trunk's layers as
// extra channels of the hidden state (trainingInputs), so activation checkpointing recomputes a layer from its saved
// input alone and the features' gradients reach the vision tower through the one embed() backward.
//
// A prompt's image tokens are framed as the chat template writes them: <|vision_start|> then t*h*w / merge² image
// tokens then <|vision_end|>; the placeholders must match the images' grids (ropeIndex names the row otherwise).
// Decoding after a prompt: a new token at text position n (tokens so far) has M-RoPE positions n + rope delta on all
// three axes, which the caller passes as positionIds (ropeIndex gives the deltas). Videos are not supported here.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Tensor } from '../../torch/index.js';
import * as torch from '../../torch/index.js';
import { ModelWeightsError, type SaveModelOptions, writeModelFolder } from '../hf-weights.js';
import type { WeightLayout } from '../inference-layout.js';
import type { KVCache } from '../kv-cache.js';
import type { MultimodalInputs } from '../training.js';
import { CausalLM, type ModelDType } from '../transformer.js';
import type { Qwen2_5VLConfig } from './config.js';
import type { Qwen3VLConfig } from './config-qwen3-vl.js';
import { type GridTHW, imageTokenCount, MultimodalRotaryEmbedding, type RopeIndex, ropeIndexOf } from './mrope.js';
import type { ImageFeatures } from './vision-tower-qwen3.js';

/** The configs of the vision-language families. */
export type VisionLanguageConfig = Qwen2_5VLConfig | Qwen3VLConfig;

/** A family's vision tower: merged image tokens and (Qwen3-VL) DeepStack features for pixel values of these grids. */
export interface ImageEncoder {
  readonly patchWidth: number;
  /** The DeepStack features features() makes: K, added after language layers 0..K-1 (0: none). */
  readonly deepstackCount: number;
  forward(pixelValues: Tensor, grids: readonly GridTHW[]): Tensor;
  features(pixelValues: Tensor, grids: readonly GridTHW[]): ImageFeatures;
  dispose(): void;
}

/** What a family adds to the shared model: its tower's weights and the names its checkpoints use. */
export interface VisionLanguageFamily<C extends VisionLanguageConfig> {
  /** The tower's weights (visual.* names) with their shapes. */
  expectedVisionWeights(config: C): Map<string, number[]>;
  makeTower(config: C, weights: ReadonlyMap<string, Tensor>): ImageEncoder;
  /** A parameter's name in the checkpoints this family's save() writes (the in-memory names are the dense ones). */
  checkpointName(name: string): string;
}

/** A checkpoint's name → the in-memory one: transformers 5's model.language_model.* and model.visual.* read as well. */
export const inMemoryWeightName = (name: string): string =>
  name.startsWith('model.language_model.')
    ? `model.${name.slice('model.language_model.'.length)}`
    : name.startsWith('model.visual.')
      ? name.slice('model.'.length)
      : name;

/**
 * A batch's images: their grids and either the processor's pixel_values or their vision tower output (imageFeatures:
 * the image tokens and, for a model with DeepStack, its features, which are then required).
 */
export type ImageInputs =
  | { grids: readonly GridTHW[]; pixelValues: Tensor }
  | { grids: readonly GridTHW[]; embeds: Tensor; deepstack?: readonly Tensor[] };

export interface VisionLanguageForwardOptions {
  /** [B, T], 1 = real token (left or right padding). */
  attentionMask?: Tensor;
  /** The images whose placeholder tokens the ids hold, row by row. */
  images?: ImageInputs;
  /** [3, B, T] M-RoPE positions; default: ropeIndex of the ids (a prompt from position 0). Required on decode steps. */
  positionIds?: Tensor;
  cache?: KVCache;
  slots?: readonly number[];
  /** 'logits' (default) or the final normed hidden states. */
  output?: 'logits' | 'hidden';
}

export interface LoadVisionLanguageOptions {
  dtype?: ModelDType;
  device?: string;
  requiresGrad?: boolean;
  /** The language model's weight layout (default 'training'; 'inference' for the rollout engine, see WeightLayout). */
  layout?: WeightLayout;
}

/** How a model is built from weights: the folder they came from, the file a tensor is named by in errors, the layout. */
export interface VisionLanguageBuildOptions {
  sourceDir?: string | null;
  fileOf?: (tensor: string | null) => string;
  layout?: WeightLayout;
}

export class VisionLanguageModel<C extends VisionLanguageConfig = VisionLanguageConfig> {
  readonly config: C;
  /** The language model (its parameters are the model's language half, under their Hugging Face names). */
  readonly language: CausalLM;
  readonly vision: ImageEncoder;
  readonly #family: VisionLanguageFamily<C>;
  readonly #visionWeights: Map<string, Tensor>;
  readonly #mrope: MultimodalRotaryEmbedding;
  #disposed = false;

  /** Builds the model from weights with Hugging Face names, checked against the config; the model takes ownership. */
  constructor(
    family: VisionLanguageFamily<C>,
    config: C,
    weights: Map<string, Tensor>,
    options: VisionLanguageBuildOptions = {},
  ) {
    const fileOf = options.fileOf ?? (() => 'weights');
    const expected = family.expectedVisionWeights(config);
    const visionWeights = new Map<string, Tensor>();
    const textWeights = new Map<string, Tensor>();
    for (const [name, t] of weights) (name.startsWith('visual.') ? visionWeights : textWeights).set(name, t);
    try {
      for (const [name, shape] of expected) {
        const t = visionWeights.get(name);
        if (t === undefined)
          throw new ModelWeightsError(fileOf(null), `missing tensor '${name}' (expected shape [${shape.join(', ')}])`);
        if (t.shape.length !== shape.length || t.shape.some((s, i) => s !== shape[i]))
          throw new ModelWeightsError(
            fileOf(name),
            `tensor '${name}' has shape [${t.shape.join(', ')}], expected [${shape.join(', ')}]`,
          );
      }
      const unexpected = [...visionWeights.keys()].filter((n) => !expected.has(n));
      if (unexpected.length > 0)
        throw new ModelWeightsError(
          fileOf(unexpected[0] ?? null),
          `unexpected tensors ${unexpected.map((n) => `'${n}'`).join(', ')} (not part of this config's vision tower)`,
        );
    } catch (error) {
      for (const t of weights.values()) t.dispose();
      throw error;
    }
    try {
      const layout = options.layout ?? 'training';
      this.language = new CausalLM(config.text, textWeights, { sourceDir: options.sourceDir ?? null, fileOf, layout });
    } catch (error) {
      for (const t of weights.values()) t.dispose();
      throw error;
    }
    const dtypes = new Set([...visionWeights.values()].map((t) => t.dtype));
    if (dtypes.size !== 1 || !dtypes.has(this.language.dtype)) {
      this.language.dispose();
      for (const t of visionWeights.values()) t.dispose();
      throw new ModelWeightsError(
        fileOf(null),
        `vision weights are ${[...dtypes].join(', ')}, the language model ${this.language.dtype}: load them with one dtype`,
      );
    }
    this.config = config;
    this.#family = family;
    this.#visionWeights = new Map([...expected.keys()].map((n) => [n, torch.keep(visionWeights.get(n) as Tensor)]));
    this.vision = family.makeTower(config, this.#visionWeights);
    this.#mrope = new MultimodalRotaryEmbedding(config, (this.#visionWeights.values().next().value as Tensor).device);
  }

  /** A Hugging Face folder's model.safetensors (or sharded index) under the in-memory names, for a family's load(). */
  protected static loadWeights(
    dir: string,
    options: LoadVisionLanguageOptions,
  ): { weights: Map<string, Tensor>; weightsFile: string } {
    const dtype = options.dtype ?? 'float32';
    if (dtype !== 'float32' && dtype !== 'bfloat16')
      throw new TypeError(`VisionLanguageModel.load: dtype must be float32 or bfloat16, got ${String(dtype)}`);
    const loaded = torch.loadModelWeights(dir, { dtype, ...(options.device ? { device: options.device } : {}) });
    const weights = new Map([...loaded].map(([name, t]) => [inMemoryWeightName(name), torch.keep(t)]));
    const index = join(dir, 'model.safetensors.index.json');
    return { weights, weightsFile: existsSync(index) ? index : join(dir, 'model.safetensors') };
  }

  get dtype(): ModelDType {
    return this.language.dtype;
  }

  /** Every parameter under its Hugging Face name (language model, then vision tower). Owned by the model. */
  parameters(): Map<string, Tensor> {
    this.#checkAlive();
    return new Map([...this.language.parameters(), ...this.#visionWeights]);
  }

  /** The vision tower's output for pixel values [patches, patch width]: [image tokens, hidden], image after image. */
  encodeImages(pixelValues: Tensor, grids: readonly GridTHW[]): Tensor {
    this.#checkAlive();
    return this.vision.forward(pixelValues, grids);
  }

  /** The image tokens and the DeepStack features (one per early language layer; none for Qwen2.5-VL). */
  imageFeatures(pixelValues: Tensor, grids: readonly GridTHW[]): ImageFeatures {
    this.#checkAlive();
    return this.vision.features(pixelValues, grids);
  }

  /** get_rope_index: M-RoPE positions [3, B, T] and each row's rope delta, for ids [B, T] holding these images. */
  ropeIndex(inputIds: Tensor, attentionMask: Tensor | null, grids: readonly GridTHW[]): RopeIndex {
    return ropeIndexOf(inputIds, attentionMask, grids, this.config);
  }

  /**
   * The trainer's inputs for ids [B, T] holding these images' placeholders (../training.ts options.multimodal): the
   * embeddings with the image tokens in place (the vision tower runs on each embed(), recording autograd under grad
   * mode) and the M-RoPE tables of ropeIndex's positions. Log-probs and gradients equal forward()'s.
   */
  trainingInputs(
    inputIds: Tensor,
    attentionMask: Tensor | null,
    images: ImageInputs | undefined,
    promptWidth?: number,
  ): MultimodalInputs {
    this.#checkAlive();
    // with promptWidth (the padded layout's response columns start there): an image token sampled in a response is
    // text, as the rollout engine decoded it (its embedding row, a text position); only the prompt's are images
    const placeholders =
      promptWidth === undefined || promptWidth >= inputIds.size(1)
        ? inputIds
        : inputIds.maskedFill(torch.arange(inputIds.size(1), { device: inputIds.device }).ge(promptWidth).unsqueeze(0), -1);
    const { positions } = ropeIndexOf(placeholders, attentionMask, images?.grids ?? [], this.config);
    const rotary = this.#mrope.cosSin(positions, this.dtype);
    const isImage = placeholders.eq(this.config.imageTokenId).unsqueeze(-1);
    if (images === undefined || this.vision.deepstackCount === 0)
      return { embed: () => this.#embedWithImages(inputIds, images, placeholders).embeds, rotary };
    // DeepStack: the trunk's state is [h, deepstack_i, ..., deepstack_{K-1}] (hidden wide each) before layer i; layer
    // i runs on h, adds deepstack_i at the image tokens and passes the rest on (see the header)
    const hidden = this.config.text.hiddenSize;
    return {
      embed: () => {
        const { embeds, deepstack } = this.#embedWithImages(inputIds, images, placeholders);
        return torch.cat([embeds, ...deepstack], -1);
      },
      rotary,
      layer: (_index, x, decoderLayer) => {
        const carried = x.size(-1) / hidden - 1;
        if (carried === 0) return decoderLayer(x);
        const h = decoderLayer(x.narrow(-1, 0, hidden));
        const out = torch.where(isImage, h.add(x.narrow(-1, hidden, hidden)), h);
        return carried === 1 ? out : torch.cat([out, x.narrow(-1, 2 * hidden, (carried - 1) * hidden)], -1);
      },
    };
  }

  /** inputIds [B, T] int64 → logits [B, T, vocab] (or final hidden states). Records autograd as CausalLM.forward. */
  forward(inputIds: Tensor, options: VisionLanguageForwardOptions = {}): Tensor {
    this.#checkAlive();
    return torch.scope(() => {
      const { images, cache, attentionMask } = options;
      const grids = images?.grids ?? [];
      const embedded = this.#embedWithImages(inputIds, images);
      let x = embedded.embeds;
      let positions = options.positionIds;
      if (positions === undefined) {
        const slots = options.slots ?? Array.from({ length: inputIds.size(0) }, (_, b) => b);
        if (cache !== undefined && slots.some((s) => cache.length(s) > 0))
          throw new TypeError('forward: a decode step over a filled cache slot needs positionIds (text position + rope delta)');
        positions = ropeIndexOf(inputIds, attentionMask ?? null, grids, this.config).positions;
      }
      const [batch, seqLen] = inputIds.shape as [number, number];
      if (positions.ndim !== 3 || positions.size(0) !== 3 || positions.size(1) !== batch || positions.size(2) !== seqLen)
        throw new TypeError(`forward: positionIds must have shape [3, ${batch}, ${seqLen}], got [${positions.shape.join(', ')}]`);
      const rotary = this.#mrope.cosSin(positions, this.dtype);
      const pass = this.language.beginPass(inputIds, {
        ...(attentionMask ? { attentionMask } : {}),
        ...(cache ? { cache } : {}),
        ...(options.slots ? { slots: options.slots } : {}),
        rotary,
      });
      const isImage = inputIds.eq(this.config.imageTokenId).unsqueeze(-1);
      for (let i = 0; i < pass.numLayers; i++) {
        x = pass.layer(i, x);
        const deepstack = embedded.deepstack[i];
        if (deepstack !== undefined) x = torch.where(isImage, x.add(deepstack), x); // x[image tokens] += deepstack_i
      }
      pass.commit();
      const hidden = pass.norm(x);
      return options.output === 'hidden' ? hidden : this.language.logits(hidden);
    });
  }

  /**
   * Token embeddings with each image placeholder's row (an image token of `placeholderIds`, the ids with a response's
   * sampled ones masked) replaced by its image token (masked_scatter, differentiable), and the DeepStack features
   * [B, T, hidden] at the placeholders' rows (zeros elsewhere; none for Qwen2.5-VL).
   */
  #embedWithImages(
    inputIds: Tensor,
    images: ImageInputs | undefined,
    placeholderIds: Tensor = inputIds,
  ): { embeds: Tensor; deepstack: Tensor[] } {
    const embedTokens = this.language.parameters().get('model.embed_tokens.weight') as Tensor;
    const embeds = torch.embedding(embedTokens, inputIds);
    const isImage = placeholderIds.eq(this.config.imageTokenId); // [B, T]
    const placeholders = isImage.long().sum().item();
    const grids = images?.grids ?? [];
    const expected = grids.reduce((n, g) => n + imageTokenCount(g, this.config.vision.spatialMergeSize), 0);
    if (placeholders !== expected)
      throw new RangeError(
        `forward: the token ids hold ${placeholders} image tokens (id ${this.config.imageTokenId}), the ${grids.length} image(s) make ${expected}`,
      );
    if (images === undefined || placeholders === 0) return { embeds, deepstack: [] };
    const computed =
      'embeds' in images
        ? { embeds: images.embeds, deepstack: images.deepstack ?? [] }
        : this.vision.features(images.pixelValues, grids);
    const features = computed.embeds;
    if (computed.deepstack.length !== this.vision.deepstackCount)
      throw new RangeError(
        `forward: ${computed.deepstack.length} DeepStack features given with the image embeds, ${this.config.architecture} adds ${this.vision.deepstackCount} (imageFeatures gives them)`,
      );
    if (features.ndim !== 2 || features.size(0) !== expected || features.size(1) !== this.config.text.hiddenSize)
      throw new RangeError(
        `forward: image embeds have shape [${features.shape.join(', ')}], expected [${expected}, ${this.config.text.hiddenSize}]`,
      );
    // placeholder k (row-major over the batch) takes image token k
    const [batch, seqLen] = inputIds.shape as [number, number];
    const index = isImage
      .long()
      .reshape([-1])
      .cumsum(0)
      .sub(1)
      .clamp(0, expected - 1);
    const rows = (t: Tensor) => t.to({ dtype: embeds.dtype }).indexSelect(0, index).reshape([batch, seqLen, -1]);
    const mask = isImage.unsqueeze(-1);
    return {
      embeds: torch.where(mask, rows(features), embeds),
      deepstack: computed.deepstack.map((t) => torch.where(mask, rows(t), torch.zerosLike(embeds))),
    };
  }

  /** Writes a Hugging Face folder transformers loads as the config's architecture (the family's checkpoint names). */
  save(dir: string, options: SaveModelOptions = {}): string[] {
    this.#checkAlive();
    const parameters = new Map([...this.parameters()].map(([name, t]) => [this.#family.checkpointName(name), t]));
    return writeModelFolder(
      dir,
      { rawConfig: this.config.raw, dtype: this.dtype, parameters, sourceDir: this.language.sourceDir },
      options,
    );
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.language.dispose();
    for (const t of this.#visionWeights.values()) t.dispose();
    this.vision.dispose();
    this.#mrope.dispose();
  }

  #checkAlive(): void {
    if (this.#disposed) throw new Error(`${this.config.architecture} was disposed`);
  }
}
