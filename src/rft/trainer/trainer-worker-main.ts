// The worker side of TrainerClient (./trainer.ts): the policy, its optimizer and LR schedule, the reference model
// and critic, and the train step, all on this thread — so the main event loop keeps driving the explorer.
// A checkpoint holds everything later steps depend on, so a resumed trainer is the trainer that was interrupted:
// the policy (or adapter) and its optimizer, the critic and its optimizer, the LR schedule's position and the train
// step's state (global step, adaptive KL coefficients), and the LoRA dropout stream's state (seeded from the run's
// seed; the only random numbers training draws), so a resumed run draws the masks the interrupted one would have.
//
// LoRA from an adapter folder (model.lora.path, or a resumed run's checkpoint): rank, alpha and target modules are
// the adapter's, so the run's LoRA settings must say the same where they are set (a difference is an error naming
// both values, never silently the adapter's; unset, null, they are the adapter's); dropout is a training setting and
// the run's applies (save() writes it).
//
// Data parallelism (init.distributed, see ./trainer.ts): the process group is created on this thread after the
// model is loaded, and rank 0's trainable parameters are broadcast to the others (as DDP does), so every rank starts
// from the same weights. Each stage's ranks meet over a store of that stage (./data-parallel.ts joinStageGroup). A
// follower that fails leaves the group at once, so rank 0's next collective fails instead of waiting out its timeout.
// Rank 0's close() ends the followers' follow(): with stop when its stage succeeded, with failed and its error message
// when it did not, so that every rank ends the run at once — unless rank 0 is inside a step (one failed part way): the
// followers may be in any of its collectives, so rank 0 sends nothing and leaves, and theirs fails.
import { type CausalLM, isVisionLanguageFolder, type LoraModel, type VisionLanguageModel } from '../../model/index.js';
import * as torch from '../../torch/index.js';
import { DistributedError, type ProcessGroup, type Store } from '../../torch/index.js';
import { Critic } from '../algorithm/critic.js';
import { loadAlgorithmPlugins } from '../algorithm/plugins.js';
import { type ResolvedAlgorithm, resolveAlgorithm } from '../algorithm/presets.js';
import { checkFiniteWeights, type LoadedCheckpoint, latestCheckpoint } from '../checkpoint.js';
import { loadCriticState, loadOptimizerState, saveCheckpoint } from '../checkpoint.js';
import type { Experience } from '../experience.js';
import { trainerAdapter } from './adapter-settings.js';
import { type SavedTrainerState, savedTrainerState } from './saved-trainer-state.js';
import { trainerLrSchedule } from './lr-schedule.js';
import { ZeroAdamW } from './zero.js';
import {
  broadcastParameters,
  type GroupStepCollectives,
  groupCollectives,
  overlapPlan,
  joinDeviceGroup,
  joinStageGroup,
  needsDeviceGroup,
  RankZeroFailedError,
  receiveCommand,
  sendCommand,
} from './data-parallel.js';
import {
  checkShardable,
  consolidatedPolicy,
  joinConsolidation,
  residentStateBytes,
  type ShardedPolicy,
  shardPolicy,
  shardsByName,
  shardsPolicy,
} from './fsdp-trainer.js';
import { type ShardedPasses, shardedCollectives } from './fsdp-passes.js';
import { saveShards, saveShardsTogether } from './fsdp-checkpoint.js';
import { weightlessModel } from './fsdp-load.js';
import { CheckpointReads, copyWeightsInto, readShardedCheckpoint, restoreOptimizer, resumeShardedPolicy } from './fsdp-resume.js';
import { MasterWeights } from './master-weights.js';
import type { DistributedOutcome, TrainerInit } from './trainer.js';
import { frozenModelReference, loraReference, type ReferencePolicy } from './reference-policy.js';
import { pinTrainerThreads } from './trainer-threads.js';
import { TrainStep, type TrainStepMetrics } from './train-step.js';
import { loadMasterPolicy, loadPolicy, type TrainerVision, withRowImages } from './vision-rows.js';

