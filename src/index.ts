// trinity-rft: reinforcement fine-tuning of LLMs in TypeScript.
export * as torch from './torch/index.js';
