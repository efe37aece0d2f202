// Data-parallel training over a c10d process group (../../torch/distributed.ts): the collectives a train step needs
// (StepCollectives, see ./train-step.ts) and the commands rank 0 sends the other ranks.
//
// Rank 0 is driven by the run loop; the other ranks follow it. Per command, rank 0 broadcasts a header and then, for
// a step, the step's experiences as JSON bytes:
//   header  int64 [2] = [kind, bytes]     kind 1: step, 0: stop
//   payload uint8 [bytes]                 JSON of the experiences (a step only)
// after which every rank runs the same step on the same global batch.
import type { Experience } from '../experience.js';
import * as torch from '../../torch/index.js';
import type { ProcessGroup, Tensor } from '../../torch/index.js';
import type { StepCollectives } from './train-step.js';

const STOP = 0;
const STEP = 1;

export type Command = { kind: 'step'; experiences: Experience[] } | { kind: 'stop' };

/** Rank 0: sends `command` to every other rank. */
export async function sendCommand(group: ProcessGroup, command: Command): Promise<void> {
  if (group.rank !== 0) throw new Error(`sendCommand: rank ${group.rank} is not rank 0; only rank 0 sends commands`);
  const bytes = command.kind === 'step' ? new TextEncoder().encode(JSON.stringify(command.experiences)) : null;
  const header = torch.tensor(new BigInt64Array([BigInt(command.kind === 'step' ? STEP : STOP), BigInt(bytes?.length ?? 0)]));
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
  if (kind !== STEP || !Number.isSafeInteger(length) || length < 0)
    throw new Error(`rank ${group.rank}: rank 0 sent a command header this trainer does not know: [${kind}, ${length}]`);
  const payload = torch.zeros([length], { dtype: 'uint8' });
  let text: string;
  try {
    await group.broadcast(payload, { root: 0 });
    text = new TextDecoder().decode(payload.toTypedArray() as Uint8Array);
  } finally {
    payload.dispose();
  }
  return { kind: 'step', experiences: JSON.parse(text) as Experience[] };
}

/** Rank 0's parameters on every rank (as DDP does at construction), so every rank starts the same update. */
export async function broadcastParameters(group: ProcessGroup, params: readonly Tensor[]): Promise<void> {
  if (params.length > 0) await group.broadcast(params, { root: 0 });
}

/** StepCollectives over a process group: gradients in buckets (c10d flattens each into one all-reduce). */
export function groupCollectives(group: ProcessGroup, options: { bucketBytes?: number } = {}): StepCollectives {
  return {
    rank: group.rank,
    worldSize: group.worldSize,
    async sum(tensors) {
      if (tensors.length > 0) await group.allReduceBuckets(tensors, { op: 'sum', ...options });
    },
    async sumGradients(params) {
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
        if (grads.length > 0) await group.allReduceBuckets(grads, { op: 'sum', ...options });
      } finally {
        present.dispose();
        for (const g of grads) g.dispose(); // handles only: the gradients stay with their parameters
      }
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
