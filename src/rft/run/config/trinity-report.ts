// What a config written for Trinity-RFT carried, as `trinity config check` and `trinity run` print it once: the
// "ignored on this backend" block (src/rft/config/ignored-keys.ts) and the "mapped" block (./trinity-mappings.ts),
// with the choices that depend on the resolved run filled in — the weight channel sync_method nccl became, and the
// placement cluster.{node_num, gpu_per_node} implies on this machine (or a problem, when it asks for more GPUs or
// machines than there are, or than one process here places).
//
//   ignored on this backend (Trinity keys for vLLM/veRL/Ray that have no counterpart here):
//     explorer.rollout_model.gpu_memory_utilization=0.7 (vLLM's KV-cache share of GPU memory: ...)
//   mapped (Trinity keys read in this backend's terms):
//     synchronizer.sync_method=nccl -> memory (...)
import type { ConfigProblem } from '../../config/errors.js';
import { showSetting } from '../../config/ignored-keys.js';
import type { Config, StageConfig } from './schema.js';
import type { ClusterRequest, MappedSetting, TrinityKeys } from './trinity-mappings.js';

export const IGNORED_HEADER = 'ignored on this backend (Trinity keys for vLLM/veRL/Ray that have no counterpart here):';
export const MAPPED_HEADER = "mapped (Trinity keys read in this backend's terms):";

/** The machine a run is placed on: its visible GPUs and the data-parallel ranks it is launched with. */
export interface Machine {
  gpus: number;
  /** WORLD_SIZE of a torchrun launch; 1 for one process. */
  worldSize: number;
}

/** The weight channel a stage resolved to, and why (sync_method nccl: the fastest the placement allows). */
function weightChannel(stage: StageConfig): string {
  const rollout = stage.explorer.rollout_model;
  if (stage.synchronizer.sync_method === 'memory')
    return 'memory (the trainer and the embedded engine share this process, mode both: weights are handed over in memory)';
  if (stage.mode !== 'both')
    return `checkpoint (mode ${stage.mode}: the trainer and the explorer are separate processes, which meet in checkpoint folders)`;
  if (rollout.engine_type === 'openai')
    return 'checkpoint (the rollout model is an external server, engine_type openai: it reloads weights from disk)';
  return 'checkpoint (the engines run in processes of their own, engine_process: each reloads weights from disk)';
}

/** The mapped records with the choices made once the run was resolved (sync_method: the weight channel). */
export function finishMappings(
  mapped: readonly MappedSetting[],
  config: Config,
  stages: readonly StageConfig[],
): MappedSetting[] {
  return mapped.map((m) => {
    if (m.to !== null) return m;
    const index = /^stages\.(\d+)\./.exec(m.path);
    const concerned = index === null ? stages : [config.stages[Number(index[1])] as StageConfig];
    const choices = concerned.map((s) => ({ name: s.stage_name, channel: weightChannel(s) }));
    const distinct = new Set(choices.map((c) => c.channel));
    const to = distinct.size === 1 ? [...distinct][0] : choices.map((c) => `in stage '${c.name}': ${c.channel}`).join('; ');
    return { ...m, to: to ?? '' };
  });
}

/** The most devices one process of this config places: the trainer's ranks and the embedded engines' device. */
function devicesPlaced(stages: readonly StageConfig[], worldSize: number): number {
  return Math.max(
    ...stages.map((stage) => {
      const trains = stage.mode === 'both' || stage.mode === 'train';
      const embedded = stage.mode !== 'train' && stage.explorer.rollout_model.engine_type === 'embedded';
      return (trains ? worldSize : 0) + (embedded ? 1 : 0);
    }),
  );
}

const MULTI_PROCESS =
  'a run here uses more GPUs as more processes sharing one config and a buffer: data-parallel trainer ranks ' +
  '(trinity run --nproc-per-node N, or torchrun) and explorer processes (mode explore, each with its explorer.name); ' +
  'docs/distributed.md';

/** The placement cluster.* implies on `machine`: one line per key written, or the problems. */
export function clusterPlacement(
  cluster: ClusterRequest | null,
  stages: readonly StageConfig[],
  machine: Machine,
): { lines: string[]; problems: ConfigProblem[] } {
  const lines: string[] = [];
  const problems: ConfigProblem[] = [];
  if (cluster === null) return { lines, problems };
  const { node_num: nodes, gpu_per_node: gpus } = cluster;
  if (nodes !== null) {
    if (nodes > 1)
      problems.push({
        path: 'cluster.node_num',
        message: `(${nodes}) one config here starts the processes of one machine; ${MULTI_PROCESS}: set 1 and start each machine's processes there`,
      });
    else lines.push(`cluster.node_num=${nodes} -> this machine`);
  }
  if (gpus === null) return { lines, problems };
  const placed = devicesPlaced(stages, machine.worldSize);
  if (machine.gpus === 0) {
    lines.push(`cluster.gpu_per_node=${gpus} -> no GPU is visible here: the trainer and the explorer run on the CPU`);
  } else if (gpus > machine.gpus) {
    problems.push({
      path: 'cluster.gpu_per_node',
      message: `(${gpus}) asks for more GPUs than the ${machine.gpus} visible here (CUDA_VISIBLE_DEVICES): set ${machine.gpus} or less, or 0`,
    });
  } else if (gpus > placed) {
    problems.push({
      path: 'cluster.gpu_per_node',
      message:
        `(${gpus}) one process of this config places ${placed} device(s) (the trainer${machine.worldSize > 1 ? "'s ranks" : ''} ` +
        `and the embedded engines: trainer.device, explorer.rollout_model.device); ${MULTI_PROCESS}: set ${placed} or 0`,
    });
  } else {
    const used = gpus === 0 ? `the ${machine.gpus} visible GPU(s)` : `${gpus} of the ${machine.gpus} visible GPU(s)`;
    lines.push(
      `cluster.gpu_per_node=${gpus} -> ${used}, as trainer.device and explorer.rollout_model.device place the trainer and ` +
        "the engines (auto: cuda:<local rank>; each stage's placement line shows it)",
    );
  }
  return { lines, problems };
}

