// Trinity-RFT keys that tune hardware or engines this backend does not have (vLLM, veRL's FSDP/Megatron trainer,
// Ray): a config written for Trinity keeps them, so they are accepted, taken out of the tree before the schema sees
// it, and reported once per run in one block ("ignored on this backend", printed by `trinity config check` and at the
// start of `trinity run`), never dropped silently. A key that means something here is not listed: it is a schema key
// (e.g. explorer.rollout_model.seed, synchronizer.sync_timeout) or mapped (src/rft/run/config/trinity-mappings.ts).
// test/rft/config/coverage.test.ts checks that each key is listed once and is not also a key of the schema.
//
// Paths are key paths of a run, in the notation of ./refusals.ts (`*`: any list item or mapping key); keys of the
// sections a stage may override are also taken from each stage (`stages.<i>.trainer.trainer_type`). Values are
// type-checked loosely, as Trinity's dataclasses would (a number where Trinity has a number, a mapping where it has a
// mapping): a wrong type is a problem naming the key.
import type { ConfigProblem } from './errors.js';
import { pathsMatching } from './refusals.js';
import { describeValue, isMapping, joinPath, type Segment, type Tree } from './source.js';

type Kind = 'number' | 'integer' | 'boolean' | 'string' | 'mapping' | 'any';

export interface IgnoredKey {
  /** The key path (with `*` for list items and mapping keys). */
  readonly path: string;
  /** The type Trinity reads it as: a value of another type is a problem. */
  readonly kind: Kind;
  /** What the key tunes in Trinity and why it has no counterpart here (what does the job here, where there is one). */
  readonly why: string;
}

/** One ignored key as a config set it: the concrete path, the value written and why it is ignored. */
export interface IgnoredSetting {
  readonly path: string;
  readonly value: unknown;
  readonly why: string;
}

const VLLM_KEYS: readonly [string, Kind, string][] = [
  ['tensor_parallel_size', 'integer', 'vLLM tensor parallelism: an embedded engine holds the whole model on one device'],
  [
    'gpu_memory_utilization',
    'number',
    "vLLM's KV-cache share of GPU memory: the embedded engine sizes its cache from slots (sequences decoded at once)",
  ],
  ['enforce_eager', 'boolean', "vLLM's CUDA-graph switch: the embedded engine always runs eagerly"],
  ['use_v1', 'boolean', "vLLM's engine version"],
  ['enable_openai_api', 'boolean', "vLLM's OpenAI server in the engine actor: every model handle here has model.openai()"],
];

const ENGINE_PATHS = ['explorer.rollout_model', 'explorer.auxiliary_models.*'] as const;

/** vLLM's OpenAI-server options (Trinity's agent examples): what the engine's OpenAI endpoint here does instead. */
const OPENAI_SERVER_KEYS: readonly [string, Kind, string][] = [
  [
    'enable_history',
    'boolean',
    "records a workflow's OpenAI calls as experiences: the model handle here records every call of each attempt " +
      '(model.openai(), model.recordedExperiences)',
  ],
  ['enable_auto_tool_choice', 'boolean', "vLLM's tool_choice auto: the engine's OpenAI endpoint always accepts tools"],
  [
    'tool_call_parser',
    'string',
    "vLLM's tool-call parser: the engine here parses Hermes-style <tool_call> blocks (vLLM's hermes, Qwen's format)",
  ],
  [
    'reasoning_parser',
    'string',
    "vLLM's parser that moves <think> text into reasoning_content: the engine here returns it in the message content",
  ],
];

const MIX_WEIGHTS =
  "veRL's batch split that Trinity's mix losses read to weigh expert and usual micro-batches: the trainer here " +
  'weighs each kind by the rows it holds (src/rft/algorithm/policy-loss/mix.ts)';
const MIX_SPLIT =
  "the expert/usual rows of a train step, which Trinity's mix losses are told: here they are counted in the batch " +
  '(sample_strategy_args.expert_data_ratio of buffer.train_batch_size)';

