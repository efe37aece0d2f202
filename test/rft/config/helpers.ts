// Test helpers: files a config's pre-run checks (src/rft/run/config/preflight.ts) look for (a model folder: they read
// only its config.json; tasksets), and a reader of the config schema.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { z } from 'zod';
import { ConfigError, ConfigSchema, RunSchema } from '../../../src/rft/run/config/index.js';
import { defOf, unwrap as unwrapSchema } from '../../../src/rft/config/schema-walker.js';

/** A folder with the config.json of a (weightless) model of `vocabSize` tokens; returns its path. */
export function modelFolder(dir: string, vocabSize = 100): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), `${JSON.stringify({ model_type: 'qwen2', vocab_size: vocabSize })}\n`);
  return dir;
}

/** A JSONL taskset of `rows` (default: two prompt/response rows); returns its path. */
export function tasksetFile(
  file: string,
  rows: readonly unknown[] = [
    { prompt: '1+1=', response: '2' },
    { prompt: '2+2=', response: '4' },
  ],
): string {
  writeFileSync(file, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  return file;
}

/**
 * A runnable mode-both config over `model` and `tasks` (one step of simple_workflow, checkpoints under `root`), with
 * `sections` (YAML lines of further top-level keys) after it.
 */
export function runnableConfigText(paths: { model: string; tasks: string; root: string }, sections: string): string {
  return `mode: both
model: {model_path: ${paths.model}, max_model_len: 64}
checkpoint_root_dir: ${paths.root}/runs
buffer:
  batch_size: 2
  train_batch_size: 2
  total_steps: 1
  explorer_input:
    taskset: {path: ${paths.tasks}}
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
${sections}`;
}

/**
 * The problems `load(text)` throws as a ConfigError, each as `path: message` (none when it loads); any other error is
 * rethrown.
 */
export function problemsOf(load: (text: string) => unknown, text: string): string[] {
  try {
    load(text);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems.map((p) => `${p.path}: ${p.message}`);
    throw error;
  }
  return [];
}

// --- reading the config schema (zod's internal definitions, through src/rft/config/schema-walker.ts) -----------------

export { defOf, unwrapSchema };

/**
 * The (unwrapped) schema of the value at `path` in a config file, or undefined where the schema does not describe it
 * (inside free-form mappings such as workflow_args). A stage's keys are the run's (RunSchema).
 */
export function schemaAt(path: readonly (string | number)[]): z.ZodType | undefined {
  // a stage's overrides are written as free-form mappings and checked as the run's keys once merged
  if (path[0] === 'stages' && path.length >= 3 && path[2] !== 'stage_name') return walk(RunSchema, path.slice(2));
  return walk(ConfigSchema, path);
}

function walk(schema: z.ZodType, path: readonly (string | number)[]): z.ZodType | undefined {
  let s: z.ZodType | undefined = schema;
  for (const segment of path) {
    if (s === undefined) return undefined;
    const def = defOf(unwrapSchema(s));
    if (def.type === 'object') s = def.shape?.[String(segment)];
    else if (def.type === 'array') s = def.element;
    else if (def.type === 'tuple') s = def.items?.[Number(segment)];
    else if (def.type === 'record') s = def.valueType;
    else return undefined;
  }
  return s === undefined ? undefined : unwrapSchema(s);
}

/** The number schemas at a leaf: itself, a list's items, a tuple's items, a union's members. */
export function numbersIn(schema: z.ZodType): z.ZodNumber[] {
  const inner = unwrapSchema(schema);
  const def = defOf(inner);
  if (def.type === 'number') return [inner as z.ZodNumber];
  if (def.type === 'array' && def.element) return numbersIn(def.element);
  if (def.type === 'tuple') return (def.items ?? []).flatMap(numbersIn);
  if (def.type === 'union') return (def.options ?? []).flatMap(numbersIn);
  return [];
}
