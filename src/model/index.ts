// trinity-rft model: the Llama / Qwen2 / Qwen3 decoder-only transformer over Hugging Face folders, with a KV cache.
//   const model = CausalLM.load('path/to/Qwen3-0.6B', { dtype: 'bfloat16' });
//   const logits = model.forward(inputIds, { attentionMask });           // [B, T, vocab]
//   const cache = model.createKVCache({ slots: 4, maxLength: 2048 });
//   model.forward(prompt, { cache, slots: [2] }); model.forward(nextToken, { cache, slots: [2] });
export * from './config.js';
export {
  checkWeightHeaders,
  expectedWeights,
  ModelWeightsError,
  readWeightHeaders,
  type SaveModelOptions,
  type WeightHeader,
} from './hf-weights.js';
export type { WeightLayout } from './inference-layout.js';
export * from './init.js';
export * from './kv-blocks.js';
export * from './kv-cache.js';
export * from './paged-kv-cache.js';
export type { LinearAdapter } from './linear.js';
export { DEFAULT_KEEP_LOGITS_BYTES, headChunkSize } from './lm-head.js';
export * from './lora.js';
export { ropeInverseFrequencies } from './rope.js';
export type { PackedLayout } from './packed-attention.js';
export { type PackedRows, type RowPacking, rowPacking } from './packed-rows.js';
export type { SharedPrefixLayout } from './shared-prefix-attention.js';
export * from './training.js';
export * from './transformer.js';
export * from './vision/index.js';