interface TrainerState {
  /** The policy the step computes with (in init.dtype); a vision-language policy's language model. */
  model: CausalLM;
  /** A vision-language policy (./vision-rows.ts): the whole model (vision tower included) and its step's images. */
  vision: TrainerVision | null;
  /** Mixed precision: the policy's master weights (init.masterDtype), which the optimizer updates and checkpoints hold. */
  master: { model: CausalLM | VisionLanguageModel; weights: MasterWeights } | null;
  lora: LoraModel | null;
  optimizer: torch.AdamW;
  scheduler: torch.LrScheduler;
  reference: (ReferencePolicy & { dispose?: () => void }) | null;
  critic: { critic: Critic; optimizer: torch.AdamW } | null;
  trainStep: TrainStep;
  algorithm: ResolvedAlgorithm;
  init: TrainerInit;
  /** A fully sharded policy (./fsdp-trainer.ts): its shards and their optimizer (also `optimizer`). */
  sharded: ShardedPolicy | null;
}

/** This rank's place in a data-parallel trainer. */
interface Ranks {
  group: ProcessGroup;
  /** The stage's store (the group's rendezvous); closed after the group. */
  store: Store;
  /** A CUDA trainer's NCCL group for its device tensors' collectives (./data-parallel.ts joinDeviceGroup), and its store. */
  device: { group: ProcessGroup; store: Store } | null;
  collectives: GroupStepCollectives;
  /** A fully sharded policy's pass schedule (its gathers outside a step: a weight sync). */
  passes: ShardedPasses | null;
  commandTimeoutMs: number;
  /** A follower's follow() loop while it runs. */
  following: Promise<unknown> | null;
  /**
   * Rank 0 sent a step whose collectives have not all completed (it is running, or failed part way): the followers
   * may be in any of its collectives, where a command header would meet the wrong one.
   */
  midStep: boolean;
}

let state: TrainerState | null = null;
let ranks: Ranks | null = null;

/**
 * Runs `fn`; a DistributedError or RankZeroFailedError becomes a result the client turns back into one (errors cross
 * as text).
 */
async function outcome<T>(fn: () => Promise<T>): Promise<DistributedOutcome<T>> {
  try {
    return { ok: true, value: await fn() };
  } catch (error) {
    if (error instanceof RankZeroFailedError) {
      const { rank, worldSize, rankZeroMessage } = error;
      return { ok: false, rankZeroFailed: { rank, worldSize, message: rankZeroMessage } };
    }
    if (!(error instanceof DistributedError)) throw error;
    const { message, collective, rank, worldSize, timedOut } = error;
    return { ok: false, error: { message, collective, rank, worldSize, timedOut } };
  }
}

/** Leaves the stage's group, then its store. */
async function leave(r: Ranks): Promise<void> {
  try {
    r.collectives.dispose();
    if (r.device !== null) {
      try {
        await r.device.group.destroy();
      } finally {
        await r.device.store.close();
      }
    }
    await r.group.destroy();
  } finally {
    await r.store.close();
  }
}

/** Checkpoints and weights are written by rank 0 alone. */
function rankZeroOnly(operation: string): void {
  if (ranks !== null && ranks.group.rank !== 0)
    throw new Error(
      `trainer rank ${ranks.group.rank} of ${ranks.group.worldSize}: ${operation} is a rank-0 operation (rank 0 alone ` +
        'writes checkpoints and publishes weights; the other ranks follow())',
    );
}

function takeStep(s: TrainerState, metrics: TrainStepMetrics): TrainStepMetrics {
  const lr = s.scheduler.step();
  return { ...metrics, lr_next: lr };
}

/** The rendezvous name of a trainer whose init.distributed names no stage. */
const DEFAULT_STAGE = 'trainer';

