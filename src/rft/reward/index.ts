// Reward functions: answer verification, format checks, and the registry workflows resolve them from.
export * from './builtin.js';
export * from './format.js';
export * from './math-answer.js';
export * from './registry.js';
