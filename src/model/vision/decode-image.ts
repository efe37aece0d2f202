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
// from any source so an experience does not depend on a file that may move. A DecodedImage is an image already
// decoded, with its data URL: a chat decodes each image once to size its placeholder run (engine/vision-chat.ts) and
// hands the engine these, which decodeImage returns as they are (imageDecodes() counts the real decodes).
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import sharp from 'sharp';
import type { ImageBytes } from './bicubic-resize.js';

/** An image decoded once (decodeImage's pixels) with the data URL of its encoded bytes. */
export interface DecodedImage {
  readonly pixels: ImageBytes;
  readonly dataUrl: string;
}

/**
 * An image as users give it: encoded bytes, or a string that is a data URL, a file:// URL or a file path; or one
 * already decoded (DecodedImage).
 */
export type ImageSource = Uint8Array | string | DecodedImage;

const isDecoded = (source: ImageSource): source is DecodedImage => typeof source === 'object' && !(source instanceof Uint8Array);

let decodes = 0;

/** How many images decodeImage has decoded in this thread (a DecodedImage passed in is not decoded again). */
export const imageDecodes = (): number => decodes;

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
  if (isDecoded(source)) return imageSourceBytes(source.dataUrl, where);
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
  if (isDecoded(source)) return checkedPixels(source.pixels, where);
  const bytes = await imageSourceBytes(source, where);
  if (bytes.length === 0) throw new ImageInputError(where, 'the image is empty (0 bytes)');
  decodes++;
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

/** A decoded image's pixels, checked: 8-bit RGB, height x width x 3 bytes. */
function checkedPixels(pixels: ImageBytes, where: string): ImageBytes {
  const { data, height, width, channels } = pixels;
  const whole = (n: unknown) => Number.isInteger(n) && (n as number) > 0;
  if (!(data instanceof Uint8Array) || !whole(height) || !whole(width) || channels !== 3 || data.length !== height * width * 3)
    throw new ImageInputError(
      where,
      `decoded pixels must be height x width x 3 bytes of RGB, got ${String(height)} x ${String(width)} x ${String(channels)} ` +
        `with ${data instanceof Uint8Array ? data.length : 'no'} bytes`,
    );
  return pixels;
}

/** A `data:image/<format>;base64,` URL holding the source's encoded bytes (the format as the bytes declare it). */
export async function imageDataUrl(source: ImageSource, where: string): Promise<string> {
  if (isDecoded(source)) return imageDataUrl(source.dataUrl, where);
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
