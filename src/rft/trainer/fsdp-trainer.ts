// The trainer worker's fully sharded policy (init.distributed.strategy 'fsdp', trainer.trainer_strategy fsdp/fsdp2 on
// several ranks; ./fsdp.ts): what ./trainer-worker-main.ts does differently for it.
//   - at start, each rank builds the model weightless and reads only its shard of every unit from the model folder,
//     in the master dtype (./fsdp-load.ts); AdamW runs over the shards (./fsdp-optimizer.ts); resuming, it then reads
//     its part of the checkpoint (./fsdp-resume.ts)
//   - the step's collectives are ./fsdp-passes.ts's (no parameter broadcast: every rank sharded the same files)
//   - a checkpoint is sharded: every rank writes its shards and their AdamW state (./fsdp-checkpoint.ts), which a run
//     on any number of ranks (or one process) resumes from; a weights folder (the HF export) is consolidated: every
//     rank all-gathers the units one at a time and rank 0 writes the same files as one process
//   - a weight sync gathers every unit into rank 0's model (compute dtype) until endSync
//   - LoRA (model.lora): the frozen base is sharded (no gradients, no reductions) and the adapters are replicated on
//     every rank, trained as in data parallelism (their gradients summed, one AdamW each, broadcast from rank 0 at
//     start): adapters are small, a base is not. A checkpoint holds the adapter and its optimizer as without sharding
//     (rank 0's); a weight sync or a weights folder gathers the base and merges the adapters into it
import { CausalLM } from '../../model/index.js';
import type * as torch from '../../torch/index.js';
import type { ProcessGroup, Tensor } from '../../torch/index.js';
import type { ResolvedAlgorithm } from '../algorithm/presets.js';
import { bytesOf, FullyShardedModel } from './fsdp.js';
import { folderSource } from './fsdp-load.js';
import { ShardedAdamW } from './fsdp-optimizer.js';
import type { CheckpointReads } from './fsdp-resume.js';
import type { TrainerInit } from './trainer.js';

export interface ShardedPolicy {
  sharded: FullyShardedModel;
  /** AdamW over the shards; null under LoRA (the base is frozen; the adapters' AdamW is an ordinary one). */
  optimizer: ShardedAdamW | null;
}

/** Whether this trainer shards its policy: strategy fsdp on more than one rank (on one, it is one process). */
export function shardsPolicy(init: TrainerInit): boolean {
  const d = init.distributed ?? null;
  return d !== null && d.worldSize > 1 && d.strategy === 'fsdp';
}

/** What fully sharded training does not cover yet, as errors naming the setting (the config's rules say the same). */
export function checkShardable(init: TrainerInit, algorithm: ResolvedAlgorithm): void {
  const problems: string[] = [];
  if (!init.gradientCheckpointing)
    problems.push(
      'it needs trainer.gradient_checkpointing true: a layer is gathered again for its backward, which recomputes it',
    );
  if (algorithm.useCritic) problems.push("a critic (advantage_fn 'ppo') is not implemented under it");
  if (problems.length > 0) throw new Error(`trainer.trainer_strategy fsdp: ${problems.join('; ')}`);
}

/**
 * Shards the policy of model folder `folder.dir` over the ranks, reading only this rank's ranges of it
 * (./fsdp-load.ts; `folder.reads` counts the bytes; none of the values when `folder.overwritten`: a sharded
 * checkpoint's shards replace them), in the master dtype (LoRA: the base, frozen, in the compute dtype), and makes
 * the AdamW of the shards; `model` (the compute copy, built weightless) reads placeholders from now on.
 */
export function shardPolicy(
  model: CausalLM,
  folder: { dir: string; reads: CheckpointReads; overwritten: boolean },
  init: TrainerInit,
  adamW: torch.AdamWOptions & { weightDecay: number },
): ShardedPolicy {
  const d = init.distributed as NonNullable<TrainerInit['distributed']>;
  const frozen = init.lora !== null;
  const dtype = frozen ? init.dtype : (init.masterDtype ?? init.dtype);
  const { dir, reads, overwritten } = folder;
  const source = folderSource(dir, model, { dtype, device: init.device ?? 'cpu', overwritten }, reads);
  const sharded = new FullyShardedModel(model, source, {
    rank: d.rank,
    worldSize: d.worldSize,
    computeDtype: init.dtype,
    frozen,
  });
  return { sharded, optimizer: frozen ? null : new ShardedAdamW(sharded, adamW) };
}

/**
 * This rank's resident state in bytes (TrainerClient.shardedStateBytes): the shards' (./fsdp.ts stateBytes, whose
 * peaks restart now), `optimizer`'s state (LoRA: the adapters' AdamW, replicated), the whole policy's parameter bytes.
 */
export function residentStateBytes(policy: ShardedPolicy, optimizer: torch.Optimizer) {
  const bytes = policy.sharded.stateBytes();
  policy.sharded.resetPeak();
  return {
    ...bytes,
    optimizer:
      policy.optimizer?.localStateBytes() ?? Object.values(optimizer.stateDict().tensors).reduce((n, t) => n + bytesOf(t), 0),
    wholeParameters: policy.sharded.wholeParameterBytes(),
    units: policy.sharded.units.length,
  };
}

/** The shards by a name each, for a check of the weights a rank resumed with. */
export function shardsByName(policy: ShardedPolicy): Map<string, Tensor> {
  return new Map(policy.sharded.shards.map((t, i) => [`shard ${i} of rank ${policy.sharded.rank}`, t]));
}

/** Every rank: the whole policy in the master dtype as a model (rank 0 writes it; the others dispose it at once). */
export async function consolidatedPolicy(policy: ShardedPolicy, group: ProcessGroup): Promise<CausalLM> {
  const weights = await policy.sharded.consolidate(group);
  const model = policy.sharded.model;
  return new CausalLM(model.config, weights, { sourceDir: model.sourceDir });
}

/**
 * A rank other than 0: takes part in consolidatedPolicy() on rank 0 (the same collectives), dropping each unit's
 * weights as they arrive, so it holds one unit at a time.
 */
export async function joinConsolidation(policy: ShardedPolicy, group: ProcessGroup): Promise<void> {
  for (const unit of policy.sharded.units) {
    const weights = await policy.sharded.gatherTensors(unit.index, group, (c) => c.shard, policy.sharded.masterDtype);
    for (const t of weights.values()) t.dispose();
  }
}
