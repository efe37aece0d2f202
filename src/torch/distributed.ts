// Collective communication between processes, on libtorch's own c10d (native/src/distributed.cpp): a TCPStore for
// rendezvous and a process group over it, Gloo for CPU tensors, NCCL for CUDA tensors (when the addon was built with
// it: availableBackends()). This is the layer data-parallel training stands on.
//
//   const group = await initProcessGroup();          // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun sets them
//   await group.allReduceBuckets(grads, { op: 'avg' }); // every rank ends with the mean of every rank's gradients
//   await group.destroy();
//
// Every collective must be called by every rank of the group, in the same order, with tensors of the same shapes and
// dtypes: that is how c10d matches them up. A collective is issued when it is called (so the order of calls is the
// order on the wire) and its promise settles when it completed on this rank; the wait runs off the JS thread (on the
// libuv pool), so the event loop keeps turning while peers arrive. Each collective has a timeout; a failure (a peer
// that died, a timeout, a bad argument) rejects with a DistributedError that names the collective, this rank and the
// timeout, and leaves the group unusable (the ranks are out of step): every later call fails at once saying why.
// Destroy it and rendezvous again. In-place collectives (allReduce, broadcast) write into the tensors given: leave
// them alone until the promise settles. Ranks that call different collectives or shapes are only caught with
// checkCollectives (Gloo alone aborts the process when the sizes it receives differ).
//
// Neighbours: distributed-options.ts (types, options, defaults, checks, the torchrun environment, DistributedError),
// distributed-store.ts (the TCPStore) and distributed-gradients.ts (gradient buckets, overlapped with the backward).
import {
  type BucketOptions,
  checkInteger,
  checkOp,
  checkRank,
  checkTimeout,
  type CollectiveOptions,
  DEFAULT_BUCKET_BYTES,
  DEFAULT_DISTRIBUTED_TIMEOUT_MS,
  type DistributedBackend,
  DistributedError,
  type ReduceCollectiveOptions,
  interfaceToward,
  messageOf,
  readTorchrunEnv,
} from './distributed-options.js';
import { type OverlapOptions, OverlappedGradients, planBuckets } from './distributed-gradients.js';
import { exchangePeers, namePeers, type PeerInfo } from './distributed-peers.js';
import { Store } from './distributed-store.js';
import { type Handle, native } from './native.js';
import { fromHandle, type Tensor } from './tensor.js';

export {
  type BucketOptions,
  type CollectiveOptions,
  DEFAULT_BUCKET_BYTES,
  DEFAULT_DISTRIBUTED_TIMEOUT_MS,
  type DistributedBackend,
  DistributedError,
  type DistributedReduceOp,
  type ReduceCollectiveOptions,
  interfaceToward,
  readTorchrunEnv,
  type TorchrunEnv,
} from './distributed-options.js';
export { type OverlapOptions, OverlappedGradients, planBuckets } from './distributed-gradients.js';
export { Store, type StoreOptions } from './distributed-store.js';

/** Which backends this build of the addon can create (NCCL needs a CUDA libtorch and NCCL's headers at build time). */
export function availableBackends(): { gloo: boolean; nccl: boolean } {
  return native.distBackends();
}

// ---------------------------------------------------------------------------------------------------------------
// process group

