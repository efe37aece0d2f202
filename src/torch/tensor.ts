// The Tensor class: a handle to a libtorch tensor with PyTorch's semantics, and deterministic memory.
//
// Memory: garbage collection alone cannot free native tensors in time (finalizers never run inside a synchronous
// loop, so a training step's temporaries would stay resident until the loop yields), so
//   - t.dispose() frees a tensor now (storage goes when no view or autograd node still uses it);
//   - scope(fn) disposes every tensor created while fn runs, except what fn returns and what keep() marks;
//   - a FinalizationRegistry, with external-memory accounting in the addon, is only a safety net. Tensors that a
//     scope will free never enter it (registering has a cost per tensor); those that outlive every scope do.
// Using a disposed tensor throws TensorDisposedError. The scopes and the safety net live in ./scope.ts.
import { type AnyTypedArray, DTYPE_CODES, type DType, dtypeCode, dtypeFromCode, type TypedArrayFor } from './dtype.js';
import { type BoxedScalar, type GeneratorHandle, type Handle, native } from './native.js';
import { accountUnscoped, adoptTensor, finalizer, scope, TENSOR_BRAND } from './scope.js';

export class TensorDisposedError extends Error {
  constructor() {
    super('tensor was disposed: it was freed by dispose() or by the scope() it was created in (use keep() to retain it)');
    this.name = 'TensorDisposedError';
  }
}

// ---------------------------------------------------------------------------------------------------------------
// helpers shared by the methods

type TensorOrNumber = Tensor | number;
/** A tensor operand, or a number boxed as [v] (the addon reads a bare number as a tensor handle). */
// (Not `instanceof Tensor`: a plug-in that imports this module by another path gets a second Tensor class.)
export const operand = (v: TensorOrNumber | boolean): Handle | BoxedScalar =>
  typeof v === 'number' || typeof v === 'boolean' ? [v] : v.handle;
const h = operand;
const wrap = (handle: Handle): Tensor => new Tensor(handle);
const wrapPair = ([a, b]: [Handle, Handle]): { values: Tensor; indices: Tensor } => ({ values: wrap(a), indices: wrap(b) });
const dims = (d: number | readonly number[] | undefined | null): number[] | null =>
  d === undefined || d === null ? null : typeof d === 'number' ? [d] : [...d];
const optDtype = (d: DType | undefined): number | null => (d === undefined ? null : dtypeCode(d));

export function checkDevice(device: string): string {
  if (device.startsWith('cuda') && native.cudaDeviceCount() === 0) {
    throw new Error(`device '${device}' is not available: this libtorch build has no CUDA device (CPU only)`);
  }
  return device;
}

export interface ReduceOptions {
  keepdim?: boolean;
  dtype?: DType;
}

export interface ToOptions {
  dtype?: DType;
  device?: string;
  copy?: boolean;
}

// ---------------------------------------------------------------------------------------------------------------

export class Tensor {
  #handle: Handle | null;
  #shape: readonly number[] | undefined;
  #dtype: DType | undefined;
  #registered = false;
  /** Set by keep(): no scope disposes this tensor. */
  isKept = false;
  readonly [TENSOR_BRAND] = true;

  /** Wraps a native handle; the Tensor owns it. Use the creation functions (tensor, zeros, randn...) instead. */
  constructor(handle: Handle) {
    this.#handle = handle;
    adoptTensor(this);
  }

