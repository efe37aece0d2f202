// Shared by the vision-language engine, chat and serve tests: the Qwen2.5-VL fixture (test/fixtures/models/qwen2_5-vl,
// random weights written by transformers, a 128-token vocabulary) in a folder with a character tokenizer whose
// special tokens sit at the config's ids (<|vision_start|> 118, <|vision_end|> 119, <|image_pad|> 120) and a chat
// template that writes content parts as Qwen2.5-VL's does (one <|image_pad|> per image between the vision markers),
// plus small test images encoded as PNG.
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { encodePng, type ImageBytes } from '../../src/model/index.js';
import { writeCharTokenizer } from '../../src/tokenizer/index.js';

export const VL_FIXTURE = fileURLToPath(new URL('../fixtures/models/qwen2_5-vl', import.meta.url));
/** The Qwen3-VL fixture (scripts/fixtures/hf_qwen3_vl.py): the same vocabulary and vision token ids. */
export const QWEN3_VL_FIXTURE = fileURLToPath(new URL('../fixtures/models/qwen3-vl', import.meta.url));
export const VISION_START = 118;
export const VISION_END = 119;
export const IMAGE_PAD = 120;

/** Qwen2.5-VL's way with content parts: an image part is <|vision_start|><|image_pad|><|vision_end|>. */
export const VL_CHAT_TEMPLATE =
  "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}" +
  '{%- if message.content is string %}{{- message.content }}{%- else %}{%- for content in message.content %}' +
  "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content %}" +
  "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}{%- elif 'text' in content %}{{- content['text'] }}{%- endif %}" +
  "{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/** A copy of the fixture with the tokenizer and template above; returns the folder. */
export function visionModelDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'vl-model-'));
  for (const file of ['config.json', 'model.safetensors', 'preprocessor_config.json', 'generation_config.json'])
    copyFileSync(join(VL_FIXTURE, file), join(dir, file));
  // 4 specials + 60 characters: ids 0..63, then the vision tokens at the config's ids
  writeCharTokenizer(dir, 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456 ?\n');
  const tokenizerFile = join(dir, 'tokenizer.json');
  const tokenizer = JSON.parse(readFileSync(tokenizerFile, 'utf8')) as {
    added_tokens: Record<string, unknown>[];
    model: { vocab: Record<string, number> };
  };
  const configFile = join(dir, 'tokenizer_config.json');
  const config = JSON.parse(readFileSync(configFile, 'utf8')) as Record<string, unknown>;
  const decoder = config.added_tokens_decoder as Record<string, unknown>;
  for (const [content, id] of [
    ['<|vision_start|>', VISION_START],
    ['<|vision_end|>', VISION_END],
    ['<|image_pad|>', IMAGE_PAD],
  ] as const) {
    const token = { content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
    tokenizer.added_tokens.push({ id, ...token });
    tokenizer.model.vocab[content] = id;
    decoder[String(id)] = token;
  }
  config.chat_template = VL_CHAT_TEMPLATE;
  writeFileSync(tokenizerFile, JSON.stringify(tokenizer));
  writeFileSync(configFile, JSON.stringify(config));
  return dir;
}

/** A height x width RGB image of pseudo-random pixels from `seed` (deterministic). */
export function testImage(height: number, width: number, seed: number): ImageBytes {
  const data = new Uint8Array(height * width * 3);
  let state = seed >>> 0 || 1;
  for (let i = 0; i < data.length; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    data[i] = state >>> 24;
  }
  return { data, height, width, channels: 3 };
}

/** testImage as a PNG data URL. */
export async function testImageDataUrl(height: number, width: number, seed: number): Promise<string> {
  const png = await encodePng(testImage(height, width, seed));
  return `data:image/png;base64,${Buffer.from(png).toString('base64')}`;
}
