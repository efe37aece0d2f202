// The tasksets of the run config (buffer.explorer_input: Trinity's taskset configs, their format, data_selector and
// rollout_args) — the schemas with their defaults, the tasksets resolved (one list, names, inherited defaults) with
// their rules and each selector's arguments, and the settings the taskset loader (./taskset.ts) and the selectors
// (./selector.ts) read. The rest of the buffer section is ./config.ts. Written in the config language of
// src/rft/config/.
import { z } from 'zod';
import { closestName } from '../../util/did-you-mean.js';
import type { ReportProblem } from '../config/errors.js';
import { omitNulls } from '../config/mapping.js';
import { describeValue } from '../config/source.js';
import { args, bool, intIn, MAX_REPEAT_TIMES, MAX_TOKENS, nonEmpty, num, numIn, str } from '../config/value-schemas.js';
import type { SelectorConfig } from './selector.js';
import type { TasksetConfig as TasksetSettings } from './taskset.js';

export const SELECTOR_TYPES = ['sequential', 'shuffle', 'random', 'offline_easy2hard', 'difficulty_based'] as const;
export const PROMPT_TYPES = ['messages', 'plaintext'] as const;

/** How the rows of a dataset become tasks or training samples (Trinity's FormatConfig). */
export const FormatSchema = z.strictObject({
  prompt_type: z.enum(PROMPT_TYPES).default('messages'),
  prompt_key: nonEmpty().default('prompt'),
  response_key: nonEmpty().default('response'),
  messages_key: nonEmpty().default('message'),
  tools_key: nonEmpty().default('tools'),
  system_prompt_key: str().nullable().default(null),
  system_prompt: str().nullable().default(null),
  reply_prefix: str().nullable().default(null), // assistant prefill, e.g. "<think>"
  workflow_key: str().nullable().default(null), // Trinity '' (none)
  reward_fn_key: str().nullable().default(null), // Trinity '' (none)
  chosen_key: nonEmpty().default('chosen'),
  rejected_key: nonEmpty().default('rejected'),
  enable_concatenated_multi_turn: bool().default(false), // SFT messages rows: train every assistant turn
  image_key: str().nullable().default(null), // the prompt's images: paths, data URLs, bytes, HF Image structs (a VLM)
});

/**
 * Trinity's data_selector (task_selector before v0.5.2, still accepted). kwargs: the selector's own arguments,
 * offline_easy2hard {descending}, difficulty_based {target_reward, tau, do_sample, prior_strength; with two feature_keys
 * BOTS' m, lamb, rho, adaptive_rho} (src/rft/buffer/selector.ts); feature_keys: the numeric columns offline_easy2hard
 * sorts by, difficulty_based's prior pass rate or BOTS' two reference models' pass rates.
 */
export const TaskSelectorSchema = z.strictObject({
  selector_type: z.enum(SELECTOR_TYPES).default('sequential'),
  seed: num(z.int()).default(42), // any safe integer (|seed| <= 2^53 − 1)
  feature_keys: z.array(z.string()).default(() => []),
  kwargs: args().default(() => ({})),
});

/** Sampling of the rollouts of a taskset (Trinity's GenerationConfig; `n` comes from repeat_times). */
export const RolloutArgsSchema = z.strictObject({
  temperature: numIn(0, 100).default(1.0), // [0, 100]
  top_p: numIn(0, 1, true).default(1.0), // (0, 1]
  top_k: intIn(-1, MAX_TOKENS).default(-1), // [-1, 2^20]; -1: off
  min_p: numIn(0, 1).default(0), // [0, 1]
  max_tokens: intIn(1, MAX_TOKENS).nullable().default(null), // [1, 2^20]; derived: model.max_response_tokens
  seed: intIn(0, Number.MAX_SAFE_INTEGER).nullable().default(null), // [0, 2^53 − 1]
  stop: z
    .union([z.string(), z.array(z.string())])
    .nullable()
    .default(null),
  stop_token_ids: z
    .array(intIn(0, MAX_TOKENS - 1)) // token ids in [0, 2^20); below the model's vocab_size (checked before a run)
    .nullable()
    .default(null),
});

