// Where each rank of a process group runs, so that a failed collective names the machine it lost. Gloo reports a dead
// or unreachable peer by its address ("Connection closed by peer [10.0.0.2]:38047"); at the rendezvous every rank
// writes its IPv4 addresses, host name and node index (GROUP_RANK, as torchrun and `trinity run --nnodes` set it, or
// SLURM_NODEID) to the group's store under PEER_KEY/<rank>, and reads the others'. A failure message is then followed
// by what its addresses are: "(10.0.0.2 is rank 1: node 1, host node-b)". An address several ranks share (ranks on
// one machine) names them all.
import { hostname, networkInterfaces } from 'node:os';
import type { Store } from './distributed-store.js';

/** One rank's place, as the others see it. */
export interface PeerInfo {
  rank: number;
  host: string;
  /** The rank's node index (GROUP_RANK, else SLURM_NODEID); null when no launcher said. */
  node: number | null;
  /** The IPv4 addresses it can be reached at (those of its Gloo interfaces, else every non-loopback one). */
  addresses: string[];
}

const PEER_KEY = 'trinity/peer';

/** This process's addresses: the given interfaces' IPv4 addresses, else every non-internal IPv4 address. */
function ownAddresses(interfaces: readonly string[]): string[] {
  const all = networkInterfaces();
  const names = interfaces.length > 0 ? interfaces : Object.keys(all);
  return names.flatMap((name) =>
    (all[name] ?? []).filter((info) => info.family === 'IPv4' && (interfaces.length > 0 || !info.internal)).map((i) => i.address),
  );
}

function nodeIndex(env: NodeJS.ProcessEnv): number | null {
  const raw = env.GROUP_RANK ?? env.SLURM_NODEID;
  return raw !== undefined && /^\d+$/.test(raw) ? Number(raw) : null;
}

/** Writes this rank's place to the store and reads every rank's (waiting up to `timeoutMs` for each). */
export async function exchangePeers(
  store: Store,
  options: { rank: number; worldSize: number; timeoutMs: number; interfaces: readonly string[]; env: NodeJS.ProcessEnv },
): Promise<PeerInfo[]> {
  const own: PeerInfo = {
    rank: options.rank,
    host: hostname(),
    node: nodeIndex(options.env),
    addresses: ownAddresses(options.interfaces),
  };
  await store.set(`${PEER_KEY}/${options.rank}`, JSON.stringify(own));
  const peers: PeerInfo[] = [];
  for (let rank = 0; rank < options.worldSize; rank++) {
    const value = await store.get(`${PEER_KEY}/${rank}`, { timeoutMs: options.timeoutMs });
    peers.push(JSON.parse(new TextDecoder().decode(value)) as PeerInfo);
  }
  return peers;
}

/**
 * What the IPv4 addresses in `message` are among `peers`, other than `self`: " (10.0.0.2 is rank 1: node 1, host
 * node-b)"; '' when the message names none of them.
 */
export function namePeers(message: string, peers: readonly PeerInfo[], self: number): string {
  const named: string[] = [];
  for (const address of new Set(message.match(/\b\d{1,3}(?:\.\d{1,3}){3}\b/g) ?? [])) {
    const ranks = peers.filter((p) => p.rank !== self && p.addresses.includes(address));
    if (ranks.length === 0) continue;
    const where = ranks.map((p) => `rank ${p.rank}: ${p.node === null ? '' : `node ${p.node}, `}host ${p.host}`);
    named.push(`${address} is ${where.join('; ')}`);
  }
  return named.length === 0 ? '' : ` (${named.join('; ')})`;
}
