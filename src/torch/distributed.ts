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
import { DTYPE_BYTES } from './dtype.js';
import { type Handle, native } from './native.js';
import { fromHandle, type Tensor } from './tensor.js';

export type DistributedBackend = 'gloo' | 'nccl';
export type DistributedReduceOp = 'sum' | 'avg' | 'max' | 'min' | 'product';

const REDUCE_OPS: readonly DistributedReduceOp[] = ['sum', 'avg', 'max', 'min', 'product'];

/** Default time a collective, a store read or the rendezvous may wait for the other ranks. */
export const DEFAULT_DISTRIBUTED_TIMEOUT_MS = 300_000;
/** Default bucket size of allReduceBuckets (PyTorch DDP's default bucket_cap_mb is 25). */
export const DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024;

/** Which backends this build of the addon can create (NCCL needs a CUDA libtorch and NCCL's headers at build time). */
export function availableBackends(): { gloo: boolean; nccl: boolean } {
  return native.distBackends();
}

// ---------------------------------------------------------------------------------------------------------------
// argument checks

function checkInteger(name: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer in [${min}, ${max}]`;
    throw new RangeError(`${name} must be ${range}, got ${JSON.stringify(value) ?? String(value)}`);
  }
  return value;
}

function checkTimeout(where: string, timeoutMs: unknown): number {
  return checkInteger(`${where}: timeoutMs`, timeoutMs, 1);
}

function checkRank(where: string, rank: unknown, worldSize: number): number {
  checkInteger(`${where}: rank`, rank, 0);
  if ((rank as number) >= worldSize)
    throw new RangeError(`${where}: rank ${rank} is out of range for world size ${worldSize} (ranks are 0..${worldSize - 1})`);
  return rank as number;
}

/** The torchrun environment: what RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT say, checked. */
export interface TorchrunEnv {
  rank?: number;
  worldSize?: number;
  localRank?: number;
  masterAddr?: string;
  masterPort?: number;
}

/** Reads the torchrun variables that are set; a set variable that is not a valid value is an error naming it. */
export function readTorchrunEnv(env: NodeJS.ProcessEnv = process.env): TorchrunEnv {
  const integer = (name: string, min: number, max?: number): number | undefined => {
    const raw = env[name];
    if (raw === undefined || raw === '') return undefined;
    const value = /^\d+$/.test(raw.trim()) ? Number(raw.trim()) : Number.NaN;
    if (!Number.isSafeInteger(value) || value < min || (max !== undefined && value > max))
      throw new RangeError(
        `${name}=${JSON.stringify(raw)} is not ${max === undefined ? `an integer >= ${min}` : `an integer in [${min}, ${max}]`}`,
      );
    return value;
  };
  const out: TorchrunEnv = {};
  const rank = integer('RANK', 0);
  const worldSize = integer('WORLD_SIZE', 1);
  const localRank = integer('LOCAL_RANK', 0);
  const masterPort = integer('MASTER_PORT', 1, 65535);
  if (rank !== undefined) out.rank = rank;
  if (worldSize !== undefined) out.worldSize = worldSize;
  if (localRank !== undefined) out.localRank = localRank;
  if (masterPort !== undefined) out.masterPort = masterPort;
  if (env.MASTER_ADDR) out.masterAddr = env.MASTER_ADDR;
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// store

export interface StoreOptions {
  /** The master's address (every rank connects to it). */
  host: string;
  /** The master's port; 0 on the master lets the OS pick a free one (read it back from `store.port`). */
  port: number;
  /** How many ranks will use the store. */
  worldSize: number;
  /** Whether this process serves the store (rank 0, by convention). */
  isMaster: boolean;
  /** How long connecting, and each get(), may wait. */
  timeoutMs?: number;
}

/**
 * A c10d TCPStore: a small key-value store every rank reaches, for rendezvous and coordination. The master serves it
 * (and is a client too); the other ranks connect, retrying until the timeout. `close()` when done.
 */
export class Store {
  #id: number | null;
  readonly port: number;
  readonly timeoutMs: number;

  private constructor(id: number, port: number, timeoutMs: number) {
    this.#id = id;
    this.port = port;
    this.timeoutMs = timeoutMs;
  }

  static async create(options: StoreOptions): Promise<Store> {
    const where = 'Store.create';
    if (typeof options.host !== 'string' || options.host === '')
      throw new TypeError(`${where}: host must be a non-empty string (the master's address)`);
    const worldSize = checkInteger(`${where}: worldSize`, options.worldSize, 1);
    const port = checkInteger(`${where}: port`, options.port, 0, 65535);
    if (port === 0 && !options.isMaster)
      throw new RangeError(`${where}: port 0 (any free port) only works on the master; other ranks need the master's port`);
    const timeoutMs = checkTimeout(where, options.timeoutMs ?? DEFAULT_DISTRIBUTED_TIMEOUT_MS);
    try {
      const { id, port: bound } = await native.distStoreCreate(options.host, port, worldSize, options.isMaster, timeoutMs);
      return new Store(id, bound, timeoutMs);
    } catch (error) {
      throw new Error(
        `${where}: ${options.isMaster ? 'serving' : 'connecting to'} the store at ${options.host}:${port} failed: ${messageOf(error)}`,
        { cause: error },
      );
    }
  }

  /** Internal: the native id. */
  get id(): number {
    if (this.#id === null) throw new Error('the store was closed');
    return this.#id;
  }

  async set(key: string, value: string | Uint8Array): Promise<void> {
    await native.distStoreSet(this.id, key, typeof value === 'string' ? new TextEncoder().encode(value) : value);
  }

  /** The value under `key`, waiting until some rank sets it (or the timeout passes, then an Error naming the key). */
  async get(key: string, options: { timeoutMs?: number } = {}): Promise<Uint8Array> {
    const timeoutMs = checkTimeout('Store.get', options.timeoutMs ?? this.timeoutMs);
    try {
      return await native.distStoreGet(this.id, key, timeoutMs);
    } catch (error) {
      throw new Error(`Store.get: waiting for key ${JSON.stringify(key)} failed (timeout ${timeoutMs} ms): ${messageOf(error)}`, {
        cause: error,
      });
    }
  }

  /** Adds `delta` to the integer counter under `key` (atomically, across ranks) and returns the new value. */
  async add(key: string, delta: number): Promise<number> {
    return native.distStoreAdd(this.id, key, checkInteger('Store.add: delta', delta, Number.MIN_SAFE_INTEGER));
  }

  /** Releases this handle on the store (a process group made over it keeps its own). Idempotent. */
  async close(): Promise<void> {
    if (this.#id === null) return;
    const id = this.#id;
    this.#id = null;
    await native.distStoreFree(id);
  }
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
  /** Gloo: network interfaces to use; default GLOO_SOCKET_IFNAME (comma-separated), else the host name's interface. */
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

export interface CollectiveOptions {
  /** Default: the group's timeoutMs. */
  timeoutMs?: number;
}

export interface ReduceCollectiveOptions extends CollectiveOptions {
  /** Default 'sum'. 'avg' is the sum divided by the world size. */
  op?: DistributedReduceOp;
}

export interface BucketOptions extends ReduceCollectiveOptions {
  /** Size cap of one bucket in bytes; a tensor larger than the cap travels alone. Default 25 MiB. */
  bucketBytes?: number;
}

/** A collective that failed: names it, this rank, the world size and the timeout; `cause` holds c10d's error. */
export class DistributedError extends Error {
  constructor(
    message: string,
    readonly collective: string,
    readonly rank: number,
    readonly worldSize: number,
    readonly timedOut: boolean,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'DistributedError';
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
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
  const interfaces = options.socketInterfaces ?? splitList(env.GLOO_SOCKET_IFNAME);
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
  try {
    const id = await native.distGroupCreate(store.id, rank, worldSize, backend, timeoutMs, [...interfaces], checkCollectives);
    return new ProcessGroup(id, { rank, worldSize, localRank, backend, timeoutMs, store, ownsStore });
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
        }: ${message}`,
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

function checkOp(collective: string, op: DistributedReduceOp | undefined): DistributedReduceOp {
  const value = op ?? 'sum';
  if (!REDUCE_OPS.includes(value))
    throw new TypeError(`${collective}: op must be one of ${REDUCE_OPS.join(', ')}, got ${JSON.stringify(value)}`);
  return value;
}

function handles(tensors: Tensor | readonly Tensor[]): Handle[] {
  return (Array.isArray(tensors) ? (tensors as readonly Tensor[]) : [tensors as Tensor]).map((t) => t.handle);
}

/**
 * Groups tensors by dtype and device, keeping their order within a group, and packs each group greedily into buckets
 * of at most `bucketBytes` (a tensor larger than that is a bucket of its own). Depends only on the tensors' dtypes,
 * devices and sizes, so every rank plans the same buckets.
 */
export function planBuckets(tensors: readonly Tensor[], bucketBytes: number): Tensor[][] {
  checkInteger('planBuckets: bucketBytes', bucketBytes, 1);
  const groups = new Map<string, { bytes: number; open: Tensor[]; buckets: Tensor[][] }>();
  for (const t of tensors) {
    const key = `${t.dtype}@${t.device}`;
    let group = groups.get(key);
    if (group === undefined) {
      group = { bytes: 0, open: [], buckets: [] };
      groups.set(key, group);
    }
    const bytes = t.numel * DTYPE_BYTES[t.dtype];
    if (group.open.length > 0 && group.bytes + bytes > bucketBytes) {
      group.buckets.push(group.open);
      group.open = [];
      group.bytes = 0;
    }
    group.open.push(t);
    group.bytes += bytes;
  }
  const out: Tensor[][] = [];
  for (const group of groups.values()) {
    if (group.open.length > 0) group.buckets.push(group.open);
    out.push(...group.buckets);
  }
  return out;
}

export interface OverlapOptions extends BucketOptions {
  /**
   * Where each parameter's gradient is summed: `targets[i]` (same shape; its .grad receives params[i]'s gradient in
   * its own dtype, and params[i].grad is cleared), e.g. float32 master weights of bf16 parameters. Default: the
   * parameters themselves.
   */
  targets?: readonly Tensor[];
  /**
   * Parameters one backward reaches more than once (a chunked LM head, tied embeddings): their hooks are not used,
   * their buckets go last, when finish() is called.
   */
  unhooked?: ReadonlySet<Tensor>;
}

/**
 * The gradient sum of DDP: a bucketed all-reduce that overlaps the backward pass (native/src/distributed.cpp,
 * GradBuckets). The buckets are planned once, as DDP does: parameters in reverse order (the backward produces the
 * last layers' gradients first), grouped by the targets' dtype and device, at most `bucketBytes` each; unhooked
 * parameters in buckets of their own at the end. Every rank must plan the same buckets (same parameters, same order).
 *
 *   arm()        before the backward whose gradients complete the step (the last micro-batch: earlier micro-batches
 *                only accumulate); from then on a hook moves each gradient into its target and a full bucket is
 *                issued (in bucket order) while the backward goes on
 *   finish()     after it: the buckets the backward did not fill are issued (zeros for targets without a gradient:
 *                a rank that ran no micro-batch still takes part), and the promise settles when every bucket is summed
 *   dispose()    removes the hooks
 *
 * Every target ends with a gradient (zeros where it had none); the caller decides what a gradient no rank produced
 * means. Collectives issued by other calls are ordered with the buckets as usual (the order of the calls).
 */
export class OverlappedGradients {
  readonly #group: ProcessGroup;
  #id: number | null;
  readonly #op: DistributedReduceOp;
  readonly #timeoutMs: number | undefined;
  /** The targets, in the order given. */
  readonly targets: readonly Tensor[];
  /** The buckets as parameter indices, in issue order. */
  readonly buckets: readonly (readonly number[])[];

  /** Internal: use ProcessGroup.overlappedGradients. */
  constructor(group: ProcessGroup, groupId: number, params: readonly Tensor[], options: OverlapOptions) {
    const where = 'overlappedGradients';
    this.#group = group;
    this.#op = checkOp(where, options.op);
    this.#timeoutMs = options.timeoutMs;
    const timeoutMs = checkTimeout(where, options.timeoutMs ?? group.timeoutMs);
    const bucketBytes = checkInteger(`${where}: bucketBytes`, options.bucketBytes ?? DEFAULT_BUCKET_BYTES, 1);
    const targets = options.targets ?? params;
    if (targets.length !== params.length)
      throw new RangeError(`${where}: ${params.length} parameters but ${targets.length} targets`);
    targets.forEach((t, i) => {
      const p = params[i] as Tensor;
      if (t.shape.join(',') !== p.shape.join(','))
        throw new RangeError(`${where}: parameter ${i} is [${p.shape}] but its target is [${t.shape}]`);
    });
    this.targets = targets;
    const unhooked = options.unhooked ?? new Set<Tensor>();
    const index = new Map(targets.map((t, i) => [t, i]));
    const order = (keep: (i: number) => boolean) =>
      targets
        .map((_, i) => i)
        .filter(keep)
        .reverse()
        .map((i) => targets[i] as Tensor);
    const isUnhooked = (i: number) => unhooked.has(params[i] as Tensor);
    const plan = [
      ...planBuckets(
        order((i) => !isUnhooked(i)),
        bucketBytes,
      ),
      ...planBuckets(order(isUnhooked), bucketBytes),
    ];
    this.buckets = plan.map((bucket) => bucket.map((t) => index.get(t) as number));
    this.#id = native.distGradBucketsCreate(
      groupId,
      params.map((p) => p.handle),
      options.targets === undefined ? null : targets.map((t) => t.handle),
      this.buckets.map((b) => [...b]),
      params.map((_, i) => !isUnhooked(i)),
      this.#op,
      timeoutMs,
    );
  }

  #live(): number {
    if (this.#id === null) throw new Error('overlappedGradients: disposed');
    return this.#id;
  }

  /** Sums the gradients of the next backward as they arrive (see the class comment). */
  arm(): void {
    native.distGradBucketsArm(this.#live());
  }

  /**
   * Issues the buckets not issued yet and waits until every bucket of this round is summed on this rank. Resolves
   * with how many buckets the hooks issued during the backward (the overlapped ones).
   */
  finish(): Promise<number> {
    const id = this.#live();
    return this.#group.runCollective(
      'overlappedGradients.finish',
      this.#timeoutMs === undefined ? {} : { timeoutMs: this.#timeoutMs },
      () => native.distGradBucketsFinish(id),
    );
  }

  /** Removes the hooks. Idempotent. */
  dispose(): void {
    if (this.#id === null) return;
    native.distGradBucketsFree(this.#id);
    this.#id = null;
  }
}
