// Fully sharded data parallelism (trainer.trainer_strategy fsdp / fsdp2: Zhao et al. 2023, "PyTorch FSDP"; ZeRO-3,
// Rajbhandari et al. 2020) over a c10d process group: each of W ranks holds 1/W of every parameter, of its gradient
// and of its AdamW state, and a layer's whole parameters exist only while the layer runs.
//
//   unit     a decoder layer's parameters (model.layers.<i>.*), or the root: embeddings, final norm, LM head
//   flat     a unit's parameters of one weight-decay class (torch.weightDecayGroups' rule), flattened and laid end
//            to end: n elements, zero-padded to W·L, L = ⌈n / W⌉
//   shard    rank r holds flat[rL, (r+1)L) in the master dtype (float32 under mixed precision): a leaf the optimizer
//            updates, with its gradient and AdamW moments
//   gather   before a unit is used: every rank casts its shards to the compute dtype and all-gathers them (one
//            collective per unit: the rank's classes side by side); the model reads views of the result
//   release  after the unit's use: the model reads empty placeholders again, and the gathered buffer goes
//   reduce   after the unit's backward: its gradients, in the master dtype, laid out as W blocks [class 0's slice r |
//            class 1's slice r | ...] and reduce-scattered (sum): rank r adds block r of the sum to its shards' grads
//
// AdamW is elementwise, so AdamW over the shards is the slice of one process's update; clipping uses the global norm
// (the shards' squared norms summed across the ranks). So W ranks end a step with the parameters one process would.
// A frozen model (LoRA's base: the adapters train, replicated on every rank, their gradients summed as in data
// parallelism) is sharded and gathered the same way; its shards take no gradient and nothing is reduce-scattered.
// When the units are gathered and released is ./fsdp-passes.ts; the optimizer's checkpoint layout ./fsdp-optimizer.ts.
import type { CausalLM } from '../../model/index.js';
import * as torch from '../../torch/index.js';
import { DTYPE_BYTES, type DType, type ParamGroup, type ProcessGroup, type Tensor } from '../../torch/index.js';

/** The unit index of the root (embeddings, final norm, LM head); decoder layer i is unit i. */
export const ROOT_UNIT = -1;

/** A parameter's place in its class's flat vector. */
export interface FlatParam {
  name: string;
  shape: number[];
  numel: number;
  offset: number;
}

/** One weight-decay class of a unit: its flat layout and this rank's shard of it. */
export interface ShardClass {
  decay: boolean;
  params: FlatParam[];
  /** n: the class's elements. */
  total: number;
  /** L = ⌈n / W⌉: every rank's shard length. */
  shardLength: number;
  /** This rank's shard [L] in the master dtype: a leaf the optimizer updates. */
  shard: Tensor;
}

export interface Unit {
  index: number;
  classes: ShardClass[];
}

/**
 * Rank `rank`'s part of a class's flat vector without its padding: flat[from, from + count), from = min(rL, n),
 * count = max(0, min(L, n - rL)); the rest of its shard (L - count elements) is zeros.
 */
export function ownRange(c: Pick<ShardClass, 'total' | 'shardLength'>, rank: number): { from: number; count: number } {
  const start = rank * c.shardLength;
  return { from: Math.min(start, c.total), count: Math.max(0, Math.min(c.shardLength, c.total - start)) };
}

/** The rule of torch.weightDecayGroups: biases, norm weights and other 1-d tensors get no weight decay. */
const noDecay = (name: string, shape: readonly number[]) => shape.length < 2 || name.endsWith('.bias') || /norm/i.test(name);

/** Which unit parameter `name` belongs to. */
export function unitOf(name: string): number {
  const layer = /^model\.layers\.(\d+)\./.exec(name)?.[1];
  return layer === undefined ? ROOT_UNIT : Number(layer);
}

/** The bytes of a tensor's elements. */
export const bytesOf = (t: Tensor) => t.numel * DTYPE_BYTES[t.dtype];

/**
 * The whole parameters a model is sharded from, read in ranges: their shapes by Hugging Face name (in the model's
 * order), the master dtype and device of the shards, and elements [from, from + count) of one parameter as a 1-d
 * tensor (any dtype and device: it is copied into the shard).
 */