export const TasksetSchema = z.strictObject({
  name: str().nullable().default(null), // derived: taskset_<i> / eval_taskset_<i>
  storage_type: z.enum(['file', 'sql']).default('file'), // sql: an SQLite table named after the taskset (raw_task JSON)
  path: nonEmpty(), // required: a .jsonl/.json/.parquet file, a dataset folder or cached hub id (src/rft/buffer/split.ts), or an SQLite file
  split: nonEmpty().default('train'), // which split of a folder to read
  subset_name: nonEmpty().nullable().default(null), // the subset (HF config name) of a dataset folder; null: its default
  format: FormatSchema.prefault({}),
  data_selector: TaskSelectorSchema.optional(), // Trinity >= 0.5.2's name
  task_selector: TaskSelectorSchema.optional(), // derived: data_selector, else sequential (the name before 0.5.2)
  rollout_args: RolloutArgsSchema.prefault({}),
  workflow_args: args().default(() => ({})),
  reward_fn_args: args().default(() => ({})),
  default_workflow_type: str().nullable().default(null), // derived: explorer_input.default_workflow_type
  default_reward_fn_type: str().nullable().default(null), // derived: explorer_input.default_reward_fn_type
  repeat_times: intIn(1, MAX_REPEAT_TIMES).nullable().default(null), // [1, 1024]; derived: algorithm.repeat_times (training), 1 (eval)
});

export const ExplorerInputSchema = z.strictObject({
  taskset: TasksetSchema.optional(), // one taskset, or:
  tasksets: z.array(TasksetSchema).default(() => []), // several, mixed in proportion to their sizes
  eval_tasksets: z.array(TasksetSchema).default(() => []),
  default_workflow_type: str().nullable().default(null),
  default_eval_workflow_type: str().nullable().default(null), // eval tasksets' workflow where they name none; null: default_workflow_type
  default_reward_fn_type: str().nullable().default(null),
});

export type FormatConfig = z.output<typeof FormatSchema>;
export type TaskSelectorConfig = z.output<typeof TaskSelectorSchema>;
export type RolloutArgs = Omit<z.output<typeof RolloutArgsSchema>, 'max_tokens'> & { max_tokens: number };

export type TasksetConfig = Omit<
  z.output<typeof TasksetSchema>,
  'name' | 'repeat_times' | 'rollout_args' | 'data_selector' | 'task_selector'
> & {
  name: string;
  /** data_selector, or task_selector (its name before Trinity 0.5.2). */
  task_selector: TaskSelectorConfig;
  repeat_times: number;
  rollout_args: RolloutArgs;
};

export interface ExplorerInputConfig {
  /** Training tasksets (`taskset` is moved here as the only item); eval tasksets are those in eval_tasksets. */
  tasksets: TasksetConfig[];
  eval_tasksets: TasksetConfig[];
  default_workflow_type: string | null;
  /** The eval tasksets' default workflow (Trinity's decoupled evaluation), before default_workflow_type. */
  default_eval_workflow_type: string | null;
  default_reward_fn_type: string | null;
}

/** Each selector's own arguments (data_selector.kwargs, snake_case as Trinity's), by selector type. */
const SELECTOR_KWARGS: Readonly<Record<TaskSelectorConfig['selector_type'], Readonly<Record<string, 'number' | 'boolean'>>>> = {
  sequential: {},
  shuffle: {},
  random: {},
  offline_easy2hard: { descending: 'boolean' },
  difficulty_based: {
    target_reward: 'number',
    tau: 'number',
    do_sample: 'boolean',
    prior_strength: 'number',
    m: 'number',
    lamb: 'number',
    rho: 'number',
    adaptive_rho: 'boolean',
  },
};

/** Checks a selector's kwargs against its type and that feature_keys are given where the selector needs them. */
function checkSelector(selector: TaskSelectorConfig, path: string, problem: ReportProblem): void {
  const allowed = SELECTOR_KWARGS[selector.selector_type];
  for (const [key, value] of Object.entries(selector.kwargs)) {
    const type = allowed[key];
    if (type === undefined) {
      const known = Object.keys(allowed);
      const best = closestName(key, known);
      const hint =
        known.length === 0 ? 'it takes none' : best !== null ? `did you mean '${best}'?` : `expected one of: ${known.join(', ')}`;
      problem(`${path}.kwargs.${key}`, `unknown argument of selector_type ${selector.selector_type}; ${hint}`);
    } else if (typeof value !== type) {
      problem(`${path}.kwargs.${key}`, `expected a ${type}, got ${describeValue(value)}`);
    }
  }
  if (selector.selector_type === 'offline_easy2hard' && selector.feature_keys.length === 0) {
    problem(`${path}.feature_keys`, 'offline_easy2hard sorts tasks by these columns: set at least one');
  }
  if (selector.selector_type === 'difficulty_based') checkDifficultyBased(selector, path, problem);
  if (['sequential', 'shuffle', 'random'].includes(selector.selector_type) && selector.feature_keys.length > 0) {
    problem(`${path}.feature_keys`, `selector_type ${selector.selector_type} does not read features: remove them`);
  }
}

