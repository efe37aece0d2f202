// Images as users hand them in, decoded to the 8-bit RGB bytes the image processor (./image-processor.ts) takes:
// OpenAI chat content parts' `image_url.url` (a `data:image/...;base64,` URL or a local file path / file:// URL),
// dataset cells (encoded bytes, Hugging Face image columns {bytes, path}), files.
//
//   source -> encoded bytes (PNG, JPEG, WebP, GIF's first frame, TIFF, AVIF) -> EXIF orientation applied
//          -> RGB (alpha dropped, grey expanded), 8 bits per channel, height x width x 3 row-major
//
// That is transformers' load_image + convert("RGB") (Pillow): exif_transpose, then alpha channels dropped (not
// blended). Decoding is sharp's (libvips, prebuilt from the npm registry for Linux/macOS/Windows; chosen over pure-JS
// decoders for speed and format coverage): PNG decodes byte-exactly as Pillow does; JPEG decoders may differ from
// Pillow's by a unit in some pixels (different IDCT implementations).
//
// Images keep their encoded form in experiences and requests (data URLs: JSON-safe, compact); imageDataUrl makes one
// from any source so an experience does not depend on a file that may move.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import sharp from 'sharp';
import type { ImageBytes } from './bicubic-resize.js';

/** An image as users give it: encoded bytes, or a string that is a data URL, a file:// URL or a file path. */
export type ImageSource = Uint8Array | string;

/** Bad or unreadable image input; `where` names the request field, dataset row or file. */
export class ImageInputError extends Error {
  constructor(
    readonly where: string,
    detail: string,
  ) {
    super(`${where}: ${detail}`);
    this.name = 'ImageInputError';
  }
}

const DATA_URL = /^data:(image\/[a-z0-9.+-]+)?(;[a-z0-9=.+-]+)*;base64,/i;

/** The encoded bytes of an image source (reads files; decodes base64 data URLs); http(s) URLs are refused. */
export async function imageSourceBytes(source: ImageSource, where: string): Promise<Uint8Array> {
  if (typeof source !== 'string') return source;
  const match = DATA_URL.exec(source);
  if (match) return Buffer.from(source.slice(match[0].length), 'base64');
  if (source.startsWith('data:')) throw new ImageInputError(where, 'a data URL must be base64: data:image/<type>;base64,<bytes>');
  if (/^https?:\/\//i.test(source))
    throw new ImageInputError(
      where,
      `remote image URLs are not fetched (${source.slice(0, 80)}); send a data URL or a local file path`,
    );
  const file = source.startsWith('file://') ? fileURLToPath(source) : source;
  try {
    return await readFile(file);
  } catch (error) {
    throw new ImageInputError(where, `cannot read image file ${file}: ${(error as Error).message}`);
  }
}

/** Decodes an image source to RGB bytes as transformers' load_image(...).convert('RGB') sees it. */
export async function decodeImage(source: ImageSource, where: string): Promise<ImageBytes> {
  const bytes = await imageSourceBytes(source, where);
  if (bytes.length === 0) throw new ImageInputError(where, 'the image is empty (0 bytes)');
  try {
    const { data, info } = await sharp(bytes, { pages: 1 })
      .autoOrient()
      .toColourspace('srgb')
      .removeAlpha()
      .raw({ depth: 'uchar' })
      .toBuffer({ resolveWithObject: true });
    if (info.channels !== 3) throw new Error(`decoded to ${info.channels} channels, expected 3`);
    return {
      data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
      height: info.height,
      width: info.width,
      channels: 3,
    };
  } catch (error) {
    throw new ImageInputError(where, `not a decodable image (PNG, JPEG, WebP, GIF, TIFF, AVIF): ${(error as Error).message}`);
  }
}

/** A `data:image/<format>;base64,` URL holding the source's encoded bytes (the format as the bytes declare it). */
export async function imageDataUrl(source: ImageSource, where: string): Promise<string> {
  if (typeof source === 'string' && /^data:image\//i.test(source) && DATA_URL.test(source)) return source;
  const bytes = await imageSourceBytes(source, where);
  let format: string | undefined;
  try {
    format = (await sharp(bytes).metadata()).format;
  } catch (error) {
    throw new ImageInputError(where, `not a decodable image: ${(error as Error).message}`);
  }
  const mime = format === 'jpeg' || format === 'jpg' ? 'jpeg' : (format ?? 'octet-stream');
  return `data:image/${mime};base64,${Buffer.from(bytes).toString('base64')}`;
}

/** Encodes RGB bytes as a PNG (lossless: decodeImage gives the same bytes back); for generated images and tests. */
export async function encodePng(image: ImageBytes): Promise<Uint8Array> {
  const png = await sharp(image.data, { raw: { width: image.width, height: image.height, channels: image.channels as 3 } })
    .png()
    .toBuffer();
  return new Uint8Array(png.buffer, png.byteOffset, png.byteLength);
}
