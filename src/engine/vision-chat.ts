// Chat messages with images, for a vision-language engine (./vision-requests.ts): OpenAI content parts
//
//   messages[i].content = [{ type: 'text', text }, { type: 'image_url', image_url: { url } }, ...]
//
//   images      every image_url part, in message order: a data:image/...;base64 URL, a local file path or a file://
//               URL (http(s) URLs are refused: the engine fetches nothing); decoded once here to size its placeholder
//               run, and kept as a data URL (the experience's); the request's `images` are the decoded images with
//               their data URLs (DecodedImage), which the engine takes as they are instead of decoding them again
//   template    the chat template renders the parts itself (Qwen2.5-VL's writes <|vision_start|><|image_pad|>
//               <|vision_end|> for an image part)
//   expansion   each image's single <|image_pad|> becomes its token count, t*h*w / merge² of the grid the image
//               processor makes of its size (smart_resize), as transformers' processor expands the text; a run that
//               already has its count (a continued conversation's earlier turns, exact ids) stays
//
// Errors name the message and part (messages[2].content[1]: ...): ImageInputError for an image that cannot be read,
// RangeError when the template's placeholders do not match the images.
import type { DecodedImage, ImageProcessorConfig, ImageSource } from '../model/index.js';
import type { ChatInputMessage } from '../tokenizer/index.js';

/** What rendering a chat prompt with images needs of a vision-language engine (RolloutEngine.vision fits). */
export interface ImagePrompts {
  readonly imageTokenId: number;
  readonly processor: ImageProcessorConfig;
}

/** A chat call's images: data URLs in placeholder order, each one's token count, and the placeholder's id. */
export interface ChatImages {
  readonly dataUrls: readonly string[];
  /** The same images decoded (the pixels with the data URL): what the generate request carries. */
  readonly decoded: readonly DecodedImage[];
  readonly tokenCounts: readonly number[];
  readonly imageTokenId: number;
}

/** Whether any message has an image part: a chat without one renders synchronously (no chatImages call). */
export function hasImageParts(messages: readonly ChatInputMessage[]): boolean {
  return messages.some((m) => Array.isArray(m.content) && m.content.some((part) => part.type === 'image_url'));
}

/**
 * The images of `messages` (null: none), decoded and sized for `prompts`' processor. Throws ImageInputError naming
 * the part for an unreadable image, or any image when the engine takes none (prompts null).
 */
export async function chatImages(
  messages: readonly ChatInputMessage[],
  prompts: ImagePrompts | null | undefined,
): Promise<ChatImages | null> {
  const parts: { url: unknown; where: string }[] = [];
  messages.forEach((message, i) => {
    if (!Array.isArray(message.content)) return;
    message.content.forEach((part, j) => {
      if (part.type === 'image_url') parts.push({ url: part.image_url?.url, where: `messages[${i}].content[${j}]` });
    });
  });
  if (parts.length === 0) return null;
  // loaded with the first image: a text chat (a workflow's thread runs chat() without libtorch) never loads it
  const { decodeImage, ImageInputError, imageDataUrl, imageSourceBytes, smartResize } = await import('../model/index.js');
  if (!prompts)
    throw new ImageInputError(
      (parts[0] as { where: string }).where,
      'an image part needs a vision-language model (config.json model_type qwen2_5_vl or qwen3_vl) as the rollout model',
    );
  const { patchSize, mergeSize, minPixels, maxPixels } = prompts.processor;
  const loaded = await Promise.all(
    parts.map(async ({ url, where }) => {
      if (typeof url !== 'string' || url === '') throw new ImageInputError(where, 'image_url.url must be a non-empty string');
      const bytes = await imageSourceBytes(url, where);
      const image = await decodeImage(bytes, where);
      let size: [number, number];
      try {
        size = smartResize(image.height, image.width, patchSize * mergeSize, minPixels, maxPixels);
      } catch (error) {
        throw new ImageInputError(where, (error as Error).message);
      }
      const tokens = ((size[0] / patchSize) * (size[1] / patchSize)) / (mergeSize * mergeSize);
      const dataUrl = await imageDataUrl(url.startsWith('data:') ? url : bytes, where);
      return { dataUrl, decoded: { pixels: image, dataUrl }, tokens };
    }),
  );
  return {
    dataUrls: loaded.map((l) => l.dataUrl),
    decoded: loaded.map((l) => l.decoded),
    tokenCounts: loaded.map((l) => l.tokens),
    imageTokenId: prompts.imageTokenId,
  };
}

/**
 * Prompt ids with each image's placeholder run made its token count (see the header); arrays parallel to the ids
 * (a conversation's generated mask and log-probs) get 0 at the added positions. Throws a RangeError when the runs
 * and the images do not match.
 */
export function expandImagePads(
  ids: readonly number[],
  imageTokenId: number,
  tokenCounts: readonly number[],
  parallel: readonly (readonly number[])[] = [],
): { ids: number[]; parallel: number[][] } {
  const out: number[] = [];
  const outParallel = parallel.map(() => [] as number[]);
  let image = 0;
  for (let t = 0; t < ids.length; ) {
    let run = 0;
    while (ids[t + run] === imageTokenId) run++;
    const take = Math.max(run, 1);
    let copies = take;
    if (run > 0) {
      const count = tokenCounts[image];
      if (count === undefined)
        throw new RangeError(
          `the chat template wrote more image placeholders than the messages have images (${tokenCounts.length})`,
        );
      if (run !== count && run !== 1)
        throw new RangeError(`image ${image}'s placeholder run has ${run} tokens: expected 1 (to expand) or ${count}`);
      copies = count;
      image++;
    }
    for (let c = 0; c < copies; c++) {
      out.push(ids[t + Math.min(c, take - 1)] as number);
      for (const [k, values] of parallel.entries()) outParallel[k]?.push(c < take ? (values[t + c] as number) : 0);
    }
    t += take;
  }
  if (image !== tokenCounts.length)
    throw new RangeError(
      `the chat template wrote ${image} image placeholder(s) for ${tokenCounts.length} image(s) (does it render image_url parts?)`,
    );
  return { ids: out, parallel: outParallel };
}

/**
 * Image sources (data URLs, file paths, bytes, decoded images) as data URLs, the form experiences keep (a generate()
 * request's).
 */
export async function imageDataUrls(sources: readonly ImageSource[]): Promise<string[]> {
  const { imageDataUrl } = await import('../model/index.js'); // loaded with the first image, as in chatImages
  return Promise.all(sources.map((source, i) => imageDataUrl(source, `images[${i}]`)));
}
