// The task pipeline: operators over a taskset's rows before a stage explores (see ./pipeline.ts).
export * from './operators/index.js';
export * from './pipeline.js';
export * from './rows.js';
export * from './sampler.js';
export * from './types.js';
