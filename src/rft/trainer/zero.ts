// ZeRO-1 (Rajbhandari et al. 2020, stage 1: optimizer state partitioning) for the data-parallel trainer
// (./data-parallel.ts): every rank still holds every parameter and the whole gradient (all-reduced as without it, so
// gradient clipping sees the global norm), but AdamW's moments live on one rank only.
//
//   flat   the optimizer's parameters, group by group, flattened and laid end to end: N elements
//   shard  rank r owns flat[⌊rN/W⌋, ⌊(r+1)N/W⌋) (W ranks); a parameter may straddle two shards
//   step   rank r runs AdamW on its shard alone (views of the parameters and of their gradients), then every rank
//          all-gathers the shards, so each ends with the parameters one process would have
//
// AdamW is elementwise (moments, bias correction by the parameter's own step count, decoupled weight decay), so the
// update of a slice is the slice of the update: the result equals the unsharded step. Memory: 2N/W moment elements
// per rank instead of 2N.
//
// Checkpoints hold the same files as one process writes (state.<i>.exp_avg with the parameter's shape, ...): before
// a save, every rank joins gatherState(), which rebuilds the whole state on each rank; loadStateDict() takes the
// whole state and keeps this rank's shard, so a run resumes with any number of ranks.
import * as torch from '../../torch/index.js';
import type { OptimizerState, ParamGroup, ProcessGroup, Tensor } from '../../torch/index.js';

/** The flat range [start, end) of rank `rank`'s shard of N elements over `worldSize` ranks. */
export function shardBounds(n: number, rank: number, worldSize: number): { start: number; end: number } {
  return { start: Math.floor((rank * n) / worldSize), end: Math.floor(((rank + 1) * n) / worldSize) };
}

/** A parameter's part of this rank's shard: elements [from, from + length) of its flattened view. */
interface Piece {
  param: Tensor;
  /** The parameter's offset in the flat layout. */
  offset: number;
  from: number;
  length: number;
  /** A leaf sharing the parameter's storage (the elements above): what the inner AdamW updates. */
  view: Tensor;
}

/** AdamW whose moments cover this rank's shard of the parameters only (see the header). */
export class ZeroAdamW extends torch.AdamW {
  readonly rank: number;
  readonly worldSize: number;
  /** N: elements of all the optimizer's parameters. */
  readonly totalElements: number;
  readonly shard: { start: number; end: number };
  /** Every parameter's flat offset, in the optimizer's order. */
  readonly #offsets: number[];
  /** This rank's pieces, in the flat order. */
  readonly #pieces: Piece[];
  readonly #inner: torch.AdamW;
  /** The whole state as gatherState() rebuilt it, until the next step. */
  #gathered: OptimizerState | null = null;

  constructor(params: readonly ParamGroup[], options: torch.AdamWOptions, shard: { rank: number; worldSize: number }) {
    super(params, options);
    const { rank, worldSize } = shard;
    if (!Number.isInteger(worldSize) || worldSize < 1 || !Number.isInteger(rank) || rank < 0 || rank >= worldSize)
      throw new Error(`ZeRO-1 optimizer: rank ${rank} of ${worldSize} is not a rank of the group`);
    this.rank = rank;
    this.worldSize = worldSize;
    const all = this.groups.flatMap((g) => g.params);
    const dtypes = new Set(all.map((p) => p.dtype));
    if (dtypes.size > 1)
      throw new Error(
        `ZeRO-1 optimizer: the parameters have dtypes ${[...dtypes].join(', ')}; the flat shards need one dtype ` +
          '(train with float32 master weights: trainer.master_dtype)',
      );
    this.#offsets = [];
    let n = 0;
    for (const p of all) {
      this.#offsets.push(n);
      n += p.numel;
    }
    this.totalElements = n;
    this.shard = shardBounds(n, rank, worldSize);
    const { start, end } = this.shard;
    this.#pieces = [];
    const innerGroups: ParamGroup[] = [];
    let index = 0;
    for (const g of this.groups) {
      const views: Tensor[] = [];
      for (const p of g.params) {
        const offset = this.#offsets[index++] as number;
        const from = Math.max(start, offset) - offset;
        const to = Math.min(end, offset + p.numel) - offset;
        if (to <= from) continue;
        const view = torch.keep(
          torch
            .noGrad(() =>
              torch.scope(() =>
                p
                  .detach()
                  .reshape([-1])
                  .narrow(0, from, to - from),
              ),
            )
            .requiresGrad_(true),
        );
        views.push(view);
        this.#pieces.push({ param: p, offset, from, length: to - from, view });
      }
      innerGroups.push({ params: views, lr: g.lr, weightDecay: g.weightDecay });
    }
    const { beta1, beta2, eps } = (this.groups[0]?.hyper ?? { beta1: 0.9, beta2: 0.999, eps: 1e-8 }) as {
      beta1: number;
      beta2: number;
      eps: number;
    };
    this.#inner = new torch.AdamW(innerGroups, { betas: [beta1, beta2], eps });
  }

