// Settings of Trinity-RFT's schema that this framework does not implement (yet): the one table validation checks
// (refusalProblems below) and the schema-coverage test (test/rft/config/coverage.test.ts) reads. A key listed here accepts
// its default (and any value `accepts` allows, all of which work); any other value is a problem naming the key,
// saying it is not supported here and what to use instead. Every other key of the schema is read by the run.
//
// Paths are key paths of the schema; `*` is any list item or mapping key (`buffer.explorer_input.tasksets.*.x`).

import type { ConfigProblem } from './errors.js';
import { describeValue, isMapping, joinPath, type Segment } from './source.js';

export interface Refusal {
  /** The key path (with `*` for list items and mapping keys). */
  readonly path: string;
  /** True for the values that are accepted (the default, and equivalents that work). */
  readonly accepts: (value: unknown) => boolean;
  /** Why the value is refused and what to use instead; the problem reads `<path>: got <value>: <message>`. */
  readonly message: string;
}

const SQL_DATASETS =
  'storage_type sql (SFT rows in an SQL table) is not supported here for training datasets: export the rows to JSONL ' +
  'and use storage_type file with that path (an SQLite experience buffer is buffer.trainer_input.experience_buffer; ' +
  'tasksets do read SQLite tables)';

const DATASET_PATHS = [
  'buffer.trainer_input.experience_buffer',
  'buffer.trainer_input.sft_warmup_dataset',
  'buffer.trainer_input.auxiliary_buffers.*',
] as const;

/** Format keys that mean something for one kind of data only: tasks (rollouts) or training rows (SFT/DPO). */
const TASK_ONLY_FORMAT_KEYS = ['reply_prefix', 'workflow_key', 'reward_fn_key'] as const;
const ROW_ONLY_FORMAT_KEYS: readonly [string, unknown][] = [
  ['chosen_key', 'chosen'],
  ['rejected_key', 'rejected'],
  ['enable_concatenated_multi_turn', false],
];

const TASKSET_PATHS = [
  'buffer.explorer_input.taskset',
  'buffer.explorer_input.tasksets.*',
  'buffer.explorer_input.eval_tasksets.*',
] as const;

export const REFUSED_SETTINGS: readonly Refusal[] = [
  {
    path: 'data_processor.task_pipeline.priority_weights',
    accepts: (v) => typeof v === 'object' && v !== null && Object.keys(v).length === 0,
    message:
      "Data-Juicer's priority ranking is not supported here: score the tasks with an operator (difficulty_scorer, " +
      'llm_difficulty_score_filter, llm_quality_score_filter) and let data_selector (difficulty_based, offline_easy2hard) ' +
      'read the score through feature_keys',
  },
  {
    path: 'data_processor.task_pipeline.top_k',
    accepts: (v) => v === -1,
    message:
      "Data-Juicer's top-k selection is not supported here: use -1 (all rows) and drop rows with the operators' " +
      'thresholds (e.g. difficulty_scorer min_pass_rate / max_pass_rate, llm_quality_score_filter min_score)',
  },
  {
    path: 'algorithm.optimizer.optimizer_type',
    accepts: (v) => typeof v === 'string' && /^adamw?$/i.test(v),
    message:
      "this optimizer is not supported here: the trainer has AdamW only (decoupled weight decay, as Trinity's FSDP trainer runs " +
      "'adam' and 'adamw'); use 'adam' or 'adamw'",
  },
  {
    path: 'monitor.detailed_stats',
    accepts: (v) => v === false,
    message:
      'detailed_stats is not supported here: eval metrics are logged as averages over the eval tasks (eval/<taskset>/mean@n, ' +
      'pass@k, best@k, worst@k); the across-task std/max/min that Trinity adds are not computed; use false',
  },
  {
    path: 'buffer.trainer_input.sft_warmup_dataset.storage_type',
    accepts: (v) => v === 'file',
    message: SQL_DATASETS,
  },
  { path: 'buffer.trainer_input.auxiliary_buffers.*.storage_type', accepts: (v) => v === 'file', message: SQL_DATASETS },
  ...DATASET_PATHS.flatMap((base) =>
    TASK_ONLY_FORMAT_KEYS.map(
      (key): Refusal => ({
        path: `${base}.format.${key}`,
        accepts: (v) => v === null,
        message: `${key} applies to tasksets (the rollouts of a task); a training row holds its whole answer: remove it`,
      }),
    ),
  ),
  ...TASKSET_PATHS.flatMap((base) =>
    ROW_ONLY_FORMAT_KEYS.map(
      ([key, value]): Refusal => ({
        path: `${base}.format.${key}`,
        accepts: (v) => v === value,
        message: `${key} applies to training datasets (buffer.trainer_input), not to tasks: remove it`,
      }),
    ),
  ),
  ...ROW_ONLY_FORMAT_KEYS.slice(0, 2).map(
    ([key, value]): Refusal => ({
      path: `buffer.trainer_input.auxiliary_buffers.*.format.${key}`,
      accepts: (v) => v === value,
      message: `${key} applies to DPO datasets; an auxiliary buffer holds SFT rows (e.g. mix's expert data): remove it`,
    }),
  ),
  // Trinity's LoRA key (src/rft/run/config/model.ts TrinityLoraSchema): what vLLM or PEFT read that has no counterpart
  {
    path: 'model.lora_configs.*.base_model_name',
    accepts: (v) => v === null,
    message:
      "names the base model in vLLM's list of served adapters; here the adapter always sits on model.model_path: remove it",
  },
  {
    path: 'model.lora_configs.*.lora_dtype',
    accepts: (v) => v === 'auto',
    message: "the adapter's weights take the trainer's dtype here (trainer.param_dtype): use 'auto' or remove it",
  },
  {
    path: 'model.lora_configs.*.exclude_modules',
    accepts: (v) => v === null,
    message: 'excluding modules is not supported here: list the modules to adapt in target_modules instead',
  },
  ...(['data_selector', 'task_selector'] as const).map(
    (key): Refusal => ({
      path: `buffer.explorer_input.eval_tasksets.*.${key}`,
      accepts: (v) => v === undefined,
      message: 'a selector is not used for eval tasksets (each evaluation runs every task of the taskset): remove it',
    }),
  ),
];

