// trinity-rft engine: rollouts with continuous batching over a KV cache, sampling, stop rules and chat.
//   const engine = RolloutEngine.load('path/to/Qwen3-0.6B', { dtype: 'bfloat16', slots: 8 });
//   const { completions } = await engine.generate({ prompt: 'The capital of France is', maxTokens: 16, temperature: 0 });
//   const reply = await engine.chat([{ role: 'user', content: 'Hi' }], { temperature: 0.7, seed: 1 });
//   await engine.close();
export * from './chat.js';
export * from './conversation.js';
export { counterIncrease, engineMetrics } from './engine-metrics.js';
export { DEFAULT_MAX_PREFILL_TOKENS } from './engine-options.js';
export { sampleSeed } from './prepare-request.js';
export * from './rollout-engine.js';
export * from './types.js';
export * from './sampling.js';
export * from './stopping.js';
export * from './tool-calls.js';
export * from './worker-engine.js';
export * from './engine-pool.js';
export * from './vision-chat.js';
export { imagePromptsOf, languageConfigOf, VisionInputs, type VisionRequest } from './vision-requests.js';
