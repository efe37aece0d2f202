// DDP's gradient sum for a process group: planBuckets (how tensors are packed into all-reduce buckets, the same
// plan on every rank) and OverlappedGradients, whose buckets all-reduce while the backward pass runs. A
// ProcessGroup hands them out (allReduceBuckets, overlappedGradients); they reach the group only through
// CollectiveRunner, so this file does not import distributed.ts.
import {
  type BucketOptions,
  checkInteger,
  checkOp,
  checkTimeout,
  type CollectiveOptions,
  DEFAULT_BUCKET_BYTES,
  type DistributedReduceOp,
} from './distributed-options.js';
import { DTYPE_BYTES } from './dtype.js';
import { native } from './native.js';
import type { Tensor } from './tensor.js';

/** What OverlappedGradients needs of its process group: the default timeout and a way to run a named collective. */
export interface CollectiveRunner {
  readonly timeoutMs: number;
  runCollective<T>(
    collective: string,
    options: CollectiveOptions,
    run: (id: number, timeoutMs: number) => Promise<T>,
  ): Promise<T>;
}

/**
 * Groups tensors by dtype and device, keeping their order within a group, and packs each group greedily into buckets
 * of at most `bucketBytes` (a tensor larger than that is a bucket of its own). Depends only on the tensors' dtypes,
 * devices and sizes, so every rank plans the same buckets.
 */
export function planBuckets(tensors: readonly Tensor[], bucketBytes: number): Tensor[][] {
  checkInteger('planBuckets: bucketBytes', bucketBytes, 1);
  const groups = new Map<string, { bytes: number; open: Tensor[]; buckets: Tensor[][] }>();
  for (const t of tensors) {
    const key = `${t.dtype}@${t.device}`;
    let group = groups.get(key);
    if (group === undefined) {
      group = { bytes: 0, open: [], buckets: [] };
      groups.set(key, group);
    }
    const bytes = t.numel * DTYPE_BYTES[t.dtype];
    if (group.open.length > 0 && group.bytes + bytes > bucketBytes) {
      group.buckets.push(group.open);
      group.open = [];
      group.bytes = 0;
    }
    group.open.push(t);
    group.bytes += bytes;
  }
  const out: Tensor[][] = [];
  for (const group of groups.values()) {
    if (group.open.length > 0) group.buckets.push(group.open);
    out.push(...group.buckets);
  }
  return out;
}

export interface OverlapOptions extends BucketOptions {
  /**
   * Where each parameter's gradient is summed: `targets[i]` (same shape; its .grad receives params[i]'s gradient in
   * its own dtype, and params[i].grad is cleared), e.g. float32 master weights of bf16 parameters. Default: the
   * parameters themselves.
   */
  targets?: readonly Tensor[];
  /**
   * Parameters one backward reaches more than once (a chunked LM head, tied embeddings): their hooks are not used,
   * their buckets go last, when finish() is called.
   */
  unhooked?: ReadonlySet<Tensor>;
}

/**
 * The gradient sum of DDP: a bucketed all-reduce that overlaps the backward pass (native/src/distributed.cpp,
 * GradBuckets). The buckets are planned once, as DDP does: parameters in reverse order (the backward produces the
 * last layers' gradients first), grouped by the targets' dtype and device, at most `bucketBytes` each; unhooked
 * parameters in buckets of their own at the end. Every rank must plan the same buckets (same parameters, same order).
 *
 *   arm()        before the backward whose gradients complete the step (the last micro-batch: earlier micro-batches
 *                only accumulate); from then on a hook moves each gradient into its target and a full bucket is
 *                issued (in bucket order) while the backward goes on
 *   finish()     after it: the buckets the backward did not fill are issued (zeros for targets without a gradient:
 *                a rank that ran no micro-batch still takes part), and the promise settles when every bucket is summed
 *   dispose()    removes the hooks
 *
 * Every target ends with a gradient (zeros where it had none); the caller decides what a gradient no rank produced
 * means. Collectives issued by other calls are ordered with the buckets as usual (the order of the calls).
 */
export class OverlappedGradients {
  readonly #group: CollectiveRunner;
  #id: number | null;
  readonly #op: DistributedReduceOp;
  readonly #timeoutMs: number | undefined;
  /** The targets, in the order given. */
  readonly targets: readonly Tensor[];
  /** The buckets as parameter indices, in issue order. */
  readonly buckets: readonly (readonly number[])[];

  /** Internal: use ProcessGroup.overlappedGradients. */
  constructor(group: CollectiveRunner, groupId: number, params: readonly Tensor[], options: OverlapOptions) {
    const where = 'overlappedGradients';
    this.#group = group;
    this.#op = checkOp(where, options.op);
    this.#timeoutMs = options.timeoutMs;
    const timeoutMs = checkTimeout(where, options.timeoutMs ?? group.timeoutMs);
    const bucketBytes = checkInteger(`${where}: bucketBytes`, options.bucketBytes ?? DEFAULT_BUCKET_BYTES, 1);
    const targets = options.targets ?? params;
    if (targets.length !== params.length)
      throw new RangeError(`${where}: ${params.length} parameters but ${targets.length} targets`);
    targets.forEach((t, i) => {
      const p = params[i] as Tensor;
      if (t.shape.join(',') !== p.shape.join(','))
        throw new RangeError(`${where}: parameter ${i} is [${p.shape}] but its target is [${t.shape}]`);
    });
    this.targets = targets;
    const unhooked = options.unhooked ?? new Set<Tensor>();
    const index = new Map(targets.map((t, i) => [t, i]));
    const order = (keep: (i: number) => boolean) =>
      targets
        .map((_, i) => i)
        .filter(keep)
        .reverse()
        .map((i) => targets[i] as Tensor);
    const isUnhooked = (i: number) => unhooked.has(params[i] as Tensor);
    const plan = [
      ...planBuckets(
        order((i) => !isUnhooked(i)),
        bucketBytes,
      ),
      ...planBuckets(order(isUnhooked), bucketBytes),
    ];
    this.buckets = plan.map((bucket) => bucket.map((t) => index.get(t) as number));
    this.#id = native.distGradBucketsCreate(
      groupId,
      params.map((p) => p.handle),
      options.targets === undefined ? null : targets.map((t) => t.handle),
      this.buckets.map((b) => [...b]),
      params.map((_, i) => !isUnhooked(i)),
      this.#op,
      timeoutMs,
    );
  }

  #live(): number {
    if (this.#id === null) throw new Error('overlappedGradients: disposed');
    return this.#id;
  }

  /** Sums the gradients of the next backward as they arrive (see the class comment). */
  arm(): void {
    native.distGradBucketsArm(this.#live());
  }

  /**
   * Issues the buckets not issued yet and waits until every bucket of this round is summed on this rank. Resolves
   * with how many buckets the hooks issued during the backward (the overlapped ones).
   */
  finish(): Promise<number> {
    const id = this.#live();
    return this.#group.runCollective(
      'overlappedGradients.finish',
      this.#timeoutMs === undefined ? {} : { timeoutMs: this.#timeoutMs },
      () => native.distGradBucketsFinish(id),
    );
  }

  /** Removes the hooks. Idempotent. */
  dispose(): void {
    if (this.#id === null) return;
    native.distGradBucketsFree(this.#id);
    this.#id = null;
  }
}
