// Tensor memory: scopes that free what a piece of work created, keep() for what must outlive them, and the garbage
// collector as a safety net (the reasons are in ./tensor.ts's header).
//
//   scope(fn)          runs fn; disposes every tensor created inside except what fn returns and kept tensors
//   scopeSteps(gen)    the same per resumption of a generator (work that pauses for asynchronous collectives)
//   keep(t)            no scope disposes t; it lives until t.dispose() (or, as a last resort, GC)
//
// A new Tensor calls adoptTensor: it joins the current scope, or the safety net when no scope is open. This file knows
// tensors only by the ScopedTensor shape and a brand symbol (tensor.ts imports it, not the other way round), which
// also recognises tensors of a second copy of this module (a plug-in that imports it by another path).
import { type Handle, native } from './native.js';

/** What scopes need of a tensor (./tensor.ts's Tensor). */
export interface ScopedTensor {
  /** Set by keep(): no scope disposes this tensor. */
  isKept: boolean;
  readonly isDisposed: boolean;
  readonly handle: Handle;
  dispose(): void;
  registerFinalizer(): void;
}

/** Marks an object as a tensor for the scopes' search of a return value. */
export const TENSOR_BRAND: unique symbol = Symbol.for('trinity-rft.torch.Tensor');

let currentScope: ScopedTensor[] | null = null;

// The safety net: frees the native handle of a Tensor that was garbage-collected without dispose().
export const finalizer = new FinalizationRegistry<Handle>((handle) => native.dispose(handle));

// V8 is told the memory of the tensors only the GC would free (core.cpp's accountMemory), so that it collects when
// they add up. Not at once: a FinalizationRegistry callback only runs as a task, after the synchronous code that
// created the tensor has finished, so accounting it before then could not free anything sooner, while every
// unscoped temporary (an optimizer reading each .grad, then disposing it) would count and force full GCs. So the
// tensors put under the safety net wait here until the current run of JavaScript ends (a microtask); those
// disposed by then are never counted.
let unaccounted: ScopedTensor[] = [];

export function accountUnscoped(tensor: ScopedTensor): void {
  if (unaccounted.length === 0) queueMicrotask(flushUnaccounted);
  unaccounted.push(tensor);
}

function flushUnaccounted(): void {
  const pending = unaccounted;
  unaccounted = [];
  for (const t of pending) if (!t.isDisposed) native.accountMemory(t.handle);
}

/**
 * Runs `fn` and disposes every tensor created inside it, except tensors in its return value (a tensor, or arrays,
 * plain objects and Maps holding tensors) and tensors marked with keep(). Returned tensors move to the enclosing
 * scope, so nested scopes compose. `fn` must be synchronous: tensors created across an `await` would be
 * attributed to whichever scope is current at that moment.
 */
export function scope<T>(fn: () => T): T {
  const created: ScopedTensor[] = [];
  const parent = currentScope;
  currentScope = created;
  let result: T;
  try {
    result = fn();
  } catch (error) {
    currentScope = parent;
    for (const t of created) if (!t.isKept) t.dispose();
    throw error;
  }
  currentScope = parent;
  if (result instanceof Promise) {
    for (const t of created) if (!t.isKept) t.dispose();
    throw new TypeError('scope(fn): fn returned a Promise; scopes track tensors synchronously, so await outside the scope');
  }
  const returned = new Set<ScopedTensor>();
  collectTensors(result, returned, 0);
  for (const t of created) {
    if (t.isKept) continue;
    if (!returned.has(t)) t.dispose();
    else if (parent !== null) parent.push(t);
    else t.registerFinalizer();
  }
  return result;
}

/**
 * scope() over a generator: every resumption of `steps` runs inside one scope of its own, so the tensors it creates
 * between its yields are tracked as if it ran in one piece, while the code that drives it (between two yields: an
 * awaited collective, say) runs outside that scope. When `steps` returns, what it created is disposed except its
 * return value (moved to the enclosing scope) and kept tensors; when it throws or is closed early, all of it is.
 * For a program that pauses where asynchronous work must happen and is otherwise driven synchronously.
 */
export function* scopeSteps<Y, R, N>(steps: Generator<Y, R, N>): Generator<Y, R, N> {
  const created: ScopedTensor[] = [];
  const inScope = <T>(fn: () => T): T => {
    const parent = currentScope;
    currentScope = created;
    try {
      return fn();
    } finally {
      currentScope = parent;
    }
  };
  let finished = false;
  try {
    let next = inScope(() => steps.next());
    while (next.done !== true) {
      const input: N = yield next.value;
      next = inScope(() => steps.next(input));
    }
    finished = true;
    const returned = new Set<ScopedTensor>();
    collectTensors(next.value, returned, 0);
    for (const t of created) {
      if (t.isKept) continue;
      if (!returned.has(t)) t.dispose();
      else if (currentScope !== null) currentScope.push(t);
      else t.registerFinalizer();
    }
    return next.value;
  } finally {
    if (!finished) {
      inScope(() => steps.return(undefined as R));
      for (const t of created) if (!t.isKept) t.dispose();
    }
  }
}

/** Marks a tensor so that no scope disposes it; it then lives until dispose() (or, as a last resort, GC). */
export function keep<T extends ScopedTensor>(tensor: T): T {
  tensor.isKept = true;
  tensor.registerFinalizer();
  return tensor;
}

function collectTensors(value: unknown, into: Set<ScopedTensor>, depth: number): void {
  if (depth > 8 || value === null || typeof value !== 'object') return;
  if (TENSOR_BRAND in value) into.add(value as unknown as ScopedTensor);
  else if (Array.isArray(value)) for (const v of value) collectTensors(v, into, depth + 1);
  else if (value instanceof Map) for (const v of value.values()) collectTensors(v, into, depth + 1);
  else if (Object.getPrototypeOf(value) === Object.prototype)
    for (const v of Object.values(value)) collectTensors(v, into, depth + 1);
}

/** A new tensor joins the current scope, or the safety net when none is open. */
export function adoptTensor(tensor: ScopedTensor): void {
  if (currentScope !== null) currentScope.push(tensor);
  else tensor.registerFinalizer();
}
