// Trinity-RFT keys whose values name Trinity's machinery, read in this backend's terms: the YAML tree rewritten
// before the schema sees it, each rewrite recorded so that `trinity config check` and `trinity run` print it once in
// a "mapped" block (./trinity-report.ts finishes the records that depend on the resolved run and prints them).
//
//   synchronizer.sync_method nccl | online   → derived: the fastest weight channel for the placement (memory when
//                                              trainer and embedded engine share the process, else checkpoint)
//                            offline         → checkpoint                (Trinity's aliases; any case)
//   explorer.rollout_model.engine_type vllm… | sglang…  → embedded, or openai when base_url is set (the same for
//                                              explorer.auxiliary_models.*)
//   buffer.trainer_input.experience_buffer storage_type queue|sql with path sqlite:///file.db (SQLAlchemy's URL)
//                                            → storage_type sql on file.db, a relative file resolved against the
//                                              config file's folder (as every other path), so two configs in one
//                                              folder share it; postgresql:// stays a URL. A queue in mode both
//                                              stays the in-process queue (Trinity's backup copy is not written)
//   explorer.runner_num (Trinity's deprecated total) → runner_per_model = ⌈runner_num / engine_num⌉
//   algorithm.optimizer.warmup_style         → lr_scheduler_type (its older name)
//   algorithm.policy_loss_fn_args.use_token_level_loss_in_sft true | false → sft_loss_agg_mode token-mean |
//                                              seq-mean-token-mean (the mix losses' SFT term)
//   explorer.rollout_model.dtype             → model.dtype (the embedded engine's dtype; the trainer computes in it
//                                              too unless trainer.param_dtype is set)
//   trainer.trainer_config's knobs that mean something here (micro-batch, gradient clipping and checkpointing, the
//                                              actor's optimizer) → their keys (./trinity-trainer-config.ts)
//   model.temperature, model.enable_thinking, <taskset>.rollout_args.n, explorer.max_inflight_batches
//                                            → ./trinity-rollout-mappings.ts
//   buffer.trainer_input.sft_warmup_dataset as mix's expert data (Trinity 0.2) → auxiliary_buffers
//                                              (./trinity-mix-mappings.ts)
//   the older mix form's algorithm.mu, buffer.expert_data_ratio, buffer.explore_batch_size; model.max_token_len
//                                            → today's keys (./trinity-older-forms.ts)
//   Trinity 0.1's form (data:, a flat explorer section) → today's keys (./trinity-v01-form.ts)
//   explorer.eval_interval, experience_buffer.use_priority_queue → as Trinity adjusts them (./trinity-adjustments.ts)
//   a taskset's workflow_args that its workflow drops, as Trinity's did (simple_mm_workflow) → the ignored block
//                                              (./trinity-workflow-args.ts)
//   cluster.node_num, cluster.gpu_per_node   → taken out here; the placement they imply is checked against the
//                                              machine when the run is checked (./trinity-report.ts)
//
// Keys of the stage sections are mapped in each stage too. cluster.ray_address and the other Ray/vLLM/veRL knobs
// are the ignored keys of src/rft/config/ignored-keys.ts, taken out after these.
import { isAbsolute, resolve } from 'node:path';
import type { ConfigProblem } from '../../config/errors.js';
import { type IgnoredSetting, takeIgnoredKeys } from '../../config/ignored-keys.js';
import { pathsMatching } from '../../config/refusals.js';
import { describeValue, getIn, isMapping, joinPath, type Segment, type Tree } from '../../config/source.js';
import { DTYPES } from '../../config/value-schemas.js';
import {
  mapMaxInflightBatches,
  mapModelEnableThinking,
  mapModelTemperature,
  mapRolloutN,
  writtenRepeatTimes,
} from './trinity-rollout-mappings.js';
import { mapMixExpertData } from './trinity-mix-mappings.js';
import { mapOlderForms } from './trinity-older-forms.js';
import { mapTrinityV01Form } from './trinity-v01-form.js';
import { mapTrinityAdjustments } from './trinity-adjustments.js';
import { mapTrainerConfig } from './trinity-trainer-config.js';
import { takeDroppedWorkflowArgs } from './trinity-workflow-args.js';

/** One mapped key: where it was written, the value, and what it became (null: decided once the run is resolved). */
export interface MappedSetting {
  readonly path: string;
  readonly value: unknown;
  readonly to: string | null;
}

/** cluster.node_num / gpu_per_node as written (null: not written; Trinity's gpu_per_node 0: the GPUs there are). */
export interface ClusterRequest {
  readonly node_num: number | null;
  readonly gpu_per_node: number | null;
}

