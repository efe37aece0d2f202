// The value schemas every config section is written with: numbers, booleans and strings that also accept their
// text (OmegaConf's coercion: "8" and "true" from ${ENV}, `name: 7` as a string), integer and number ranges, free-form
// argument mappings, a device, and the bounds of the numeric keys. A section's schema (src/rft/<part>/config.ts) is
// built from these, so a key reads and fails the same way in every section.
import { z } from 'zod';

const NUMBER_TEXT = /^\s*[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?\s*$/i;
const coerceNumber = (v: unknown): unknown => (typeof v === 'string' && NUMBER_TEXT.test(v) ? Number(v) : v);
const coerceBoolean = (v: unknown): unknown => (v === 'true' ? true : v === 'false' ? false : v);
export const coerceString = (v: unknown): unknown => (typeof v === 'number' || typeof v === 'boolean' ? String(v) : v);

/** A number schema that also accepts numeric text. */
export const num = <T extends z.ZodType>(schema: T) => z.preprocess(coerceNumber, schema);
export const bool = () => z.preprocess(coerceBoolean, z.boolean());
export const str = () => z.preprocess(coerceString, z.string());
export const nonEmpty = () => z.preprocess(coerceString, z.string().min(1));
export const args = () => z.record(z.string(), z.unknown());

/** An integer in [min, max]. */
export const intIn = (min: number, max: number) => num(z.int().min(min).max(max));
/** A finite number in [min, max], or (min, max] with `above`. */
export const numIn = (min: number, max: number, above = false) =>
  num((above ? z.number().gt(min) : z.number().min(min)).max(max));

// Bounds of the numeric keys: far beyond any real run, near enough that a slip (`repeat_times: 1e9`) is a config
// error naming the key rather than an out-of-memory abort minutes into the run. Each key's range is written beside it
// as [min, max] (a round bracket: that end excluded).
/** Tasks per explore step (buffer.batch_size), rollouts per task (repeat_times). */
export const MAX_TASKS_PER_STEP = 65_536;
export const MAX_REPEAT_TIMES = 1024;
/** Experiences of one step: train_batch_size, and batch_size × repeat_times (each step holds them all in memory). */
export const MAX_EXPERIENCES_PER_STEP = 65_536;
/** Token lengths (context, prompt, response, max_tokens) and token ids: 2^20. */
export const MAX_TOKENS = 1_048_576;
/** Step counts and intervals. */
export const MAX_STEPS = 1_000_000_000;
/** Seconds: the longest wait a Node timer holds (2^31 − 1 ms); a longer one would fire at once. */
export const MAX_TIMEOUT_SECONDS = 2_147_483;
/** Sequences decoded at once per engine, concurrent workflow runs per engine. */
export const MAX_SLOTS = 4096;

export const ENGINE_TYPES = ['embedded', 'openai'] as const;
export const DTYPES = ['float32', 'bfloat16'] as const;

/** A device: auto, cpu, cuda or cuda:N (resolved against the machine's GPUs when the run starts). */
export const deviceSetting = () =>
  z
    .preprocess(coerceString, z.string().regex(/^(auto|cpu|cuda(:\d+)?)$/, 'expected a device: auto, cpu, cuda or cuda:N'))
    .default('auto');
