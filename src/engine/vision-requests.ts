// Images in the rollout engine (./rollout-engine.ts): a vision-language model (../model/vision: Qwen2.5-VL or
// Qwen3-VL) serves text requests and requests with images in one continuous batch. The engine's KV cache, slots, sampling and decode steps are the
// language model's; this file adds what images change:
//
//   admission  a request's images (data URLs, file paths, encoded bytes; chat's come decoded: DecodedImage) are
//              decoded (those not yet) and preprocessed once, before it queues: pixel_values and grids (the model
//              folder's preprocessor_config.json); the prompt must hold each image's placeholder run (<|image_pad|>
//              x t*h*w/merge², the chat template's and ./vision-chat.ts's expansion), checked by get_rope_index,
//              which also gives the prompt's M-RoPE positions and rope delta
//   prefill    x = embed_tokens[ids], image placeholders' rows replaced by the image's vision tower output; the
//              vision tower runs at the request's first prefill, once for all its images, and its output is kept on
//              the request until it settles (its n samples, a preempted sequence's recompute reuse it). Positions:
//              the prompt's M-RoPE positions, past the prompt t + delta on all three axes; a prefill past a cached
//              prefix takes the positions (and image rows) from where the prefix ends. DeepStack (Qwen3-VL): the
//              tower's features k are kept beside the image tokens and added to layer k's output at the image rows
//              of the prefill (the cached keys and values hold them from then on)
//   decode     a token at text position n rotates by n + delta on all three axes (M-RoPE with equal axes), computed
//              from a [B, 1] input, so captured decode steps replay it
//   prefix     the paged prefix cache keys blocks by token ids; a request's image tokens enter the keys as ids made
//   cache      from a SHA-256 of the image's decoded pixels (negative int32s, never a real token id): the same text
//              with another image shares no block past the image's first token
//
// Text-only requests on a VL engine run the same path (no image rows, delta 0: ordinary RoPE positions). A prompt
// holding image tokens without images, or images whose placeholder runs do not match, is refused ('invalid').
import { createHash } from 'node:crypto';
import {
  CausalLM,
  decodeImage,
  type ForwardOptions,
  type GridTHW,
  type ImageProcessorConfig,
  type ImageSource,
  imageProcessorDefaults,
  isVisionLanguageFolder,
  loadModelConfig,
  loadVisionImageProcessor,
  loadVisionLanguageConfig,
  loadVisionLanguageModel,
  type ModelConfig,
  ModelWeightsError,
  MultimodalRotaryEmbedding,
  preprocessImages,
  ropeIndex,
  type VisionLanguageModel,
} from '../model/index.js';
import * as torch from '../torch/index.js';
import type { RolloutEngineOptions } from './types.js';
import { syncModelWeights } from './weight-sync.js';

/** A request's images, ready for the engine; the engine frees it (releaseVisionRequest) when the request settles. */
export interface VisionRequest {
  readonly grids: readonly GridTHW[];
  /** The processor's pixel values (kept until the vision tower ran), then null. */
  pixelValues: torch.Tensor | null;
  /**
   * The vision tower's output [image tokens, hidden * (1 + K)] (kept), computed at the request's first prefill: the
   * image tokens, then the K DeepStack features (Qwen3-VL; K = 0 for Qwen2.5-VL).
   */
  embeds: torch.Tensor | null;
  /** The prompt's M-RoPE positions per axis [3][prompt length], and the rope delta of the positions after it. */
  readonly positions: readonly (readonly number[])[];
  readonly ropeDelta: number;
  /** For each prompt position, its row in embeds (-1: a text token). */
  readonly imageRows: Int32Array;
  /** The prompt's ids with image tokens replaced by their image's key ids: the prefix cache's keys. */
  readonly cacheIds: readonly number[];
}

/** What this file reads of an engine's sequence (./request-state.ts's Sequence). */
export interface EngineSequence {
  readonly request: { readonly promptIds: readonly number[]; readonly vision?: VisionRequest };
  readonly tokenIds: readonly number[];
}

/** One row of a prefill (or recompute) forward: `ids` written from position `from` of the sequence. */
export interface VisionRow {
  readonly promptLength: number;
  readonly from: number;
  readonly length: number;
  readonly vision: VisionRequest | null;
}

/**
 * A sequence's row in a forward: its last `length` positions before `held` of its tokens so far (prompt + generated):
 * a prefill holds back none (the prompt's last `length`), a recompute 1 (every token but the last), a decode none
 * (the last token).
 */
