// Validating a whole config file: the schema (./schema.ts) checks each key's type, then each run is resolved by
// `resolveRun` (./resolve-run.ts: derived keys and the rules that tie keys together, section by section). Every
// problem is collected; the caller throws one ConfigError with all of them. After a schema problem the rules still
// run on the file without the offending keys (their defaults in their place), so one run reports both kinds.
//
// Stages: each stage's overrides are deep-merged onto the top level as written (before defaults), then validated
// and resolved as a run of its own, so derived keys (train_batch_size, ...) follow the stage's values. A stage that
// names a different algorithm_type replaces the `algorithm` section instead of merging into it (the top level's
// module arguments belong to the other algorithm). The top level of a multi-stage file is not run by itself, so the
// rules about what each mode needs apply only to the stages.
import type { ConfigProblem } from '../../config/errors.js';
import { parseWith } from '../../config/parse.js';
import { deepMerge, getIn, isMapping, joinPath, type Segment, type Tree } from '../../config/source.js';
import { resolveRun, type ValidateOptions } from './resolve-run.js';
import { type Config, ConfigSchema, RunSchema, type StageConfig } from './schema.js';
import { NO_TRINITY_KEYS } from './trinity-mappings.js';

export type { ValidateOptions } from './resolve-run.js';

/** How deep `path` reaches into `tree` (the number of leading segments that exist there). */
function depthIn(tree: unknown, path: readonly Segment[]): number {
  let depth = 0;
  while (depth < path.length && getIn(tree, path.slice(0, depth + 1)) !== undefined) depth++;
  return depth;
}

const splitPath = (path: string): Segment[] =>
  path === '' ? [] : path.split('.').map((s): Segment => (/^\d+$/.test(s) ? Number(s) : s));

const WARMUP_KEYS = 'buffer.trainer_input.sft_warmup_dataset/sft_warmup_steps';

/**
 * Trinity's SFT warm-up as the stages it stands for: `sft_warmup` (mode train, algorithm_type sft, the warm-up dataset
 * as a file experience buffer, sft_warmup_steps steps of train_batch_size samples, the top level's optimizer), then
 * `rft`, the run as written without the warm-up keys, starting from the warm-up's final weights.
 */
function sftWarmupStages(
  rawTop: Tree,
  trainBatchSize: number,
  steps: number,
): { stageName: string; override: Tree; madeFrom: string; base: Tree }[] {
  const trainerInput = getIn(rawTop, ['buffer', 'trainer_input']) as Tree;
  const dataset = { ...(trainerInput.sft_warmup_dataset as Tree), storage_type: 'file' };
  const optimizer = getIn(rawTop, ['algorithm', 'optimizer']);
  const withoutWarmup = { sft_warmup_dataset: null, sft_warmup_steps: null };
  return [
    {
      stageName: 'sft_warmup',
      madeFrom: WARMUP_KEYS,
      // the warm-up dataset replaces the experience buffer (no key of the RL stage's buffer carries over), and the
      // stage explores nothing (its tasksets belong to the RL stage)
      base: deepMerge(rawTop, { buffer: { explorer_input: null, trainer_input: { experience_buffer: null } } }),
      override: {
        mode: 'train',
        algorithm: { algorithm_type: 'sft', ...(isMapping(optimizer) ? { optimizer } : {}) },
        buffer: {
          train_batch_size: trainBatchSize,
          total_steps: steps,
          trainer_input: { ...withoutWarmup, experience_buffer: dataset, auxiliary_buffers: null },
        },
        synchronizer: { sync_method: null }, // derived for mode train (checkpoint)
      },
    },
    { stageName: 'rft', madeFrom: WARMUP_KEYS, base: rawTop, override: { buffer: { trainer_input: withoutWarmup } } },
  ];
}

/**
 * `tree` without the keys the schema found problems at (their defaults apply once removed), or null where that cannot
 * make it pass the schema (a required key missing, a problem of the file as a whole) or the default would change what
 * the rules check (a bad mode): what the cross-key rules can still check after a schema problem. `removed`: the key
 * paths taken out (rules about them are not reported).
 */
