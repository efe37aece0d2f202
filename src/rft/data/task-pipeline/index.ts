// The task pipeline: operators over a taskset's rows before a stage explores (see ./pipeline.ts).
export * from './operators/annotation.js';
export * from './operators/dedup.js';
export * from './operators/difficulty.js';
export * from './operators/filters.js';
export * from './operators/llm.js';
export * from './pipeline.js';
export * from './registry.js';
export * from './rows.js';
export * from './sampler.js';
export * from './types.js';
