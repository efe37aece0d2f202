// Vision-language training (a policy folder whose config.json says model_type qwen2_5_vl or qwen3_vl): the trainer
// loads the VisionLanguageModel, trains its language model as the policy (../../model/training.ts runs it) and its
// vision tower with it, and gives every forward over rows with images the model's multimodal inputs (the embeddings
// with the image tokens in place, the M-RoPE tables, Qwen3-VL's DeepStack features):
//
//   experience.images (data URLs, placeholder order) ──decode (sharp), image processor of the model folder's
//     preprocessor_config.json──▶ pixel values and grid per image (once per step, before the step runs)
//   a forward's rows ──▶ their images in row order ──▶ model.trainingInputs(ids, mask, images)
//
// A forward whose rows carry no image runs as for a text model (shared prompts, packed rows). One with images runs
// the padded layout: the image tokens and their 3-D positions follow the padded columns (../../model/training.ts).
// Mixed precision (./master-weights.ts) keeps a master copy of the whole model, vision tower included
// (loadMasterPolicy). Data-parallel ranks (ZeRO-1 too) each decode the images of the step's global batch (the
// experiences rank 0 sends carry them) and run their own rows' forwards; the vision tower's gradients are summed with
// the language model's (its parameters are the optimizer's, ./trainer-worker-main.ts policyOverlap). Not covered yet,
// refused at init naming the setting (visionTrainingProblems): fully sharded training (fsdp shards the language
// model's layers; the vision tower is no unit of it), a critic (PPO), trainer.bitwise_on_policy. LoRA adapts the
// language model; the vision tower is then frozen.
import {
  CausalLM,
  decodeImage,
  type GridTHW,
  type ImageInputs,
  imageTokenCount,
  type ImageProcessorConfig,
  isVisionLanguageFolder,
  loadVisionImageProcessor,
  loadVisionLanguageModel,
  type ModelDType,
  type MultimodalInputs,
  preprocessImages,
  type VisionLanguageModel,
} from '../../model/index.js';
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import type { Experience } from '../experience.js';

/** What a vision-language trainer does not cover yet, as one error naming each setting; null when covered. */
export function visionTrainingProblems(settings: {
  dtype: string;
  useCritic: boolean;
  /** Fully sharded ranks (trainer.trainer_strategy fsdp over more than one rank); 0 when the policy is not sharded. */
  shardedRanks: number;
  bitwiseOnPolicy?: boolean | undefined;
}): string | null {
  const problems: string[] = [];
  if (settings.bitwiseOnPolicy) problems.push('trainer.bitwise_on_policy (the multimodal forward is not batch-invariant)');
  if (settings.shardedRanks > 1)
    problems.push(
      `fully sharded training (trainer.trainer_strategy fsdp over ${settings.shardedRanks} ranks: its units are the ` +
        "language model's layers, the vision tower is none; data parallelism, ZeRO-1 included, trains it)",
    );
  if (settings.useCritic) problems.push('a critic (advantage_fn ppo / GAE)');
  return problems.length === 0
    ? null
    : `a vision-language policy (qwen2_5_vl, qwen3_vl) does not support ${problems.join('; ')} yet`;
}

/**
 * The trainer's policy from a model folder: a CausalLM, or for a vision-language folder its VisionLanguageModel (checked
 * against the settings it does not cover) whose language model is the policy the step computes with.
 */
export function loadPolicy(
  dir: string,
  options: { dtype: ModelDType; device: string; requiresGrad: boolean },
  settings: {
    shardedRanks: number;
    useCritic: boolean;
    bitwiseOnPolicy?: boolean | undefined;
  },
): { model: CausalLM; vision: TrainerVision | null } {
  const loading = {
    dtype: options.dtype,
    requiresGrad: options.requiresGrad,
    ...(options.device === 'cpu' ? {} : { device: options.device }),
  };
  if (!isVisionLanguageFolder(dir)) return { model: CausalLM.load(dir, loading), vision: null };
  const problem = visionTrainingProblems({ ...settings, dtype: options.dtype });
  if (problem !== null) throw new Error(`trainer (${dir}): ${problem}`);
  const vision = new TrainerVision(loadVisionLanguageModel(dir, loading), dir, options.device);
  return { model: vision.model.language, vision };
}

/**
 * The policy's master weights under mixed precision (./master-weights.ts): the folder's model again in `dtype`, the
 * same kind as loadPolicy's (its VisionLanguageModel, vision tower included, for a vision-language folder), trainable.
 */
export function loadMasterPolicy(dir: string, options: { dtype: ModelDType; device: string }): CausalLM | VisionLanguageModel {
  const loading = { dtype: options.dtype, requiresGrad: true, ...(options.device === 'cpu' ? {} : { device: options.device }) };
  return isVisionLanguageFolder(dir) ? loadVisionLanguageModel(dir, loading) : CausalLM.load(dir, loading);
}

/**
 * Runs a step over `experiences` with their images decoded (a vision-language policy), freed after it: after the
 * step's promise settles when it returns one (a data-parallel step awaits its collectives).
 */
