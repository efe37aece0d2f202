// Workflows: the Workflow API, the model handle that records exact rollouts, built-in workflows, and the runner. The
// registry's list comes first: it registers the built-ins in their order (./registry.ts).
export * from './registry.js';
export * from './agents/index.js';
export * from './env/index.js';
export * from './eval-metrics.js';
export * from './model-handle.js';
export * from './module-path.js';
export * from './prompt-truncation.js';
export * from './recording.js';
export * from './runner.js';
export * from './single-turn.js';
export * from './types.js';
export * from './weight-swap-gate.js';