  /** AdamW on this rank's shard; the parameters outside it are unchanged until gatherParameters(). */
  override step(): void {
    if (this.#gathered !== null) disposeState(this.#gathered);
    this.#gathered = null;
    this.groups.forEach((g, i) => {
      const inner = this.#inner.groups[i];
      if (inner === undefined) return;
      inner.lr = g.lr;
      inner.weightDecay = g.weightDecay;
    });
    torch.noGrad(() =>
      torch.scope(() => {
        for (const piece of this.#pieces) {
          const grad = piece.param.grad;
          piece.view.grad = grad === null ? null : grad.reshape([-1]).narrow(0, piece.from, piece.length);
        }
      }),
    );
    try {
      this.#inner.step();
    } finally {
      for (const piece of this.#pieces) piece.view.grad = null;
    }
  }

  /** Every rank: all-gathers the shards updated by step(), so every rank holds the whole updated parameters. */
  async gatherParameters(group: ProcessGroup, deviceGroup: ProcessGroup = group): Promise<void> {
    this.#checkGroup(group);
    this.#checkGroup(deviceGroup);
    const all = this.groups.flatMap((g) => g.params);
    const flat = await this.#allGatherFlat(deviceGroup, (piece) => piece.view);
    try {
      torch.noGrad(() =>
        torch.scope(() => {
          all.forEach((p, i) => {
            const offset = this.#offsets[i] as number;
            p.detach()
              .reshape([-1])
              .copy_(flat.narrow(0, offset, p.numel));
          });
        }),
      );
    } finally {
      flat.dispose();
    }
  }

  /**
   * Every rank: rebuilds the whole optimizer state (what one process's AdamW holds) from the shards; stateDict()
   * returns it until the next step.
   */
  async gatherState(group: ProcessGroup, deviceGroup: ProcessGroup = group): Promise<void> {
    this.#checkGroup(group);
    this.#checkGroup(deviceGroup);
    const all = this.groups.flatMap((g) => g.params);
    const stateOf = (piece: Piece) => this.#innerState(piece.view);
    // a parameter's step count, from any rank that holds a piece of it (-1: no state anywhere)
    const steps = torch.full([all.length], -1, { dtype: 'float64' });
    const positions = new Map(all.map((p, i) => [p, i]));
    let stepValues: Float64Array;
    try {
      const own = new Float64Array(all.length).fill(-1);
      for (const piece of this.#pieces) {
        const s = stateOf(piece);
        if (s?.step !== undefined) own[positions.get(piece.param) as number] = s.step.item();
      }
      const ownTensor = torch.tensor(own);
      try {
        steps.copy_(ownTensor);
      } finally {
        ownTensor.dispose();
      }
      await group.allReduce(steps, { op: 'max' });
      stepValues = steps.toTypedArray() as Float64Array;
    } finally {
      steps.dispose();
    }
    const moments: Record<string, Tensor> = {};
    for (const name of ['exp_avg', 'exp_avg_sq'] as const) {
      const flat = await this.#allGatherFlat(deviceGroup, (piece) => stateOf(piece)?.[name] ?? null);
      try {
        all.forEach((p, i) => {
          if ((stepValues[i] as number) < 0) return;
          const offset = this.#offsets[i] as number;
          moments[`state.${i}.${name}`] = torch.keep(torch.scope(() => flat.narrow(0, offset, p.numel).reshape(p.shape).clone()));
        });
      } finally {
        flat.dispose();
      }
    }
    all.forEach((p, i) => {
      const step = stepValues[i] as number;
      if (step >= 0) moments[`state.${i}.step`] = torch.keep(torch.full([], step, { dtype: 'float32', device: p.device }));
    });
    if (this.#gathered !== null) disposeState(this.#gathered);
    this.#gathered = {
      kind: 'AdamW',
      groups: this.groups.map((g) => ({ lr: g.lr, weightDecay: g.weightDecay, ...g.hyper })),
      tensors: moments,
    };
  }

  /** The whole state as gatherState() rebuilt it (a checkpoint's optimizer file). */
  override stateDict(): OptimizerState {
    if (this.#gathered === null)
      throw new Error(
        `ZeRO-1 optimizer (rank ${this.rank} of ${this.worldSize}): its state is sharded over the ranks; every rank ` +
          'must join gatherState() after the last step before stateDict() (a checkpoint) can read it',
      );
    return this.#gathered;
  }

  /** Takes the whole state (one process's AdamW, or a gathered one) and keeps this rank's shard of it. */
  override loadStateDict(saved: OptimizerState): void {
    if (saved.kind !== 'AdamW') throw new Error(`optimizer state is for ${saved.kind}, not AdamW`);
    if (saved.groups.length !== this.groups.length)
      throw new Error(`optimizer state has ${saved.groups.length} parameter groups, this optimizer has ${this.groups.length}`);
    saved.groups.forEach((g, i) => {
      const group = this.groups[i];
      if (group === undefined) return;
      group.lr = g.lr;
      group.weightDecay = g.weightDecay;
    });
    const all = this.groups.flatMap((g) => g.params);
    const positions = new Map(all.map((p, i) => [p, i]));
    const innerIndex = new Map(this.#inner.groups.flatMap((g) => g.params).map((v, i) => [v, i]));
    const tensors: Record<string, Tensor> = {};
    torch.scope(() => {
      for (const piece of this.#pieces) {
        const i = positions.get(piece.param) as number;
        const j = innerIndex.get(piece.view) as number;
        for (const name of ['exp_avg', 'exp_avg_sq', 'step']) {
          const full = saved.tensors[`state.${i}.${name}`];
          if (full === undefined) continue;
          if (name === 'step') tensors[`state.${j}.step`] = full;
          else {
            if (full.numel !== piece.param.numel)
              throw new Error(`optimizer state.${i}.${name} has ${full.numel} elements; parameter ${i} has ${piece.param.numel}`);
            tensors[`state.${j}.${name}`] = full.reshape([-1]).narrow(0, piece.from, piece.length);
          }
        }
      }
      this.#inner.loadStateDict({
        kind: 'AdamW',
        groups: this.#inner.groups.map((g, i) => ({ ...(saved.groups[i] ?? {}), lr: g.lr, weightDecay: g.weightDecay })),
        tensors,
      });
    });
    this.#inner.groups.forEach((g, i) => {
      const outer = this.groups[i];
      if (outer === undefined) return;
      g.lr = outer.lr;
      g.weightDecay = outer.weightDecay;
    });
  }

