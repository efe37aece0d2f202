// The config language of the RFT core, below every part of src/rft: problems and the error that carries them, the
// YAML tree's handling before the schema (overrides, paths: ./source.ts; ${ENV} and key references:
// ./interpolate.ts), the value schemas each section is written with (./value-schemas.ts), parsing with a schema
// (./parse.ts), the schema read as data (./schema-walker.ts), the refused settings (./refusals.ts) and the Trinity keys
// ignored here (./ignored-keys.ts). Each part
// declares its own section in these terms (src/rft/<part>/config.ts); the whole file, its rules across sections and
// loadConfig are src/rft/run/config/.
export * from './errors.js';
export * from './refusals.js';
export { IGNORED_KEYS, type IgnoredKey, type IgnoredSetting } from './ignored-keys.js';
export { PATH_KEYS } from './source.js';
export { schemaLeafPaths } from './schema-walker.js';
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
