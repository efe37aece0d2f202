// trinity-rft: reinforcement fine-tuning of LLMs in TypeScript.
export * as engine from './engine/index.js';
export * as model from './model/index.js';
export * as tokenizer from './tokenizer/index.js';
export * as torch from './torch/index.js';
