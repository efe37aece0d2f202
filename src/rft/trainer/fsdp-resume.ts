// Resuming from the checkpoint of a fully sharded policy (./fsdp-shard-files.ts), or resuming a fully sharded policy
// from one process's checkpoint, reading only the bytes a rank needs: each safetensors file's header, then one
// positioned read per tensor range (torch.readSafetensorsRange), counted in CheckpointReads.bytes.
//
//   flat source  a flat class's vectors (./fsdp.ts: a unit's parameters of one weight-decay class end to end, n
//                elements) as ranges of checkpoint files, flat[a, b):
//                  sharded, written by W ranks: for each rank r, the overlap of [a, b) with its slice [rL, (r+1)L)
//                  (L = ⌈n / W⌉) of unit.<u>.<class> (the weights) or unit.<u>.<class>.<moment> in rank-r-of-W
//                  one process (optimizer.safetensors): for each parameter p of the class, the overlap of [a, b) with
//                  [offset_p, offset_p + numel_p) of state.<i_p>.<moment>, i_p its place in one process's AdamW order
//   rank r' of W' (sharded) reads flat[r'L', min((r'+1)L', n)) of each class (ownRange; L' = ⌈n / W'⌉): its shard of
//                the weights (from a sharded checkpoint; one process's weights are its model folder, whose ranges
//                each rank read at start: ./fsdp-load.ts) and of the AdamW moments, and the step counts. The ranks together read
//                each byte of the state once, for any W and W'.
//   one process  (a sharded checkpoint resumed without sharding, or read back in a test) reads every class whole:
//                readShardedCheckpoint gives the whole weights by name and one process's AdamW state.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import * as torch from '../../torch/index.js';
import type { OptimizerState, SafetensorsHeader, Tensor } from '../../torch/index.js';
import type { LoadedCheckpoint } from '../checkpoint.js';
import { type FullyShardedModel, ownRange, type ShardClass } from './fsdp.js';
import type { ShardedAdamW } from './fsdp-optimizer.js';
import { classKey, type IndexedClass, MOMENTS, rankFile, readShardIndex, type ShardIndex } from './fsdp-shard-files.js';

/** Positioned reads of safetensors files, each header read once; `bytes` counts every byte read (headers included). */
export class CheckpointReads {
  bytes = 0;
  readonly #headers = new Map<string, SafetensorsHeader>();

  /** Elements [from, from + count) of tensor `name` of `file` (1-d, its dtype). */
  range(file: string, name: string, from: number, count: number): Tensor {
    const entry = this.header(file).entries.get(name);
    if (entry === undefined) throw new Error(`${file}: missing tensor '${name}'`);
    const t = torch.readSafetensorsRange(file, name, entry, from, count);
    this.bytes += t.numel * torch.DTYPE_BYTES[t.dtype];
    return t;
  }

  /** The elements of tensor `name` of `file` (0: absent). */
  numel(file: string, name: string): number {
    return (
      this.header(file)
        .entries.get(name)
        ?.shape.reduce((a, b) => a * b, 1) ?? 0
    );
  }

  header(file: string): SafetensorsHeader {
    let header = this.#headers.get(file);
    if (header === undefined) {
      if (!existsSync(file)) throw new Error(`${file}: missing`);
      header = torch.readSafetensorsHeader(file);
      this.bytes += header.headerBytes;
      this.#headers.set(file, header);
    }
    return header;
  }
}

type Part = 'weights' | (typeof MOMENTS)[number];

/** One flat class's vectors in a checkpoint (see the header). */
interface FlatSource {
  /** flat[from, from + count) of `part`, 1-d, in the file's dtype. */
  read(part: Part, from: number, count: number): Tensor;
  /** The class's AdamW step count (a scalar; read where flat element `at` is), or null: not stepped yet. */
  step(at: number): Tensor | null;
}

