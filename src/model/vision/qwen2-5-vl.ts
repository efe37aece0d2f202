// Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration) as transformers computes it: the vision tower (./vision-tower.ts)
// turns each image into language tokens, which replace the image placeholder tokens' embeddings, and the Qwen2
// language model (../transformer.ts, unchanged) runs over them with the multimodal RoPE (./mrope.ts).
//
//   x = embed_tokens[ids]; x[ids == image_token_id] = visual(pixel_values, image_grid_thw)   in order, image by image
//   positions = get_rope_index(ids, mask, image_grid_thw)                                      [3, B, T]
//   logits = lm_head(language_model(x, M-RoPE(positions)))
//
// A prompt's image tokens are framed as the chat template writes them: <|vision_start|> then t*h*w / merge² image
// tokens then <|vision_end|>; the placeholders must match the images' grids (ropeIndex names the row otherwise).
// Decoding after a prompt: a new token at text position n (tokens so far) has M-RoPE positions n + rope delta on all
// three axes, which the caller passes as positionIds (ropeIndex gives the deltas). Videos are not supported here.
//
// Weights: the language model's under the dense names (model.embed_tokens, model.layers.*, model.norm, lm_head), as
// the Hub's checkpoints and transformers 5's save_pretrained write them, and visual.*; the in-memory names of
// transformers 5 (model.language_model.*, model.visual.*) are read as well.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Tensor } from '../../torch/index.js';
import * as torch from '../../torch/index.js';
import { ModelWeightsError, type SaveModelOptions, writeModelFolder } from '../hf-weights.js';
import type { KVCache } from '../kv-cache.js';
import type { WeightLayout } from '../inference-layout.js';
import { CausalLM, type ModelDType } from '../transformer.js';
import { loadQwen2_5VLConfig, type Qwen2_5VLConfig } from './config.js';
import { type GridTHW, imageTokenCount, MultimodalRotaryEmbedding, type RopeIndex, ropeIndexOf } from './mrope.js';
import { expectedVisionWeights, VisionTower } from './vision-tower.js';
import type { MultimodalInputs } from '../training.js';

/** A batch's images: their grids and either the processor's pixel_values or their vision tower output (encodeImages). */
export type ImageInputs = { grids: readonly GridTHW[]; pixelValues: Tensor } | { grids: readonly GridTHW[]; embeds: Tensor };

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

/** transformers 5's in-memory names → the checkpoint names. */
const renameWeight = (name: string): string =>
  name.startsWith('model.language_model.')
    ? `model.${name.slice('model.language_model.'.length)}`
    : name.startsWith('model.visual.')
      ? name.slice('model.'.length)
      : name;

export class Qwen2_5VLModel {
  readonly config: Qwen2_5VLConfig;
  /** The language model (its parameters are the model's language half, under their Hugging Face names). */
  readonly language: CausalLM;
  readonly vision: VisionTower;
  readonly #visionWeights: Map<string, Tensor>;
  readonly #mrope: MultimodalRotaryEmbedding;
  #disposed = false;

  /** Builds the model from weights with Hugging Face names, checked against the config; the model takes ownership. */
  constructor(
    config: Qwen2_5VLConfig,
    weights: Map<string, Tensor>,
    options: { sourceDir?: string | null; fileOf?: (tensor: string | null) => string; layout?: WeightLayout } = {},
  ) {
    const fileOf = options.fileOf ?? (() => 'weights');
    const expected = expectedVisionWeights(config.vision);
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
    this.#visionWeights = new Map([...expected.keys()].map((n) => [n, torch.keep(visionWeights.get(n) as Tensor)]));
    this.vision = new VisionTower(config.vision, this.#visionWeights);
    this.#mrope = new MultimodalRotaryEmbedding(config, (this.#visionWeights.get('visual.merger.ln_q.weight') as Tensor).device);
  }

  /** Loads a Hugging Face folder: config.json (model_type qwen2_5_vl) and model.safetensors (or a sharded index). */
  static load(dir: string, options: LoadVisionLanguageOptions = {}): Qwen2_5VLModel {
    const config = loadQwen2_5VLConfig(dir);
    const dtype = options.dtype ?? 'float32';
    if (dtype !== 'float32' && dtype !== 'bfloat16')
      throw new TypeError(`Qwen2_5VLModel.load: dtype must be float32 or bfloat16, got ${String(dtype)}`);
    const loaded = torch.loadModelWeights(dir, { dtype, ...(options.device ? { device: options.device } : {}) });
    const weights = new Map([...loaded].map(([name, t]) => [renameWeight(name), torch.keep(t)]));
    const index = join(dir, 'model.safetensors.index.json');
    const weightsFile = existsSync(index) ? index : join(dir, 'model.safetensors');
    const layout = options.layout ?? 'training';
    const model = new Qwen2_5VLModel(config, weights, { sourceDir: dir, fileOf: () => weightsFile, layout });
    if (options.requiresGrad) for (const t of model.parameters().values()) t.requiresGrad_(true);
    return model;
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
    return {
      embed: () => this.#embedWithImages(inputIds, images, placeholders),
      rotary: this.#mrope.cosSin(positions, this.dtype),
    };
  }

  /** inputIds [B, T] int64 → logits [B, T, vocab] (or final hidden states). Records autograd as CausalLM.forward. */
  forward(inputIds: Tensor, options: VisionLanguageForwardOptions = {}): Tensor {
    this.#checkAlive();
    return torch.scope(() => {
      const { images, cache, attentionMask } = options;
      const grids = images?.grids ?? [];
      let x = this.#embedWithImages(inputIds, images);
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
      for (let i = 0; i < pass.numLayers; i++) x = pass.layer(i, x);
      pass.commit();
      const hidden = pass.norm(x);
      return options.output === 'hidden' ? hidden : this.language.logits(hidden);
    });
  }

  /**
   * Token embeddings with each image placeholder's row (an image token of `placeholderIds`, the ids with a response's
   * sampled ones masked) replaced by its image token (masked_scatter, differentiable).
   */
  #embedWithImages(inputIds: Tensor, images: ImageInputs | undefined, placeholderIds: Tensor = inputIds): Tensor {
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
    if (images === undefined || placeholders === 0) return embeds;
    const features = 'embeds' in images ? images.embeds : this.vision.forward(images.pixelValues, grids);
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
    const gathered = features.to({ dtype: embeds.dtype }).indexSelect(0, index).reshape([batch, seqLen, -1]);
    return torch.where(isImage.unsqueeze(-1), gathered, embeds);
  }

  /** Writes a Hugging Face folder transformers loads as Qwen2_5_VLForConditionalGeneration (the checkpoint names). */
  save(dir: string, options: SaveModelOptions = {}): string[] {
    this.#checkAlive();
    return writeModelFolder(
      dir,
      { rawConfig: this.config.raw, dtype: this.dtype, parameters: this.parameters(), sourceDir: this.language.sourceDir },
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