async function joinGroup(s: TrainerState, d: NonNullable<TrainerInit['distributed']>): Promise<Ranks> {
  const { group, store } = await joinStageGroup({
    rank: d.rank,
    worldSize: d.worldSize,
    masterAddr: d.masterAddr,
    masterPort: d.masterPort,
    timeoutMs: d.timeoutMs,
    stage: d.stage ?? DEFAULT_STAGE,
  });
  let device: Ranks['device'] = null;
  if (needsDeviceGroup(s.init.device ?? 'cpu')) {
    try {
      device = await joinDeviceGroup(store, d);
    } catch (error) {
      await group.destroy();
      await store.close();
      throw error;
    }
  }
  const base = groupCollectives(group, {
    ...(s.sharded === null ? { overlap: policyOverlap(s) } : {}),
    zero: s.optimizer instanceof ZeroAdamW ? s.optimizer : null,
    deviceGroup: device?.group ?? null,
    ...(d.bucketBytes === undefined ? {} : { bucketBytes: d.bucketBytes }),
  });
  const sharded =
    s.sharded === null
      ? null
      : shardedCollectives(base, s.sharded.sharded, device?.group ?? group, { prefetch: d.prefetch ?? true });
  const r: Ranks = {
    group,
    store,
    device,
    collectives: sharded ?? base,
    passes: sharded?.passes ?? null,
    commandTimeoutMs: d.commandTimeoutMs ?? d.timeoutMs,
    following: null,
    midStep: false,
  };
  try {
    // a sharded policy's shards differ by rank (each sharded the same files): only replicated tensors are broadcast
    // (LoRA's adapters are)
    const replicated = s.sharded === null || s.lora !== null;
    const policy = replicated ? s.trainStep.setup.optimizer.groups.flatMap((g) => g.params) : [];
    const trainable = [...policy, ...(s.critic?.critic.parameters() ?? [])];
    await broadcastParameters(group, trainable, device?.group ?? null);
    s.master?.weights.publish(); // the compute copy of rank 0's master weights
  } catch (error) {
    await leave(r);
    throw error;
  }
  return r;
}

/** The policy's gradients are summed while the last micro-batch's backward runs (./data-parallel.ts overlapPlan). */
function policyOverlap(s: TrainerState) {
  if (s.lora) return overlapPlan(s.lora.loraParameters());
  const master = s.master;
  if (master === null) return overlapPlan((s.vision?.model ?? s.model).parameters()); // a vision-language policy: its tower too
  const computeOf = new Map(master.weights.master.map((m, i) => [m, master.weights.compute[i] as torch.Tensor]));
  return overlapPlan(master.model.parameters(), (m) => computeOf.get(m) as torch.Tensor);
}

/** A follower's loop: the steps rank 0 sends, until stop. */
async function follow(s: TrainerState, r: Ranks): Promise<{ steps: number }> {
  let steps = 0;
  try {
    for (;;) {
      const command = await receiveCommand(r.group, r.commandTimeoutMs);
      if (command.kind === 'stop') return { steps };
      if (command.kind === 'failed') throw new RankZeroFailedError(r.group.rank, r.group.worldSize, command.message);
      if (command.kind === 'gatherParameters') {
        // rank 0 syncs weights: every unit of the sharded policy is all-gathered (rank 0 keeps its copy, not this rank)
        await r.passes?.joinGatherAll();
        continue;
      }
      if (command.kind === 'saveShards') {
        // rank 0 saves a checkpoint: every rank writes its own shards
        await saveShardsTogether(s.sharded?.sharded, s.sharded?.optimizer, command.dir, r.group);
        continue;
      }
      if (command.kind === 'consolidate') {
        // rank 0 writes a weights folder: the whole sharded policy
        if (s.sharded === null) throw new Error(`trainer rank ${r.group.rank}: rank 0 asked for a sharded policy's weights`);
        await joinConsolidation(s.sharded, policyGroup(r));
        continue;
      }
      if (command.kind === 'gatherOptimizer') {
        // rank 0 saves a checkpoint: the whole optimizer state, from every rank's shard
        if (!(s.optimizer instanceof ZeroAdamW))
          throw new Error(
            `trainer rank ${r.group.rank}: rank 0 asked for the ZeRO-1 optimizer state; this rank's is not sharded`,
          );
        await s.optimizer.gatherState(r.group, r.device?.group ?? r.group);
        continue;
      }
      const { experiences } = command; // a vision-language policy decodes the batch's images (./vision-rows.ts)
      takeStep(s, await withRowImages(s.vision, experiences, () => s.trainStep.runDistributed(experiences, r.collectives)));
      steps++;
    }
  } catch (error) {
    // out of step with rank 0 now (or rank 0 failed): leave the group so that rank 0 fails at once, not at its timeout
    await leave(r);
    throw error;
  }
}

