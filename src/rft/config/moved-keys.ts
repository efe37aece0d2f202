// Keys of older Trinity-RFT versions that were renamed or moved, and where they live now: the hint an unknown key gets
// (./parse.ts) before "did you mean", so a config written for Trinity 0.1-0.4 is told what to write instead of only
// "unknown key". Paths are key paths of a run in the notation of ./refusals.ts (`*`: any list item or mapping key);
// `use` is what to write (a key path of this schema). The old keys are from Trinity 0.1's config.py (global_config,
// the flat explorer section, trainer.algorithm_type...) and its deprecations (sync_iteration_interval, warmup_style).
//
// Keys that Trinity still accepts under an old name, and older keys whose meaning is clear, are mapped instead and
// are not here: they never reach the schema as unknown keys (explorer.runner_num, the older mix form's buffer keys:
// src/rft/run/config/trinity-mappings.ts, trinity-older-forms.ts).
import { matchesPath } from './refusals.js';

export interface MovedKey {
  /** The old key path (with `*`). */
  readonly path: string;
  /** What to write instead. */
  readonly use: string;
}

/** v0.1's flat explorer section: the engine's keys moved into explorer.rollout_model in v0.2. */
export const V01_ENGINE_KEYS = [
  'engine_type',
  'engine_num',
  'tensor_parallel_size',
  'gpu_memory_utilization',
  'enforce_eager',
  'enable_prefix_caching',
  'enable_chunked_prefill',
  'dtype',
  'seed',
];

/** v0.1's sampling keys in the explorer section: per taskset since v0.2 (rollout_args). */
export const V01_SAMPLING_KEYS = ['temperature', 'top_p', 'top_k', 'logprobs'];

export const MOVED_KEYS: readonly MovedKey[] = [
  { path: 'synchronizer.sync_iteration_interval', use: 'synchronizer.sync_interval' },
  { path: 'trainer.sft_warmup_iteration', use: 'buffer.trainer_input.sft_warmup_steps' },
  { path: 'trainer.sft_warmup_steps', use: 'buffer.trainer_input.sft_warmup_steps' },
  { path: 'trainer.algorithm_type', use: 'algorithm.algorithm_type' },
  { path: 'trainer.get_exp_strategy', use: 'algorithm.sample_strategy' },
  { path: 'explorer.repeat_times', use: 'algorithm.repeat_times' },
  ...V01_ENGINE_KEYS.map((key): MovedKey => ({ path: `explorer.${key}`, use: `explorer.rollout_model.${key}` })),
  ...V01_SAMPLING_KEYS.map(
    (key): MovedKey => ({ path: `explorer.${key}`, use: `buffer.explorer_input.taskset.rollout_args.${key}` }),
  ),
  { path: 'model.checkpoint_path', use: 'checkpoint_root_dir' },
  { path: 'monitor.project', use: 'project' },
  { path: 'monitor.name', use: 'name' },
  { path: 'global_config', use: 'buffer (batch_size, total_epochs) and explorer (eval_interval)' },
  { path: 'data', use: 'buffer (batch_size, total_epochs, explorer_input.taskset)' },
  { path: 'buffer.train_dataset', use: 'buffer.trainer_input.experience_buffer' },
  { path: 'buffer.read_batch_size', use: 'buffer.train_batch_size' },
  { path: 'algorithm.optimizer.warmup_style', use: 'algorithm.optimizer.lr_scheduler_type' },
  // the task pipeline of Trinity 0.2 (grpo_gsm8k_task_pipeline): buffers in and out, and a Data-Juicer recipe agent
  { path: 'data_processor.task_pipeline.input_buffers', use: 'data_processor.task_pipeline.inputs (paths)' },
  { path: 'data_processor.task_pipeline.output_buffer', use: 'data_processor.task_pipeline.output (a path)' },
  { path: 'data_processor.task_pipeline.format', use: 'the format of the taskset that reads the output' },
  ...['dj_process_desc', 'agent_model_name', 'agent_model_config', 'clean_strategy', 'dynamic'].map(
    (key): MovedKey => ({
      path: `data_processor.task_pipeline.${key}`,
      use: 'data_processor.task_pipeline.operators (the operators written out; the recipe-writing agent is gone)',
    }),
  ),
];

/** The hint for an unknown key at `path` (concrete, dotted) that an older Trinity-RFT version had, or null. */
export function movedKeyHint(path: string): string | null {
  const moved = MOVED_KEYS.find((m) => matchesPath(m.path, path));
  return moved === undefined ? null : `an older Trinity-RFT key, renamed or moved since: use ${moved.use}`;
}
