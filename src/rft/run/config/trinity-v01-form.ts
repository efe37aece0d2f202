// Trinity-RFT 0.1's config form (upstream's grpo_math/math.yaml is one), read as today's keys: part of the "mapped"
// block of ./trinity-mappings.ts, which calls this on the YAML tree before the schema sees it. The renames are
// Trinity's own ("Reorganize config", v0.2: global_config and data split into buffer and explorer, the engine's keys
// into explorer.rollout_model, algorithm_type out of trainer):
//
//   data.dataset_path, data.train_split         → buffer.explorer_input.taskset.path, .split
//   data.eval_split                             → an eval taskset on the same dataset and format, named <taskset>_eval
//   data.format                                 → the format of the taskset (and of that eval taskset)
//   data.total_epochs, data.batch_size          → buffer.total_epochs, buffer.batch_size
//   data.default_workflow_type / _reward_fn_type→ buffer.explorer_input.default_workflow_type / _reward_fn_type
//   data.db_url ''                              → nothing (a taskset in a database is storage_type sql today)
//   buffer.train_dataset                        → buffer.trainer_input.experience_buffer
//   model.checkpoint_path                       → checkpoint_root_dir
//   explorer.<engine key> (engine_type, engine_num, tensor_parallel_size, ..., dtype, seed)
//                                               → explorer.rollout_model.<key>
//   explorer.temperature / top_p / top_k / logprobs → buffer.explorer_input.taskset.rollout_args.<key>
//   explorer.repeat_times                       → algorithm.repeat_times
//   trainer.algorithm_type                      → algorithm.algorithm_type
//   trainer.sft_warmup_steps                    → buffer.trainer_input.sft_warmup_steps
//   trainer.eval_interval                       → explorer.eval_interval (evaluation moved to the explorer in v0.2)
//   monitor.project / name                      → project / name
// v0.1's keys that Trinity removed then (explorer.use_ray, backend, max_pending_requests, max_waiting_steps,
// monitor.cache_root_dir) are in the ignored block with why. Nothing here runs unless the file
// has v0.1's `data` section, so today's configs are never rewritten (a v0.1 key alone in one is refused naming today's
// key: src/rft/config/moved-keys.ts); a v0.1 key beside the key it became is a problem naming both.
import { V01_ENGINE_KEYS, V01_SAMPLING_KEYS } from '../../config/moved-keys.js';
import { describeValue, isMapping, mappingAt, type Segment, type Tree } from '../../config/source.js';

/** A mapped key's record, as ./trinity-mappings.ts's MappedSetting (which this file's caller collects). */
interface MappedSetting {
  readonly path: string;
  readonly value: unknown;
  readonly to: string | null;
}

type Report = (path: string, message: string) => void;

const TASKSET = ['buffer', 'explorer_input', 'taskset'];

/** v0.1's data keys and the key path each becomes (null: handled on its own). */
const DATA_KEYS: Readonly<Record<string, readonly string[] | null>> = {
  dataset_path: [...TASKSET, 'path'],
  train_split: [...TASKSET, 'split'],
  format: [...TASKSET, 'format'],
  total_epochs: ['buffer', 'total_epochs'],
  batch_size: ['buffer', 'batch_size'],
  default_workflow_type: ['buffer', 'explorer_input', 'default_workflow_type'],
  default_reward_fn_type: ['buffer', 'explorer_input', 'default_reward_fn_type'],
  eval_split: null,
  db_url: null,
};

const MOVED: readonly (readonly [readonly string[], readonly string[]])[] = [
  [
    ['buffer', 'train_dataset'],
    ['buffer', 'trainer_input', 'experience_buffer'],
  ],
  [['model', 'checkpoint_path'], ['checkpoint_root_dir']],
  ...V01_ENGINE_KEYS.map(
    (key) =>
      [
        ['explorer', key],
        ['explorer', 'rollout_model', key],
      ] as const,
  ),
  ...V01_SAMPLING_KEYS.map(
    (key) =>
      [
        ['explorer', key],
        [...TASKSET, 'rollout_args', key],
      ] as const,
  ),
  [
    ['explorer', 'repeat_times'],
    ['algorithm', 'repeat_times'],
  ],
  [
    ['trainer', 'algorithm_type'],
    ['algorithm', 'algorithm_type'],
  ],
  [
    ['trainer', 'sft_warmup_steps'],
    ['buffer', 'trainer_input', 'sft_warmup_steps'],
  ],
  [
    ['trainer', 'eval_interval'],
    ['explorer', 'eval_interval'],
  ],
  [['monitor', 'project'], ['project']],
  [['monitor', 'name'], ['name']],
];