/** What a config written for Trinity-RFT carried that this backend ignores or maps (Config.trinity_keys). */
export interface TrinityKeys {
  readonly ignored: readonly IgnoredSetting[];
  readonly mapped: readonly MappedSetting[];
  readonly cluster: ClusterRequest | null;
}

export const NO_TRINITY_KEYS: TrinityKeys = { ignored: [], mapped: [], cluster: null };

export interface TrinityKeyOptions {
  /** The config file's folder: relative sqlite:/// files resolve against it. */
  baseDir: string;
}

/** Rewrites the mapped keys and takes out the ignored ones (in place); every problem goes to `problems`. */
export function takeTrinityKeys(tree: Tree, options: TrinityKeyOptions, problems: ConfigProblem[]): TrinityKeys {
  const mapped: MappedSetting[] = [];
  const dropped: IgnoredSetting[] = [];
  const problem = (path: string, message: string) => problems.push({ path, message });
  mapTrinityV01Form(tree, mapped, problem);
  const stages = Array.isArray(tree.stages) ? tree.stages : [];
  const roots: [Segment[], unknown][] = [[[], tree], ...stages.map((s, i): [Segment[], unknown] => [['stages', i], s])];
  for (const [root, node] of roots) {
    if (!isMapping(node)) continue;
    const at = (path: readonly Segment[]) => joinPath([...root, ...path]);
    mapOlderForms(node, writtenRepeatTimes(tree, node), at, mapped, problem);
    mapSyncMethod(node, at, mapped);
    mapEngineTypes(node, at, mapped);
    const mode = node.mode ?? tree.mode ?? 'both';
    mapDatabaseUrl(node, at, { baseDir: options.baseDir, inOneProcess: mode === 'both' || mode === 'colocate' }, mapped);
    mapRunnerNum(node, at, mapped, problem);
    mapWarmupStyle(node, at, mapped, problem);
    mapTokenLevelSftLoss(node, at, mapped, problem);
    mapped.push(...mapTrainerConfig(node, at, problem));
    mapRolloutN(node, at, mapped, problem, writtenRepeatTimes(tree, node));
    mapMaxInflightBatches(node, at, mapped, problem);
    mapMixExpertData(node, node.algorithm ?? tree.algorithm, at, mapped, problem);
    mapped.push(...mapTrinityAdjustments(node, tree, at, problem));
    dropped.push(...takeDroppedWorkflowArgs(node, at));
  }
  mapRolloutDtype(tree, mapped, problem);
  mapModelTemperature(tree, mapped, problem);
  mapModelEnableThinking(tree, mapped, problem);
  const cluster = takeCluster(tree, problem);
  const ignored = [...takeIgnoredKeys(tree, problems), ...dropped];
  return { ignored, mapped, cluster };
}

function mapSyncMethod(node: Tree, at: (path: readonly Segment[]) => string, mapped: MappedSetting[]): void {
  const sync = node.synchronizer;
  if (!isMapping(sync) || typeof sync.sync_method !== 'string') return;
  const value = sync.sync_method;
  const lower = value.toLowerCase();
  const path = at(['synchronizer', 'sync_method']);
  if (lower === 'nccl' || lower === 'online') {
    delete sync.sync_method; // derived from the placement (sync/config.ts resolveSynchronizer)
    mapped.push({ path, value, to: null });
  } else if (lower === 'offline') {
    sync.sync_method = 'checkpoint';
    mapped.push({ path, value, to: "checkpoint (Trinity's alias of checkpoint)" });
  } else if (lower === 'memory' || lower === 'checkpoint') sync.sync_method = lower; // Trinity's enum reads any case
}

const ENGINE_PATTERNS = [
  ['explorer', 'rollout_model'],
  ['explorer', 'auxiliary_models', '*'],
] as const;

function mapEngineTypes(node: Tree, at: (path: readonly Segment[]) => string, mapped: MappedSetting[]): void {
  for (const pattern of ENGINE_PATTERNS) {
    for (const [path, model] of pathsMatching(node, [...pattern])) {
      if (!isMapping(model) || typeof model.engine_type !== 'string') continue;
      const value = model.engine_type;
      if (!/^(vllm|sglang)/i.test(value)) continue;
      const external = model.base_url !== undefined && model.base_url !== null;
      model.engine_type = external ? 'openai' : 'embedded';
      mapped.push({
        path: at([...path, 'engine_type']),
        value,
        to: external
          ? 'openai (the OpenAI-compatible server(s) at base_url)'
          : 'embedded (the engine built in, on threads of this process or, with engine_process, processes of its own)',
      });
    }
  }
}