/** veRL's batch knobs that Trinity's mix losses read to weigh expert and usual micro-batches. */
const MIX_BATCH_KNOBS: readonly [string, Kind, string][] = [
  ['use_dynamic_bsz', 'boolean', MIX_WEIGHTS],
  ['ppo_mini_batch_size', 'integer', MIX_WEIGHTS],
  ['ppo_micro_batch_size_per_gpu', 'integer', MIX_WEIGHTS],
  ['ngpus_trainer', 'integer', MIX_WEIGHTS],
  ['train_batch_size_expert', 'integer', MIX_SPLIT],
  ['train_batch_size_usual', 'integer', MIX_SPLIT],
  // the older mix form's names (mix_math, grpo_math's math_mix)
  ['repeat_times', 'integer', MIX_WEIGHTS],
  ['read_batch_size_expert', 'integer', MIX_SPLIT],
  ['read_batch_size_usual', 'integer', MIX_SPLIT],
];

/** Every dataset and buffer of the buffer section (Trinity's StorageConfig, each with a FormatConfig). */
export const STORAGE_PATHS = [
  'buffer.explorer_input.taskset',
  'buffer.explorer_input.tasksets.*',
  'buffer.explorer_input.eval_tasksets.*',
  'buffer.trainer_input.experience_buffer',
  'buffer.trainer_input.sft_warmup_dataset',
  'buffer.trainer_input.auxiliary_buffers.*',
] as const;

