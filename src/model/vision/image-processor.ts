// The Qwen2-VL image processor (transformers' Qwen2VLImageProcessor, which Qwen2.5-VL and Qwen3-VL use), from decoded RGB bytes to
// pixel_values and image_grid_thw, equal to transformers' (its Pillow backend) on the same bytes:
//
//   (h', w') = smart_resize(h, w): multiples of factor = patch_size * merge_size (28; Qwen3-VL's 32) nearest the image's size
//              (round half to even, as Python's round), scaled down to max_pixels or up to min_pixels keeping the
//              aspect ratio (floor / ceil to the factor), aspect ratio at most 200
//   resize to (h', w') with Pillow's bicubic (./bicubic-resize.ts), unless the size is unchanged
//   x = (byte * (1/255) in float64, then float32 - mean) / std       per channel, float32 (CLIP mean and std)
//   patches: grid (h'/14, w'/14); rows ordered by 2 x 2 merge blocks, row-major, patches row-major inside a block;
//   each row is channel x temporal (the one frame repeated temporal_patch_size times) x 14 x 14 values
//
// processor_config.json's image_processor (transformers 5) or preprocessor_config.json supplies the keys (min_pixels / max_pixels or size.shortest_edge / size.longest_edge,
// patch_size, temporal_patch_size, merge_size, image_mean, image_std); steps this file does not implement (no
// resize, no rescale, no normalisation, another resample filter) are refused, naming the key. Decoding image files
// (PNG, JPEG) is the caller's: this takes decoded bytes.
import { join } from 'node:path';
import type { Tensor } from '../../torch/index.js';
import * as torch from '../../torch/index.js';
import { fileErrorDetail, readRegularFile } from '../../util/index.js';
import { type ImageBytes, resizeBicubic } from './bicubic-resize.js';
import type { GridTHW } from './mrope.js';

export interface ImageProcessorConfig {
  minPixels: number;
  maxPixels: number;
  patchSize: number;
  temporalPatchSize: number;
  mergeSize: number;
  imageMean: readonly [number, number, number];
  imageStd: readonly [number, number, number];
}

/** Qwen2VLImageProcessor's defaults (OPENAI_CLIP_MEAN / OPENAI_CLIP_STD). */
export const QWEN2_VL_IMAGE_PROCESSOR: ImageProcessorConfig = {
  minPixels: 56 * 56,
  maxPixels: 28 * 28 * 1280,
  patchSize: 14,
  temporalPatchSize: 2,
  mergeSize: 2,
  imageMean: [0.48145466, 0.4578275, 0.40821073],
  imageStd: [0.26862954, 0.26130258, 0.27577711],
};

/**
 * Qwen3-VL's preprocessor_config.json on the Hub: the same processor (Qwen2VLImageProcessor) with 16-pixel patches
 * (factor 32), mean = std = 0.5 and size {shortest_edge: 65536, longest_edge: 16777216}.
 */
export const QWEN3_VL_IMAGE_PROCESSOR: ImageProcessorConfig = {
  minPixels: 65536,
  maxPixels: 16777216,
  patchSize: 16,
  temporalPatchSize: 2,
  mergeSize: 2,
  imageMean: [0.5, 0.5, 0.5],
  imageStd: [0.5, 0.5, 0.5],
};

/** Python's round(): halves go to the even neighbour. */
function roundHalfEven(x: number): number {
  const floor = Math.floor(x);
  const fraction = x - floor;
  if (fraction !== 0.5) return Math.round(x);
  return floor % 2 === 0 ? floor : floor + 1;
}

/** transformers' smart_resize: the (height, width) an image is resized to. */
export function smartResize(
  height: number,
  width: number,
  factor: number,
  minPixels: number,
  maxPixels: number,
): [number, number] {
  if (Math.max(height, width) / Math.min(height, width) > 200)
    throw new RangeError(`image of ${height} x ${width}: the aspect ratio must be smaller than 200`);
  let h = roundHalfEven(height / factor) * factor;
  let w = roundHalfEven(width / factor) * factor;
  if (h * w > maxPixels) {
    const beta = Math.sqrt((height * width) / maxPixels);
    h = Math.max(factor, Math.floor(height / beta / factor) * factor);
    w = Math.max(factor, Math.floor(width / beta / factor) * factor);
  } else if (h * w < minPixels) {
    const beta = Math.sqrt(minPixels / (height * width));
    h = Math.ceil((height * beta) / factor) * factor;
    w = Math.ceil((width * beta) / factor) * factor;
  }
  return [h, w];
}