export interface ShardSource {
  shapes: ReadonlyMap<string, readonly number[]>;
  dtype: DType;
  device: string;
  read(name: string, from: number, count: number): Tensor;
}

/** A ShardSource over whole tensors in memory: its ranges are views. */
function tensorSource(weights: ReadonlyMap<string, Tensor>): ShardSource {
  const first = [...weights.values()][0];
  return {
    shapes: new Map([...weights].map(([name, t]) => [name, t.shape])),
    dtype: first?.dtype ?? 'float32',
    device: first?.device ?? 'cpu',
    read: (name, from, count) => (weights.get(name) as Tensor).detach().reshape([-1]).narrow(0, from, count),
  };
}

/**
 * Copies flat[from, from + count) of `params` laid end to end into `into` (at 0): for each parameter p, the overlap
 * of the range with [offset_p, offset_p + numel_p), read as elements of p, copied and freed before the next is read.
 */
function copyFlatRange(params: readonly FlatParam[], from: number, count: number, read: ShardSource['read'], into: Tensor): void {
  for (const p of params) {
    const lo = Math.max(from, p.offset);
    const hi = Math.min(from + count, p.offset + p.numel);
    if (lo >= hi) continue;
    const piece = read(p.name, lo - p.offset, hi - lo);
    try {
      into.narrow(0, lo - from, hi - lo).copy_(piece);
    } finally {
      piece.dispose();
    }
  }
}

export interface ShardOptions {
  rank: number;
  worldSize: number;
  /** The dtype the model computes in (gathers are cast to it). */
  computeDtype: DType;
  /** The parameters are not trained (LoRA's base): no gradients, no reductions (default false). */
  frozen?: boolean;
}

/** A model whose parameters are sharded over the ranks of a group (see the header). */
export class FullyShardedModel {
  readonly model: CausalLM;
  readonly rank: number;
  readonly worldSize: number;
  readonly computeDtype: DType;
  readonly frozen: boolean;
  /** Units in forward order: the root first, then the layers. */
  readonly units: Unit[];
  /** The empty tensors the model reads while a unit is not gathered, by parameter name. */
  readonly #placeholders = new Map<string, Tensor>();
  /** Gathered units the model reads now, by unit index. */
  readonly #installed = new Map<number, Map<string, Tensor>>();
  #liveGatheredBytes = 0;
  #peakGatheredBytes = 0;
  #peakGradientBytes = 0;