/** BOTS' kwargs of difficulty_based (src/rft/buffer/pass-rate-estimators.ts), read with two feature_keys only. */
const BOTS_KWARGS = ['m', 'lamb', 'rho', 'adaptive_rho'];

/** difficulty_based: none, one (a prior pass rate) or two feature_keys (BOTS), each form with its own kwargs. */
function checkDifficultyBased(selector: TaskSelectorConfig, path: string, problem: ReportProblem): void {
  const keys = selector.feature_keys.length;
  const kwargs = selector.kwargs;
  if (keys > 2) {
    problem(
      `${path}.feature_keys`,
      `difficulty_based takes one prior pass-rate column (e.g. the task pipeline's pass_rate) or two (BOTS: a weaker ` +
        `and a stronger reference model's pass rates), got ${keys}`,
    );
  }
  if (keys !== 2) {
    for (const key of BOTS_KWARGS.filter((k) => kwargs[k] !== undefined))
      problem(
        `${path}.kwargs.${key}`,
        `BOTS' argument: it needs two feature_keys (a weaker and a stronger reference model's pass rates), got ${keys}`,
      );
  } else if (kwargs.prior_strength !== undefined) {
    problem(`${path}.kwargs.prior_strength`, 'weights one prior feature key; with two (BOTS) the pseudo-count is m');
  }
  const range = (key: string, ok: (x: number) => boolean, what: string): void => {
    const value = kwargs[key];
    if (typeof value === 'number' && !ok(value)) problem(`${path}.kwargs.${key}`, `must be ${what}, got ${value}`);
  };
  range('m', (x) => x > 0, '> 0');
  range('lamb', (x) => x >= 0 && x <= 1, 'in [0, 1]');
  range('rho', (x) => x >= 0 && x <= 1, 'in [0, 1]');
  range('target_reward', (x) => x >= 0 && x <= 1, 'in [0, 1]');
  range('tau', (x) => x >= 0, '>= 0');
}

/** What the tasksets' resolution reads from other sections. */
export interface ExplorerInputContext {
  /** algorithm.repeat_times: how often a training taskset repeats each task. */
  repeatTimes: number;
  /** model.max_response_tokens: rollout_args.max_tokens where a taskset sets none. */
  maxResponseTokens: number;
}

/**
 * The tasksets resolved: `taskset` as the only training taskset, names (taskset_<i>, eval_taskset_<i>), the selector
 * (data_selector or task_selector), repeat_times and the explorer_input's defaults filled in, and their rules.
 */
export function resolveExplorerInput(
  explorerInput: z.output<typeof ExplorerInputSchema>,
  { repeatTimes, maxResponseTokens }: ExplorerInputContext,
  problem: ReportProblem,
): ExplorerInputConfig {
  const tasksetBase = explorerInput.taskset !== undefined ? 'buffer.explorer_input.taskset' : 'buffer.explorer_input.tasksets';
  if (explorerInput.taskset !== undefined && explorerInput.tasksets.length > 0) {
    problem('buffer.explorer_input.taskset', 'set either taskset or tasksets, not both');
  }
  const trainSets = explorerInput.taskset !== undefined ? [explorerInput.taskset] : explorerInput.tasksets;
  // names are unique among the training tasksets and among the eval tasksets; an eval taskset may share a training
  // taskset's name, as Trinity's examples do (grpo_frozen_lake: both 'frozenlake'): its scores are eval/<name>/...,
  // the training series rollout/..., and its tasks are loaded and run apart from the training ones
  const namePaths = { train: new Map<string, string>(), eval: new Map<string, string>() };
  const fillTaskset = (taskset: (typeof trainSets)[number], index: number, isEval: boolean, path: string): TasksetConfig => {
    const tasksetName = taskset.name ?? `${isEval ? 'eval_' : ''}taskset_${index}`;
    const names = isEval ? namePaths.eval : namePaths.train;
    const seen = names.get(tasksetName);
    if (seen !== undefined) problem(`${path}.name`, `taskset name '${tasksetName}' is already used by ${seen}`);
    else names.set(tasksetName, path);
    if (taskset.storage_type === 'sql' && taskset.split !== 'train') {
      problem(`${path}.split`, 'applies to files; an sql taskset reads its table (named after the taskset): remove it');
    }
    if (taskset.storage_type === 'sql' && taskset.subset_name !== null) {
      problem(`${path}.subset_name`, 'applies to files; an sql taskset reads its table (named after the taskset): remove it');
    }
    if (taskset.data_selector !== undefined && taskset.task_selector !== undefined) {
      problem(`${path}.task_selector`, 'set data_selector (its name since Trinity 0.5.2) or task_selector, not both');
    }
    const { data_selector, task_selector, ...rest } = taskset;
    const selector = data_selector ?? task_selector ?? TaskSelectorSchema.parse({});
    if (!isEval) checkSelector(selector, `${path}.${data_selector !== undefined ? 'data_selector' : 'task_selector'}`, problem);
    if (!isEval && taskset.repeat_times !== null && taskset.repeat_times !== repeatTimes) {
      problem(
        `${path}.repeat_times`,
        `a training taskset repeats each task algorithm.repeat_times (${repeatTimes}) times; set algorithm.repeat_times instead`,
      );
    }
    return {
      ...rest,
      task_selector: selector,
      name: tasksetName,
      repeat_times: isEval ? (taskset.repeat_times ?? 1) : repeatTimes,
      default_workflow_type:
        taskset.default_workflow_type ??
        (isEval ? explorerInput.default_eval_workflow_type : null) ??
        explorerInput.default_workflow_type,
      default_reward_fn_type: taskset.default_reward_fn_type ?? explorerInput.default_reward_fn_type,
      rollout_args: { ...taskset.rollout_args, max_tokens: taskset.rollout_args.max_tokens ?? maxResponseTokens },
    };
  };
  const tasksets = trainSets.map((t, i) =>
    fillTaskset(t, i, false, explorerInput.taskset !== undefined ? tasksetBase : `${tasksetBase}.${i}`),
  );
  const evalTasksets = explorerInput.eval_tasksets.map((t, i) =>
    fillTaskset(t, i, true, `buffer.explorer_input.eval_tasksets.${i}`),
  );
  return {
    tasksets,
    eval_tasksets: evalTasksets,
    default_workflow_type: explorerInput.default_workflow_type,
    default_eval_workflow_type: explorerInput.default_eval_workflow_type,
    default_reward_fn_type: explorerInput.default_reward_fn_type,
  };
}

