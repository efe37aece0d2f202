// Vision-language models: Qwen2.5-VL and Qwen3-VL (their configs, vision towers, multimodal RoPE and the model that
// joins them).
//   const model = loadVisionLanguageModel('path/to/Qwen3-VL-2B-Instruct');
//   const logits = model.forward(inputIds, { attentionMask, images: { pixelValues, grids } });
export * from './config.js';
export * from './config-qwen3-vl.js';
export * from './family.js';
export {
  type GridTHW,
  imageTokenCount,
  MultimodalRotaryEmbedding,
  mropeAxes,
  type RopeIndex,
  ropeIndex,
  ropeIndexOf,
} from './mrope.js';
export * from './qwen2-5-vl.js';
export * from './qwen3-vl.js';
export * from './vision-language-model.js';
export { expectedVisionWeights, patchPositions, VisionTower, windowLayout } from './vision-tower.js';
export { expectedQwen3VisionWeights, type ImageFeatures, positionTaps, Qwen3VisionTower } from './vision-tower-qwen3.js';
export { type ImageBytes, resizeBicubic } from './bicubic-resize.js';
export * from './image-processor.js';
export * from './decode-image.js';
export * from './init.js';
