// Reward functions: answer verification, format checks, LLM judges and reward models, and the registry workflows
// resolve them from. The registry's list comes first: it registers the built-ins in their order (./registry.ts).
export * from './registry.js';
export * from './builtin.js';
export * from './countdown.js';
export * from './format.js';
export * from './judge-answer.js';
export * from './judge-call.js';
export * from './judge-prompt.js';
export * from './llm-judge.js';
export * from './math-answer.js';
export { extractMathAnswer, mathEqual, verifyMathAnswer } from './math-equal.js';
export * from './module.js';
export * from './reward-model.js';
export * from './types.js';