  /**
   * Internal: puts this tensor under the garbage-collection safety net (once); V8 learns how much memory it holds
   * when the current synchronous run of JavaScript ends, if it is still alive then (accountUnscoped).
   */
  registerFinalizer(): void {
    if (this.#registered || this.#handle === null) return;
    this.#registered = true;
    finalizer.register(this, this.#handle, this);
    accountUnscoped(this);
  }

  /** The native handle (internal to src/torch). Throws if the tensor was disposed. */
  get handle(): Handle {
    const handle = this.#handle;
    if (handle === null) throw new TensorDisposedError();
    return handle;
  }

  // ---- lifecycle ----

  /** Frees this handle now. Idempotent. Other tensors sharing the storage (views, autograd) keep it alive. */
  dispose(): void {
    if (this.#handle === null) return;
    if (this.#registered) finalizer.unregister(this);
    native.dispose(this.#handle);
    this.#handle = null;
  }

  get isDisposed(): boolean {
    return this.#handle === null;
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  // ---- metadata ----

  get shape(): readonly number[] {
    if (this.#shape === undefined) this.#shape = Object.freeze(native.shape(this.handle));
    return this.#shape;
  }

  get dtype(): DType {
    if (this.#dtype === undefined) this.#dtype = dtypeFromCode(native.dtype(this.handle));
    return this.#dtype;
  }

  get device(): string {
    return native.device(this.handle);
  }

  get ndim(): number {
    return this.shape.length;
  }

  get numel(): number {
    let n = 1;
    for (const s of this.shape) n *= s;
    return n;
  }

  size(dim: number): number {
    const d = dim < 0 ? dim + this.ndim : dim;
    const s = this.shape[d];
    if (s === undefined) throw new RangeError(`dimension ${dim} out of range for a ${this.ndim}-d tensor`);
    return s;
  }

  get strides(): number[] {
    return native.strides(this.handle);
  }

  get isContiguous(): boolean {
    return native.isContiguous(this.handle);
  }

  /** In-place writes so far to this tensor's storage, counted for it and its views together (PyTorch's _version). */
  get version(): number {
    return native.version(this.handle);
  }

  toString(): string {
    if (this.#handle === null) return 'Tensor(disposed)';
    return `Tensor(shape=[${this.shape.join(', ')}], dtype=${this.dtype}, device=${this.device})`;
  }

  // ---- read-back ----

  /** The values as a typed array (a copy). float16/bfloat16 widen to Float32Array; bool reads as 0/1 Uint8Array. */
  toTypedArray(): TypedArrayFor<DType> {
    const dtype = this.dtype;
    if (dtype === 'float16' || dtype === 'bfloat16') {
      const wide = native.to(this.handle, dtypeCode('float32'), null, false, false);
      try {
        return new Float32Array(native.toBytes(wide, true));
      } finally {
        native.dispose(wide);
      }
    }
    const bytes = native.toBytes(this.handle, true);
    switch (dtype) {
      case 'float32':
        return new Float32Array(bytes);
      case 'float64':
        return new Float64Array(bytes);
      case 'int64':
        return new BigInt64Array(bytes);
      case 'int32':
        return new Int32Array(bytes);
      case 'int16':
        return new Int16Array(bytes);
      case 'int8':
        return new Int8Array(bytes);
      default:
        return new Uint8Array(bytes);
    }
  }

  /** The values as nested JavaScript arrays (int64 as numbers, bool as booleans); a 0-d tensor gives a scalar. */
  toArray(): unknown {
    const flat = this.toTypedArray() as AnyTypedArray;
    const isBool = this.dtype === 'bool';
    const values: (number | boolean)[] = Array.from(flat as ArrayLike<number | bigint>, (v) => (isBool ? v !== 0 : Number(v)));
    const shape = this.shape;
    if (shape.length === 0) return values[0];
    const build = (dim: number, offset: number): unknown[] => {
      const n = shape[dim] as number;
      if (dim === shape.length - 1) return values.slice(offset, offset + n);
      let stride = 1;
      for (let i = dim + 1; i < shape.length; i++) stride *= shape[i] as number;
      return Array.from({ length: n }, (_, i) => build(dim + 1, offset + i * stride));
    };
    return build(0, 0);
  }

  /** The single value of a one-element tensor. */
  item(): number {
    return Number(native.item(this.handle));
  }

  /** Raw bytes in row-major order. With copy=false the buffer views the tensor's memory: write it out at once. */
  bytes(copy = true): ArrayBuffer {
    return native.toBytes(this.handle, copy);
  }

  // ---- autograd ----

  get requiresGrad(): boolean {
    return native.requiresGrad(this.handle);
  }

  set requiresGrad(value: boolean) {
    native.setRequiresGrad(this.handle, value);
  }

  requiresGrad_(value = true): this {
    native.setRequiresGrad(this.handle, value);
    return this;
  }

  get isLeaf(): boolean {
    return native.isLeaf(this.handle);
  }

  /** The accumulated gradient (a new handle to it), or null. */
  get grad(): Tensor | null {
    const g = native.grad(this.handle);
    return g === null ? null : wrap(g);
  }

  set grad(value: Tensor | null) {
    native.setGrad(this.handle, value === null ? null : value.handle);
  }

  /** Accumulates d(this)/d(leaves) into the leaves' .grad. A non-scalar tensor needs `gradient`. */
  backward(gradient?: Tensor, options: { retainGraph?: boolean; createGraph?: boolean } = {}): void {
    native.backward(this.handle, gradient?.handle ?? null, options.retainGraph ?? null, options.createGraph ?? false);
  }

  retainGrad(): this {
    native.retainGrad(this.handle);
    return this;
  }

  detach(): Tensor {
    return wrap(native.detach(this.handle));
  }

  // ---- elementwise arithmetic (the second operand may be a number: PyTorch's scalar promotion applies) ----

  add(other: TensorOrNumber, alpha?: number): Tensor {
    return wrap(native.add(this.handle, h(other), alpha ?? null));
  }
  sub(other: TensorOrNumber, alpha?: number): Tensor {
    return wrap(native.sub(this.handle, h(other), alpha ?? null));
  }
  mul(other: TensorOrNumber): Tensor {
    return wrap(native.mul(this.handle, h(other)));
  }
  div(other: TensorOrNumber): Tensor {
    return wrap(native.div(this.handle, h(other)));
  }
  pow(exponent: TensorOrNumber): Tensor {
    return wrap(native.pow(this.handle, h(exponent)));
  }
  minimum(other: TensorOrNumber): Tensor {
    return wrap(native.minimum(this.handle, h(other)));
  }
  maximum(other: TensorOrNumber): Tensor {
    return wrap(native.maximum(this.handle, h(other)));
  }
  clamp(min?: number | null, max?: number | null): Tensor {
    return wrap(native.clamp(this.handle, min ?? null, max ?? null));
  }
  lerp(end: Tensor, weight: TensorOrNumber): Tensor {
    return wrap(native.lerp(this.handle, end.handle, h(weight)));
  }
  neg(): Tensor {
    return wrap(native.neg(this.handle));
  }
  abs(): Tensor {
    return wrap(native.abs(this.handle));
  }
  exp(): Tensor {
    return wrap(native.exp(this.handle));
  }
  log(): Tensor {
    return wrap(native.log(this.handle));
  }
  log1p(): Tensor {
    return wrap(native.log1p(this.handle));
  }
  expm1(): Tensor {
    return wrap(native.expm1(this.handle));
  }
  sqrt(): Tensor {
    return wrap(native.sqrt(this.handle));
  }
  rsqrt(): Tensor {
    return wrap(native.rsqrt(this.handle));
  }
  square(): Tensor {
    return wrap(native.square(this.handle));
  }
  reciprocal(): Tensor {
    return wrap(native.reciprocal(this.handle));
  }
  sign(): Tensor {
    return wrap(native.sign(this.handle));
  }
  sin(): Tensor {
    return wrap(native.sin(this.handle));
  }
  cos(): Tensor {
    return wrap(native.cos(this.handle));
  }
  floor(): Tensor {
    return wrap(native.floor(this.handle));
  }
  ceil(): Tensor {
    return wrap(native.ceil(this.handle));
  }
  round(): Tensor {
    return wrap(native.round(this.handle));
  }

  // ---- comparisons and logic (results are bool tensors) ----

  eq(other: TensorOrNumber): Tensor {
    return wrap(native.eq(this.handle, h(other)));
  }
  ne(other: TensorOrNumber): Tensor {
    return wrap(native.ne(this.handle, h(other)));
  }
  lt(other: TensorOrNumber): Tensor {
    return wrap(native.lt(this.handle, h(other)));
  }
  le(other: TensorOrNumber): Tensor {
    return wrap(native.le(this.handle, h(other)));
  }
  gt(other: TensorOrNumber): Tensor {
    return wrap(native.gt(this.handle, h(other)));
  }
  ge(other: TensorOrNumber): Tensor {
    return wrap(native.ge(this.handle, h(other)));
  }
  logicalAnd(other: Tensor): Tensor {
    return wrap(native.logicalAnd(this.handle, other.handle));
  }
  logicalOr(other: Tensor): Tensor {
    return wrap(native.logicalOr(this.handle, other.handle));
  }
  logicalXor(other: Tensor): Tensor {
    return wrap(native.logicalXor(this.handle, other.handle));
  }
  logicalNot(): Tensor {
    return wrap(native.logicalNot(this.handle));
  }
  isnan(): Tensor {
    return wrap(native.isnan(this.handle));
  }
  isinf(): Tensor {
    return wrap(native.isinf(this.handle));
  }
  isfinite(): Tensor {
    return wrap(native.isfinite(this.handle));
  }

  // ---- activations and normalisers ----

  relu(): Tensor {
    return wrap(native.relu(this.handle));
  }
  silu(): Tensor {
    return wrap(native.silu(this.handle));
  }
  /** GELU; approximate 'tanh' gives the tanh approximation (gelu_pytorch_tanh). */
  gelu(approximate: 'none' | 'tanh' = 'none'): Tensor {
    return wrap(native.gelu(this.handle, approximate));
  }
  tanh(): Tensor {
    return wrap(native.tanh(this.handle));
  }
  sigmoid(): Tensor {
    return wrap(native.sigmoid(this.handle));
  }
  logsigmoid(): Tensor {
    return wrap(native.logsigmoid(this.handle));
  }
  softplus(beta = 1, threshold = 20): Tensor {
    return wrap(native.softplus(this.handle, beta, threshold));
  }
  softmax(dim: number, dtype?: DType): Tensor {
    return wrap(native.softmax(this.handle, dim, optDtype(dtype)));
  }
  logSoftmax(dim: number, dtype?: DType): Tensor {
    return wrap(native.logSoftmax(this.handle, dim, optDtype(dtype)));
  }
  dropout(p: number, train = true): Tensor {
    return wrap(native.dropout(this.handle, p, train));
  }

  // ---- reductions (dim may be a number, a list, or omitted for all) ----

  sum(dim?: number | readonly number[] | null, options: ReduceOptions = {}): Tensor {
    return wrap(native.sum(this.handle, dims(dim), options.keepdim ?? false, optDtype(options.dtype)));
  }
  mean(dim?: number | readonly number[] | null, options: ReduceOptions = {}): Tensor {
    return wrap(native.mean(this.handle, dims(dim), options.keepdim ?? false, optDtype(options.dtype)));
  }
  amax(dim?: number | readonly number[] | null, keepdim = false): Tensor {
    return wrap(native.amax(this.handle, dims(dim), keepdim));
  }
  amin(dim?: number | readonly number[] | null, keepdim = false): Tensor {
    return wrap(native.amin(this.handle, dims(dim), keepdim));
  }
  /** max() reduces everything; max(dim) returns the values and their indices along dim. */
  max(): Tensor;
  max(dim: number, keepdim?: boolean): { values: Tensor; indices: Tensor };
  max(dim?: number, keepdim = false): Tensor | { values: Tensor; indices: Tensor } {
    if (dim === undefined) return wrap(native.amax(this.handle, null, false));
    return wrapPair(native.maxDim(this.handle, dim, keepdim));
  }
  min(): Tensor;
  min(dim: number, keepdim?: boolean): { values: Tensor; indices: Tensor };
  min(dim?: number, keepdim = false): Tensor | { values: Tensor; indices: Tensor } {
    if (dim === undefined) return wrap(native.amin(this.handle, null, false));
    return wrapPair(native.minDim(this.handle, dim, keepdim));
  }
  argmax(dim?: number, keepdim = false): Tensor {
    return wrap(native.argmax(this.handle, dim ?? null, keepdim));
  }
  argmin(dim?: number, keepdim = false): Tensor {
    return wrap(native.argmin(this.handle, dim ?? null, keepdim));
  }
  logsumexp(dim: number | readonly number[], keepdim = false): Tensor {
    return wrap(native.logsumexp(this.handle, dims(dim) ?? [], keepdim));
  }
  /** Vector p-norm over dim (all elements when omitted). */
  norm(p = 2, dim?: number | readonly number[] | null, options: ReduceOptions = {}): Tensor {
    return wrap(native.norm(this.handle, p, dims(dim), options.keepdim ?? false, optDtype(options.dtype)));
  }
  /** Variance with Bessel's correction by default (correction=1), as torch.var. */
  var(dim?: number | readonly number[] | null, options: { correction?: number; keepdim?: boolean } = {}): Tensor {
    return wrap(native.var(this.handle, dims(dim), options.correction ?? 1, options.keepdim ?? false));
  }
  std(dim?: number | readonly number[] | null, options: { correction?: number; keepdim?: boolean } = {}): Tensor {
    return scope(() => this.var(dim, options).sqrt());
  }
  all(dim?: number, keepdim = false): Tensor {
    return wrap(native.all(this.handle, dim ?? null, keepdim));
  }
  any(dim?: number, keepdim = false): Tensor {
    return wrap(native.any(this.handle, dim ?? null, keepdim));
  }
  cumsum(dim: number, dtype?: DType): Tensor {
    return wrap(native.cumsum(this.handle, dim, optDtype(dtype)));
  }
  cumprod(dim: number, dtype?: DType): Tensor {
    return wrap(native.cumprod(this.handle, dim, optDtype(dtype)));
  }
  topk(k: number, options: { dim?: number; largest?: boolean; sorted?: boolean } = {}): { values: Tensor; indices: Tensor } {
    return wrapPair(native.topk(this.handle, k, options.dim ?? -1, options.largest ?? true, options.sorted ?? true));
  }
  sort(options: { dim?: number; descending?: boolean; stable?: boolean } = {}): { values: Tensor; indices: Tensor } {
    return wrapPair(native.sort(this.handle, options.dim ?? -1, options.descending ?? false, options.stable ?? false));
  }
  argsort(options: { dim?: number; descending?: boolean; stable?: boolean } = {}): Tensor {
    return wrap(native.argsort(this.handle, options.dim ?? -1, options.descending ?? false, options.stable ?? false));
  }

  // ---- matrix products ----

  matmul(other: Tensor): Tensor {
    return wrap(native.matmul(this.handle, other.handle));
  }
  mm(other: Tensor): Tensor {
    return wrap(native.mm(this.handle, other.handle));
  }
  bmm(other: Tensor): Tensor {
    return wrap(native.bmm(this.handle, other.handle));
  }

  // ---- indexing ----

  gather(dim: number, index: Tensor): Tensor {
    return wrap(native.gather(this.handle, dim, index.handle));
  }
  scatter(dim: number, index: Tensor, src: TensorOrNumber): Tensor {
    return wrap(native.scatter(this.handle, dim, index.handle, h(src)));
  }
  scatterAdd(dim: number, index: Tensor, src: Tensor): Tensor {
    return wrap(native.scatterAdd(this.handle, dim, index.handle, src.handle));
  }
  indexSelect(dim: number, index: Tensor): Tensor {
    return wrap(native.indexSelect(this.handle, dim, index.handle));
  }
  maskedFill(mask: Tensor, value: TensorOrNumber | boolean): Tensor {
    return wrap(native.maskedFill(this.handle, mask.handle, h(value)));
  }
  maskedSelect(mask: Tensor): Tensor {
    return wrap(native.maskedSelect(this.handle, mask.handle));
  }
  nonzero(): Tensor {
    return wrap(native.nonzero(this.handle));
  }
  tril(diagonal = 0): Tensor {
    return wrap(native.tril(this.handle, diagonal));
  }
  triu(diagonal = 0): Tensor {
    return wrap(native.triu(this.handle, diagonal));
  }
  /** Advanced indexing, as t[i0, i1, ...] in PyTorch: index tensors per dimension, null for ':'. */
  index(indices: readonly (Tensor | null)[]): Tensor {
    return wrap(
      native.index(
        this.handle,
        indices.map((i) => (i === null ? null : i.handle)),
      ),
    );
  }

  // ---- shape and layout ----

  reshape(shape: readonly number[]): Tensor {
    return wrap(native.reshape(this.handle, [...shape]));
  }
  view(shape: readonly number[]): Tensor {
    return wrap(native.view(this.handle, [...shape]));
  }
  transpose(dim0: number, dim1: number): Tensor {
    return wrap(native.transpose(this.handle, dim0, dim1));
  }
  /** Transpose of a 2-d tensor. */
  t(): Tensor {
    return this.transpose(0, 1);
  }
  permute(order: readonly number[]): Tensor {
    return wrap(native.permute(this.handle, [...order]));
  }
  contiguous(): Tensor {
    return wrap(native.contiguous(this.handle));
  }
  unsqueeze(dim: number): Tensor {
    return wrap(native.unsqueeze(this.handle, dim));
  }
  squeeze(dim?: number | readonly number[]): Tensor {
    return wrap(native.squeeze(this.handle, dims(dim)));
  }
  expand(shape: readonly number[]): Tensor {
    return wrap(native.expand(this.handle, [...shape]));
  }
  expandAs(other: Tensor): Tensor {
    return this.expand(other.shape);
  }
  narrow(dim: number, start: number, length: number): Tensor {
    return wrap(native.narrow(this.handle, dim, start, length));
  }
  /** A view of elements start..end (exclusive) along dim, as t[..., start:end:step]. Negative bounds count from the end. */
  slice(dim: number, start?: number | null, end?: number | null, step = 1): Tensor {
    return wrap(native.slice(this.handle, dim, start ?? null, end ?? null, step));
  }
  /** Index `index` along dim, removing that dimension (t[..., index]). */
  select(dim: number, index: number): Tensor {
    return wrap(native.select(this.handle, dim, index));
  }
  flatten(startDim = 0, endDim = -1): Tensor {
    return wrap(native.flatten(this.handle, startDim, endDim));
  }
  repeat(repeats: readonly number[]): Tensor {
    return wrap(native.repeat(this.handle, [...repeats]));
  }
  repeatInterleave(repeats: number, dim: number): Tensor {
    return wrap(native.repeatInterleave(this.handle, repeats, dim));
  }
  flip(dim: number | readonly number[]): Tensor {
    return wrap(native.flip(this.handle, dims(dim) ?? []));
  }
  roll(shifts: number | readonly number[], dim: number | readonly number[]): Tensor {
    return wrap(native.roll(this.handle, dims(shifts) ?? [], dims(dim) ?? []));
  }
  /** Constant padding, torch.nn.functional.pad layout: [lastDimLeft, lastDimRight, prevDimLeft, ...]. */
  pad(padding: readonly number[], value = 0): Tensor {
    return wrap(native.pad(this.handle, [...padding], value));
  }
  /** Splits into pieces of `size` (a number) or of the given sizes (a list) along dim. */
  split(sizeOrSizes: number | readonly number[], dim = 0): Tensor[] {
    const arg = typeof sizeOrSizes === 'number' ? sizeOrSizes : [...sizeOrSizes];
    return native.split(this.handle, arg, dim).map(wrap);
  }
  chunk(chunks: number, dim = 0): Tensor[] {
    return native.chunk(this.handle, chunks, dim).map(wrap);
  }
  unbind(dim = 0): Tensor[] {
    return native.unbind(this.handle, dim).map(wrap);
  }

  // ---- conversion ----

  /** Converts dtype and/or device; returns a new handle to the same tensor when nothing changes (unless copy). */
  to(target: DType | string | ToOptions): Tensor {
    const opts: ToOptions = typeof target === 'string' ? (isDType(target) ? { dtype: target } : { device: target }) : target;
    const device = opts.device === undefined ? null : checkDevice(opts.device);
    return wrap(native.to(this.handle, optDtype(opts.dtype), device, false, opts.copy ?? false));
  }
  float(): Tensor {
    return this.to({ dtype: 'float32' });
  }
  double(): Tensor {
    return this.to({ dtype: 'float64' });
  }
  bfloat16(): Tensor {
    return this.to({ dtype: 'bfloat16' });
  }
  half(): Tensor {
    return this.to({ dtype: 'float16' });
  }
  long(): Tensor {
    return this.to({ dtype: 'int64' });
  }
  int(): Tensor {
    return this.to({ dtype: 'int32' });
  }
  bool(): Tensor {
    return this.to({ dtype: 'bool' });
  }
  cpu(): Tensor {
    return this.to({ device: 'cpu' });
  }
  clone(): Tensor {
    return wrap(native.clone(this.handle));
  }
  /** A second handle to the same tensor (same storage, same autograd identity). */
  alias(): Tensor {
    return wrap(native.alias(this.handle));
  }

  // ---- in place (for optimizers, caches and initialisation); each returns this ----

  copy_(src: Tensor): this {
    native.copy_(this.handle, src.handle);
    return this;
  }
  add_(other: TensorOrNumber, alpha?: number): this {
    native.add_(this.handle, h(other), alpha ?? null);
    return this;
  }
  sub_(other: TensorOrNumber, alpha?: number): this {
    native.sub_(this.handle, h(other), alpha ?? null);
    return this;
  }
  mul_(other: TensorOrNumber): this {
    native.mul_(this.handle, h(other));
    return this;
  }
  div_(other: TensorOrNumber): this {
    native.div_(this.handle, h(other));
    return this;
  }
  zero_(): this {
    native.zero_(this.handle);
    return this;
  }
  fill_(value: number | boolean): this {
    native.fill_(this.handle, value);
    return this;
  }
  clamp_(min?: number | null, max?: number | null): this {
    native.clamp_(this.handle, min ?? null, max ?? null);
    return this;
  }
  maskedFill_(mask: Tensor, value: number | boolean): this {
    native.maskedFill_(this.handle, mask.handle, value);
    return this;
  }
  /** this[..., index[i], ...] = src[..., i, ...] along dim (KV-cache writes). */
  indexCopy_(dim: number, index: Tensor, src: Tensor): this {
    native.indexCopy_(this.handle, dim, index.handle, src.handle);
    return this;
  }
  indexPut_(indices: readonly (Tensor | null)[], values: Tensor, accumulate = false): this {
    native.indexPut_(
      this.handle,
      indices.map((i) => (i === null ? null : i.handle)),
      values.handle,
      accumulate,
    );
    return this;
  }
  addcmul_(tensor1: Tensor, tensor2: Tensor, value = 1): this {
    native.addcmul_(this.handle, tensor1.handle, tensor2.handle, value);
    return this;
  }
  lerp_(end: Tensor, weight: TensorOrNumber): this {
    native.lerp_(this.handle, end.handle, h(weight));
    return this;
  }
  normal_(mean = 0, std = 1, generator?: { handle: GeneratorHandle }): this {
    native.normal_(this.handle, mean, std, generator?.handle ?? null);
    return this;
  }
  uniform_(from = 0, to = 1, generator?: { handle: GeneratorHandle }): this {
    native.uniform_(this.handle, from, to, generator?.handle ?? null);
    return this;
  }
}

export function isDType(value: string): value is DType {
  return Object.hasOwn(DTYPE_CODES, value);
}

/** Internal: wraps a handle returned by the addon. */
export function fromHandle(handle: Handle): Tensor {
  return new Tensor(handle);
}
