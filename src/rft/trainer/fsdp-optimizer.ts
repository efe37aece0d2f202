// AdamW over a fully sharded model's shards (./fsdp.ts).
//
// The optimizer's parameters are this rank's shard leaves (decayed classes, then the others), so its moments cover
// 1/W of the model. A checkpoint holds each rank's state of its shards (classState; ./fsdp-checkpoint.ts writes them);
// loadStateDict() takes one process's layout (AdamW over torch.weightDecayGroups of the master model's parameters:
// state.<i>.exp_avg with the parameter's shape, ...: a one-process or ZeRO-1 checkpoint's optimizer file, or a sharded
// checkpoint read back whole) and keeps this rank's shard of each flat class, so a run resumes with any number of ranks;
// loadClassStates() takes this rank's part of each class as it is (./fsdp-resume.ts reads only that part of a file).
import * as torch from '../../torch/index.js';
import type { OptimizerState, Tensor } from '../../torch/index.js';
import { bytesOf, type FullyShardedModel, ownRange, type ShardClass } from './fsdp.js';

export class ShardedAdamW extends torch.AdamW {
  readonly sharded: FullyShardedModel;
  /** Parameter names in one process's optimizer order (its state index i is the i-th). */
  readonly #oneProcessOrder: string[];

  constructor(sharded: FullyShardedModel, options: torch.AdamWOptions & { weightDecay: number }) {
    super(sharded.optimizerGroups(options.weightDecay), options);
    this.sharded = sharded;
    const classes = sharded.units.flatMap((u) => u.classes);
    const names = (decay: boolean) =>
      new Set(classes.filter((c) => c.decay === decay).flatMap((c) => c.params.map((p) => p.name)));
    const decayed = names(true);
    const plain = names(false);
    const all = [...sharded.model.parameters().keys()];
    this.#oneProcessOrder = [...all.filter((n) => decayed.has(n)), ...all.filter((n) => plain.has(n))];
  }

  /** Refused: the state is sharded; a checkpoint holds each rank's shards (./fsdp-checkpoint.ts, classState). */
  override stateDict(): OptimizerState {
    throw new Error(
      `fully sharded optimizer (rank ${this.sharded.rank} of ${this.sharded.worldSize}): its state is sharded over the ` +
        "ranks; a checkpoint writes each rank's shards of it (fsdp-checkpoint.ts)",
    );
  }

  /** Takes the whole state (one process's AdamW layout) and keeps this rank's shard of it. */
  override loadStateDict(saved: OptimizerState): void {
    if (saved.kind !== 'AdamW') throw new Error(`optimizer state is for ${saved.kind}, not AdamW`);
    const position = new Map(this.#oneProcessOrder.map((name, i) => [name, i]));
    this.loadClassStates(saved.groups, (c) => {
      const keys = c.params.map((p) => `state.${position.get(p.name)}`);
      const present = keys.filter((k) => saved.tensors[`${k}.step`] !== undefined).length;
      if (present === 0) return null;
      if (present !== keys.length)
        throw new Error(
          `optimizer state: parameters ${c.params.map((p) => p.name).join(', ')} share a shard, but only ${present} of ` +
            `them have AdamW state; a fully sharded optimizer needs all or none`,
        );
      const moment = (name: 'exp_avg' | 'exp_avg_sq') => {
        const parts = c.params.map((p, i) => {
          const t = saved.tensors[`${keys[i]}.${name}`];
          if (t === undefined || t.numel !== p.numel)
            throw new Error(
              `optimizer state ${keys[i]}.${name}: ${t === undefined ? 'missing' : `${t.numel} elements`}; parameter ` +
                `${p.name} has ${p.numel}`,
            );
          return t.reshape([-1]);
        });
        const { from, count } = ownRange(c, this.sharded.rank);
        return torch.cat(parts).narrow(0, from, count);
      };
      return { exp_avg: moment('exp_avg'), exp_avg_sq: moment('exp_avg_sq'), step: saved.tensors[`${keys[0]}.step`] as Tensor };
    });
  }

  /**
   * Loads this rank's state class by class: `stateOf(c)` gives the class's moments over this rank's part of the flat
   * vector, flat[rL, min((r+1)L, n)) (the padding past n is zeros), and its step count; null: not stepped yet.
   */
  loadClassStates(
    groups: OptimizerState['groups'],
    stateOf: (c: ShardClass) => { exp_avg: Tensor; exp_avg_sq: Tensor; step: Tensor } | null,
  ): void {
    const leaves = this.groups.flatMap((g) => g.params);
    const tensors: Record<string, Tensor> = {};
    torch.noGrad(() =>
      torch.scope(() => {
        for (const unit of this.sharded.units) {
          for (const c of unit.classes) {
            const state = stateOf(c);
            if (state === null) continue;
            const j = leaves.indexOf(c.shard);
            tensors[`state.${j}.step`] = state.step;
            for (const moment of ['exp_avg', 'exp_avg_sq'] as const) {
              const part = state[moment].to({ dtype: c.shard.dtype, device: c.shard.device });
              const padding = c.shardLength - part.numel;
              tensors[`state.${j}.${moment}`] =
                padding > 0 ? torch.cat([part, torch.zeros([padding], { dtype: c.shard.dtype, device: c.shard.device })]) : part;
            }
          }
        }
        // (the base class reads its own class name as the kind: the shards' layout is this class's)
        super.loadStateDict({ kind: this.constructor.name, groups, tensors });
      }),
    );
  }

  /** Parameter names in one process's optimizer order (its state index i is the i-th): a sharded checkpoint's index. */
  get oneProcessOrder(): readonly string[] {
    return this.#oneProcessOrder;
  }

  /** The groups' settings as one process's stateDict() lists them. */
  groupSettings(): OptimizerState['groups'] {
    return this.groups.map((g) => ({ lr: g.lr, weightDecay: g.weightDecay, ...g.hyper }));
  }

  /** This rank's AdamW state of shard class `c` (its moments [L] and step count), null before its first step. */
  classState(c: ShardClass): { exp_avg: Tensor; exp_avg_sq: Tensor; step: Tensor } | null {
    const own = super.stateDict().tensors;
    const j = this.groups.flatMap((g) => g.params).indexOf(c.shard);
    const [expAvg, expAvgSq, step] = ['exp_avg', 'exp_avg_sq', 'step'].map((name) => own[`state.${j}.${name}`]);
    return expAvg && expAvgSq && step ? { exp_avg: expAvg, exp_avg_sq: expAvgSq, step } : null;
  }

  /** Elements of the optimizer state this rank holds (its shards' moments and step counts). */
  localStateElements(): number {
    return Object.values(super.stateDict().tensors).reduce((n, t) => n + t.numel, 0);
  }

  /** Bytes of the optimizer state this rank holds. */
  localStateBytes(): number {
    return Object.values(super.stateDict().tensors).reduce((n, t) => n + bytesOf(t), 0);
  }
}
