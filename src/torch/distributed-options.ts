// The distributed layer's vocabulary (distributed.ts is its entry): backends, reduce ops, the options every
// collective takes and their defaults, the DistributedError a failed collective raises, the torchrun environment
// read and checked, the network interface Gloo listens on, and the argument checks every entry point (store, process
// group, gradient buckets) applies.
import { lookup } from 'node:dns/promises';
import { isIPv4 } from 'node:net';
import { type NetworkInterfaceInfo, networkInterfaces } from 'node:os';

export type DistributedBackend = 'gloo' | 'nccl';
export type DistributedReduceOp = 'sum' | 'avg' | 'max' | 'min' | 'product';

const REDUCE_OPS: readonly DistributedReduceOp[] = ['sum', 'avg', 'max', 'min', 'product'];

/** Default time a collective, a store read or the rendezvous may wait for the other ranks. */
export const DEFAULT_DISTRIBUTED_TIMEOUT_MS = 300_000;
/** Default bucket size of allReduceBuckets (PyTorch DDP's default bucket_cap_mb is 25). */
export const DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024;

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

/** The message of anything thrown. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

// ---------------------------------------------------------------------------------------------------------------
// argument checks

export function checkInteger(name: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer in [${min}, ${max}]`;
    throw new RangeError(`${name} must be ${range}, got ${JSON.stringify(value) ?? String(value)}`);
  }
  return value;
}

export function checkTimeout(where: string, timeoutMs: unknown): number {
  return checkInteger(`${where}: timeoutMs`, timeoutMs, 1);
}

export function checkRank(where: string, rank: unknown, worldSize: number): number {
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

export function checkOp(collective: string, op: DistributedReduceOp | undefined): DistributedReduceOp {
  const value = op ?? 'sum';
  if (!REDUCE_OPS.includes(value))
    throw new TypeError(`${collective}: op must be one of ${REDUCE_OPS.join(', ')}, got ${JSON.stringify(value)}`);
  return value;
}

/** An IPv4 address as a 32-bit unsigned number. */
const ipv4Number = (address: string): number => address.split('.').reduce((n, part) => ((n << 8) | Number(part)) >>> 0, 0);

/**
 * The network interface Gloo should listen on to be reached from the master's side: the one whose IPv4 subnet holds
 * `masterHost` (resolved when it is a name), i.e. (address & netmask) = (master & netmask). Gloo's default device
 * listens on the address the host name resolves to, which on many machines (and in a network namespace) is a
 * loopback address: the other machines' ranks would be told to connect to 127.x. Null (keep Gloo's default) when the
 * master is on loopback, does not resolve, or no interface's subnet holds it (a routed network: set
 * GLOO_SOCKET_IFNAME).
 */
export async function interfaceToward(
  masterHost: string,
  interfaces: NodeJS.Dict<NetworkInterfaceInfo[]> = networkInterfaces(),
): Promise<string | null> {
  let address = masterHost;
  if (!isIPv4(address)) {
    try {
      address = (await lookup(masterHost, { family: 4 })).address;
    } catch {
      return null;
    }
  }
  if (address.startsWith('127.')) return null;
  const master = ipv4Number(address);
  for (const [name, infos] of Object.entries(interfaces)) {
    for (const info of infos ?? []) {
      if (info.family !== 'IPv4' || info.internal) continue;
      const mask = ipv4Number(info.netmask);
      if ((ipv4Number(info.address) & mask) >>> 0 === (master & mask) >>> 0) return name;
    }
  }
  return null;
}