function withoutProblemKeys(tree: Tree, schemaProblems: readonly ConfigProblem[]): { tree: Tree; removed: string[] } | null {
  const rest = structuredClone(tree);
  const removed: string[] = [];
  for (const { path } of schemaProblems) {
    if (path === 'mode') return null; // the rules of another mode than the one meant would only mislead
    if (removed.includes(path)) continue;
    const segments = splitPath(path);
    const key = segments[segments.length - 1];
    const parent = getIn(rest, segments.slice(0, -1));
    // a required key that is missing, or a list item (removing it would renumber the rest): the rules cannot run
    if (key === undefined || !isMapping(parent) || parent[String(key)] === undefined) return null;
    delete parent[String(key)];
    removed.push(path);
  }
  const check: ConfigProblem[] = [];
  parseWith(ConfigSchema, structuredClone(rest), check);
  return check.length === 0 ? { tree: rest, removed } : null;
}

/**
 * Validates a config tree (after overrides, ${ENV} and path resolution) and resolves it; returns the problems
 * instead of throwing. `config` is set only when there are none.
 */
export function validateConfig(tree: Tree, options: ValidateOptions = {}): { config?: Config; problems: ConfigProblem[] } {
  const problems: ConfigProblem[] = [];
  const input = parseWith(ConfigSchema, tree, problems);
  if (input === undefined) {
    // the rules between keys still run on the rest of the file, so that one run reports every problem
    const rest = withoutProblemKeys(tree, problems);
    if (rest === null) return { problems };
    const ruleProblems = validateConfig(rest.tree, options).problems;
    const removed = (path: string) => rest.removed.some((r) => path === r || path.startsWith(`${r}.`));
    return { problems: [...problems, ...ruleProblems.filter((p) => !removed(p.path))] };
  }
  const { stages: stageInputs, ...runInput } = input;
  const { sft_warmup_dataset: warmupDataset, sft_warmup_steps: warmupSteps } = runInput.buffer.trainer_input;
  const warmup = stageInputs.length === 0 && warmupDataset !== null && warmupSteps > 0;
  const top = resolveRun(runInput, { ...options, runnable: stageInputs.length === 0 && !warmup }, problems);

  const topProblems = new Set(problems.map((p) => `${p.path}\n${p.message}`));
  const rawStages = Array.isArray(tree.stages) ? (tree.stages as unknown[]) : [];
  const { stages: _stages, checkpoint_job_dir: _jobDir, ...rawTop } = tree;
  // the stages as written, or the two stages an SFT warm-up stands for
  const written = stageInputs.map((stageInput, i) => {
    const { stage_name: _name, ...override } = isMapping(rawStages[i]) ? (rawStages[i] as Tree) : {};
    return { stageName: stageInput.stage_name, override, madeFrom: null as string | null, base: rawTop };
  });
  const stageList = warmup ? sftWarmupStages(rawTop, top.buffer.train_batch_size, warmupSteps) : written;
  const stageNames = new Map<string, number>();
  const stages: StageConfig[] = [];
  stageList.forEach(({ stageName, override, madeFrom, base: stageBase }, i) => {
    const first = stageNames.get(stageName);
    if (first !== undefined) {
      problems.push({ path: `stages.${i}.stage_name`, message: `'${stageName}' is already the name of stages.${first}` });
    } else stageNames.set(stageName, i);

    const base = { ...stageBase };
    const topType = isMapping(rawTop.algorithm) ? (rawTop.algorithm.algorithm_type ?? 'ppo') : 'ppo';
    if (
      isMapping(override.algorithm) &&
      override.algorithm.algorithm_type !== undefined &&
      override.algorithm.algorithm_type !== topType
    ) {
      delete base.algorithm; // another algorithm: the top level's module settings do not apply
    }
    const merged = deepMerge(base, override);
    const stageProblems: ConfigProblem[] = [];
    const runStage = parseWith(RunSchema, merged, stageProblems);
    const resolved =
      runStage === undefined ? undefined : resolveRun(runStage, { ...options, runnable: true, stageName }, stageProblems);
    // a problem in a key the stage wrote is the stage's; one in an inherited key is the top level's, once
    for (const p of stageProblems) {
      const path = splitPath(p.path);
      const inStage = depthIn(override, path);
      const where = madeFrom === null ? `in stage '${stageName}'` : `in stage '${stageName}', made from ${madeFrom}`;
      const attributed: ConfigProblem =
        madeFrom === null && inStage > 0 && inStage >= depthIn(rawTop, path)
          ? { ...p, path: joinPath(['stages', i, ...path]) }
          : { ...p, message: `${p.message} (${where})` };
      if (attributed.path === p.path && topProblems.has(`${p.path}\n${p.message}`)) continue;
      problems.push(attributed);
    }
    if (resolved !== undefined) stages.push({ ...resolved, stage_name: stageName });
  });
  return problems.length > 0 ? { problems } : { config: { ...top, stages, trinity_keys: NO_TRINITY_KEYS }, problems };
}