/** Every concrete path of `tree` that matches `pattern` (`*`: any list index or mapping key), with its value. */
export function pathsMatching(tree: unknown, pattern: readonly string[], at: Segment[] = []): [Segment[], unknown][] {
  const [head, ...rest] = pattern;
  if (head === undefined) return [[at, tree]];
  let children: [Segment, unknown][];
  if (head !== '*') children = isMapping(tree) ? [[head, tree[head]]] : [];
  else if (Array.isArray(tree)) children = tree.map((v, i): [Segment, unknown] => [i, v]);
  else children = isMapping(tree) ? Object.entries(tree) : [];
  // the last segment may be absent (an unset optional key); every segment before it must exist
  return children
    .filter(([, child]) => child !== undefined || rest.length === 0)
    .flatMap(([key, child]) => pathsMatching(child, rest, [...at, key]));
}

const shown = (value: unknown): string => (typeof value === 'string' ? `'${value}'` : describeValue(value));

/** The settings of REFUSED_SETTINGS set to a value that is not accepted, one problem each. */
export function refusalProblems(input: unknown): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const refusal of REFUSED_SETTINGS) {
    for (const [path, value] of pathsMatching(input, refusal.path.split('.'))) {
      if (!refusal.accepts(value)) problems.push({ path: joinPath(path), message: `got ${shown(value)}: ${refusal.message}` });
    }
  }
  return problems;
}

/**
 * Keys that config resolution folds into another key, which the run reads (the coverage test checks that it does):
 * schema path (or prefix of paths) → the resolved key (or prefix) that carries its effect.
 */
export const FOLDED_SETTINGS: Readonly<Record<string, string>> = {
  checkpoint_root_dir: 'checkpoint_job_dir', // job dir = checkpoint_root_dir/project/name
  'trainer.grad_clip': 'algorithm.optimizer.clip_grad', // one max gradient norm, trainer.grad_clip first
  'trainer.ppo_max_token_len_per_gpu': 'trainer.max_token_len_per_gpu', // veRL's name (src/rft/trainer/config.ts)
  'model.max_response_tokens': 'buffer.explorer_input.tasksets.*.rollout_args.max_tokens',
  'buffer.explorer_input.default_reward_fn_type': 'buffer.explorer_input.tasksets.*.default_reward_fn_type',
  'buffer.explorer_input.default_eval_workflow_type': 'buffer.explorer_input.eval_tasksets.*.default_workflow_type',
  'buffer.explorer_input.taskset': 'buffer.explorer_input.tasksets.*', // the one taskset becomes tasksets[0]
  'buffer.explorer_input.tasksets.*.data_selector': 'buffer.explorer_input.tasksets.*.task_selector',
  'buffer.explorer_input.tasksets.*.repeat_times': 'algorithm.repeat_times', // must equal it (checked)
  // sft warm-up: an SFT stage before the RL stage (src/rft/run/config/validate.ts sftWarmupStages)
  'buffer.trainer_input.sft_warmup_dataset': 'buffer.trainer_input.experience_buffer',
  'buffer.trainer_input.sft_warmup_steps': 'buffer.total_steps',
  // Trinity's form of the LoRA adapter, model.lora_configs[0] (src/rft/run/config/model.ts TrinityLoraSchema)
  'model.lora_configs.*.name': 'model.lora.name',
  'model.lora_configs.*.path': 'model.lora.path',
  'model.lora_configs.*.lora_rank': 'model.lora.rank',
  'model.lora_configs.*.lora_alpha': 'model.lora.alpha',
  'model.lora_configs.*.target_modules': 'model.lora.target_modules',
};

/** True when `path` (concrete, with list indices and mapping keys) matches `pattern` (with `*`). */
export function matchesPath(pattern: string, path: string): boolean {
  const p = pattern.split('.');
  const q = path.split('.');
  return p.length === q.length && p.every((segment, i) => segment === '*' || segment === q[i]);
}