/** Where a fully sharded policy's collectives run: the device group on a GPU, else the stage's group. */
function policyGroup(r: Ranks): ProcessGroup {
  return r.device?.group ?? r.group;
}

/**
 * Rank 0 of a fully sharded policy: the whole policy in the master dtype as a model (every rank joins), for a weights
 * folder; the caller disposes it. Null when the policy is not sharded, or under LoRA (the weights folder is the
 * gathered base with the adapters merged: gatherWholePolicy).
 */
async function consolidatedOnRankZero(s: TrainerState): Promise<CausalLM | null> {
  if (s.sharded === null || s.lora !== null || ranks === null) return null;
  await sendCommand(ranks.group, { kind: 'consolidate' });
  return consolidatedPolicy(s.sharded, policyGroup(ranks));
}

/** A sharded policy: every unit gathered into rank 0's model (every rank joins) until ranks.passes.releaseAll(). */
async function gatherWholePolicy(s: TrainerState): Promise<void> {
  if (s.sharded === null || !ranks?.passes) return;
  await sendCommand(ranks.group, { kind: 'gatherParameters' });
  await ranks.passes.gatherAll();
}

function current(): TrainerState {
  if (state === null) throw new Error('the trainer worker is not initialised');
  return state;
}

/** `reads` counts the bytes read of a sharded checkpoint (./fsdp-resume.ts), `modelReads` of the model folder (./fsdp-load.ts). */
function initialise(
  init: TrainerInit,
  checkpoint: LoadedCheckpoint | null,
  reads: CheckpointReads,
  modelReads: CheckpointReads,
): TrainerState {
  const algorithm = resolveAlgorithm(init.algorithm);
  if (shardsPolicy(init)) checkShardable(init, algorithm);
  const modelDir = checkpoint?.modelDir ?? init.modelPath;
  if (init.loraPath !== null && init.lora === null) {
    throw new Error(`model.lora path '${init.loraPath}': an adapter to start from needs LoRA training (lora settings)`);
  }
  const device = init.device ?? 'cpu';
  const onDevice = device === 'cpu' ? {} : { device };
  const { bitwiseOnPolicy } = init; // what a vision-language policy does not cover yet (./vision-rows.ts)
  const shardedRanks = shardsPolicy(init) ? (init.distributed?.worldSize ?? 1) : 0;
  const covered = { bitwiseOnPolicy, shardedRanks, useCritic: algorithm.useCritic };
  // a sharded policy: a weightless model and its shards of the folder (loadPolicy refuses a vision-language one)
  const fromFolderShards = shardsPolicy(init) && !isVisionLanguageFolder(modelDir);
  const { model, vision } = fromFolderShards
    ? { model: weightlessModel(modelDir, { dtype: init.dtype, device }), vision: null }
    : loadPolicy(modelDir, { dtype: init.dtype, device, requiresGrad: init.lora === null }, covered);
  // a sharded checkpoint unsharded: the whole weights and AdamW state; sharded, each rank reads its part (below)
  const fromShards = checkpoint?.shardedDir && !shardsPolicy(init) ? readShardedCheckpoint(checkpoint.shardedDir, reads) : null;
  if (init.bitwiseOnPolicy) model.setBatchInvariant(true);
  let master: TrainerState['master'] = null;
  if (init.masterDtype !== undefined && init.masterDtype !== init.dtype && init.lora !== null) {
    model.dispose();
    throw new Error(
      `trainer: master weights in ${init.masterDtype} under ${init.dtype} compute are for full fine-tuning; LoRA ` +
        'adapters train in one dtype',
    );
  }
  // a sharded policy's shards are its master weights (read from the folder in the master dtype): no master model
  if (init.masterDtype !== undefined && init.masterDtype !== init.dtype && !fromFolderShards) {
    const masterModel = loadMasterPolicy(modelDir, { dtype: init.masterDtype, device });
    const names = [...masterModel.parameters().keys()];
    const computeParams = (vision?.model ?? model).parameters(); // a vision-language policy: its vision tower too
    master = {
      model: masterModel,
      weights: new MasterWeights(
        names.map((n) => computeParams.get(n) as torch.Tensor),
        names.map((n) => masterModel.parameters().get(n) as torch.Tensor),
      ),
    };
  }
  if (fromShards) copyWeightsInto([model, master?.model], fromShards.weights);
  const saved = checkpoint ? savedTrainerState(checkpoint) : null;
  const lora = init.lora === null ? null : trainerAdapter(model, init, init.lora, checkpoint, saved);
  const named = lora ? lora.loraParameters() : (master?.model ?? vision?.model ?? model).parameters();
  const o = algorithm.optimizer;
  const d = init.distributed ?? null;
  const adamW = { lr: o.lr, betas: [o.betas[0] ?? 0.9, o.betas[1] ?? 0.999] as [number, number] };
  // a sharded policy reads its shards of the master weights (LoRA: the frozen base) from the folder; none of their
  // values when a sharded checkpoint's replace them
  const folder = { dir: modelDir, reads: modelReads, overwritten: !lora && !!checkpoint?.shardedDir };
  const sharded = fromFolderShards ? shardPolicy(model, folder, init, { ...adamW, weightDecay: o.weightDecay }) : null;
  const optimizer =
    sharded?.optimizer ??
    (d !== null && d.worldSize > 1 && d.zeroStage === 1
      ? new ZeroAdamW(torch.weightDecayGroups(named, o.weightDecay), adamW, d)
      : new torch.AdamW(torch.weightDecayGroups(named, o.weightDecay), adamW));
  const startStep = checkpoint?.step ?? 0;
  if (fromShards) restoreOptimizer(fromShards, optimizer);
  else if (checkpoint && sharded?.optimizer) resumeShardedPolicy(checkpoint, { ...sharded, optimizer: sharded.optimizer }, reads);
  else if (checkpoint) loadOptimizerState(checkpoint, optimizer);
  const scheduler = new torch.LrScheduler(
    optimizer,
    o.lr,
    trainerLrSchedule(algorithm.optimizer, init.totalSteps),
    saved?.schedulerStep ?? startStep,
  );
  let reference: TrainerState['reference'] = null;
  if (algorithm.useReference) {
    if (lora) reference = loraReference(lora, vision?.model ?? null);
    // the reference is the stage's starting model (also after a resume), frozen
    else reference = frozenModelReference(init.modelPath, { dtype: init.dtype, ...onDevice });
  }
  let critic: TrainerState['critic'] = null;
  if (algorithm.useCritic) {
    const c =
      init.criticModelPath === null
        ? Critic.fromPolicy(model)
        : Critic.load(init.criticModelPath, model, { dtype: init.dtype, ...onDevice });
    critic = { critic: c, optimizer: new torch.AdamW([...c.parameters().values()], { lr: init.criticLr ?? o.lr }) };
    if (checkpoint) loadCriticState(checkpoint, c, critic.optimizer);
  }
  const trainStep = new TrainStep({
    model,
    lora,
    optimizer,
    algorithm,
    reference,
    critic,
    ...(init.microBatchSize ? { microBatchSize: init.microBatchSize } : {}),
    microBatchTokens: init.microBatchTokens ?? null,
    checkpoint: init.gradientCheckpointing,
    removePadding: init.removePadding === undefined ? false : init.removePadding,
    padTokenId: init.padTokenId,
    startStep,
    device,
    masterWeights: master?.weights ?? null,
    vision,
  });
  if (saved) trainStep.loadState(saved.trainStep, `${checkpoint?.dir}/trainer.json trainStep`);
  return { model, vision, master, lora, optimizer, scheduler, reference, critic, trainStep, algorithm, init, sharded };
}