/** Whether `tree` is a whole file in v0.1's form: one with its `data` section (which no later version has). */
function isV01(tree: Tree): boolean {
  return tree.data !== undefined;
}

/** Sets `path` in `tree` to `value` (sections made where absent); false when a value or a non-mapping is there. */
function place(tree: Tree, path: readonly string[], value: unknown): boolean {
  const at = mappingAt(tree, path.slice(0, -1));
  const last = path.at(-1) as string;
  if (at === null || at[last] !== undefined) return false;
  at[last] = value;
  return true;
}

function move(
  tree: Tree,
  from: readonly Segment[],
  value: unknown,
  to: readonly string[],
  mapped: MappedSetting[],
  problem: Report,
): void {
  const path = from.join('.');
  if (!place(tree, to, value)) {
    problem(path, `is Trinity 0.1's ${to.join('.')}, which is set too: remove one`);
    return;
  }
  mapped.push({ path, value, to: `${to.join('.')} (Trinity 0.1's key)` });
}

/** Rewrites a v0.1 config in place (see the header); today's configs are left as they are. */
export function mapTrinityV01Form(tree: Tree, mapped: MappedSetting[], problem: Report): void {
  if (!isV01(tree)) return;
  const data = tree.data;
  delete tree.data;
  if (isMapping(data)) mapDataSection(tree, data, mapped, problem);
  else if (data !== undefined) problem('data', `Trinity 0.1's data section must be a mapping, got ${describeValue(data)}`);
  for (const [from, to] of MOVED) {
    const section = tree[from[0] as string];
    const key = from[1] as string;
    if (!isMapping(section) || section[key] === undefined) continue;
    const value = section[key];
    delete section[key];
    move(tree, from, value, to, mapped, problem);
  }
}

function mapDataSection(tree: Tree, data: Tree, mapped: MappedSetting[], problem: Report): void {
  for (const [key, value] of Object.entries(data)) {
    const to = DATA_KEYS[key];
    if (to === undefined) {
      problem(`data.${key}`, `unknown key of Trinity 0.1's data section (known: ${Object.keys(DATA_KEYS).join(', ')})`);
    } else if (to !== null) {
      move(tree, ['data', key], value, to, mapped, problem);
    }
  }
  if (data.db_url !== undefined && data.db_url !== null && data.db_url !== '') {
    problem('data.db_url', "is Trinity 0.1's taskset database: write the taskset as storage_type sql with that path");
  } else if (data.db_url !== undefined) {
    mapped.push({ path: 'data.db_url', value: data.db_url, to: 'nothing (empty: the taskset is read from dataset_path)' });
  }
  const evalSplit = data.eval_split;
  if (evalSplit === undefined || evalSplit === null || evalSplit === '') return;
  const taskset = tree.buffer && isMapping(tree.buffer) ? (tree.buffer as Tree).explorer_input : undefined;
  const train = isMapping(taskset) && isMapping(taskset.taskset) ? taskset.taskset : {};
  const name = `${typeof train.name === 'string' ? train.name : 'taskset'}_eval`;
  const evalTaskset = {
    name,
    path: data.dataset_path,
    split: evalSplit,
    ...(isMapping(data.format) ? { format: structuredClone(data.format) } : {}),
  };
  if (!place(tree, ['buffer', 'explorer_input', 'eval_tasksets'], [evalTaskset])) {
    problem('data.eval_split', "is Trinity 0.1's eval taskset, and buffer.explorer_input.eval_tasksets is set too: remove one");
    return;
  }
  mapped.push({
    path: 'data.eval_split',
    value: evalSplit,
    to: `buffer.explorer_input.eval_tasksets: ${name} (split ${String(evalSplit)} of the same dataset)`,
  });
}