/** Class `c` (of unit `unit`) of a sharded checkpoint in `dir`. */
function shardedSource(dir: string, index: ShardIndex, unit: number, c: IndexedClass, reads: CheckpointReads): FlatSource {
  const key = classKey(unit, c.decay);
  const files = Array.from({ length: index.worldSize }, (_, r) => join(dir, rankFile(r, index.worldSize)));
  const nameOf = (part: Part) => (part === 'weights' ? key : `${key}.${part}`);
  const checked = (file: string, name: string) => {
    if (!existsSync(file)) throw new Error(`${file}: missing (the index says ${index.worldSize} ranks wrote this checkpoint)`);
    const numel = reads.numel(file, name);
    if (numel !== c.shardLength)
      throw new Error(`${file}: ${name} is ${numel === 0 ? 'missing' : `${numel} elements`}; the index says ${c.shardLength}`);
  };
  return {
    read(part, from, count) {
      const name = nameOf(part);
      const L = c.shardLength;
      const pieces: Tensor[] = [];
      for (const [r, file] of files.entries()) {
        const lo = Math.max(from, r * L);
        const hi = Math.min(from + count, (r + 1) * L, c.total);
        if (lo >= hi) continue;
        checked(file, name);
        pieces.push(reads.range(file, name, lo - r * L, hi - lo));
      }
      return joined(pieces, count, `${dir}: ${name}`);
    },
    step(at) {
      const file = files[Math.min(Math.floor(at / c.shardLength), index.worldSize - 1)] as string;
      const name = `${key}.step`;
      return reads.numel(file, name) === 0 ? null : reads.range(file, name, 0, 1).reshape([]);
    },
  };
}

/** Class `c` of a one-process optimizer file (its moments; the weights are the model folder's). */
function oneProcessSource(
  file: string,
  c: ShardClass,
  position: ReadonlyMap<string, number>,
  reads: CheckpointReads,
): FlatSource {
  const keys = c.params.map((p) => `state.${position.get(p.name)}`);
  return {
    read(part, from, count) {
      if (part === 'weights') throw new Error(`${file}: a one-process checkpoint's weights are its model folder`);
      const pieces: Tensor[] = [];
      for (const [i, p] of c.params.entries()) {
        const lo = Math.max(from, p.offset);
        const hi = Math.min(from + count, p.offset + p.numel);
        if (lo >= hi) continue;
        const name = `${keys[i]}.${part}`;
        const numel = reads.numel(file, name);
        if (numel !== p.numel)
          throw new Error(
            `${file}: ${name} is ${numel === 0 ? 'missing' : `${numel} elements`}; parameter ${p.name} has ${p.numel}`,
          );
        pieces.push(reads.range(file, name, lo - p.offset, hi - lo));
      }
      return joined(pieces, count, `${file}: ${keys.join(', ')}`);
    },
    step() {
      const present = keys.filter((k) => reads.numel(file, `${k}.step`) > 0).length;
      if (present === 0) return null;
      if (present !== keys.length)
        throw new Error(
          `${file}: parameters ${c.params.map((p) => p.name).join(', ')} share a shard, but only ${present} of them have ` +
            'AdamW state; a fully sharded optimizer needs all or none',
        );
      return reads.range(file, `${keys[0]}.step`, 0, 1).reshape([]);
    },
  };
}

/** The pieces of a range end to end (none: a rank whose shard is all padding reads nothing). */
function joined(pieces: Tensor[], count: number, what: string): Tensor {
  const t = pieces.length === 0 ? torch.zeros([0]) : pieces.length === 1 ? (pieces[0] as Tensor) : torch.cat(pieces);
  if (t.numel !== count) throw new Error(`${what}: read ${t.numel} elements, expected ${count}`);
  return t;
}

/** The index's class of unit `unit` with the same parameters as `c` (a rank's own layout), checked. */
function indexedClass(index: ShardIndex, dir: string, unit: number, c: ShardClass): IndexedClass {
  const saved = index.units.find((u) => u.index === unit)?.classes.find((k) => k.decay === c.decay);
  const layout = (k: Pick<IndexedClass, 'params'>) => k.params.map((p) => `${p.name}@${p.offset}+${p.numel}`).join(',');
  if (saved === undefined || saved.total !== c.total || layout(saved) !== layout(c))
    throw new Error(
      `${dir}: the checkpoint's ${classKey(unit, c.decay)} does not hold this model's parameters ` +
        `(${c.params.map((p) => p.name).join(', ')}; ${c.total} elements): another model's checkpoint?`,
    );
  return saved;
}

/**
 * A fully sharded rank resuming from `checkpoint`: its shards from a sharded checkpoint's files (one process's: the
 * model folder it was built from already holds them) and its part of the AdamW state, read as the header says.
 */