export interface InitProcessGroupOptions {
  /** This process's rank; default RANK. */
  rank?: number;
  /** Number of ranks; default WORLD_SIZE. */
  worldSize?: number;
  /** This process's rank on its machine (which GPU it uses); default LOCAL_RANK, else 0. */
  localRank?: number;
  /** The store's host; default MASTER_ADDR, else 127.0.0.1. Ignored when `store` is given. */
  masterAddr?: string;
  /** The store's port; default MASTER_PORT. Ignored when `store` is given. */
  masterPort?: number;
  /** An existing store to rendezvous over (for instance one the master created on port 0). */
  store?: Store;
  /** Default 'gloo' (CPU tensors); 'nccl' for CUDA tensors. */
  backend?: DistributedBackend;
  /** Rendezvous timeout, and the default timeout of every collective on the group. */
  timeoutMs?: number;
  /**
   * Gloo: network interfaces to use; default GLOO_SOCKET_IFNAME (comma-separated), else the interface whose subnet
   * holds the master's address (interfaceToward), else the host name's interface.
   */
  socketInterfaces?: readonly string[];
  /**
   * Before each collective, check that every rank arrived and calls the same collective with the same shapes and
   * dtypes (c10d's ProcessGroupWrapper, PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL): a mismatch or a missing rank is an
   * error that says which ranks and how, where Gloo alone would abort the process on mismatched sizes. Costs two
   * small extra collectives per collective. Default: whether TORCH_DISTRIBUTED_DEBUG is DETAIL.
   */
  checkCollectives?: boolean;
  /** Where the torchrun variables are read from; default process.env. */
  env?: NodeJS.ProcessEnv;
}
/**
 * Creates a process group (collectives between `worldSize` processes) and waits until every rank joined, or the
 * timeout passed. Arguments default to the torchrun environment; rank 0 serves the store unless `store` is given.
 */
export async function initProcessGroup(options: InitProcessGroupOptions = {}): Promise<ProcessGroup> {
  const where = 'initProcessGroup';
  const fromEnv = readTorchrunEnv(options.env ?? process.env);
  const worldSize = options.worldSize ?? fromEnv.worldSize;
  if (worldSize === undefined) throw new Error(`${where}: worldSize is not set: pass { worldSize } or set WORLD_SIZE`);
  checkInteger(`${where}: worldSize`, worldSize, 1);
  const rank = options.rank ?? fromEnv.rank;
  if (rank === undefined) throw new Error(`${where}: rank is not set: pass { rank } or set RANK`);
  checkRank(where, rank, worldSize);
  const localRank = checkInteger(`${where}: localRank`, options.localRank ?? fromEnv.localRank ?? 0, 0);
  const backend = options.backend ?? 'gloo';
  if (backend !== 'gloo' && backend !== 'nccl')
    throw new TypeError(`${where}: backend must be 'gloo' or 'nccl', got ${JSON.stringify(backend)}`);
  if (!availableBackends()[backend])
    throw new Error(
      backend === 'nccl'
        ? `${where}: this build of the addon has no NCCL (it needs a CUDA libtorch with ProcessGroupNCCL and NCCL's headers when native/build.mjs runs); use backend 'gloo'`
        : `${where}: this build of the addon has no Gloo (gloo's headers were missing when native/build.mjs ran: install them, e.g. apt-get install libgloo-dev, and rebuild)`,
    );
  const timeoutMs = checkTimeout(where, options.timeoutMs ?? DEFAULT_DISTRIBUTED_TIMEOUT_MS);
  const env = options.env ?? process.env;
  let interfaces = options.socketInterfaces ?? splitList(env.GLOO_SOCKET_IFNAME);
  const checkCollectives = options.checkCollectives ?? env.TORCH_DISTRIBUTED_DEBUG?.toUpperCase() === 'DETAIL';

  let store = options.store;
  const ownsStore = store === undefined;
  if (store === undefined) {
    const masterAddr = options.masterAddr ?? fromEnv.masterAddr ?? '127.0.0.1';
    const masterPort = options.masterPort ?? fromEnv.masterPort;
    if (masterPort === undefined) throw new Error(`${where}: masterPort is not set: pass { masterPort } or set MASTER_PORT`);
    checkInteger(`${where}: masterPort`, masterPort, 1, 65535);
    store = await Store.create({ host: masterAddr, port: masterPort, worldSize, isMaster: rank === 0, timeoutMs });
  }
  if (interfaces.length === 0 && backend === 'gloo') {
    const toward = await interfaceToward(store.host);
    if (toward !== null) interfaces = [toward];
  }
  try {
    const peers = await exchangePeers(store, { rank, worldSize, timeoutMs, interfaces, env });
    const id = await native.distGroupCreate(store.id, rank, worldSize, backend, timeoutMs, [...interfaces], checkCollectives);
    return new ProcessGroup(id, { rank, worldSize, localRank, backend, timeoutMs, store, ownsStore, peers });
  } catch (error) {
    if (ownsStore) await store.close();
    throw new DistributedError(
      `${where}: rank ${rank} of ${worldSize} (${backend}) could not rendezvous with the other ranks within ${timeoutMs} ms: ${messageOf(error)}`,
      'initProcessGroup',
      rank,
      worldSize,
      /timed? ?out/i.test(messageOf(error)),
      { cause: error },
    );
  }
}

