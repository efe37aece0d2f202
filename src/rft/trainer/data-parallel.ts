// Data-parallel training over a c10d process group (../../torch/distributed.ts): the rendezvous of a stage's ranks,
// the collectives a train step needs (StepCollectives, see ./train-step.ts) and the commands rank 0 sends the other
// ranks.
//
// Rank 0 is driven by the run loop; the other ranks follow it. Per command, rank 0 broadcasts a header and then, for
// a step or a failure, a payload:
//   header  int64 [2] = [kind, bytes]     kind 1: step, 0: stop, 2: failed (rank 0's stage failed),
//                                         3: gather the sharded state for a checkpoint (ZeRO-1's optimizer state,
//                                            ./zero.ts; a fully sharded policy's weights and optimizer state, ./fsdp.ts)
//                                         4: gather a fully sharded policy's parameters (a weight sync)
//   payload uint8 [bytes]                 step: JSON of the experiences; failed: rank 0's error message (UTF-8)
// after a step every rank runs the same step on the same global batch; after stop or failed the followers end.
import type { Experience } from '../experience.js';
import * as torch from '../../torch/index.js';
import { DistributedError, type ProcessGroup, Store, type Tensor } from '../../torch/index.js';
import type { StepCollectives } from './row-sharding.js';
import type { ZeroAdamW } from './zero.js';

const STOP = 0;
const STEP = 1;
const FAILED = 2;
const GATHER_OPTIMIZER = 3;
const GATHER_PARAMETERS = 4;
const SAVE_SHARDS = 5;
const CONSOLIDATE = 6;

/** What rank 0 sends: a step to take, or the end of the stage (it succeeded: stop; it did not: failed). */
export type Command =
  | { kind: 'step'; experiences: Experience[] }
  | { kind: 'stop' }
  | { kind: 'failed'; message: string }
  | { kind: 'gatherOptimizer' }
  | { kind: 'gatherParameters' }
  /** Every rank writes its shards of a fully sharded policy into `dir` (./fsdp-checkpoint.ts). */
  | { kind: 'saveShards'; dir: string }
  /** Every rank joins the all-gathers of a fully sharded policy's whole weights for rank 0 (a weights folder). */
  | { kind: 'consolidate' };

/** A follower's end when rank 0's stage failed: names this rank and carries rank 0's error message. */
export class RankZeroFailedError extends Error {
  constructor(
    readonly rank: number,
    readonly worldSize: number,
    /** Rank 0's error message. */
    readonly rankZeroMessage: string,
  ) {
    super(`trainer rank ${rank} of ${worldSize}: rank 0's stage failed, so this rank stops too; rank 0: ${rankZeroMessage}`);
    this.name = 'RankZeroFailedError';
  }
}

export interface StageRendezvous {
  rank: number;
  worldSize: number;
  masterAddr: string;
  masterPort: number;
  /** Bounds finding the stage's store, then the group's rendezvous; the default timeout of every collective. */
  timeoutMs: number;
  /** The stage's name for its rendezvous: the same on every rank, different for consecutive stages. */
  stage: string;
  /** Called on a rank > 0 that reached another stage's store (the previous one, not yet closed by rank 0). */
  onOtherStage?: (stage: string) => void;
}

/** The store key where rank 0 writes the stage its store belongs to, before anything else. */
const STAGE_KEY = 'trinity/stage';
/** A key no rank ever sets: waiting on it ends when the store goes away (or at the timeout). */
const NEVER_KEY = 'trinity/stage-closed';

/**
 * Joins the process group of one stage's trainer ranks, over a store of that stage. Each stage's rank 0 serves a
 * fresh store at masterAddr:masterPort and first writes the stage's name there (STAGE_KEY); a rank > 0 joins only
 * over a store of its own stage. It can reach the previous stage's store, which rank 0 closes when that stage's
 * trainer closes, just after the followers learn that the stage ended: it then waits on that store until rank 0
 * closes it (the wait breaks with the connection) and connects again, to the new store (the TCPStore client retries
 * until it is served). So no rank takes part in another stage's rendezvous. destroy() the group, then close() the
 * store.
 */
