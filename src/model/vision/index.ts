// Vision-language models: Qwen2.5-VL (its config, vision tower, multimodal RoPE and the model that joins them).
//   const model = Qwen2_5VLModel.load('path/to/Qwen2.5-VL-3B-Instruct');
//   const logits = model.forward(inputIds, { attentionMask, images: { pixelValues, grids } });
export * from './config.js';
export { type GridTHW, imageTokenCount, MultimodalRotaryEmbedding, type RopeIndex, ropeIndex, ropeIndexOf } from './mrope.js';
export * from './qwen2-5-vl.js';
export { expectedVisionWeights, VisionTower, windowLayout } from './vision-tower.js';
export { type ImageBytes, resizeBicubic } from './bicubic-resize.js';
export * from './image-processor.js';
export * from './decode-image.js';
export * from './init.js';
