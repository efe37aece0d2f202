// Optimizers over libtorch: AdamW (libtorch's fused kernel) and SGD, parameter groups, gradient clipping.
// Their state (moments, step counts) can be saved and restored for checkpoints via stateDict()/loadStateDict().
import { zerosLike } from './creation.js';
import { noGrad } from './functional.js';
import { native } from './native.js';
import { keep } from './scope.js';
import { fromHandle, type Tensor } from './tensor.js';

export interface ParamGroup {
  params: Tensor[];
  lr?: number;
  weightDecay?: number;
}

interface ResolvedGroup<H> {
  params: Tensor[];
  lr: number;
  weightDecay: number;
  hyper: H;
}

/** Serializable optimizer state: hyper-parameters as JSON, per-parameter tensors by `state.<index>.<name>`. */
export interface OptimizerState {
  kind: string;
  groups: { lr: number; weightDecay: number; [key: string]: unknown }[];
  tensors: Record<string, Tensor>;
}

/** The common part: groups, learning rates, gradients, state bookkeeping. */
export abstract class Optimizer<H extends object = object> {
  readonly groups: ResolvedGroup<H>[];
  protected readonly state = new Map<Tensor, Record<string, Tensor>>();

  constructor(params: readonly Tensor[] | readonly ParamGroup[], defaults: { lr: number; weightDecay: number }, hyper: H) {
    const groups: ParamGroup[] =
      params.length > 0 && !(params[0] as ParamGroup).params
        ? [{ params: [...(params as readonly Tensor[])] }]
        : [...(params as readonly ParamGroup[])];
    this.groups = groups.map((g, i) => {
      for (const p of g.params) {
        if (!p.requiresGrad) throw new Error(`optimizer: a parameter in group ${i} does not require gradients`);
      }
      return { params: g.params, lr: g.lr ?? defaults.lr, weightDecay: g.weightDecay ?? defaults.weightDecay, hyper };
    });
  }

  /** Sets every group's learning rate (schedulers call this each step). */
  setLr(lr: number): void {
    for (const g of this.groups) g.lr = lr;
  }

  get lr(): number {
    return this.groups[0]?.lr ?? 0;
  }

  /** Drops gradients (set to none, as PyTorch's default), so the next backward writes fresh ones. */
  zeroGrad(): void {
    for (const g of this.groups) for (const p of g.params) p.grad = null;
  }

  abstract step(): void;

  protected stateFor(p: Tensor, init: () => Record<string, Tensor>): Record<string, Tensor> {
    let s = this.state.get(p);
    if (s === undefined) {
      s = init();
      for (const t of Object.values(s)) keep(t);
      this.state.set(p, s);
    }
    return s;
  }

  stateDict(): OptimizerState {
    const tensors: Record<string, Tensor> = {};
    let index = 0;
    for (const g of this.groups) {
      for (const p of g.params) {
        const s = this.state.get(p);
        if (s) for (const [name, t] of Object.entries(s)) tensors[`state.${index}.${name}`] = t;
        index++;
      }
    }
    return {
      kind: this.constructor.name,
      groups: this.groups.map((g) => ({ lr: g.lr, weightDecay: g.weightDecay, ...g.hyper })),
      tensors,
    };
  }

  /** Restores state saved by stateDict() for the same parameter layout (tensors are copied in). */
  loadStateDict(saved: OptimizerState): void {
    if (saved.kind !== this.constructor.name)
      throw new Error(`optimizer state is for ${saved.kind}, not ${this.constructor.name}`);
    if (saved.groups.length !== this.groups.length) {
      throw new Error(`optimizer state has ${saved.groups.length} parameter groups, this optimizer has ${this.groups.length}`);
    }
    saved.groups.forEach((g, i) => {
      const group = this.groups[i] as ResolvedGroup<H>;
      group.lr = g.lr;
      group.weightDecay = g.weightDecay;
    });
    let index = 0;
    for (const g of this.groups) {
      for (const p of g.params) {
        const prefix = `state.${index}.`;
        const entries = Object.entries(saved.tensors).filter(([k]) => k.startsWith(prefix));
        if (entries.length > 0) {
          const s: Record<string, Tensor> = {};
          for (const [k, t] of entries) s[k.slice(prefix.length)] = keep(t.clone());
          for (const old of Object.values(this.state.get(p) ?? {})) old.dispose();
          this.state.set(p, s);
        }
        index++;
      }
    }
  }

  /** Frees the optimizer state. */
  dispose(): void {
    for (const s of this.state.values()) for (const t of Object.values(s)) t.dispose();
    this.state.clear();
  }
}

export interface AdamWOptions {
  lr?: number;
  betas?: [number, number];
  eps?: number;
  weightDecay?: number;
}

