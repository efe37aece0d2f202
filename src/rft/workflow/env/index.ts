// Multi-turn environment workflows: the base (one episode per run, one experience per episode or per step) and the
// built-in environments.
import '../registry.js'; // the built-in workflows' list first: it, not this file, decides their registration order
export * from './environment.js';
export * from './frozen-lake.js';
export * from './grid.js';
export * from './sokoban.js';
