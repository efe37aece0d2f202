// AdamW over a fully sharded model's shards (./fsdp.ts), with checkpoints in one process's layout.
//
// The optimizer's parameters are this rank's shard leaves (decayed classes, then the others), so its moments cover
// 1/W of the model. A checkpoint holds the same optimizer file as one process writes (AdamW over
// torch.weightDecayGroups of the master model's parameters: state.<i>.exp_avg with the parameter's shape, ...):
// before a save every rank joins gatherState(), which all-gathers the moments unit by unit and lays them out by
// parameter; loadStateDict() takes such a state (written by one process, ZeRO-1 or any number of sharded ranks) and
// keeps this rank's shard of each flat class, so a run resumes with any number of ranks.
import * as torch from '../../torch/index.js';
import type { OptimizerState, ProcessGroup, Tensor } from '../../torch/index.js';
import { bytesOf, type FullyShardedModel, type ShardClass } from './fsdp.js';

export class ShardedAdamW extends torch.AdamW {
  readonly sharded: FullyShardedModel;
  /** Parameter names in one process's optimizer order (its state index i is the i-th). */
  readonly #oneProcessOrder: string[];
  /** The whole state as gatherState() rebuilt it, until the next step. */
  #gathered: OptimizerState | null = null;

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

  override step(): void {
    this.#dropGathered();
    super.step();
  }

  /**
   * Every rank: rebuilds the whole optimizer state (what one process's AdamW holds) from the shards; stateDict()
   * returns it until the next step.
   */
  async gatherState(group: ProcessGroup): Promise<void> {
    const own = super.stateDict().tensors;
    const leafIndex = new Map(this.groups.flatMap((g) => g.params).map((p, i) => [p, i]));
    const stateOf = (c: ShardClass, name: string): Tensor | undefined => own[`state.${leafIndex.get(c.shard)}.${name}`];
    const stepped = (c: ShardClass) => stateOf(c, 'step') !== undefined;
    const tensors: Record<string, Tensor> = {};
    const position = new Map(this.#oneProcessOrder.map((name, i) => [name, i]));
    for (const unit of this.sharded.units) {
      // every rank holds state for the same shards (they all step the same units)
      if (!unit.classes.every(stepped)) continue;
      for (const moment of ['exp_avg', 'exp_avg_sq'] as const) {
        const whole = await this.sharded.gatherTensors(
          unit.index,
          group,
          (c) => stateOf(c, moment) as Tensor,
          this.sharded.masterDtype,
        );
        for (const [name, t] of whole) tensors[`state.${position.get(name)}.${moment}`] = t;
      }
      for (const c of unit.classes) {
        const step = stateOf(c, 'step') as Tensor;
        for (const p of c.params) tensors[`state.${position.get(p.name)}.step`] = torch.keep(step.clone());
      }
    }
    this.#dropGathered();
    this.#gathered = {
      kind: 'AdamW',
      groups: this.groupSettings(),
      tensors,
    };
  }

  /** The whole state as gatherState() rebuilt it (a checkpoint's optimizer file). */
  override stateDict(): OptimizerState {
    if (this.#gathered === null)
      throw new Error(
        `fully sharded optimizer (rank ${this.sharded.rank} of ${this.sharded.worldSize}): its state is sharded over ` +
          'the ranks; every rank must join gatherState() after the last step before stateDict() (a checkpoint) can read it',
      );
    return this.#gathered;
  }

  /** Takes the whole state (one process's AdamW layout) and keeps this rank's shard of it. */
  override loadStateDict(saved: OptimizerState): void {
    if (saved.kind !== 'AdamW') throw new Error(`optimizer state is for ${saved.kind}, not AdamW`);
    const position = new Map(this.#oneProcessOrder.map((name, i) => [name, i]));
    const leaves = this.groups.flatMap((g) => g.params);
    const tensors: Record<string, Tensor> = {};
    torch.noGrad(() =>
      torch.scope(() => {
        for (const unit of this.sharded.units) {
          for (const c of unit.classes) {
            const j = leaves.indexOf(c.shard);
            const keys = c.params.map((p) => `state.${position.get(p.name)}`);
            const present = keys.filter((k) => saved.tensors[`${k}.step`] !== undefined).length;
            if (present === 0) continue;
            if (present !== keys.length)
              throw new Error(
                `optimizer state: parameters ${c.params.map((p) => p.name).join(', ')} share a shard, but only ${present} of ` +
                  `them have AdamW state; a fully sharded optimizer needs all or none`,
              );
            tensors[`state.${j}.step`] = saved.tensors[`${keys[0]}.step`] as Tensor;
            for (const moment of ['exp_avg', 'exp_avg_sq']) {
              const parts = c.params.map((p, i) => {
                const t = saved.tensors[`${keys[i]}.${moment}`];
                if (t === undefined || t.numel !== p.numel)
                  throw new Error(
                    `optimizer state ${keys[i]}.${moment}: ${t === undefined ? 'missing' : `${t.numel} elements`}; parameter ` +
                      `${p.name} has ${p.numel}`,
                  );
                return t.reshape([-1]).to({ dtype: c.shard.dtype, device: c.shard.device });
              });
              const padding = this.sharded.worldSize * c.shardLength - c.total;
              if (padding > 0) parts.push(torch.zeros([padding], { dtype: c.shard.dtype, device: c.shard.device }));
              tensors[`state.${j}.${moment}`] = torch.cat(parts).narrow(0, this.sharded.rank * c.shardLength, c.shardLength);
            }
          }
        }
        // (the base class reads its own class name as the kind: the shards' layout is this class's)
        super.loadStateDict({ kind: this.constructor.name, groups: saved.groups, tensors });
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

  override dispose(): void {
    this.#dropGathered();
    super.dispose();
  }

  /** Frees the state gatherState() rebuilt (a rank that does not write the checkpoint). */
  dropGatheredState(): void {
    this.#dropGathered();
  }

  #dropGathered(): void {
    if (this.#gathered !== null) for (const t of Object.values(this.#gathered.tensors)) t.dispose();
    this.#gathered = null;
  }
}
