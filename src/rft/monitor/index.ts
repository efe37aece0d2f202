export * from './monitor.js';
export * from './progress.js';
export * from './tensorboard.js';
export * from './step-lines.js';
export * from './advantage-record.js';
