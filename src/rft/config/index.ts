// The run configuration of the RFT core: a YAML file with Trinity-RFT's key names, `--set` overrides, ${ENV}
// interpolation, a zod schema with precise errors, derived keys and cross-field rules, and multi-stage runs.
//
//   import { loadConfig, resolveStages } from './rft/config/index.js';
//   const config = loadConfig('run.yaml', { overrides: ['buffer.batch_size=16'] });   // throws ConfigError
//   for (const stage of resolveStages(config)) ...
export * from './errors.js';
export * from './load.js';
export * from './schema.js';
export {
  DTYPES,
  ENGINE_TYPES,
  MAX_EXPERIENCES_PER_STEP,
  MAX_REPEAT_TIMES,
  MAX_SLOTS,
  MAX_STEPS,
  MAX_TASKS_PER_STEP,
  MAX_TIMEOUT_SECONDS,
  MAX_TOKENS,
} from './value-schemas.js';
export * from './refusals.js';
export { schemaLeafPaths } from './schema-walker.js';
export { type AlgorithmResolver, type ValidateOptions, validateConfig } from './validate.js';
