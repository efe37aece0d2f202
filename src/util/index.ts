// Helpers every layer may import (src/util imports nothing else from src): name suggestions, module arguments from
// YAML, user code by module path, the generic registry, opening user-given files that must be regular files, writes
// whose errors name their file, and the resident memory a piece of work adds at its peak.
export * from './device-memory.js';
export * from './did-you-mean.js';
export * from './process.js';
export * from './file-write.js';
export * from './module-args.js';
export * from './module-path.js';
export * from './registry.js';
export * from './regular-file.js';
export * from './resident-peak.js';