export function visionRow(seq: EngineSequence, held: number, length: number): VisionRow {
  const promptLength = seq.request.promptIds.length;
  const from = promptLength + seq.tokenIds.length - held - length;
  return { promptLength, from, length, vision: seq.request.vision ?? null };
}

/**
 * The prefix cache's keys of a sequence's tokens but the last `held`: its prompt's (image tokens keyed by their
 * image) then its generated ids.
 */
export function cacheKeys(seq: EngineSequence, held = 0): number[] {
  const prompt = seq.request.vision?.cacheIds ?? seq.request.promptIds;
  return [...prompt, ...seq.tokenIds.slice(0, seq.tokenIds.length - held)];
}

/** The language model's config of a model folder, a VL folder's text_config included (cache sizes before loading). */
export function languageConfigOf(dir: string): ModelConfig {
  return isVisionLanguageFolder(dir) ? loadVisionLanguageConfig(dir).text : loadModelConfig(dir);
}

/** A folder's image token and processor when it holds a vision-language model (chat on the caller's thread), else null. */
export function imagePromptsOf(dir: string): { imageTokenId: number; processor: ImageProcessorConfig } | null {
  if (!isVisionLanguageFolder(dir)) return null;
  return { imageTokenId: loadVisionLanguageConfig(dir).imageTokenId, processor: loadVisionImageProcessor(dir) };
}

/**
 * The model a rollout engine serves from a folder, in the inference layout: a CausalLM, or a vision-language model
 * with its image processor (preprocessor_config.json; absent: its family's defaults).
 */
export function loadEngineModel(
  dir: string,
  options: { dtype?: 'float32' | 'bfloat16'; device?: string },
): { model: CausalLM | VisionLanguageModel; options: Pick<RolloutEngineOptions, 'imageProcessor'> } {
  if (!isVisionLanguageFolder(dir)) return { model: CausalLM.load(dir, { ...options, layout: 'inference' }), options: {} };
  const imageProcessor = loadVisionImageProcessor(dir);
  return { model: loadVisionLanguageModel(dir, { ...options, layout: 'inference' }), options: { imageProcessor } };
}

/** The key id of image token j of an image with this digest: 4 digest bytes, sign bit set (never a token id). */
const imageKeyId = (digest: Buffer, j: number): number => digest.readInt32LE((j % 8) * 4) | 0x80000000;

export class VisionInputs {
  readonly model: VisionLanguageModel;
  readonly processor: ImageProcessorConfig;
  readonly imageTokenId: number;
  readonly #mrope: MultimodalRotaryEmbedding;
  /** The model's device: pixel values are moved there when a request is admitted. */
  readonly #device: string;

  constructor(model: VisionLanguageModel, options: Pick<RolloutEngineOptions, 'imageProcessor' | 'batchInvariant'> = {}) {
    if (options.batchInvariant)
      throw new RangeError(`RolloutEngine: batchInvariant is not available for ${model.config.architecture} (M-RoPE)`);
    this.model = model;
    this.processor = options.imageProcessor ?? imageProcessorDefaults(model.config);
    this.imageTokenId = model.config.imageTokenId;
    this.#device = model.language.parameters().get('model.embed_tokens.weight')?.device ?? 'cpu';
    this.#mrope = new MultimodalRotaryEmbedding(model.config, this.#device);
  }

  /**
   * Checks a request's images against its prompt: null for a text-only prompt (a RangeError when it holds image
   * tokens), else a promise of its decoded, preprocessed images and positions (rejecting with the bad image named).
   */
  admit(promptIds: readonly number[], images: readonly ImageSource[] | undefined): Promise<VisionRequest> | null {
    if (images === undefined || images.length === 0) {
      const at = promptIds.indexOf(this.imageTokenId);
      if (at !== -1)
        throw new RangeError(
          `generate: the prompt holds image tokens (id ${this.imageTokenId}, first at position ${at}) but the request has no images`,
        );
      return null;
    }
    return this.#prepare(promptIds, images);
  }

