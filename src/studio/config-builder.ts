// The config builder's server side. The form is generated from the zod schema `trinity config check` validates
// with (./config-schema.ts reads it at request time, so a new key appears in the form by itself), and every
// check runs the command's own function (src/rft/run/config/check.ts) on the YAML as if it were saved where the
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
import { ConfigError, type ConfigProblem, formatProblem } from '../rft/run/config/index.js';
import { checkConfigText } from '../rft/run/config/check.js';
import { describeSchema } from './config-schema.js';
import { readJson, relativeToRoot, writeTarget } from './body.js';
import { readTextUnderRoot, resolveInside, writeUnderRoot } from './paths.js';
import { HttpError, query, type Route, type RouteRequest } from './router.js';

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
