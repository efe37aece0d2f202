// The buffer layer: experience buffers (FIFO queue, priority replay, durable SQLite), dataset files (JSONL, JSON,
// parquet; Hugging Face folders and hub cache), tasksets with selectors and the multi-taskset scheduler, and a text
// viewer.
export * from './buffer-record.js';
export * from './jsonl.js';
export * from './postgres.js';
export * from './priority.js';
export * from './queue.js';
export * from './scheduler.js';
export * from './selector.js';
export * from './shared.js';
export * from './sqlite.js';
export * from './taskset.js';
export * from './types.js';
export * from './viewer.js';
export * from './dataset.js';
export * from './cpt.js';
export * from './parquet.js';
export * from './rows.js';
export * from './source.js';