const SQLITE_URL = /^sqlite:\/\/\/(.+)$/;

/**
 * An experience buffer on a database URL. Trinity's queue is a Ray actor that every process of the run reaches and
 * that keeps a backup copy of the experiences in the database at `path`. Here, where explorer and trainer share one
 * process (mode both) the in-process queue is that actor's counterpart and the copy is not written (a leftover file
 * of an earlier run cannot leak into this one); in separate processes the SQL buffer on that database is what they share.
 */
function mapDatabaseUrl(
  node: Tree,
  at: (path: readonly Segment[]) => string,
  { baseDir, inOneProcess }: { baseDir: string; inOneProcess: boolean },
  mapped: MappedSetting[],
): void {
  const bufferPath = ['buffer', 'trainer_input', 'experience_buffer'];
  const buffer = getIn(node, bufferPath);
  if (!isMapping(buffer) || typeof buffer.path !== 'string') return;
  const storage = buffer.storage_type ?? 'queue';
  if (storage !== 'queue' && storage !== 'sql') return;
  const sqlite = SQLITE_URL.exec(buffer.path);
  const postgres = /^postgres(ql)?:\/\//.test(buffer.path);
  if (sqlite === null && !(postgres && storage === 'queue')) return;
  const url = buffer.path;
  // SQLAlchemy: sqlite:///rel.db is relative, sqlite:////abs.db absolute
  const file =
    sqlite === null ? null : isAbsolute(sqlite[1] as string) ? (sqlite[1] as string) : resolve(baseDir, sqlite[1] as string);
  const where = file ?? 'that PostgreSQL database';
  if (storage === 'queue' && inOneProcess) {
    delete buffer.path;
    mapped.push({
      path: at([...bufferPath, 'path']),
      value: url,
      to:
        "not used: mode both hands experiences over in this process's queue (Trinity's backup copy of them in that " +
        'database is not written; storage_type sql with a file path keeps them in SQLite)',
    });
    return;
  }
  if (storage === 'queue') {
    buffer.storage_type = 'sql';
    mapped.push({
      path: at([...bufferPath, 'storage_type']),
      value: storage,
      to:
        `sql on ${where} (Trinity's queue keeps a copy of the experiences in that database; the SQL buffer here passes ` +
        'them through it, so the processes that share the path share the buffer)',
    });
  }
  if (file !== null) {
    buffer.path = file;
    mapped.push({
      path: at([...bufferPath, 'path']),
      value: url,
      to: `${file} (the SQLite file, relative to the config's folder)`,
    });
  }
}

function mapRunnerNum(
  node: Tree,
  at: (path: readonly Segment[]) => string,
  mapped: MappedSetting[],
  problem: (path: string, message: string) => void,
): void {
  const explorer = node.explorer;
  if (!isMapping(explorer) || explorer.runner_num === undefined || explorer.runner_num === null) return;
  const value = explorer.runner_num;
  delete explorer.runner_num;
  const path = at(['explorer', 'runner_num']);
  const runners = typeof value === 'string' && /^\s*\d+\s*$/.test(value) ? Number(value) : value;
  if (typeof runners !== 'number' || !Number.isInteger(runners) || runners < 1) {
    problem(path, `expected an integer >= 1, got ${describeValue(value)}`);
    return;
  }
  if (explorer.runner_per_model !== undefined && explorer.runner_per_model !== null) {
    problem(path, "is Trinity's older form of explorer.runner_per_model, which is set too: remove one");
    return;
  }
  const rollout = isMapping(explorer.rollout_model) ? explorer.rollout_model : {};
  const engines = Number(rollout.engine_num ?? 1);
  const perModel = Math.ceil(runners / (Number.isInteger(engines) && engines > 0 ? engines : 1));
  explorer.runner_per_model = perModel;
  mapped.push({
    path,
    value,
    to: `explorer.runner_per_model ${perModel} (runner_num is the total over the ${engines} engine(s) of engine_num)`,
  });
}

