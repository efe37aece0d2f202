export * from './char-tokenizer.js';
export * from './tokenizer.js';