export async function joinStageGroup(options: StageRendezvous): Promise<{ group: ProcessGroup; store: Store }> {
  const { rank, worldSize, timeoutMs } = options;
  const store = await stageStore(options);
  try {
    const group = await torch.initProcessGroup({ rank, worldSize, store, timeoutMs, backend: 'gloo' });
    return { group, store };
  } catch (error) {
    await store.close();
    throw error;
  }
}

/** The store key where rank 0 writes the port of the device group's store (joinDeviceGroup). */
const DEVICE_STORE_KEY = 'trinity/device-store-port';

/**
 * The stage's second process group, on NCCL, for the collectives of CUDA tensors (gradient buckets, ZeRO-1 gathers,
 * parameter broadcasts); the Gloo group of joinStageGroup keeps the commands and the small CPU bookkeeping. NCCL
 * only moves device tensors, and Gloo would stage CUDA tensors through the host. The NCCL group rendezvous over a
 * store of its own (rank 0 serves it on a free port and publishes the port in the stage's store), since two
 * groups over one store would read each other's rendezvous keys. Every rank of the stage must call this, after
 * joinStageGroup. destroy() the group, then close() the store.
 */
export async function joinDeviceGroup(
  stageStore: Store,
  options: { rank: number; worldSize: number; masterAddr: string; timeoutMs: number; localRank?: number },
): Promise<{ group: ProcessGroup; store: Store }> {
  const { rank, worldSize, masterAddr, timeoutMs } = options;
  let store: Store;
  if (rank === 0) {
    store = await Store.create({ host: masterAddr, port: 0, worldSize, isMaster: true, timeoutMs });
    try {
      await stageStore.set(DEVICE_STORE_KEY, String(store.port));
    } catch (error) {
      await store.close();
      throw error;
    }
  } else {
    const port = Number(new TextDecoder().decode(await stageStore.get(DEVICE_STORE_KEY, { timeoutMs })));
    store = await Store.create({ host: masterAddr, port, worldSize, isMaster: false, timeoutMs });
  }
  try {
    const group = await torch.initProcessGroup({
      rank,
      worldSize,
      store,
      timeoutMs,
      backend: 'nccl',
      ...(options.localRank === undefined ? {} : { localRank: options.localRank }),
    });
    return { group, store };
  } catch (error) {
    await store.close();
    throw error;
  }
}

/** Whether tensors on `device` travel on a device (NCCL) group rather than the Gloo group. */
export function needsDeviceGroup(device: string): boolean {
  return device.startsWith('cuda');
}