/** algorithm.optimizer.warmup_style: Trinity's older name of lr_scheduler_type. */
function mapWarmupStyle(
  node: Tree,
  at: (path: readonly Segment[]) => string,
  mapped: MappedSetting[],
  problem: (path: string, message: string) => void,
): void {
  const optimizer = getIn(node, ['algorithm', 'optimizer']);
  if (!isMapping(optimizer) || optimizer.warmup_style === undefined || optimizer.warmup_style === null) return;
  const value = optimizer.warmup_style;
  delete optimizer.warmup_style;
  const path = at(['algorithm', 'optimizer', 'warmup_style']);
  const written = optimizer.lr_scheduler_type;
  if (written !== undefined && written !== null && written !== value) {
    problem(path, `is Trinity's older name of lr_scheduler_type, which is set to ${describeValue(written)}: remove one`);
    return;
  }
  optimizer.lr_scheduler_type = value; // the schema checks the name
  mapped.push({ path, value, to: `algorithm.optimizer.lr_scheduler_type ${String(value)} (its older name)` });
}

/** policy_loss_fn_args.use_token_level_loss_in_sft (Trinity's mix losses): sft_loss_agg_mode's older switch. */
function mapTokenLevelSftLoss(
  node: Tree,
  at: (path: readonly Segment[]) => string,
  mapped: MappedSetting[],
  problem: (path: string, message: string) => void,
): void {
  const args = getIn(node, ['algorithm', 'policy_loss_fn_args']);
  if (!isMapping(args) || args.use_token_level_loss_in_sft === undefined || args.use_token_level_loss_in_sft === null) return;
  const value = args.use_token_level_loss_in_sft;
  delete args.use_token_level_loss_in_sft;
  const path = at(['algorithm', 'policy_loss_fn_args', 'use_token_level_loss_in_sft']);
  const flag = value === 'true' ? true : value === 'false' ? false : value;
  if (typeof flag !== 'boolean') {
    problem(path, `expected a boolean (true or false), got ${describeValue(value)}`);
    return;
  }
  const mode = flag ? 'token-mean' : 'seq-mean-token-mean';
  if (args.sft_loss_agg_mode !== undefined && args.sft_loss_agg_mode !== null && args.sft_loss_agg_mode !== mode) {
    problem(path, `means sft_loss_agg_mode ${mode}, which is set to ${describeValue(args.sft_loss_agg_mode)}: remove one`);
    return;
  }
  args.sft_loss_agg_mode = mode;
  mapped.push({ path, value, to: `algorithm.policy_loss_fn_args.sft_loss_agg_mode ${mode}` });
}

function mapRolloutDtype(tree: Tree, mapped: MappedSetting[], problem: (path: string, message: string) => void): void {
  const rollout = getIn(tree, ['explorer', 'rollout_model']);
  if (!isMapping(rollout) || rollout.dtype === undefined || rollout.dtype === null) return;
  const value = rollout.dtype;
  delete rollout.dtype;
  const path = 'explorer.rollout_model.dtype';
  const dtype = typeof value === 'string' ? value.toLowerCase() : value;
  const model = isMapping(tree.model) ? tree.model : null;
  const written = model?.dtype ?? null;
  if (dtype === 'auto') {
    mapped.push({ path, value, to: `model.dtype (auto: ${written ?? 'its default, bfloat16'})` });
    return;
  }
  if (typeof dtype !== 'string' || !(DTYPES as readonly string[]).includes(dtype)) {
    problem(path, `got ${describeValue(value)}: the embedded engine runs in model.dtype, one of ${DTYPES.join(', ')} (or auto)`);
    return;
  }
  if (written !== null && written !== dtype) {
    problem(path, `is ${dtype} but model.dtype is ${String(written)}: the embedded engine runs in model.dtype; remove one`);
    return;
  }
  if (model !== null) model.dtype = dtype;
  mapped.push({
    path,
    value,
    to: `model.dtype ${dtype} (the embedded engine's dtype; the trainer computes in it too unless trainer.param_dtype is set)`,
  });
}

function takeCluster(tree: Tree, problem: (path: string, message: string) => void): ClusterRequest | null {
  const cluster = tree.cluster;
  if (!isMapping(cluster)) return null;
  const read = (key: 'node_num' | 'gpu_per_node', min: number): number | null => {
    const value = cluster[key];
    delete cluster[key];
    if (value === undefined || value === null) return null;
    const n = typeof value === 'string' && /^\s*\d+\s*$/.test(value) ? Number(value) : value;
    if (typeof n === 'number' && Number.isInteger(n) && n >= min && n <= 1_000_000) return n;
    problem(`cluster.${key}`, `expected an integer >= ${min}, got ${describeValue(value)}`);
    return null;
  };
  const request = { node_num: read('node_num', 1), gpu_per_node: read('gpu_per_node', 0) };
  return request.node_num === null && request.gpu_per_node === null ? null : request;
}