/** RGB images (height x width x 3 bytes) → pixel_values [patches, 3 * temporal * patch²] float32 and their grids. */
export function preprocessImages(
  images: readonly ImageBytes[],
  config: ImageProcessorConfig = QWEN2_VL_IMAGE_PROCESSOR,
): { pixelValues: Tensor; grids: GridTHW[] } {
  const { patchSize: p, mergeSize: m, temporalPatchSize: temporal } = config;
  const grids: GridTHW[] = [];
  const pixelValues = torch.scope(() => {
    const mean = torch.tensor([...config.imageMean], { dtype: 'float32' }).view([3, 1, 1]);
    const std = torch.tensor([...config.imageStd], { dtype: 'float32' }).view([3, 1, 1]);
    const rows = images.map((image, i) => {
      if (image.channels !== 3) throw new RangeError(`image ${i}: expected 3 channels (RGB), got ${image.channels}`);
      const [h, w] = smartResize(image.height, image.width, p * m, config.minPixels, config.maxPixels);
      const resized = h === image.height && w === image.width ? image : resizeBicubic(image, h, w);
      const chw = torch.tensor(resized.data, { dtype: 'uint8', shape: [h, w, 3] }).permute([2, 0, 1]);
      const x = chw
        .double()
        .mul(1 / 255)
        .float()
        .sub(mean)
        .div(std); // [3, h, w]
      const [gh, gw] = [h / p, w / p];
      grids.push([1, gh, gw]);
      return x
        .reshape([3, gh / m, m, p, gw / m, m, p])
        .permute([1, 4, 2, 5, 0, 3, 6]) // [gh/m, gw/m, m, m, C, p, p]
        .unsqueeze(5)
        .expand([gh / m, gw / m, m, m, 3, temporal, p, p])
        .reshape([gh * gw, 3 * temporal * p * p]);
    });
    return torch.cat(rows, 0);
  });
  return { pixelValues, grids };
}

/** A JSON object file of the folder; null when the file does not exist. */
function readJsonObject(file: string): Record<string, unknown> | null {
  let raw: unknown;
  try {
    raw = JSON.parse(readRegularFile(file, 'utf8'));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new Error(`${file}: cannot read the image processor config: ${fileErrorDetail(error)}`);
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new Error(`${file}: expected a JSON object`);
  return raw as Record<string, unknown>;
}

/**
 * A model folder's image processor keys over `defaults` (Qwen2VLImageProcessor's unless given), found as transformers
 * finds them: processor_config.json's nested "image_processor" (transformers 5's processor.save_pretrained writes
 * only that file), else preprocessor_config.json; neither: the defaults.
 */
export function loadImageProcessorConfig(
  dir: string,
  defaults: ImageProcessorConfig = QWEN2_VL_IMAGE_PROCESSOR,
): ImageProcessorConfig {
  const processorFile = join(dir, 'processor_config.json');
  const nested = readJsonObject(processorFile)?.image_processor;
  if (nested !== undefined && (nested === null || typeof nested !== 'object' || Array.isArray(nested)))
    throw new Error(`${processorFile}: key 'image_processor': expected an object, got ${JSON.stringify(nested)}`);
  const file = nested !== undefined ? `${processorFile} (image_processor)` : join(dir, 'preprocessor_config.json');
  const raw = (nested as Record<string, unknown> | undefined) ?? readJsonObject(file);
  if (raw === null) return defaults;
  const fail = (key: string, detail: string): never => {
    throw new Error(`${file}: key '${key}': ${detail}`);
  };
  const int = (key: string, value: unknown, fallback: number): number => {
    const v = value ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0)
      fail(key, `expected a positive integer, got ${JSON.stringify(v)}`);
    return v as number;
  };
  for (const key of ['do_resize', 'do_rescale', 'do_normalize', 'do_convert_rgb'])
    if (raw[key] === false) fail(key, 'false is not supported (the Qwen2-VL processor resizes, rescales and normalises)');
  if (raw.resample !== undefined && raw.resample !== null && raw.resample !== 3)
    fail('resample', `only 3 (bicubic) is supported, got ${JSON.stringify(raw.resample)}`);
  if (
    raw.rescale_factor !== undefined &&
    raw.rescale_factor !== null &&
    Math.abs((raw.rescale_factor as number) - 1 / 255) > 1e-12
  )
    fail('rescale_factor', `only 1/255 is supported, got ${JSON.stringify(raw.rescale_factor)}`);
  const size = (raw.size ?? {}) as Record<string, unknown>;
  const triple = (key: string, fallback: readonly [number, number, number]): [number, number, number] => {
    const v = raw[key] ?? fallback;
    if (!Array.isArray(v) || v.length !== 3 || v.some((x) => typeof x !== 'number' || !Number.isFinite(x)))
      fail(key, `expected three numbers, got ${JSON.stringify(v)}`);
    return v as [number, number, number];
  };
  return {
    minPixels: int('min_pixels', raw.min_pixels ?? size.shortest_edge, defaults.minPixels),
    maxPixels: int('max_pixels', raw.max_pixels ?? size.longest_edge, defaults.maxPixels),
    patchSize: int('patch_size', raw.patch_size, defaults.patchSize),
    temporalPatchSize: int('temporal_patch_size', raw.temporal_patch_size, defaults.temporalPatchSize),
    mergeSize: int('merge_size', raw.merge_size, defaults.mergeSize),
    imageMean: triple('image_mean', defaults.imageMean),
    imageStd: triple('image_std', defaults.imageStd),
  };
}
