// The built-in experience operators. Each file registers its operator at its bottom; this list imports the files in
// registration order, which is the order of EXPERIENCE_OPERATORS.names(): a new operator is one file plus one line
// here. Import EXPERIENCE_OPERATORS from here (every built-in registered) and the operators' files only through here:
// a file imported before this list would register first and reorder the names.
export * from './reward-filter.js';
export * from './reward-std-filter.js';
export * from './invalid-reward-filter.js';
export * from './reward-shaping-mapper.js';
export * from './pass-rate-calculator.js';
export * from './dapo-dynamic-sampling.js';
export * from './overlong-reward-shaping.js';
export * from './data-juicer.js';
export * from './mask-response-truncated.js';
export { EXPERIENCE_OPERATORS } from '../registry.js';