  /**
   * Shards the whole parameters `weights` describes and leaves `model` reading placeholders; the model's own
   * parameters are disposed. `weights` is a map of tensors in the master dtype by Hugging Face name (the model's own,
   * so then disposed, or a master copy, which stays the caller's), or a ShardSource (positioned reads of a model
   * folder: ./fsdp-load.ts), of which this rank reads only its ranges. The shards are copies.
   */
  constructor(model: CausalLM, weights: ReadonlyMap<string, Tensor> | ShardSource, options: ShardOptions) {
    const { rank, worldSize } = options;
    if (!Number.isInteger(worldSize) || worldSize < 1 || !Number.isInteger(rank) || rank < 0 || rank >= worldSize)
      throw new Error(`fully sharded model: rank ${rank} of ${worldSize} is not a rank of the group`);
    this.model = model;
    this.rank = rank;
    this.worldSize = worldSize;
    this.computeDtype = options.computeDtype;
    this.frozen = options.frozen ?? false;
    const source = weights instanceof Map ? tensorSource(weights) : (weights as ShardSource);
    const byUnit = new Map<number, [string, readonly number[]][]>();
    for (const [name, shape] of source.shapes) {
      const unit = unitOf(name);
      byUnit.set(unit, [...(byUnit.get(unit) ?? []), [name, shape]]);
    }
    const order = [...byUnit.keys()].sort((a, b) => a - b); // the root (-1) first, then the layers
    this.units = order.map((index) => ({ index, classes: this.#shardUnit(byUnit.get(index) ?? [], source) }));
    for (const name of source.shapes.keys())
      this.#placeholders.set(name, torch.keep(torch.zeros([0], { dtype: this.computeDtype, device: source.device })));
    for (const t of model.replaceParameters(this.#placeholders).values()) t.dispose();
  }

  #shardUnit(params: [string, readonly number[]][], source: ShardSource): ShardClass[] {
    return [true, false].flatMap((decay) => {
      const members = params.filter(([name, shape]) => noDecay(name, shape) !== decay);
      if (members.length === 0) return [];
      let offset = 0;
      const flatParams = members.map(([name, shape]) => {
        const numel = shape.reduce((a, b) => a * b, 1);
        const p = { name, shape: [...shape], numel, offset };
        offset += numel;
        return p;
      });
      const shardLength = Math.ceil(offset / this.worldSize);
      const { from, count } = ownRange({ total: offset, shardLength }, this.rank);
      const shard = torch.noGrad(() =>
        torch.scope(() => {
          const own = torch.keep(torch.zeros([shardLength], { dtype: source.dtype, device: source.device }));
          copyFlatRange(flatParams, from, count, source.read, own);
          return own;
        }),
      );
      shard.requiresGrad_(!this.frozen);
      return [{ decay, params: flatParams, total: offset, shardLength, shard }];
    });
  }

  /** The optimizer's parameter groups: the decayed shards, then the others (torch.weightDecayGroups' order). */
  optimizerGroups(weightDecay: number): ParamGroup[] {
    const shards = (decay: boolean) => this.units.flatMap((u) => u.classes.filter((c) => c.decay === decay).map((c) => c.shard));
    return [
      { params: shards(true), weightDecay },
      { params: shards(false), weightDecay: 0 },
    ].filter((g) => g.params.length > 0);
  }

  /** The shards' dtype: the master weights'. */
  get masterDtype(): DType {
    return this.units[0]?.classes[0]?.shard.dtype ?? 'float32';
  }

  /** Every shard leaf, in optimizer order. */
  get shards(): Tensor[] {
    return this.optimizerGroups(0).flatMap((g) => g.params);
  }

  /** The decoder layers (units 0 .. numLayers - 1). */
  get numLayers(): number {
    return this.units.length - 1;
  }

  unit(index: number): Unit {
    const unit = this.units.find((u) => u.index === index);
    if (unit === undefined) throw new RangeError(`fully sharded model: no unit ${index}`);
    return unit;
  }

  /**
   * Every rank: all-gathers unit `index` (issued now, in call order) in `dtype` (default the compute dtype); resolves
   * to its parameters by name, leaves that require grad when `trainable` (never when frozen). The caller installs or
   * discards them.
   */
  async gather(
    index: number,
    group: ProcessGroup,
    dtype: DType = this.computeDtype,
    trainable = true,
  ): Promise<Map<string, Tensor>> {
    const unit = this.unit(index);
    const out = await this.gatherTensors(index, group, (c) => c.shard, dtype, trainable && !this.frozen);
    this.#liveGatheredBytes += unit.classes.reduce((n, c) => n + c.shardLength * this.worldSize * DTYPE_BYTES[dtype], 0);
    this.#peakGatheredBytes = Math.max(this.#peakGatheredBytes, this.#liveGatheredBytes);
    return out;
  }

  /**
   * Every rank: the whole tensors of unit `index` laid out as its parameters, from a per-class shard-shaped tensor
   * of each rank (`of(c)`: the shard itself, or an optimizer moment of it), all-gathered in `dtype`. By name; the
   * caller disposes them.
   */
  async gatherTensors(
    index: number,
    group: ProcessGroup,
    of: (c: ShardClass) => Tensor,
    dtype: DType,
    trainable = false,
  ): Promise<Map<string, Tensor>> {
    const unit = this.unit(index);
    const mine = torch.noGrad(() =>
      torch.scope(() => torch.keep(torch.cat(unit.classes.map((c) => of(c).detach().to({ dtype, copy: true }))))),
    );
    let parts: Tensor[];
    try {
      parts = await group.allGather(mine);
    } finally {
      mine.dispose();
    }
    try {
      return torch.noGrad(() =>
        torch.scope(() => {
          const named = new Map<string, Tensor>();
          let from = 0;
          for (const c of unit.classes) {
            const full = torch.cat(parts.map((p) => p.narrow(0, from, c.shardLength)));
            for (const p of c.params) {
              const t = full.narrow(0, p.offset, p.numel).reshape(p.shape).detach();
              named.set(p.name, torch.keep(trainable ? t.requiresGrad_(true) : t));
            }
            from += c.shardLength;
          }
          return named;
        }),
      );
    } finally {
      for (const p of parts) p.dispose();
    }
  }

  /** Disposes gathered parameters that were not installed (or were taken back by release()). */
  discard(index: number, gathered: ReadonlyMap<string, Tensor>): void {
    const unit = this.unit(index);
    const dtype = [...gathered.values()][0]?.dtype ?? this.computeDtype;
    for (const t of gathered.values()) t.dispose();
    this.#liveGatheredBytes -= unit.classes.reduce((n, c) => n + c.shardLength * this.worldSize * DTYPE_BYTES[dtype], 0);
  }

  /** The model reads unit `index`'s gathered parameters. */
  install(index: number, gathered: Map<string, Tensor>): void {
    if (this.#installed.has(index)) throw new Error(`fully sharded model: unit ${index} is already gathered`);
    this.model.replaceParameters(gathered); // hands back the placeholders, which stay ours
    this.#installed.set(index, gathered);
  }

  isInstalled(index: number): boolean {
    return this.#installed.has(index);
  }

  /** The model reads placeholders again for unit `index`; its gathered parameters (and their gradients) go. */
  release(index: number): void {
    const gathered = this.#installed.get(index);
    if (gathered === undefined) return;
    const unit = this.unit(index);
    this.model.replaceParameters(new Map(unit.classes.flatMap((c) => c.params.map((p) => [p.name, this.#placeholder(p.name)]))));
    this.#installed.delete(index);
    this.discard(index, gathered);
  }

  #placeholder(name: string): Tensor {
    return this.#placeholders.get(name) as Tensor;
  }

  /**
   * Every rank: reduce-scatters unit `index`'s gradients (those of its installed parameters; zeros for a unit not
   * installed or a parameter without one) and adds this rank's block to its shards' gradients. The collective is
   * issued now, from copies, so the unit may be released at once; the promise settles when the shards have it.
   * A frozen model has no gradients: nothing is issued, on any rank.
   */
  reduceGradients(index: number, group: ProcessGroup): Promise<void> {
    if (this.frozen) return Promise.resolve();
    const unit = this.unit(index);
    const installed = this.#installed.get(index) ?? null;
    const input = torch.noGrad(() =>
      torch.scope(() => {
        const flats = unit.classes.map((c) => {
          const dtype = c.shard.dtype;
          const device = c.shard.device;
          const parts = c.params.map((p) => {
            const grad = installed?.get(p.name)?.grad ?? null;
            return grad === null ? torch.zeros([p.numel], { dtype, device }) : grad.reshape([-1]).to({ dtype });
          });
          const padding = this.worldSize * c.shardLength - c.total;
          if (padding > 0) parts.push(torch.zeros([padding], { dtype, device }));
          return torch.cat(parts);
        });
        const blocks: Tensor[] = [];
        for (let r = 0; r < this.worldSize; r++)
          for (const [i, c] of unit.classes.entries())
            blocks.push((flats[i] as Tensor).narrow(0, r * c.shardLength, c.shardLength));
        return torch.keep(torch.cat(blocks));
      }),
    );
    return group
      .reduceScatter(input, { op: 'sum' })
      .finally(() => input.dispose())
      .then((summed) => {
        try {
          torch.noGrad(() =>
            torch.scope(() => {
              let from = 0;
              for (const c of unit.classes) {
                const part = summed.narrow(0, from, c.shardLength);
                const grad = c.shard.grad;
                if (grad === null) c.shard.grad = part.clone();
                else grad.add_(part);
                from += c.shardLength;
              }
              this.#peakGradientBytes = Math.max(this.#peakGradientBytes, this.stateBytes().gradients);
            }),
          );
        } finally {
          summed.dispose();
        }
      });
  }

  /**
   * Every rank: clips the shards' gradients to a global norm of at most maxNorm, as torch.nn.utils.clip_grad_norm_
   * over the whole parameters: total = sqrt(Σ_ranks Σ_shards |g|²), each gradient × min(1, maxNorm / (total + 1e-6)).
   * Returns the total before clipping.
   */
  async clipGradNorm(group: ProcessGroup, maxNorm: number): Promise<number> {
    const squares = torch.noGrad(() =>
      torch.scope(() => {
        const sum = torch.zeros([1], { dtype: 'float64' });
        for (const shard of this.shards) {
          const g = shard.grad;
          if (g !== null) sum.add_(g.to({ dtype: 'float64', device: 'cpu' }).square().sum());
        }
        return torch.keep(sum);
      }),
    );
    let total: number;
    try {
      await group.allReduce(squares, { op: 'sum' });
      total = Math.sqrt(squares.item());
    } finally {
      squares.dispose();
    }
    const coefficient = Math.min(1, maxNorm / (total + 1e-6));
    if (coefficient < 1)
      torch.noGrad(() =>
        torch.scope(() => {
          for (const shard of this.shards) shard.grad?.mul_(coefficient);
        }),
      );
    return total;
  }

  /**
   * Every rank: the whole parameters in `dtype` (default the shards' dtype: the master weights), unit by unit, in the
   * order the model lists them (a consolidated checkpoint). The caller disposes them.
   */
  async consolidate(group: ProcessGroup, dtype?: DType): Promise<Map<string, Tensor>> {
    const byName = new Map<string, Tensor>();
    for (const unit of this.units) {
      const gathered = await this.gatherTensors(unit.index, group, (c) => c.shard, dtype ?? this.masterDtype);
      for (const [name, t] of gathered) byName.set(name, t);
    }
    return new Map([...this.model.parameters().keys()].map((name) => [name, byName.get(name) as Tensor]));
  }

  /**
   * This rank's resident training state, in bytes: its shards (parameters), their gradients now and at most since
   * the last resetPeak(), and the most bytes of gathered units held at once since then (the gather buffers); with
   * the count of flat classes and the largest unit's gathered bytes (root, layer).
   */
  stateBytes(): {
    parameters: number;
    gradients: number;
    peakGradients: number;
    peakGathered: number;
    classes: number;
    largestGather: { root: number; layer: number };
  } {
    let parameters = 0;
    let gradients = 0;
    torch.scope(() => {
      for (const shard of this.shards) {
        parameters += bytesOf(shard);
        const g = shard.grad;
        if (g !== null) gradients += bytesOf(g);
      }
    });
    const layers = this.units.filter((u) => u.index !== ROOT_UNIT).map((u) => this.gatheredBytes(u.index));
    return {
      parameters,
      gradients,
      peakGradients: Math.max(this.#peakGradientBytes, gradients),
      peakGathered: this.#peakGatheredBytes,
      classes: this.units.reduce((n, u) => n + u.classes.length, 0),
      largestGather: { root: this.gatheredBytes(ROOT_UNIT), layer: Math.max(0, ...layers) },
    };
  }

  /** The whole policy's parameters in the master dtype, in bytes (what one process holds). */
  wholeParameterBytes(): number {
    return this.units.reduce((n, u) => n + u.classes.reduce((m, c) => m + c.total * DTYPE_BYTES[this.masterDtype], 0), 0);
  }

  /** Unit `index`'s gathered bytes in the compute dtype (its whole parameters, with padding). */
  gatheredBytes(index: number): number {
    return this.unit(index).classes.reduce((n, c) => n + c.shardLength * this.worldSize * DTYPE_BYTES[this.computeDtype], 0);
  }

  resetPeak(): void {
    this.#peakGatheredBytes = this.#liveGatheredBytes;
    this.#peakGradientBytes = 0;
  }

  dispose(): void {
    for (const index of [...this.#installed.keys()]) this.release(index);
    for (const unit of this.units) for (const c of unit.classes) c.shard.dispose();
    // the placeholders belong to the model (it reads them): it disposes them with itself
  }
}