/** A taskset as the buffer's loader reads it (./taskset.ts); `isEval`: an eval taskset (no selector, no features). */
export function tasksetSettings(t: TasksetConfig, isEval: boolean): TasksetSettings {
  const f = t.format;
  // the selector's feature columns are read into task.features (eval tasksets have no selector)
  const featureKeys = isEval ? [] : t.task_selector.feature_keys;
  return {
    name: t.name,
    path: t.path,
    split: t.split,
    subset: t.subset_name,
    storageType: t.storage_type,
    format: omitNulls({
      promptKey: f.prompt_key,
      responseKey: f.response_key,
      ...(f.prompt_type === 'messages' && f.messages_key !== 'message' ? { messagesKey: f.messages_key } : {}),
      systemPromptKey: f.system_prompt_key,
      systemPrompt: f.system_prompt,
      replyPrefix: f.reply_prefix,
      workflowKey: f.workflow_key,
      rewardFnKey: f.reward_fn_key,
      toolsKey: f.tools_key,
      imageKey: f.image_key,
      ...(featureKeys.length > 0 ? { featureKeys } : {}),
    }),
    ...(t.default_workflow_type ? { defaultWorkflowType: t.default_workflow_type } : {}),
    ...(t.default_reward_fn_type ? { defaultRewardFnType: t.default_reward_fn_type } : {}),
    workflowArgs: t.workflow_args,
    rewardFnArgs: t.reward_fn_args,
    rolloutArgs: omitNulls({ ...t.rollout_args, top_k: t.rollout_args.top_k < 0 ? null : t.rollout_args.top_k }),
    isEval,
  };
}

/** data_selector.kwargs (snake_case, checked by the config's validation) as SelectorConfig fields. */
const SELECTOR_FIELDS: Readonly<Record<string, keyof SelectorConfig>> = {
  descending: 'descending',
  target_reward: 'targetReward',
  tau: 'tau',
  do_sample: 'doSample',
  prior_strength: 'priorStrength',
  m: 'm',
  lamb: 'lamb',
  rho: 'rho',
  adaptive_rho: 'adaptiveRho',
};

/** A training taskset's selector as ./selector.ts reads it. */
export function selectorSettings(t: TasksetConfig): SelectorConfig {
  const selector = t.task_selector;
  const kwargs = Object.fromEntries(
    Object.entries(selector.kwargs).map(([key, value]) => [SELECTOR_FIELDS[key] ?? key, value]),
  ) as Partial<SelectorConfig>;
  return {
    selectorType: selector.selector_type,
    seed: selector.seed,
    ...(selector.feature_keys.length ? { featureKeys: selector.feature_keys } : {}),
    ...kwargs,
  };
}