function splitList(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

interface GroupInfo {
  rank: number;
  worldSize: number;
  localRank: number;
  backend: DistributedBackend;
  timeoutMs: number;
  store: Store;
  ownsStore: boolean;
  peers?: readonly PeerInfo[];
}

/** A process group: collectives between its ranks. Create it with initProcessGroup; `destroy()` it when done. */
export class ProcessGroup {
  readonly rank: number;
  readonly worldSize: number;
  readonly localRank: number;
  readonly backend: DistributedBackend;
  /** Default timeout of this group's collectives. */
  readonly timeoutMs: number;
  /** The store the group rendezvoused over (usable for coordination until the group is destroyed). */
  readonly store: Store;
  #id: number | null;
  #ownsStore: boolean;
  #failure: DistributedError | null = null;
  /** Where every rank runs (./distributed-peers.ts): a failure's message names the machine of a peer it lost. */
  readonly #peers: readonly PeerInfo[];

  /** Internal: use initProcessGroup. */
  constructor(id: number, info: GroupInfo) {
    this.#id = id;
    this.rank = info.rank;
    this.worldSize = info.worldSize;
    this.localRank = info.localRank;
    this.backend = info.backend;
    this.timeoutMs = info.timeoutMs;
    this.store = info.store;
    this.#ownsStore = info.ownsStore;
    this.#peers = info.peers ?? [];
  }

  /** The failure that made this group unusable, if one did. */
  get failure(): DistributedError | null {
    return this.#failure;
  }

  get isDestroyed(): boolean {
    return this.#id === null;
  }

  /** Reduces each tensor across the ranks, in place: every rank ends with the result. One collective per tensor. */
  allReduce(tensors: Tensor | readonly Tensor[], options: ReduceCollectiveOptions = {}): Promise<void> {
    return this.#collective('allReduce', options, (id, timeoutMs) => {
      const op = checkOp('allReduce', options.op);
      return native.distAllReduce(id, handles(tensors), op, timeoutMs, false);
    });
  }

  /**
   * allReduce of many tensors (a model's gradients) in a few collectives: the tensors are grouped by dtype and device
   * and packed, in order, into buckets of at most `bucketBytes`; c10d flattens each bucket into one buffer, reduces
   * it in one collective and copies the results back. Every bucket is issued before any is waited for. Same result
   * as allReduce of each tensor.
   */
  allReduceBuckets(tensors: readonly Tensor[], options: BucketOptions = {}): Promise<void> {
    return this.#collective('allReduceBuckets', options, (id, timeoutMs) => {
      const op = checkOp('allReduceBuckets', options.op);
      const bucketBytes = checkInteger('allReduceBuckets: bucketBytes', options.bucketBytes ?? DEFAULT_BUCKET_BYTES, 1);
      const buckets = planBuckets(tensors, bucketBytes);
      return Promise.all(buckets.map((bucket) => native.distAllReduce(id, handles(bucket), op, timeoutMs, true))).then(() => {});
    });
  }

  /** Copies each tensor of rank `root` into the same tensor of every other rank, in place. */
  broadcast(tensors: Tensor | readonly Tensor[], options: CollectiveOptions & { root?: number } = {}): Promise<void> {
    return this.#collective('broadcast', options, (id, timeoutMs) => {
      const root = checkRank('broadcast: root', options.root ?? 0, this.worldSize);
      return native.distBroadcast(id, handles(tensors), root, timeoutMs);
    });
  }

  /** Every rank's `tensor`, in rank order (new tensors: dispose them). */
  allGather(tensor: Tensor, options: CollectiveOptions = {}): Promise<Tensor[]> {
    return this.#collective('allGather', options, async (id, timeoutMs) => {
      const out = await native.distAllGather(id, tensor.handle, timeoutMs);
      return out.map(fromHandle);
    });
  }

  /**
   * Reduces `input` across the ranks and gives rank r the r-th of `worldSize` equal slices along dimension 0 of the
   * result (a new tensor: dispose it). input.shape[0] must be a multiple of the world size.
   */
  reduceScatter(input: Tensor, options: ReduceCollectiveOptions = {}): Promise<Tensor> {
    return this.#collective('reduceScatter', options, async (id, timeoutMs) => {
      const op = checkOp('reduceScatter', options.op);
      const rows = input.shape[0];
      if (rows === undefined) throw new RangeError('reduceScatter: input is a scalar; it needs a first dimension to split');
      if (rows % this.worldSize !== 0)
        throw new RangeError(
          `reduceScatter: input's first dimension (${rows}, shape [${input.shape.join(', ')}]) is not a multiple of the world size (${this.worldSize})`,
        );
      return fromHandle(await native.distReduceScatter(id, input.handle, op, timeoutMs));
    });
  }

  /**
   * Gradient buckets that all-reduce while the backward runs (see OverlappedGradients): hooks on `params` mark each
   * gradient ready as autograd accumulates it, and a full bucket is all-reduced at once, asynchronously.
   */
  overlappedGradients(params: readonly Tensor[], options: OverlapOptions = {}): OverlappedGradients {
    if (this.#id === null)
      throw new DistributedError(
        'overlappedGradients: the process group was destroyed',
        'overlappedGradients',
        this.rank,
        this.worldSize,
        false,
      );
    return new OverlappedGradients(this, this.#id, params, options);
  }

  /** Internal: runs `run` as a named collective of this group (its errors become DistributedErrors). */
  runCollective<T>(
    collective: string,
    options: CollectiveOptions,
    run: (id: number, timeoutMs: number) => Promise<T>,
  ): Promise<T> {
    return this.#collective(collective, options, run);
  }

  /** Waits until every rank reached its barrier. */
  barrier(options: CollectiveOptions = {}): Promise<void> {
    return this.#collective('barrier', options, (id, timeoutMs) => native.distBarrier(id, timeoutMs));
  }

  /**
   * Leaves the group: its connections close and its threads stop (off the JS thread, once collectives in flight
   * settled), and the store it created is released. Idempotent. Peers still in a collective with this rank fail.
   */
  async destroy(): Promise<void> {
    if (this.#id === null) return;
    const id = this.#id;
    this.#id = null;
    await native.distGroupDestroy(id);
    if (this.#ownsStore) await this.store.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.destroy();
  }

  // Runs one collective: checks the group is usable, issues it, and turns any failure (bad argument, c10d error,
  // timeout) into a DistributedError that also marks the group unusable, since this rank is now out of step.
  async #collective<T>(
    collective: string,
    options: CollectiveOptions,
    run: (id: number, timeoutMs: number) => Promise<T>,
  ): Promise<T> {
    if (this.#id === null)
      throw new DistributedError(`${collective}: the process group was destroyed`, collective, this.rank, this.worldSize, false);
    if (this.#failure !== null)
      throw new DistributedError(
        `${collective} on rank ${this.rank} of ${this.worldSize}: the process group is unusable since an earlier collective failed (${this.#failure.message}); destroy it and create a new one`,
        collective,
        this.rank,
        this.worldSize,
        false,
        { cause: this.#failure },
      );
    let timeoutMs = this.timeoutMs;
    try {
      timeoutMs = checkTimeout(collective, options.timeoutMs ?? this.timeoutMs);
      return await run(this.#id, timeoutMs);
    } catch (error) {
      const message = messageOf(error);
      const timedOut = /timed? ?out/i.test(message);
      const failure = new DistributedError(
        `${collective} on rank ${this.rank} of ${this.worldSize} (${this.backend}) ${
          timedOut ? `timed out after ${timeoutMs} ms waiting for the other ranks` : 'failed'
        }: ${message}${namePeers(message, this.#peers, this.rank)}`,
        collective,
        this.rank,
        this.worldSize,
        timedOut,
        { cause: error },
      );
      this.#failure ??= failure;
      throw failure;
    }
  }
}

function handles(tensors: Tensor | readonly Tensor[]): Handle[] {
  return (Array.isArray(tensors) ? (tensors as readonly Tensor[]) : [tensors as Tensor]).map((t) => t.handle);
}