export const IGNORED_KEYS: readonly IgnoredKey[] = [
  ...ENGINE_PATHS.flatMap((base) => VLLM_KEYS.map(([key, kind, why]): IgnoredKey => ({ path: `${base}.${key}`, kind, why }))),
  {
    path: 'explorer.auxiliary_models.*.enable_prefix_caching',
    kind: 'boolean',
    why: "vLLM's prefix cache: an auxiliary model's engine prefills each prompt anew (explorer.rollout_model has the key)",
  },
  {
    path: 'explorer.auxiliary_models.*.enable_chunked_prefill',
    kind: 'boolean',
    why: "vLLM's chunked prefill: an auxiliary model's engine prefills each prompt in one pass (explorer.rollout_model has the key)",
  },
  { path: 'trainer.trainer_type', kind: 'string', why: 'the training backend (veRL, Tinker): the trainer here is its own' },
  {
    path: 'trainer.ulysses_sequence_parallel_size',
    kind: 'integer',
    why: 'sequence parallelism across GPUs: each sequence is trained whole on one device',
  },
  {
    path: 'trainer.trainer_config',
    kind: 'mapping',
    why:
      "veRL's own config (FSDP, micro-batches, checkpoint engine): the trainer's knobs here are trainer.micro_batch_size, " +
      'gradient_checkpointing, param_dtype, zero_stage and algorithm.optimizer',
  },
  {
    path: 'trainer.trainer_config_path',
    kind: 'string',
    why: "a veRL config file (trainer_config's older form): the trainer's knobs here are trainer.* and algorithm.optimizer",
  },
  { path: 'trainer.save_strategy', kind: 'string', why: 'how veRL ranks share checkpoint writing: rank 0 writes here' },
  { path: 'trainer.name', kind: 'string', why: "the trainer's Ray actor name" },
  {
    path: 'buffer.max_retry_times',
    kind: 'integer',
    why: "retries of Trinity's SQLAlchemy storage: the SQL buffer here waits on its database's locks and transactions",
  },
  { path: 'buffer.max_retry_interval', kind: 'number', why: "seconds between retries of Trinity's SQLAlchemy storage" },
  { path: 'synchronizer.wait_for_checkpoint', kind: 'boolean', why: 'reserved in Trinity (not read there either)' },
  { path: 'synchronizer.explorer_world_size', kind: 'integer', why: "the NCCL group's size, derived by Trinity" },
  { path: 'synchronizer.ray_namespace', kind: 'string', why: "the synchronizer's Ray namespace" },
  { path: 'monitor.enable_ray_timeline', kind: 'boolean', why: "Ray's timeline export: there is no Ray here" },
  { path: 'cluster.ray_address', kind: 'string', why: 'the Ray cluster to join: processes here are started directly' },
  { path: 'ray_namespace', kind: 'string', why: "the run's Ray namespace: there is no Ray here" },
  { path: 'log.*', kind: 'any', why: "the Ray actors' log files: the run logs to its output and the job folder" },
  {
    path: 'service.*',
    kind: 'any',
    why: "Trinity's helper services (the Data-Juicer server): operators run in-process here (docs/data-pipelines.md)",
  },
  ...STORAGE_PATHS.map(
    (base): IgnoredKey => ({
      path: `${base}.enable_progress_bar`,
      kind: 'boolean',
      why: "a progress bar while Trinity loads the dataset: the run's progress line counts the steps",
    }),
  ),
  ...STORAGE_PATHS.map(
    (base): IgnoredKey => ({
      path: `${base}.schema_type`,
      kind: 'string',
      why:
        "the rows' schema (task, experience, sft, dpo), which Trinity sets itself from the dataset's use (its " +
        '"DO NOT SET"): here too the use decides (tasksets read tasks, mix\'s expert data and algorithm sft read SFT rows, dpo DPO rows)',
    }),
  ),
  ...STORAGE_PATHS.slice(0, 3).map(
    (base): IgnoredKey => ({
      path: `${base}.rollout_args.logprobs`,
      kind: 'integer',
      why:
        "how many of vLLM's top log-probs come back per token: the engine here records the sampled token's log-prob, " +
        'which is what training reads',
    }),
  ),
  ...MIX_BATCH_KNOBS.map(([key, kind, why]): IgnoredKey => ({ path: `algorithm.policy_loss_fn_args.${key}`, kind, why })),
  {
    path: 'model.fully_sharded_loras',
    kind: 'boolean',
    why: "vLLM's LoRA sharding across tensor-parallel ranks: an embedded engine holds the adapter whole on one device",
  },
  {
    path: 'model.max_cpu_loras',
    kind: 'integer',
    why: "vLLM's CPU cache of LoRA adapters: a run here serves its one adapter (model.lora), kept with the engine's weights",
  },
  ...ENGINE_PATHS.flatMap((base) =>
    OPENAI_SERVER_KEYS.map(([key, kind, why]): IgnoredKey => ({ path: `${base}.${key}`, kind, why })),
  ),
  ...(['max_prompt_tokens', 'max_response_tokens'] as const).flatMap((key): IgnoredKey[] => [
    {
      path: `explorer.rollout_model.${key}`,
      kind: 'integer',
      why: `the rollout engine's own length limit: here model.${key} bounds every rollout (engine and trainer share it)`,
    },
    {
      path: `explorer.auxiliary_models.*.${key}`,
      kind: 'integer',
      why:
        "vLLM's length limit of an auxiliary model: here its context is its max_model_len, and a reply is bounded by " +
        'the max_tokens of each call',
    },
  ]),
  {
    path: 'model.tinker',
    kind: 'mapping',
    why:
      "Tinker's remote training service (base_model, LoRA rank): the trainer here trains model.model_path in this " +
      'process (LoRA with model.lora_configs), as trainer.trainer_type is ignored',
  },
  {
    path: 'explorer.env_vars',
    kind: 'mapping',
    why:
      "environment variables of Trinity's Ray workers: workflows here run in this process and its worker threads, " +
      'with the environment trinity run was started with',
  },
  {
    path: 'explorer.max_repeat_times_per_runner',
    kind: 'integer',
    why:
      "how many of a task's repeats one Trinity runner takes (the rest go to other runners): here a repeatable " +
      'workflow samples all repeat_times in one batched call, and a non-repeatable one runs each repeat concurrently',
  },
  {
    path: 'trainer.enable_preview',
    kind: 'boolean',
    why: "a preview of experiences in Trinity's monitor: here every rollout is kept for the Studio (trinity studio)",
  },
  // Trinity 0.1's keys that Trinity removed in 0.2 (its grpo_math/math.yaml; the rest of v0.1's form is mapped by
  // src/rft/run/config/trinity-v01-form.ts)
  { path: 'explorer.use_ray', kind: 'boolean', why: "whether Trinity 0.1's explorer ran its engines as Ray actors: no Ray here" },
  {
    path: 'explorer.backend',
    kind: 'string',
    why: "Trinity 0.1's weight-sync backend of the explorer (nccl): synchronizer.sync_method chooses the channel here",
  },
  {
    path: 'explorer.max_pending_requests',
    kind: 'integer',
    why: "Trinity 0.1's cap on requests queued at a vLLM engine: the embedded engine batches what its slots hold",
  },
  {
    path: 'explorer.max_waiting_steps',
    kind: 'integer',
    why: "Trinity 0.1's wait for pending requests before a step ended: an explore step here ends when its tasks do",
  },
  {
    path: 'monitor.cache_root_dir',
    kind: 'string',
    why: "Trinity 0.1's folder for monitor files: metrics are written in the run's job folder here",
  },
  {
    path: 'data_processor.data_processor_url',
    kind: 'string',
    why: 'the URL of the data-processor server of older Trinity versions: operators run in-process here (docs/data-pipelines.md)',
  },
];