export async function withRowImages<T>(
  vision: TrainerVision | null,
  experiences: readonly Experience[],
  run: () => T | Promise<T>,
): Promise<T> {
  if (vision === null) return run();
  try {
    await vision.decode(experiences);
    return await run();
  } finally {
    vision.forget();
  }
}

/** One image as the vision tower takes it. */
interface ProcessedImage {
  pixelValues: Tensor;
  grid: GridTHW;
}

/** The policy's vision side: the model, and the decoded images of the step's rows. */
export class TrainerVision {
  readonly #processor: ImageProcessorConfig;
  readonly #device: string;
  readonly #images = new Map<string, ProcessedImage>();

  constructor(
    readonly model: VisionLanguageModel,
    modelDir: string,
    device: string,
  ) {
    this.#processor = loadVisionImageProcessor(modelDir);
    this.#device = device;
  }

  /** Decodes and preprocesses the images of `experiences` not decoded yet (before a step runs; forget() after it). */
  async decode(experiences: readonly Experience[]): Promise<void> {
    for (const e of experiences) {
      for (const [i, url] of (e.images ?? []).entries()) {
        if (this.#images.has(url)) continue;
        const bytes = await decodeImage(url, `experience ${e.eid} images[${i}]`);
        const processed = preprocessImages([bytes], this.#processor);
        const pixelValues = this.#device === 'cpu' ? processed.pixelValues : processed.pixelValues.to({ device: this.#device });
        this.#images.set(url, { pixelValues: torch.keep(pixelValues), grid: processed.grids[0] as GridTHW });
      }
    }
  }

  /** The images of `rows` in row order (each row's in placeholder order); null when no row has one. */
  rowImages(rows: readonly Experience[]): ImageInputs | null {
    const images = rows.flatMap((e) =>
      (e.images ?? []).map((url, i) => {
        const image = this.#images.get(url);
        if (image === undefined) throw new Error(`experience ${e.eid} images[${i}] was not decoded before the step`);
        return image;
      }),
    );
    if (images.length === 0) return null;
    return {
      grids: images.map((image) => image.grid),
      pixelValues: torch.cat(
        images.map((image) => image.pixelValues),
        0,
      ),
    };
  }

  /** Each row's image tokens are as many as its (decoded) images make: a row that lost its images is an error. */
  checkRows(rows: readonly Experience[]): void {
    const { imageTokenId, vision } = this.model.config;
    for (const e of rows) {
      // the prompt's: an image token sampled in the response is text (VisionLanguageModel.trainingInputs' promptWidth)
      const placeholders = e.tokens.slice(0, e.promptLength).reduce((n, t) => n + (t === imageTokenId ? 1 : 0), 0);
      const made = (e.images ?? []).reduce((n, url, i) => {
        const image = this.#images.get(url);
        if (image === undefined) throw new Error(`experience ${e.eid} images[${i}] was not decoded before the step`);
        return n + imageTokenCount(image.grid, vision.spatialMergeSize);
      }, 0);
      if (placeholders !== made)
        throw new Error(
          `experience ${e.eid}: its tokens hold ${placeholders} image tokens (id ${imageTokenId}), its ` +
            `${e.images?.length ?? 0} image(s) make ${made}`,
        );
    }
  }

  /** Frees the decoded images. */
  forget(): void {
    for (const image of this.#images.values()) image.pixelValues.dispose();
    this.#images.clear();
  }
}

/**
 * The forward options of rows holding `images` (../../model/training.ts multimodal), computed by `model`; none
 * without images. `promptWidth`: the padded layout's first response column (image tokens past it are sampled text). Rows with images and a text model are an error: their placeholder tokens would be read as text.
 */
export function visionOptions(
  model: VisionLanguageModel | null,
  inputIds: Tensor,
  attentionMask: Tensor,
  images: ImageInputs | null | undefined,
  promptWidth?: number,
): { multimodal?: MultimodalInputs } {
  if (images === null || images === undefined) return {};
  if (model === null)
    throw new Error(
      `rows carry ${images.grids.length} image(s), but the model is not a vision-language model (its config.json's ` +
        'model_type is not qwen2_5_vl or qwen3_vl): train image rows on a Qwen2.5-VL or Qwen3-VL model',
    );
  return { multimodal: model.trainingInputs(inputIds, attentionMask, images, promptWidth) };
}

/**
 * Rows with images need a vision-language policy (else their placeholder tokens would train as text), and a
 * vision-language policy's rows need their images (TrainerVision.checkRows).
 */
export function checkImageRows(rows: readonly Experience[], vision: TrainerVision | null): void {
  if (vision !== null) {
    vision.checkRows(rows);
    return;
  }
  const row = rows.find((e) => (e.images?.length ?? 0) > 0);
  if (row !== undefined)
    throw new Error(
      `experience ${row.eid} carries ${row.images?.length} image(s), but the policy is not a vision-language model ` +
        "(its config.json's model_type is not qwen2_5_vl or qwen3_vl): train image rows on a Qwen2.5-VL or Qwen3-VL model",
    );
}
