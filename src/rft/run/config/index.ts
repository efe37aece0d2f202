// The run configuration of the RFT core: a YAML file with Trinity-RFT's key names, `--set` overrides, ${ENV}
// interpolation, a zod schema with precise errors, derived keys and cross-field rules, and multi-stage runs.
//
//   import { loadConfig, resolveStages } from './rft/run/config/index.js';
//   const config = loadConfig('run.yaml', { overrides: ['buffer.batch_size=16'] });   // throws ConfigError
//   for (const stage of resolveStages(config)) ...
//
// The whole file is composed here, above every part of src/rft; its language (problems, value schemas, the schema
// walker, refusals) is src/rft/config/, re-exported here so that this is the one import a caller needs.
export * from '../../config/index.js';
export * from './load.js';
export * from './schema.js';
export type { AlgorithmResolver } from '../../algorithm/config.js';
export { type ValidateOptions, validateConfig } from './validate.js';
