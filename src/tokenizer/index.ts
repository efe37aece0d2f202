export * from './char-tokenizer.js';
export * from './chat-template.js';
export * from './tokenizer.js';
export * from './word-tokenizer.js';