/** Rank 0: a new store marked with the stage; other ranks: a connection to the store of their stage. */
async function stageStore(options: StageRendezvous): Promise<Store> {
  const { rank, worldSize, masterAddr, masterPort, timeoutMs, stage } = options;
  const where = `rank ${rank} of ${worldSize}, stage ${JSON.stringify(stage)}: rendezvous at ${masterAddr}:${masterPort}`;
  const failed = (error: unknown) =>
    new DistributedError(`${where}: ${messageOf(error)}`, 'rendezvous', rank, worldSize, /timed? ?out/i.test(messageOf(error)), {
      cause: error,
    });
  const connect = (isMaster: boolean, ms: number) =>
    Store.create({ host: masterAddr, port: masterPort, worldSize, isMaster, timeoutMs: ms }).catch((error: unknown) => {
      throw failed(error);
    });
  if (rank === 0) {
    const store = await connect(true, timeoutMs);
    await store.set(STAGE_KEY, stage).catch(async (error: unknown) => {
      await store.close();
      throw failed(error);
    });
    return store;
  }
  const deadline = Date.now() + timeoutMs;
  let other: string | null = null;
  for (;;) {
    const store = await connect(false, Math.max(1, deadline - Date.now()));
    try {
      const of = new TextDecoder().decode(await store.get(STAGE_KEY, { timeoutMs: Math.max(1, deadline - Date.now()) }));
      if (of === stage) return store;
      other = of;
      options.onOtherStage?.(of);
      await store.get(NEVER_KEY, { timeoutMs: Math.max(1, deadline - Date.now()) });
    } catch (error) {
      // the store went away (the previous stage's, closed by rank 0; or rank 0 is gone): connect again, in time
      if (Date.now() >= deadline) {
        await store.close();
        throw other === null
          ? failed(error)
          : new DistributedError(
              `${where}: the store there is stage ${JSON.stringify(other)}'s, and rank 0 did not close it within ${timeoutMs} ms`,
              'rendezvous',
              rank,
              worldSize,
              true,
              { cause: error },
            );
      }
    }
    await store.close();
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Rank 0: sends `command` to every other rank. */
export async function sendCommand(group: ProcessGroup, command: Command): Promise<void> {
  if (group.rank !== 0) throw new Error(`sendCommand: rank ${group.rank} is not rank 0; only rank 0 sends commands`);
  const bytes =
    command.kind === 'step'
      ? new TextEncoder().encode(JSON.stringify(command.experiences))
      : command.kind === 'failed'
        ? new TextEncoder().encode(command.message || 'an error without a message') // never an empty payload
        : command.kind === 'saveShards'
          ? new TextEncoder().encode(command.dir)
          : null;
  const kind = {
    step: STEP,
    failed: FAILED,
    stop: STOP,
    gatherOptimizer: GATHER_OPTIMIZER,
    gatherParameters: GATHER_PARAMETERS,
    saveShards: SAVE_SHARDS,
    consolidate: CONSOLIDATE,
  }[command.kind];
  const header = torch.tensor(new BigInt64Array([BigInt(kind), BigInt(bytes?.length ?? 0)]));
  try {
    await group.broadcast(header, { root: 0 });
  } finally {
    header.dispose();
  }
  if (bytes === null) return;
  const payload = torch.tensor(bytes);
  try {
    await group.broadcast(payload, { root: 0 });
  } finally {
    payload.dispose();
  }
}

/**
 * Ranks > 0: the next command from rank 0. `timeoutMs` bounds the wait for the header (rank 0 may explore for a long
 * time between steps); the payload follows at once and has the group's timeout.
 */
export async function receiveCommand(group: ProcessGroup, timeoutMs = group.timeoutMs): Promise<Command> {
  const header = torch.zeros([2], { dtype: 'int64' });
  let kind: number;
  let length: number;
  try {
    await group.broadcast(header, { root: 0, timeoutMs });
    [kind, length] = [...(header.toTypedArray() as BigInt64Array)].map(Number) as [number, number];
  } finally {
    header.dispose();
  }
  if (kind === STOP) return { kind: 'stop' };
  if (kind === GATHER_OPTIMIZER) return { kind: 'gatherOptimizer' };
  if (kind === GATHER_PARAMETERS) return { kind: 'gatherParameters' };
  if (kind === CONSOLIDATE) return { kind: 'consolidate' };
  if ((kind !== STEP && kind !== FAILED && kind !== SAVE_SHARDS) || !Number.isSafeInteger(length) || length < 0)
    throw new Error(`rank ${group.rank}: rank 0 sent a command header this trainer does not know: [${kind}, ${length}]`);
  const payload = torch.zeros([length], { dtype: 'uint8' });
  let text: string;
  try {
    await group.broadcast(payload, { root: 0 });
    text = new TextDecoder().decode(payload.toTypedArray() as Uint8Array);
  } finally {
    payload.dispose();
  }
  if (kind === SAVE_SHARDS) return { kind: 'saveShards', dir: text };
  return kind === FAILED ? { kind: 'failed', message: text } : { kind: 'step', experiences: JSON.parse(text) as Experience[] };
}

/** Rank 0's parameters on every rank (as DDP does at construction), so every rank starts the same update. */
export async function broadcastParameters(
  group: ProcessGroup,
  params: readonly Tensor[],
  deviceGroup: ProcessGroup | null = null,
): Promise<void> {
  if (params.length > 0) await groupFor(group, deviceGroup, params).broadcast(params, { root: 0 });
}

/**
 * Where `tensors` are exchanged: the device group when there is one and they are not on the CPU (NCCL takes CUDA
 * tensors only), else the Gloo group. All the tensors of one collective share a device.
 */
function groupFor(group: ProcessGroup, deviceGroup: ProcessGroup | null, tensors: readonly Tensor[]): ProcessGroup {
  const first = tensors[0];
  return deviceGroup !== null && first !== undefined && first.device !== 'cpu' ? deviceGroup : group;
}

/** The policy's gradients as the trainer's backward produces them, for overlappedGradients. */
export interface OverlapPlan {
  /** The leaves the backward accumulates into (the model's, or LoRA's, trainable tensors). */
  params: readonly Tensor[];
  /** What the optimizer updates, params[i]'s in targets[i] (float32 master weights); default params. */
  targets?: readonly Tensor[];
  /** Parameters one forwardBackward reaches more than once (the LM head, chunk by chunk; tied embeddings). */
  unhooked: ReadonlySet<Tensor>;
}

/**
 * The overlap plan of a model trained by TrainStep: `named` are the trainable tensors the optimizer updates (by
 * Hugging Face or PEFT name), `computeOf` gives the tensor the backward reaches for each (the bf16 compute copy of a
 * master weight; absent: itself). The LM head and the embeddings are unhooked (model/training.ts runs the head's
 * backward chunk by chunk, and a tied head is the embedding matrix).
 */
export function overlapPlan(named: ReadonlyMap<string, Tensor>, computeOf?: (target: Tensor) => Tensor): OverlapPlan {
  const targets = [...named.values()];
  const params = targets.map((t) => computeOf?.(t) ?? t);
  const unhooked = new Set<Tensor>();
  [...named.keys()].forEach((name, i) => {
    if (/(^|\.)(lm_head|embed_tokens)(\.|$)/.test(name)) unhooked.add(params[i] as Tensor);
  });
  return { params, ...(computeOf === undefined ? {} : { targets }), unhooked };
}

export interface GroupCollectivesOptions {
  /** Gradient bucket size (default DDP's 25 MiB). */
  bucketBytes?: number;
  /**
   * Sum the policy's gradients while the last micro-batch's backward runs (OverlappedGradients), instead of after it.
   * Absent: after it, in buckets.
   */
  overlap?: OverlapPlan;
  /** ZeRO-1: the policy's optimizer, sharded over the group's ranks; its updated shards are all-gathered after a step. */
  zero?: ZeroAdamW | null;
  /**
   * The NCCL group of the same ranks (joinDeviceGroup) when the trainer's tensors are on a GPU: gradient buckets,
   * device tensors' sums and ZeRO-1 gathers go over it; the masks and metrics (CPU tensors) stay on `group`.
   */
  deviceGroup?: ProcessGroup | null;
}

/** StepCollectives with the resources they hold (the overlap's autograd hooks): dispose() when the group goes. */
export interface GroupStepCollectives extends StepCollectives {
  dispose(): void;
}

/**
 * StepCollectives over a process group: gradients in buckets (c10d flattens each into one all-reduce), summed while
 * the backward runs when `overlap` plans it. Both ways give the same sums (the same additions, in the same order on
 * every rank: Gloo's all-reduce of a bucket does not depend on when it was issued).
 */
export function groupCollectives(group: ProcessGroup, options: GroupCollectivesOptions = {}): GroupStepCollectives {
  const bucketOptions = options.bucketBytes === undefined ? {} : { bucketBytes: options.bucketBytes };
  const deviceGroup = options.deviceGroup ?? null;
  const overlap =
    options.overlap === undefined
      ? null
      : groupFor(group, deviceGroup, options.overlap.targets ?? options.overlap.params).overlappedGradients(
          options.overlap.params,
          {
            op: 'sum',
            ...bucketOptions,
            ...(options.overlap.targets === undefined ? {} : { targets: options.overlap.targets }),
            unhooked: options.overlap.unhooked,
          },
        );
  const overlapped = overlap === null ? null : new Set(overlap.targets);
  return {
    rank: group.rank,
    worldSize: group.worldSize,
    beforeLastBackward() {
      overlap?.arm();
    },
    dispose() {
      overlap?.dispose();
    },
    async sum(tensors) {
      await sumByDevice(group, deviceGroup, tensors, bucketOptions);
    },
    async sumGradients(params) {
      if (
        overlap !== null &&
        overlapped !== null &&
        params.length === overlapped.size &&
        params.every((p) => overlapped.has(p))
      ) {
        // which targets had a gradient on this rank before finish() zero-fills the rest (its hooks moved theirs)
        const plan = options.overlap as OverlapPlan;
        const had = torch.scope(() => overlap.targets.map((t, i) => (t.grad !== null || overlapParamHasGrad(plan, i) ? 1 : 0)));
        await overlap.finish();
        await dropGradientsNoRankHad(group, overlap.targets, had);
        return;
      }
      // a parameter some rank has a gradient for (a rank that ran no micro-batch has none) gets one on every rank
      const present = torch.tensor(
        params.map((p) => (p.grad === null ? 0 : 1)),
        { dtype: 'float32' },
      );
      const grads: Tensor[] = [];
      try {
        await group.allReduce(present, { op: 'max' });
        const anywhere = [...(present.toTypedArray() as Float32Array)];
        torch.noGrad(() => {
          params.forEach((p, i) => {
            if (anywhere[i] === 0) return;
            let grad = p.grad;
            if (grad === null) {
              p.grad = torch.zerosLike(p);
              grad = p.grad;
            }
            grads.push(grad as Tensor);
          });
        });
        await sumByDevice(group, deviceGroup, grads, bucketOptions);
      } finally {
        present.dispose();
        for (const g of grads) g.dispose(); // handles only: the gradients stay with their parameters
      }
    },
    async afterOptimizerStep() {
      await options.zero?.gatherParameters(group, deviceGroup ?? group);
    },
    async sumMetrics(sums) {
      // the union of the ranks' metric names (in order), then one all-reduce of their values
      const names = await unionOfNames(group, [...sums.keys()]);
      const values = torch.tensor(new Float64Array(names.map((name) => sums.get(name) ?? 0)));
      try {
        if (names.length > 0) await group.allReduce(values, { op: 'sum' });
        const total = [...(values.toTypedArray() as Float64Array)];
        return new Map(names.map((name, i) => [name, total[i] as number]));
      } finally {
        values.dispose();
      }
    },
  };
}

/** Sums `tensors` in buckets: the CPU ones over `group`, the others over `deviceGroup` when there is one. */
async function sumByDevice(
  group: ProcessGroup,
  deviceGroup: ProcessGroup | null,
  tensors: readonly Tensor[],
  bucketOptions: { bucketBytes?: number },
): Promise<void> {
  const onDevice = deviceGroup === null ? [] : tensors.filter((t) => t.device !== 'cpu');
  const onHost = deviceGroup === null ? tensors : tensors.filter((t) => t.device === 'cpu');
  // issued in one order on every rank (host first), both awaited together: the two groups do not wait on each other
  await Promise.all([
    onHost.length > 0 ? group.allReduceBuckets(onHost, { op: 'sum', ...bucketOptions }) : undefined,
    onDevice.length > 0 ? (deviceGroup as ProcessGroup).allReduceBuckets(onDevice, { op: 'sum', ...bucketOptions }) : undefined,
  ]);
}

/** Whether the backward's own leaf still holds a gradient for target i (not moved into the target yet). */
function overlapParamHasGrad(plan: OverlapPlan, i: number): boolean {
  return plan.targets !== undefined && (plan.params[i] as Tensor).grad !== null;
}

/**
 * After an overlapped sum every target has a gradient; one that no rank had before the sum is set back to none, as
 * one process leaves it (AdamW skips a parameter without a gradient, weight decay included).
 */
async function dropGradientsNoRankHad(group: ProcessGroup, targets: readonly Tensor[], had: readonly number[]): Promise<void> {
  const present = torch.tensor(had, { dtype: 'float32' });
  try {
    await group.allReduce(present, { op: 'max' });
    const anywhere = present.toTypedArray() as Float32Array;
    targets.forEach((t, i) => {
      if (anywhere[i] === 0) t.grad = null;
    });
  } finally {
    present.dispose();
  }
}

/** Every rank's names, merged and sorted: each rank's JSON padded to the longest and gathered. */
async function unionOfNames(group: ProcessGroup, names: readonly string[]): Promise<string[]> {
  const own = new TextEncoder().encode(JSON.stringify(names));
  const longest = torch.tensor(new BigInt64Array([BigInt(own.length)]));
  let width: number;
  try {
    await group.allReduce(longest, { op: 'max' });
    width = Number((longest.toTypedArray() as BigInt64Array)[0]);
  } finally {
    longest.dispose();
  }
  const padded = new Uint8Array(width).fill(0x20); // JSON allows trailing spaces
  padded.set(own);
  const mine = torch.tensor(padded);
  const all = await group.allGather(mine).finally(() => mine.dispose());
  const union = new Set<string>();
  try {
    for (const t of all)
      for (const name of JSON.parse(new TextDecoder().decode(t.toTypedArray() as Uint8Array)) as string[]) union.add(name);
  } finally {
    for (const t of all) t.dispose();
  }
  return [...union].sort();
}
