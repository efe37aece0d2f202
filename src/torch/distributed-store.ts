// The c10d TCPStore (native/src/distributed.cpp): the small key-value store every rank of a process group reaches,
// for the rendezvous (initProcessGroup creates one unless given one) and for coordination between ranks.
import { checkInteger, checkTimeout, DEFAULT_DISTRIBUTED_TIMEOUT_MS, messageOf } from './distributed-options.js';
import { native } from './native.js';

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
  /** The master's address the store was created with. */
  readonly host: string;
  readonly port: number;
  readonly timeoutMs: number;

  private constructor(id: number, host: string, port: number, timeoutMs: number) {
    this.#id = id;
    this.host = host;
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
      return new Store(id, options.host, bound, timeoutMs);
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
