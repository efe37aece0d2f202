export * from './run.js';
export * from './stage.js';
