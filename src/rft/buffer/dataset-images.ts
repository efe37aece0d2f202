// The images of dataset rows (Trinity's format.image_key) for a vision-language model, in tasksets and SFT datasets.
//
//   cell      one image or a list of them; an image is a file path (relative to the dataset's folder), a file://
//             or data:image/...;base64 URL, encoded bytes, or a Hugging Face Image column's {bytes, path} struct
//             (bytes first, else path); null or [] is a row without images. Each becomes a data URL (the row does
//             not depend on a file that may move, and an experience holds it as JSON).
//   prompt    the user turn's content parts, OpenAI's form: {type: 'image_url', image_url: {url}} for each image and
//             {type: 'text', text}. A prompt that writes "<image>" markers puts the images there (as many markers as
//             images), else the images come before the text (Qwen2.5-VL's and Trinity's order).
//   tokens    (SFT) the chat template renders one <|image_pad|> per image; each becomes the image's token count,
//             t·h·w / merge² of the grid the model's image processor gives it (imageTokenCount), as transformers'
//             Qwen2.5-VL processor expands it, so the ids equal what a rollout of the same prompt holds.
import { statSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import {
  decodeImage,
  type ImageProcessorConfig,
  ImageInputError,
  imageDataUrl,
  imageTokenCount,
  loadVisionImageProcessor,
  loadVisionLanguageConfig,
  ModelConfigError,
  smartResize,
} from '../../model/index.js';
import type { ChatContentPart, ChatTurn } from '../experience.js';
import type { Task } from '../task.js';

/** The marker a prompt writes where an image goes. */
export const IMAGE_MARKER = '<image>';

/** What turns a dataset's images into placeholder tokens: the model's image processor and image token id. */
export interface DatasetVision {
  processor: ImageProcessorConfig;
  imageTokenId: number;
}

/** The vision side of `modelDir` for format.image_key; an error naming the key when the model is not a VLM. */
export function datasetVision(modelDir: string | undefined, where: string): DatasetVision {
  if (modelDir === undefined) throw new Error(`${where}: format.image_key needs the model folder (its image processor)`);
  try {
    const config = loadVisionLanguageConfig(modelDir);
    return { processor: loadVisionImageProcessor(modelDir), imageTokenId: config.imageTokenId };
  } catch (error) {
    if (!(error instanceof ModelConfigError)) throw error;
    throw new Error(
      `${where}: format.image_key gives rows images, which need a vision-language model (model_type qwen2_5_vl or qwen3_vl); ` +
        `${modelDir}: ${error.message}`,
    );
  }
}

/** The folder a dataset's relative image paths start from: the dataset file's folder, or the dataset folder. */
export function imageBaseDir(datasetPath: string): string {
  try {
    return statSync(datasetPath).isDirectory() ? resolve(datasetPath) : dirname(resolve(datasetPath));
  } catch {
    return process.cwd(); // a hub id: paths in its rows are the cache's own, absolute
  }
}

/** The row's images (see the header) as data URLs; `where` names the row, `key` the column. */
export async function rowImageUrls(value: unknown, key: string, where: string, baseDir: string): Promise<string[]> {
  if (value === undefined || value === null) return [];
  const cells = Array.isArray(value) ? value : [value];
  const urls: string[] = [];
  for (const [i, cell] of cells.entries()) {
    const at = Array.isArray(value) ? `'${key}'[${i}]` : `'${key}'`;
    const source = imageSource(cell, baseDir);
    if (source === null)
      throw new ImageInputError(
        `${where}: ${at}`,
        `must be an image: a file path, a data:image URL, encoded bytes or a {bytes, path} struct, got ${describe(cell)}`,
      );
    urls.push(await imageDataUrl(source, `${where}: ${at}`));
  }
  return urls;
}

function imageSource(cell: unknown, baseDir: string): string | Uint8Array | null {
  const path = (p: string) => (p.startsWith('data:') || p.startsWith('file://') || isAbsolute(p) ? p : join(baseDir, p));
  if (typeof cell === 'string' && cell.length > 0) return path(cell);
  if (cell instanceof Uint8Array) return cell;
  if (cell !== null && typeof cell === 'object' && !Array.isArray(cell)) {
    const { bytes, path: file } = cell as { bytes?: unknown; path?: unknown };
    if (bytes instanceof Uint8Array && bytes.length > 0) return bytes;
    if (typeof file === 'string' && file.length > 0) return path(file);
  }
  return null;
}

const describe = (v: unknown): string =>
  Array.isArray(v)
    ? 'a list'
    : v === null
      ? 'null'
      : typeof v === 'object'
        ? `an object with keys ${Object.keys(v).join(', ')}`
        : typeof v;

/** A prompt's content parts with its images (see the header); `where` names the row in errors. */
export function promptWithImages(text: string, images: readonly string[], where: string): ChatContentPart[] {
  const image = (url: string): ChatContentPart => ({ type: 'image_url', image_url: { url } });
  const pieces = text.split(IMAGE_MARKER);
  const markers = pieces.length - 1;
  if (markers === 0) return [...images.map(image), ...(text.length > 0 ? [{ type: 'text' as const, text }] : [])];
  if (markers !== images.length)
    throw new Error(`${where}: the prompt writes ${markers} ${IMAGE_MARKER} marker(s) for ${images.length} image(s)`);
  return pieces.flatMap((piece, i) => [
    ...(piece.length > 0 ? [{ type: 'text' as const, text: piece }] : []),
    ...(i < images.length ? [image(images[i] as string)] : []),
  ]);
}

/**
 * Prompt ids as the chat template wrote them (one image token per image) with each image token repeated its image's
 * token count (see the header); an error naming the row when the placeholders and images differ in number.
 */
export async function expandImageTokens(
  ids: readonly number[],
  images: readonly string[],
  vision: DatasetVision,
  where: string,
): Promise<number[]> {
  const placeholders = ids.filter((id) => id === vision.imageTokenId).length;
  if (placeholders !== images.length)
    throw new Error(
      `${where}: the chat template wrote ${placeholders} image placeholder(s) (token ${vision.imageTokenId}) for ` +
        `${images.length} image(s): its template must render each image part as Qwen2.5-VL's does`,
    );
  const { patchSize, mergeSize, minPixels, maxPixels } = vision.processor;
  const counts: number[] = [];
  for (const [i, url] of images.entries()) {
    const { height, width } = await decodeImage(url, `${where}: image ${i}`);
    const [h, w] = smartResize(height, width, patchSize * mergeSize, minPixels, maxPixels);
    counts.push(imageTokenCount([1, h / patchSize, w / patchSize], mergeSize));
  }
  let image = 0;
  return ids.flatMap((id) => (id === vision.imageTokenId ? Array.from({ length: counts[image++] as number }, () => id) : [id]));
}

/**
 * A task's images (column `key` of its row) joined to its prompt: the task's conversation, or [user: the prompt], with
 * the images in the first user turn (promptWithImages); the workflow renders task.messages. No images: unchanged.
 */
export async function attachTaskImages(task: Task, key: string, where: string, baseDir: string): Promise<void> {
  const images = await rowImageUrls(task.raw[key], key, where, baseDir);
  if (images.length === 0) return;
  const turns: ChatTurn[] = task.messages ?? [{ role: 'user', content: task.prompt ?? '' }];
  const first = turns.findIndex((t) => t.role === 'user');
  const turn = turns[first];
  if (turn === undefined || typeof turn.content !== 'string')
    throw new Error(`${where}: '${key}' gives images, but the prompt has no text user turn to put them in`);
  const content = promptWithImages(turn.content, images, where);
  task.messages = turns.map((t, i) => (i === first ? { ...t, content } : t));
}