  /** Elements of the optimizer state this rank holds (its shard's moments and step counts). */
  localStateElements(): number {
    return Object.values(this.#inner.stateDict().tensors).reduce((n, t) => n + t.numel, 0);
  }

  override dispose(): void {
    if (this.#gathered !== null) disposeState(this.#gathered);
    this.#gathered = null;
    this.#inner.dispose();
    for (const piece of this.#pieces) piece.view.dispose();
    super.dispose();
  }

  #innerState(view: Tensor): Record<string, Tensor> | undefined {
    // the inner optimizer's state, by its own indexing (stateDict() holds the live tensors, no copies)
    const index = this.#inner.groups.flatMap((g) => g.params).indexOf(view);
    const tensors = this.#inner.stateDict().tensors;
    const prefix = `state.${index}.`;
    const entries = Object.entries(tensors).filter(([k]) => k.startsWith(prefix));
    return entries.length === 0 ? undefined : Object.fromEntries(entries.map(([k, t]) => [k.slice(prefix.length), t]));
  }

  #checkGroup(group: ProcessGroup): void {
    if (group.rank !== this.rank || group.worldSize !== this.worldSize)
      throw new Error(
        `ZeRO-1 optimizer: sharded for rank ${this.rank} of ${this.worldSize}, used with rank ${group.rank} of ${group.worldSize}`,
      );
  }

  /**
   * The flat vector of N elements from every rank's shard: each rank lays out `of(piece)` (zeros where null) for its
   * pieces, pads to the longest shard and all-gathers. The caller disposes the result.
   */
  async #allGatherFlat(group: ProcessGroup, of: (piece: Piece) => Tensor | null): Promise<Tensor> {
    const dtype = this.groups[0]?.params[0]?.dtype ?? 'float32';
    const device = this.groups[0]?.params[0]?.device ?? 'cpu';
    const longest = Math.max(
      ...Array.from({ length: this.worldSize }, (_, r) => {
        const b = shardBounds(this.totalElements, r, this.worldSize);
        return b.end - b.start;
      }),
    );
    const mine = torch.noGrad(() =>
      torch.scope(() => {
        const parts = this.#pieces.map((piece) => {
          const t = of(piece);
          return t === null ? torch.zeros([piece.length], { dtype, device }) : t.detach().reshape([-1]);
        });
        const padding = longest - (this.shard.end - this.shard.start);
        if (padding > 0) parts.push(torch.zeros([padding], { dtype, device }));
        return torch.keep(parts.length === 0 ? torch.zeros([0], { dtype, device }) : torch.cat(parts));
      }),
    );
    const gathered = await group.allGather(mine).finally(() => mine.dispose());
    try {
      return torch.keep(
        torch.scope(() =>
          torch.cat(
            gathered.map((t, r) => {
              const b = shardBounds(this.totalElements, r, this.worldSize);
              return t.narrow(0, 0, b.end - b.start);
            }),
          ),
        ),
      );
    } finally {
      for (const t of gathered) t.dispose();
    }
  }
}

function disposeState(state: OptimizerState): void {
  for (const t of Object.values(state.tensors)) t.dispose();
}