/** Sections that Trinity has and this backend does not: removed once the keys above are taken out of them. */
const FOREIGN_SECTIONS = ['cluster', 'log', 'service'] as const;

/** The sections a stage may override (its keys are taken from each stage too). */
const STAGE_SECTIONS = new Set(['algorithm', 'buffer', 'explorer', 'trainer', 'synchronizer']);

const NUMBER_TEXT = /^\s*[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?\s*$/i;

function hasKind(value: unknown, kind: Kind): boolean {
  const number = typeof value === 'string' && NUMBER_TEXT.test(value) ? Number(value) : value;
  switch (kind) {
    case 'number':
      return typeof number === 'number' && Number.isFinite(number);
    case 'integer':
      return typeof number === 'number' && Number.isInteger(number);
    case 'boolean':
      return typeof value === 'boolean' || value === 'true' || value === 'false';
    case 'string':
      return typeof value === 'string' || typeof value === 'number';
    case 'mapping':
      return isMapping(value);
    case 'any':
      return true;
  }
}

const KIND_NAMES: Record<Kind, string> = {
  number: 'a number',
  integer: 'an integer',
  boolean: 'a boolean (true or false)',
  string: 'a string',
  mapping: 'a mapping',
  any: 'anything',
};

/**
 * Takes the keys of IGNORED_KEYS out of `tree` (at the top level, and in each stage for the stage sections), in
 * place; returns them in table order. A key set to null counts as not set. A value of the wrong type is a problem.
 */
export function takeIgnoredKeys(tree: Tree, problems: ConfigProblem[]): IgnoredSetting[] {
  const stages = Array.isArray(tree.stages) ? tree.stages : [];
  const roots: Segment[][] = [[], ...stages.map((_, i): Segment[] => ['stages', i])];
  const taken: IgnoredSetting[] = [];
  for (const root of roots) {
    const node = root.length === 0 ? tree : stages[root[1] as number];
    if (!isMapping(node)) continue;
    for (const key of IGNORED_KEYS) {
      const pattern = key.path.split('.');
      if (root.length > 0 && !STAGE_SECTIONS.has(pattern[0] as string)) continue;
      for (const [path, value] of pathsMatching(node, pattern)) {
        if (value === undefined) continue;
        removeAt(node, path);
        if (value === null) continue;
        const at = joinPath([...root, ...path]);
        if (!hasKind(value, key.kind)) {
          problems.push({ path: at, message: `expected ${KIND_NAMES[key.kind]}, got ${describeValue(value)} (${key.why})` });
        } else taken.push({ path: at, value, why: key.why });
      }
    }
  }
  for (const section of FOREIGN_SECTIONS) {
    if (isMapping(tree[section]) && Object.keys(tree[section]).length === 0) delete tree[section];
  }
  return taken;
}

function removeAt(node: Tree, path: readonly Segment[]): void {
  let parent: unknown = node;
  for (const segment of path.slice(0, -1)) parent = (parent as Record<string | number, unknown>)[segment];
  const last = path[path.length - 1] as Segment;
  if (isMapping(parent)) delete parent[String(last)];
}

/** `path=value` for the block: strings as written, other values as YAML flow would show them. */
export function showSetting(path: string, value: unknown): string {
  const shown =
    typeof value === 'string' ? value : isMapping(value) || Array.isArray(value) ? JSON.stringify(value) : String(value);
  return `${path}=${shown.length > 80 ? `${shown.slice(0, 77)}...` : shown}`;
}
