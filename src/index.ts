// trinity-rft: reinforcement fine-tuning of LLMs in TypeScript. Each layer is also its own entry point
// (trinity-rft/torch, …/model, …/tokenizer, …/engine, …/openai, …/rft, …/serve); docs/architecture.md maps them.
export * as engine from './engine/index.js';
export * as model from './model/index.js';
export * as openai from './openai/index.js';
export * as rft from './rft/index.js';
export * as serve from './serve/index.js';
export * as tokenizer from './tokenizer/index.js';
export * as torch from './torch/index.js';