/** AdamW (Loshchilov & Hutter 2019, decoupled weight decay) through libtorch's fused kernel, as torch.optim.AdamW(fused=True). */
export class AdamW extends Optimizer<{ beta1: number; beta2: number; eps: number }> {
  constructor(params: readonly Tensor[] | readonly ParamGroup[], options: AdamWOptions = {}) {
    const [beta1, beta2] = options.betas ?? [0.9, 0.999];
    super(
      params,
      { lr: options.lr ?? 1e-3, weightDecay: options.weightDecay ?? 0.01 },
      { beta1, beta2, eps: options.eps ?? 1e-8 },
    );
  }

  step(): void {
    noGrad(() => {
      for (const g of this.groups) {
        const params: Tensor[] = [];
        const grads: Tensor[] = [];
        const states: Record<string, Tensor>[] = [];
        for (const p of g.params) {
          const grad = p.grad;
          if (grad === null) continue;
          params.push(p);
          grads.push(grad);
          states.push(
            this.stateFor(p, () => ({
              exp_avg: zerosLike(p),
              exp_avg_sq: zerosLike(p),
              step: fromHandle(native.full([], 0, 6, p.device)),
            })),
          );
        }
        if (params.length === 0) continue;
        try {
          native.fusedAdamW(
            params.map((p) => p.handle),
            grads.map((t) => t.handle),
            states.map((s) => (s.exp_avg as Tensor).handle),
            states.map((s) => (s.exp_avg_sq as Tensor).handle),
            states.map((s) => (s.step as Tensor).handle),
            g.lr,
            g.hyper.beta1,
            g.hyper.beta2,
            g.weightDecay,
            g.hyper.eps,
          );
        } finally {
          for (const t of grads) t.dispose();
        }
      }
    });
  }
}

export interface SGDOptions {
  lr?: number;
  momentum?: number;
  dampening?: number;
  nesterov?: boolean;
  /** L2 penalty added to the gradient (coupled), as torch.optim.SGD. */
  weightDecay?: number;
}

/** Stochastic gradient descent with optional (Nesterov) momentum, as torch.optim.SGD. */
export class SGD extends Optimizer<{ momentum: number; dampening: number; nesterov: boolean }> {
  constructor(params: readonly Tensor[] | readonly ParamGroup[], options: SGDOptions = {}) {
    super(
      params,
      { lr: options.lr ?? 1e-3, weightDecay: options.weightDecay ?? 0 },
      { momentum: options.momentum ?? 0, dampening: options.dampening ?? 0, nesterov: options.nesterov ?? false },
    );
  }

  step(): void {
    noGrad(() => {
      for (const g of this.groups) {
        const { momentum, dampening, nesterov } = g.hyper;
        for (const p of g.params) {
          const grad = p.grad;
          if (grad === null) continue;
          let d = g.weightDecay !== 0 ? grad.add(p, g.weightDecay) : grad;
          if (momentum !== 0) {
            const s = this.state.get(p);
            let buf: Tensor;
            if (s === undefined) buf = this.stateFor(p, () => ({ momentum_buffer: d.clone() })).momentum_buffer as Tensor;
            else buf = (s.momentum_buffer as Tensor).mul_(momentum).add_(d, 1 - dampening);
            const next = nesterov ? d.add(buf, momentum) : buf.alias();
            if (d !== grad) d.dispose();
            d = next;
          }
          p.add_(d, -g.lr);
          if (d !== grad) d.dispose();
          grad.dispose();
        }
      }
    });
  }
}

/**
 * Scales gradients in place so that their global norm is at most maxNorm (torch.nn.utils.clip_grad_norm_).
 * Returns the norm before clipping.
 */
export function clipGradNorm(params: readonly Tensor[], maxNorm: number, normType = 2): number {
  const grads = params.map((p) => p.grad).filter((g): g is Tensor => g !== null);
  try {
    const total = fromHandle(
      native.clipGradNorm(
        grads.map((g) => g.handle),
        maxNorm,
        normType,
      ),
    );
    try {
      return total.item();
    } finally {
      total.dispose();
    }
  } finally {
    for (const g of grads) g.dispose();
  }
}

/**
 * Splits named parameters into a decayed group and a non-decayed one: biases, norm weights and other 1-d tensors
 * get no weight decay (as Hugging Face's Trainer and most LLM recipes do).
 */
export function weightDecayGroups(
  named: Iterable<[string, Tensor]>,
  weightDecay: number,
  noDecay: (name: string, param: Tensor) => boolean = (name, p) => p.ndim < 2 || name.endsWith('.bias') || /norm/i.test(name),
): ParamGroup[] {
  const decay: Tensor[] = [];
  const plain: Tensor[] = [];
  for (const [name, p] of named) (noDecay(name, p) ? plain : decay).push(p);
  return [
    { params: decay, weightDecay },
    { params: plain, weightDecay: 0 },
  ].filter((g) => g.params.length > 0);
}