export function resumeShardedPolicy(
  checkpoint: Pick<LoadedCheckpoint, 'dir' | 'shardedDir' | 'state'>,
  policy: { sharded: FullyShardedModel; optimizer: ShardedAdamW },
  reads: CheckpointReads,
): void {
  const { sharded, optimizer } = policy;
  const dir = checkpoint.shardedDir;
  const index = dir === null ? null : readShardIndex(dir);
  const file = join(checkpoint.dir, 'optimizer.safetensors');
  const position = new Map(optimizer.oneProcessOrder.map((name, i) => [name, i]));
  const sources = new Map<ShardClass, FlatSource>();
  for (const unit of sharded.units)
    for (const c of unit.classes)
      sources.set(
        c,
        dir !== null && index !== null
          ? shardedSource(dir, index, unit.index, indexedClass(index, dir, unit.index, c), reads)
          : oneProcessSource(file, c, position, reads),
      );
  const own = (c: ShardClass) => ownRange(c, sharded.rank);
  if (dir !== null)
    torch.noGrad(() =>
      torch.scope(() => {
        for (const [c, source] of sources) {
          const { from, count } = own(c);
          c.shard.zero_();
          if (count > 0) c.shard.narrow(0, 0, count).copy_(source.read('weights', from, count));
        }
      }),
    );
  const saved = checkpoint.state.optimizer as Pick<OptimizerState, 'kind' | 'groups'> | null | undefined;
  const groups = index?.optimizer.groups ?? saved?.groups;
  if (groups === undefined) throw new Error(`${checkpoint.dir}: the checkpoint has no optimizer state`);
  if (index === null && saved?.kind !== 'AdamW') throw new Error(`${file}: optimizer state is for ${saved?.kind}, not AdamW`);
  optimizer.loadClassStates(groups, (c) => {
    const source = sources.get(c) as FlatSource;
    const { from, count } = own(c);
    const step = source.step(from);
    if (step === null) return null;
    return { exp_avg: source.read('exp_avg', from, count), exp_avg_sq: source.read('exp_avg_sq', from, count), step };
  });
}

/**
 * A sharded checkpoint folder's whole policy (by Hugging Face name, in its master dtype) and one process's AdamW
 * state, every class read whole (see the header). The caller disposes the tensors.
 */
export function readShardedCheckpoint(
  dir: string,
  reads = new CheckpointReads(),
): { weights: Map<string, Tensor>; optimizer: OptimizerState } {
  const index = readShardIndex(dir);
  const weights = new Map<string, Tensor>();
  const state = new Map<string, Tensor>(); // `<name>.<exp_avg|exp_avg_sq|step>`
  try {
    torch.noGrad(() =>
      torch.scope(() => {
        for (const unit of index.units)
          for (const c of unit.classes) {
            const source = shardedSource(dir, index, unit.index, c, reads);
            const split = (whole: Tensor, into: Map<string, Tensor>, suffix: string) => {
              for (const p of c.params)
                into.set(`${p.name}${suffix}`, torch.keep(whole.narrow(0, p.offset, p.numel).reshape(p.shape).clone()));
            };
            split(source.read('weights', 0, c.total), weights, '');
            const step = source.step(0);
            if (step === null) continue; // not stepped yet
            for (const moment of MOMENTS) split(source.read(moment, 0, c.total), state, `.${moment}`);
            for (const p of c.params) state.set(`${p.name}.step`, torch.keep(step.clone()));
          }
      }),
    );
  } catch (error) {
    for (const t of [...weights.values(), ...state.values()]) t.dispose();
    throw error;
  }
  const tensors: Record<string, Tensor> = {};
  for (const [i, name] of index.optimizer.order.entries())
    for (const part of [...MOMENTS, 'step']) {
      const t = state.get(`${name}.${part}`);
      if (t !== undefined) tensors[`state.${i}.${part}`] = t;
    }
  return { weights, optimizer: { kind: index.optimizer.kind, groups: index.optimizer.groups, tensors } };
}

/** Copies `weights` (by name) into each model's parameters, cast to its dtype (the master and the compute copy). */
export function copyWeightsInto(
  models: readonly ({ parameters(): Map<string, Tensor> } | undefined)[],
  weights: ReadonlyMap<string, Tensor>,
): void {
  torch.noGrad(() => {
    for (const model of models) {
      if (model === undefined) continue;
      const params = model.parameters();
      for (const [name, t] of weights) {
        const target = params.get(name);
        if (target === undefined) throw new Error(`sharded checkpoint: '${name}' is not a parameter of the model`);
        target.copy_(t);
      }
    }
  });
}

/** Loads what readShardedCheckpoint read into `optimizer` (any AdamW: one process's, ZeRO-1's) and frees it. */
export function restoreOptimizer(restored: ReturnType<typeof readShardedCheckpoint>, optimizer: torch.Optimizer): void {
  try {
    optimizer.loadStateDict(restored.optimizer);
  } finally {
    for (const t of [...restored.weights.values(), ...Object.values(restored.optimizer.tensors)]) t.dispose();
  }
}