  async #prepare(promptIds: readonly number[], images: readonly ImageSource[]): Promise<VisionRequest> {
    const decoded = await Promise.all(images.map((image, i) => decodeImage(image, `images[${i}]`)));
    const processed = preprocessImages(decoded, this.processor); // on the CPU
    const grids = processed.grids;
    const pixelValues = this.#device === 'cpu' ? processed.pixelValues : processed.pixelValues.to({ device: this.#device });
    if (pixelValues !== processed.pixelValues) processed.pixelValues.dispose();
    try {
      const { positions, ropeDeltas } = ropeIndex([promptIds], null, grids, this.model.config);
      const digests = decoded.map((image) =>
        createHash('sha256').update(`${image.height}x${image.width}|`).update(image.data).digest(),
      );
      const imageRows = new Int32Array(promptIds.length).fill(-1);
      const cacheIds = [...promptIds];
      let row = 0;
      let image = -1;
      let inImage = 0;
      promptIds.forEach((id, t) => {
        if (id !== this.imageTokenId) return;
        // ropeIndex checked that each run of image tokens is one whole image
        if (t === 0 || promptIds[t - 1] !== this.imageTokenId) {
          image += 1;
          inImage = 0;
        }
        imageRows[t] = row++;
        cacheIds[t] = imageKeyId(digests[image] as Buffer, inImage++);
      });
      return {
        grids,
        pixelValues: torch.keep(pixelValues),
        embeds: null,
        positions: positions.map((axis) => axis[0] as number[]),
        ropeDelta: ropeDeltas[0] as number,
        imageRows,
        cacheIds,
      };
    } catch (error) {
      pixelValues.dispose();
      throw error;
    }
  }

  /**
   * The final hidden states [B, T, H] of a prefill (or, held 1, a recompute) of right-padded `inputIds` [B, T] over
   * the engine's cache: row b is the lengths[b] positions of seqs[b]'s tokens that end `held` (or held[b]) before its
   * last (visionRow; a chunk of a prompt part-way through ends before the prompt's end), image rows from its
   * request's vision tower output, M-RoPE positions from where the row starts.
   */
  hidden(
    inputIds: torch.Tensor,
    seqs: readonly EngineSequence[],
    lengths: readonly number[],
    forward: Pick<ForwardOptions, 'cache' | 'slots' | 'cachePlan'>,
    held: number | readonly number[] = 0,
  ): torch.Tensor {
    const rows = seqs.map((seq, b) =>
      visionRow(seq, typeof held === 'number' ? held : (held[b] as number), lengths[b] as number),
    );
    const [batch, seqLen] = inputIds.shape as [number, number];
    const device = inputIds.device;
    const positions = new BigInt64Array(3 * batch * seqLen);
    const gather = new BigInt64Array(batch * seqLen);
    const features: torch.Tensor[] = [];
    let featureRows = 0;
    rows.forEach((row, b) => {
      const vision = row.vision;
      let offset = 0;
      if (vision?.imageRows.subarray(row.from, row.from + row.length).some((r) => r >= 0)) {
        const embeds = this.#embeds(vision);
        features.push(embeds);
        offset = featureRows;
        featureRows += embeds.size(0);
      }
      for (let t = 0; t < row.length; t++) {
        const at = row.from + t;
        const inPrompt = vision !== null && at < row.promptLength;
        for (let axis = 0; axis < 3; axis++)
          positions[(axis * batch + b) * seqLen + t] = BigInt(
            inPrompt ? (vision.positions[axis]?.[at] as number) : at + (vision?.ropeDelta ?? 0),
          );
        const imageRow = inPrompt ? (vision.imageRows[at] as number) : -1;
        if (imageRow >= 0) gather[b * seqLen + t] = BigInt(offset + imageRow);
      }
    });
    const language = this.model.language;
    const dtype = language.dtype;
    const positionIds = torch.tensor(positions, { shape: [3, batch, seqLen], device });
    const { cache, slots, cachePlan } = forward;
    const pass = language.beginPass(inputIds, { cache, slots, cachePlan, rotary: this.#mrope.cosSin(positionIds, dtype) });
    let x = pass.embed();
    // per image row: its image token, then DeepStack feature k for layer k (hidden wide each)
    let imageRows: torch.Tensor | null = null;
    const isImage = inputIds.eq(this.imageTokenId).unsqueeze(-1);
    if (features.length > 0) {
      const index = torch.tensor(gather, { shape: [batch * seqLen], device });
      imageRows = torch.cat(features, 0).to({ dtype }).indexSelect(0, index).reshape([batch, seqLen, -1]);
      x = torch.where(isImage, imageRows.narrow(-1, 0, x.size(-1)), x);
    }
    const hidden = x.size(-1);
    const deepstack = imageRows === null ? 0 : imageRows.size(-1) / hidden - 1;
    for (let i = 0; i < pass.numLayers; i++) {
      x = pass.layer(i, x);
      if (imageRows !== null && i < deepstack) x = torch.where(isImage, x.add(imageRows.narrow(-1, (i + 1) * hidden, hidden)), x);
    }
    pass.commit();
    return pass.norm(x);
  }

  /** The request's vision tower output with its DeepStack features, computed once (kept until the request settles). */
  #embeds(vision: VisionRequest): torch.Tensor {
    if (vision.embeds === null) {
      vision.embeds = torch.keep(
        torch.scope(() => {
          const { embeds, deepstack } = this.model.imageFeatures(vision.pixelValues as torch.Tensor, vision.grids);
          return deepstack.length === 0 ? embeds : torch.cat([embeds, ...deepstack], -1);
        }),
      );
      vision.pixelValues?.dispose();
      vision.pixelValues = null;
    }
    return vision.embeds;
  }

  /**
   * A decode step's M-RoPE, each row's last token at its text position + rope delta (equal on the three axes): the
   * positions [B, 1] as the step's input (made before the forward; a captured step replays with new ones) and the
   * forward's rotary tables computed from them.
   */
  decodeRope(
    seqs: readonly EngineSequence[],
    device: string,
  ): { inputs: [torch.Tensor]; forward: () => Pick<ForwardOptions, 'rotary'> } {
    const values = BigInt64Array.from(seqs, (seq) => {
      const row = visionRow(seq, 0, 1);
      return BigInt(row.from + (row.vision?.ropeDelta ?? 0));
    });
    const positions = torch.tensor(values, { shape: [seqs.length, 1], device });
    const dtype = this.model.language.dtype;
    return {
      inputs: [positions],
      forward: () => ({ rotary: this.#mrope.cosSin(positions.unsqueeze(0).expand([3, -1, -1]), dtype) }),
    };
  }

  /**
   * A weight sync (weights, or a model folder's path): the language model's weights through syncModelWeights, the vision tower's (visual.*) checked by
   * name and shape first and copied after; all or nothing as a text model's sync. Returns the tensors copied.
   */
  syncWeights(from: ReadonlyMap<string, torch.Tensor> | string): number {
    if (typeof from === 'string') return this.#syncFromDir(from);
    const weights = from;
    const own = this.model.parameters();
    // transformers 5's in-memory names (model.language_model.*, model.visual.*) as the checkpoint's
    const named = [...weights].map(
      ([name, t]) => [name.replace(/^model\.language_model\./, 'model.').replace(/^model\.visual\./, 'visual.'), t] as const,
    );
    const renamed = named.filter(([name]) => name.startsWith('visual.'));
    for (const [name, t] of renamed) {
      const target = own.get(name);
      if (target === undefined)
        throw new ModelWeightsError('syncWeights', `the engine's vision tower has no parameter '${name}' (nothing was copied)`);
      if (t.shape.join() !== target.shape.join())
        throw new ModelWeightsError(
          'syncWeights',
          `tensor '${name}' has shape [${t.shape.join(', ')}], expected [${target.shape.join(', ')}] (nothing was copied)`,
        );
    }
    const missing = [...own.keys()].filter((n) => n.startsWith('visual.') && !renamed.some(([r]) => r === n));
    if (missing.length > 0)
      throw new ModelWeightsError('syncWeights', `missing vision tensor '${missing[0]}' (nothing was copied)`);
    const text = new Map(named.filter(([name]) => !name.startsWith('visual.')));
    const copied = syncModelWeights(this.model.language, text);
    torch.noGrad(() => {
      for (const [name, t] of renamed) (own.get(name) as torch.Tensor).copy_(t);
    });
    return copied + renamed.length;
  }

  /**
   * syncWeights from a Hugging Face folder (a VL checkpoint, either layout of names), read whole: a VL folder is not
   * streamed in buckets (weightSyncBufferBytes applies to text models).
   */
  #syncFromDir(dir: string): number {
    const loaded = torch.loadModelWeights(dir, { dtype: this.model.dtype });
    try {
      return this.syncWeights(loaded);
    } finally {
      for (const t of loaded.values()) t.dispose();
    }
  }

  /** Frees the M-RoPE tables, and the model when the engine owns it. */
  dispose(ownsModel: boolean): void {
    this.#mrope.dispose();
    if (ownsModel) this.model.dispose();
  }
}

/** Frees a settled request's images. */
export function releaseVisionRequest(vision: VisionRequest | undefined): void {
  vision?.pixelValues?.dispose();
  vision?.embeds?.dispose();
}
