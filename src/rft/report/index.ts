export * from './chart.js';
export * from './html.js';
export * from './read.js';
export * from './summary.js';
export * from './jsonl-chunks.js';
