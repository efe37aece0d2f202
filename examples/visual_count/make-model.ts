// The example's model: a tiny random Qwen2.5-VL-shaped model (initVisionLanguageModel) whose character tokenizer
// covers the prompt, the chat roles and the digits, and whose image processor keeps the 56 x 56 images at their size
// (min_pixels = max_pixels = 56²: a 4 x 4 patch grid, 4 image tokens after the 2 x 2 merge).
// Usage: node --import tsx examples/visual_count/make-model.ts MODEL_DIR [--seed N]
import { parseArgs } from 'node:util';
import { initVisionLanguageModel, type VisionModelInitOptions } from 'trinity-rft/model';
import { VISUAL_COUNT_PROMPT } from './make-data.js';

export const VISUAL_COUNT_MODEL: VisionModelInitOptions = {
  alphabet: [...new Set(`${VISUAL_COUNT_PROMPT}0123456789 usersystemassistant\n`)].join(''),
  hiddenSize: 64,
  numLayers: 2,
  numHeads: 4,
  visionHiddenSize: 32,
  visionDepth: 2,
  minPixels: 56 * 56,
  maxPixels: 56 * 56,
};

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { seed: { type: 'string', default: '0' } } });
  const out = positionals[0];
  if (!out) throw new Error('usage: make-model.ts MODEL_DIR [--seed N]');
  initVisionLanguageModel(out, { ...VISUAL_COUNT_MODEL, seed: Number(values.seed) });
  console.log(`wrote ${out}`);
}