/** Whether a stage shards its trainer (trainer_strategy fsdp/fsdp2) or asks to offload the shards. */
const shardingWritten = (stage: StageConfig) =>
  stage.trainer.trainer_strategy === 'fsdp' ||
  stage.trainer.trainer_strategy === 'fsdp2' ||
  stage.trainer.param_offload ||
  stage.trainer.optimizer_offload;

/**
 * What trainer.trainer_strategy fsdp/fsdp2 and trainer.{param,optimizer}_offload do on `machine`: one line per key
 * and stage that sets them, or the problems (offload on a GPU is not implemented). On the CPU the shards already live
 * in host memory, so offload changes nothing: said here, not silently.
 */
export function shardingPlacement(
  stages: readonly StageConfig[],
  machine: Machine,
): { lines: string[]; problems: ConfigProblem[] } {
  const lines: string[] = [];
  const problems: ConfigProblem[] = [];
  const many = stages.length > 1;
  for (const [i, stage] of stages.entries()) {
    if (!shardingWritten(stage) || (stage.mode !== 'both' && stage.mode !== 'train')) continue;
    const at = many ? ` (stage '${stage.stage_name}')` : '';
    const { trainer_strategy: strategy } = stage.trainer;
    if (strategy === 'fsdp' || strategy === 'fsdp2')
      lines.push(
        machine.worldSize > 1
          ? `trainer.trainer_strategy=${strategy}${at} -> ` +
              (stage.model.lora === null
                ? "the policy's parameters, gradients and AdamW state sharded over "
                : 'the frozen base model sharded (the LoRA adapters replicated, their gradients summed) over ') +
              `the ${machine.worldSize} trainer ranks, each layer gathered while it runs`
          : `trainer.trainer_strategy=${strategy}${at} -> one trainer rank: nothing to shard, the whole policy in one process`,
      );
    const onGpu = stage.trainer.device.startsWith('cuda') || (stage.trainer.device === 'auto' && machine.gpus > 0);
    for (const key of ['param_offload', 'optimizer_offload'] as const) {
      if (!stage.trainer[key]) continue;
      if (onGpu)
        problems.push({
          path: `${many ? `stages.${i}.` : ''}trainer.${key}`,
          message:
            'offloading the shards from a GPU to host memory is not implemented (the trainer runs on a GPU here): remove it',
        });
      else
        lines.push(
          `trainer.${key}=true${at} -> nothing: the trainer runs on the CPU, where the shards and the optimizer state already live in host memory`,
        );
    }
  }
  return { lines, problems };
}

/** The two blocks, one line per key (none when the config carried no Trinity-only key). */
export function trinityKeyLines(keys: TrinityKeys, clusterLines: readonly string[]): string[] {
  const lines: string[] = [];
  if (keys.ignored.length > 0) {
    lines.push(IGNORED_HEADER, ...keys.ignored.map((k) => `  ${showSetting(k.path, k.value)} (${k.why})`));
  }
  const mapped = [
    ...keys.mapped.map((m) => `  ${showSetting(m.path, m.value)} -> ${m.to ?? ''}`),
    ...clusterLines.map((l) => `  ${l}`),
  ];
  if (mapped.length > 0) lines.push(MAPPED_HEADER, ...mapped);
  return lines;
}

/** This machine: its visible GPUs (libtorch's count) and WORLD_SIZE. */
export async function thisMachine(env: NodeJS.ProcessEnv = process.env): Promise<Machine> {
  const { cuda } = await import('../../../torch/index.js');
  const worldSize = Number(env.WORLD_SIZE ?? 1);
  return { gpus: cuda.deviceCount(), worldSize: Number.isInteger(worldSize) && worldSize > 0 ? worldSize : 1 };
}

/** The blocks for `config` on this machine (libtorch is asked for the GPUs only when cluster.* was written). */
export async function describeTrinityKeys(
  config: Config,
  stages: readonly StageConfig[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<string[]> {
  const keys = config.trinity_keys;
  const sharding = stages.some(shardingWritten);
  const machine = keys.cluster !== null || sharding ? await thisMachine(env) : null;
  const cluster = keys.cluster === null || machine === null ? [] : clusterPlacement(keys.cluster, stages, machine).lines;
  const sharded = machine === null ? [] : shardingPlacement(stages, machine).lines;
  return trinityKeyLines(keys, [...cluster, ...sharded]);
}