function release(s: TrainerState): void {
  s.optimizer.dispose();
  s.sharded?.sharded.dispose();
  s.critic?.optimizer.dispose();
  s.critic?.critic.dispose();
  s.reference?.dispose?.();
  s.lora?.dispose();
  s.vision?.forget();
  (s.vision?.model ?? s.model).dispose();
  s.master?.model.dispose();
}

torch.serveTensorWorker({
  /** Loads the policy (from the job's latest checkpoint when resuming); returns the step it starts from. */
  async init(init: TrainerInit) {
    await loadAlgorithmPlugins(init.algorithm, init.pluginBaseDir);
    const checkpoint = init.resume ? latestCheckpoint(init.jobDir) : null;
    const reads = new CheckpointReads();
    const modelReads = new CheckpointReads();
    const s = initialise(init, checkpoint, reads, modelReads);
    state = s;
    const d = init.distributed ?? null;
    try {
      // a diverged run's checkpoint is refused: the weights it held (the adapter, the master copy in mixed precision)
      if (checkpoint)
        checkFiniteWeights(
          checkpoint.dir,
          s.lora?.loraParameters() ??
            (s.sharded !== null ? shardsByName(s.sharded) : (s.master?.model ?? s.vision?.model ?? s.model).parameters()),
        );
      if (d !== null && d.worldSize > 1) ranks = await joinGroup(s, d);
    } catch (error) {
      release(s);
      state = null;
      throw error;
    }
    return {
      step: checkpoint?.step ?? 0,
      state: checkpoint?.state ?? null,
      algorithmType: s.algorithm.algorithmType,
      checkpointBytesRead: reads.bytes,
      modelBytesRead: modelReads.bytes,
    };
  },
  step(experiences: Experience[]) {
    const s = current();
    pinTrainerThreads(s.init);
    return outcome(async () => {
      // a vision-language policy's images are decoded for the step and freed after it (on every rank: ./vision-rows.ts)
      if (ranks === null) return takeStep(s, await withRowImages(s.vision, experiences, () => s.trainStep.run(experiences)));
      const r = ranks;
      if (r.group.rank !== 0)
        throw new Error(
          `trainer rank ${r.group.rank} of ${r.group.worldSize}: step() is driven on rank 0; the other ranks call follow()`,
        );
      r.midStep = true;
      await sendCommand(r.group, { kind: 'step', experiences });
      const run = () => s.trainStep.runDistributed(experiences, r.collectives);
      const metrics = takeStep(s, await withRowImages(s.vision, experiences, run));
      r.midStep = false;
      return metrics;
    });
  },
  /** Ranks > 0: the steps rank 0 sends, until it sends stop. */
  follow() {
    const s = current();
    const r = ranks;
    if (r === null || r.group.rank === 0)
      throw new Error(
        r === null
          ? 'follow(): this trainer is not data-parallel (init.distributed is not set)'
          : 'follow(): rank 0 is driven by step(); only ranks > 0 follow it',
      );
    if (r.following !== null) throw new Error(`follow(): rank ${r.group.rank} is already following rank 0`);
    const loop = follow(s, r);
    r.following = loop;
    return outcome(() => loop);
  },
  /** The last step's advantage per experience id (TrainStep.lastAdvantages), as entries. */
  lastAdvantages() {
    return [...current().trainStep.lastAdvantages];
  },
  /** The policy optimizer's state elements here, and the elements of the parameters it updates. */
  optimizerStateElements() {
    const s = current();
    const sharded = s.sharded?.optimizer ?? (s.optimizer instanceof ZeroAdamW ? s.optimizer : null);
    const local =
      sharded?.localStateElements() ?? Object.values(s.optimizer.stateDict().tensors).reduce((n, t) => n + t.numel, 0);
    return { local, parameters: s.optimizer.groups.flatMap((g) => g.params).reduce((n, p) => n + p.numel, 0) };
  },
  /**
   * A fully sharded policy's resident state on this rank, in bytes: shards, their gradients (as the last step left
   * them: none after its optimizer step), AdamW state, and the most bytes of gathered units held at once during the
   * steps since the last call; with the whole policy's parameter bytes in the master dtype. Null when not sharded.
   */
  shardedStateBytes() {
    const s = current();
    return s.sharded === null ? null : residentStateBytes(s.sharded, s.optimizer);
  },
  /** Weights for the explorer, by reference: merged with LoRA (unmerged again by endSync). */
  async beginSync() {
    rankZeroOnly('beginSync');
    const s = current();
    await gatherWholePolicy(s); // until endSync
    if (s.lora) s.lora.merge();
    return Object.fromEntries((s.vision?.model ?? s.model).parameters());
  },
  endSync() {
    rankZeroOnly('endSync');
    const s = current();
    if (s.lora?.merged) s.lora.unmerge();
    ranks?.passes?.releaseAll();
  },
  /** Writes the current weights (the master weights under mixed precision) as a Hugging Face folder. */
  async saveWeights(dir: string) {
    rankZeroOnly('saveWeights');
    const s = current();
    const consolidated = await consolidatedOnRankZero(s);
    if (consolidated !== null) {
      try {
        consolidated.save(dir);
      } finally {
        consolidated.dispose();
      }
      return;
    }
    if (s.master) {
      s.master.model.save(dir);
      return;
    }
    const policy = s.vision?.model ?? s.model; // a vision-language policy saves its vision tower and processor files
    if (s.lora) {
      await gatherWholePolicy(s); // a sharded base
      s.lora.merge();
      try {
        policy.save(dir);
      } finally {
        s.lora.unmerge();
        ranks?.passes?.releaseAll();
      }
    } else policy.save(dir);
  },
  /** Writes the LoRA adapter alone (PEFT's adapter_config.json + adapter_model.safetensors): a LoRA run's weights sync. */
  saveAdapter(dir: string) {
    rankZeroOnly('saveAdapter');
    const s = current();
    if (!s.lora) throw new Error(`saveAdapter(${dir}): this trainer has no LoRA adapter (model.lora is not set)`);
    s.lora.save(dir);
  },
  async save(step: number, componentState: Record<string, unknown>, keep: number) {
    rankZeroOnly('save');
    const s = current();
    if (s.optimizer instanceof ZeroAdamW && ranks !== null) {
      // the checkpoint holds the whole optimizer state, as one process writes it: every rank joins the gather
      await sendCommand(ranks.group, { kind: 'gatherOptimizer' });
      await s.optimizer.gatherState(ranks.group, ranks.device?.group ?? ranks.group);
    }
    // a sharded policy: each rank's shards (LoRA: the adapter, replicated, as without sharding)
    const { sharded, optimizer } = s.sharded ?? {};
    const shards =
      sharded && optimizer && ranks ? await saveShards({ sharded, optimizer }, s.init.jobDir, step, ranks.group) : null;
    const trainer: SavedTrainerState = {
      trainStep: s.trainStep.state(),
      schedulerStep: s.scheduler.currentStep,
      ...(s.lora ? { loraDropout: s.lora.randomState() } : {}),
    };
    const policy = s.master?.model ?? s.vision?.model ?? s.model;
    const contents = { model: policy, lora: s.lora, shards, critic: s.critic, trainer: { ...trainer } };
    return saveCheckpoint(
      s.init.jobDir,
      step,
      { ...contents, optimizer: shards === null ? s.optimizer : null, state: componentState },
      keep,
    ).dir;
  },
  /**
   * Rank 0 ends the other ranks' follow(): stop, or failed with `failure` (rank 0's error message) when its stage
   * failed; every rank leaves the group.
   */
  async close(failure: string | null) {
    const r = ranks;
    ranks = null;
    if (r !== null) {
      try {
        if (r.group.rank === 0 && r.group.failure === null && !r.group.isDestroyed && !r.midStep)
          await sendCommand(r.group, failure === null ? { kind: 'stop' } : { kind: 'failed', message: failure }).catch(
            () => {}, // a follower that is gone needs no stop
          );
      } finally {
        // the group goes once no collective holds it: a follower closed while it waits for rank 0 does not wait on
        await leave(r);
      }
    }
    if (state) release(state);
    state = null;
  },
});
