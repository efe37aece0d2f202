// The config builder's server side. The form is generated from the zod schema `trinity config check` validates
// with (src/rft/config/schema.ts, read at request time, so a new key appears in the form by itself), and every
// check runs the command's own function (src/rft/config/check.ts) on the YAML as if it were saved where the
// builder will save it: the same problems, with the same key paths and file:line:column.
//
//   GET  /api/config/schema     the form: a tree of fields (kind, default, bounds, choices)
//   GET  /api/config/presets    a starting config per algorithm (src/rft/algorithm/presets.ts)
//   POST /api/config/check      {file, yaml} → {ok, problems, message, resolvedYaml}
//   POST /api/config/save       {file, yaml} → writes <runs>/<file> (.yaml/.yml)
//   GET  /api/config/file       ?file → the YAML of a config inside the runs folder
import { readFileSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import YAML from 'yaml';
import { z } from 'zod';
import { ConfigError, type ConfigProblem, ConfigSchema, formatProblem } from '../rft/config/index.js';
import { defOf, type SchemaDef, type unwrap } from '../rft/config/validate.js';
import { checkConfigText } from '../rft/config/check.js';
import { readJson, relativeToRoot, writeTarget } from './body.js';
import { readTextUnderRoot, resolveInside, writeUnderRoot } from './paths.js';
import { HttpError, query, type Route, type RouteRequest } from './router.js';

/** One field of the form. Lists, free-form mappings, unions and tuples are edited as YAML text (kind 'yaml'). */
export type FieldSpec =
  | { kind: 'object'; key: string; path: string; nullable: boolean; required: boolean; fields: FieldSpec[] }
  | {
      kind: 'string' | 'number' | 'integer' | 'boolean' | 'enum' | 'yaml';
      key: string;
      path: string;
      required: boolean;
      nullable: boolean;
      /** The schema's default (undefined: none, or derived from other keys). */
      default?: unknown;
      /** enum: the choices. */
      choices?: string[];
      /** number/integer bounds; `exclusive` marks an open end. */
      min?: { value: number; exclusive: boolean };
      max?: { value: number; exclusive: boolean };
    };

type Schema = Parameters<typeof unwrap>[0];

interface Wrappers {
  nullable: boolean;
  optional: boolean;
  default?: unknown;
}

/** Walks the wrappers (default, prefault, nullable, optional, preprocess) down to the value's own schema. */
function peel(schema: Schema): { inner: Schema; wrappers: Wrappers } {
  const wrappers: Wrappers = { nullable: false, optional: false };
  let s = schema;
  for (;;) {
    const def = defOf(s) as SchemaDef & { defaultValue?: unknown };
    if (def.type === 'default' || def.type === 'prefault') {
      wrappers.optional = true;
      if (wrappers.default === undefined) wrappers.default = def.defaultValue;
    }
    if (def.type === 'nullable') wrappers.nullable = true;
    if (def.type === 'optional') wrappers.optional = true;
    if (def.innerType !== undefined) s = def.innerType;
    else if (def.type === 'pipe' && def.out !== undefined) s = def.out;
    else return { inner: s, wrappers };
  }
}

interface Check {
  check: string;
  value?: number;
  inclusive?: boolean;
}

/** The form's field tree for `schema` (ConfigSchema by default). */
export function describeSchema(schema: Schema = ConfigSchema as unknown as Schema, key = '', path = ''): FieldSpec {
  const { inner, wrappers } = peel(schema);
  const def = defOf(inner) as SchemaDef & {
    entries?: Record<string, string>;
    checks?: { _zod: { def: Check } }[];
  };
  const base = { key, path, required: !wrappers.optional, nullable: wrappers.nullable };
  if (def.type === 'object')
    return {
      kind: 'object',
      ...base,
      fields: Object.entries(def.shape ?? {}).map(([k, child]) => describeSchema(child, k, path === '' ? k : `${path}.${k}`)),
    };
  const field: FieldSpec = { kind: 'yaml', ...base };
  if (wrappers.default !== undefined && wrappers.default !== null) field.default = wrappers.default;
  if (def.type === 'enum') {
    field.kind = 'enum';
    field.choices = Object.values(def.entries ?? {});
  } else if (def.type === 'boolean') field.kind = 'boolean';
  else if (def.type === 'string') field.kind = 'string';
  else if (def.type === 'number') {
    field.kind = def.format?.includes('int') ? 'integer' : 'number';
    for (const c of def.checks ?? []) {
      const { check, value, inclusive } = c._zod.def;
      if (value === undefined) continue;
      if (check === 'greater_than') field.min = { value, exclusive: inclusive === false };
      if (check === 'less_than') field.max = { value, exclusive: inclusive === false };
    }
  }
  return field;
}

/** A starting config per algorithm preset: the keys a run of its kind needs, the rest left to defaults. */
export async function configPresets(root: string) {
  const { ALGORITHM_PRESETS } = await import('../rft/algorithm/presets.js');
  return Object.entries(ALGORITHM_PRESETS).map(([name, preset]) => {
    const trainOnly = preset.schema !== 'experience';
    const tree: Record<string, unknown> = {
      mode: trainOnly ? 'train' : 'both',
      project: 'studio',
      name,
      // the Studio shows and controls runs inside its runs folder only
      checkpoint_root_dir: root,
      model: { model_path: '' },
      algorithm: { algorithm_type: name, repeat_times: preset.repeatTimes },
      buffer: trainOnly
        ? { total_steps: 10, trainer_input: { experience_buffer: { storage_type: 'file', path: '' } } }
        : {
            batch_size: 4,
            total_steps: 10,
            explorer_input: {
              taskset: { path: '' },
              default_workflow_type: 'simple_workflow',
              default_reward_fn_type: 'accuracy_reward',
            },
          },
      monitor: { monitor_type: ['jsonl'] },
    };
    return { name, description: preset.description, data: preset.schema, yaml: YAML.stringify(tree, { lineWidth: 0 }) };
  });
}

export interface CheckAnswer {
  ok: boolean;
  /** The config file, relative to the runs folder. */
  file: string;
  problems: (ConfigProblem & { text: string })[];
  /** What `trinity config check FILE` prints on stderr ('' when ok). */
  message: string;
  /** What it prints on stdout when ok: the resolved config. */
  resolvedYaml: string;
}

let algorithmResolver: Promise<typeof import('../rft/algorithm/presets.js')['resolveAlgorithm'] | null> | null = null;

/** The algorithm checker `trinity config check` uses (null, as there, when the algorithm library cannot load). */
function resolver() {
  algorithmResolver ??= import('../rft/algorithm/presets.js').then(
    (m) => m.resolveAlgorithm,
    () => null,
  );
  return algorithmResolver;
}

/** Checks `yaml` as the content of `<root>/<file>` exactly as `trinity config check` does. */
export async function checkConfig(root: string, file: string, yaml: string): Promise<CheckAnswer> {
  const path = writeTarget(root, file, ['.yaml', '.yml']);
  const resolveAlgorithm = await resolver();
  try {
    const { resolvedYaml } = await checkConfigText(yaml, path, resolveAlgorithm ? { resolveAlgorithm } : {});
    return { ok: true, file: relativeToRoot(root, path), problems: [], message: '', resolvedYaml };
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    return {
      ok: false,
      file: relativeToRoot(root, path),
      problems: error.problems.map((p) => ({ ...p, text: formatProblem(p) })),
      message: error.message,
      resolvedYaml: '',
    };
  }
}

/** The largest config the builder saves or opens. */
const MAX_CONFIG_BYTES = 512 * 1024;

const ConfigBody = z.strictObject({
  file: z.string().min(1).max(500),
  yaml: z.string().max(MAX_CONFIG_BYTES),
});

const YAML_DIR = realpathSync(join(dirname(createRequire(import.meta.url).resolve('yaml/package.json')), 'browser'));

export const configRoutes: Route[] = [
  {
    method: 'GET',
    path: '/api/config/schema',
    description: "the config builder's form: the config schema's fields (kind, default, bounds, choices)",
    handle: () => describeSchema(),
  },
  {
    method: 'GET',
    path: '/api/config/presets',
    description: 'a starting config (YAML) per algorithm preset',
    handle: ({ studio }) => configPresets(studio.root),
  },
  {
    method: 'POST',
    path: '/api/config/check',
    description: '{file, yaml}: the problems trinity config check finds in it, as saved at <runs>/<file>',
    handle: async ({ req, studio }: RouteRequest) => {
      const { file, yaml } = await readJson(req, ConfigBody);
      return checkConfig(studio.root, file, yaml);
    },
  },
  {
    method: 'POST',
    path: '/api/config/save',
    description: '{file, yaml}: writes the config to <runs>/<file> (.yaml, .yml; inside the runs folder)',
    handle: async ({ req, studio }: RouteRequest) => {
      const { file, yaml } = await readJson(req, ConfigBody);
      const path = writeUnderRoot(studio.root, writeTarget(studio.root, file, ['.yaml', '.yml']), yaml);
      return { file: relativeToRoot(studio.root, path), bytes: Buffer.byteLength(yaml) };
    },
  },
  {
    method: 'GET',
    path: '/api/config/file',
    description: 'the YAML of a config file inside the runs folder (?file)',
    handle: async ({ url, studio }: RouteRequest) => {
      const file = query.required(url, 'file');
      if (!/\.ya?ml$/.test(file)) throw new HttpError(403, `'${file}' is not a YAML config (.yaml, .yml)`);
      const path = await resolveInside(studio.root, file);
      return { file: relativeToRoot(studio.root, path), yaml: await readTextUnderRoot(studio.root, path, MAX_CONFIG_BYTES) };
    },
  },
  {
    method: 'GET',
    path: '/vendor/yaml/*',
    description: "the yaml package's browser build (npm package yaml), served from node_modules",
    handle: async ({ res, params }: RouteRequest) => {
      const path = await resolveInside(YAML_DIR, params['*'] as string);
      res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'no-cache' });
      res.end(readFileSync(path));
      return undefined;
    },
  },
];
