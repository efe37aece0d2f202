// Creating tensors: from JavaScript data, filled, ranges, and random (with seedable generators).
import { type AnyTypedArray, type DType, dtypeCode, isFloatingPoint } from './dtype.js';
import { type GeneratorHandle, native } from './native.js';
import { checkDevice, fromHandle, type Tensor } from './tensor.js';

export interface CreateOptions {
  dtype?: DType;
  /** 'cpu' (default) or 'cuda:N'. */
  device?: string;
  requiresGrad?: boolean;
}

/** A random number generator with its own state; pass it to random functions for reproducible streams. */
export class Generator {
  readonly handle: GeneratorHandle;
  /** The device whose random numbers it draws ('cpu', 'cuda:0', ...). */
  readonly device: string;
  constructor(
    readonly seed: number | bigint,
    device = 'cpu',
  ) {
    this.device = checkDevice(device);
    this.handle = native.createGenerator(seed, this.device);
  }
}

/** Seeds libtorch's default generators (CPU and every CUDA device). */
export function manualSeed(seed: number | bigint): void {
  native.manualSeed(seed);
}

const code = (dtype: DType | undefined, fallback: DType = 'float32'): number => dtypeCode(dtype ?? fallback);
const dev = (device: string | undefined): string | null => (device === undefined ? null : checkDevice(device));

function finish(t: Tensor, options: CreateOptions): Tensor {
  if (options.requiresGrad) t.requiresGrad_(true);
  return t;
}

type Nested = number | boolean | bigint | readonly Nested[];

function inferShape(data: Nested): number[] {
  const shape: number[] = [];
  let cursor: Nested = data;
  while (Array.isArray(cursor)) {
    shape.push(cursor.length);
    if (cursor.length === 0) break;
    cursor = cursor[0] as Nested;
  }
  return shape;
}

function flatten(data: Nested, shape: number[], depth: number, out: (number | boolean | bigint)[], path: string): void {
  if (depth === shape.length) {
    if (Array.isArray(data)) throw new TypeError(`ragged nested array at ${path}: expected a scalar`);
    out.push(data as number | boolean | bigint);
    return;
  }
  if (!Array.isArray(data) || data.length !== shape[depth]) {
    throw new TypeError(`ragged nested array at ${path}: expected ${shape[depth]} elements`);
  }
  (data as readonly Nested[]).forEach((item, i) => {
    flatten(item, shape, depth + 1, out, `${path}[${i}]`);
  });
}

/** Bytes holding `values` in the in-memory layout of `dtype` (half types are built from float32 by the caller). */
function encode(values: ArrayLike<number | boolean | bigint>, dtype: DType): AnyTypedArray {
  const n = values.length;
  switch (dtype) {
    case 'float64':
      return Float64Array.from(values as ArrayLike<number>, Number);
    case 'int64':
      return BigInt64Array.from(values as ArrayLike<number>, (v) => BigInt(typeof v === 'bigint' ? v : Math.trunc(Number(v))));
    case 'int32':
      return Int32Array.from(values as ArrayLike<number>, Number);
    case 'int16':
      return Int16Array.from(values as ArrayLike<number>, Number);
    case 'int8':
      return Int8Array.from(values as ArrayLike<number>, Number);
    case 'uint8':
      return Uint8Array.from(values as ArrayLike<number>, Number);
    case 'bool': {
      const out = new Uint8Array(n);
      for (let i = 0; i < n; i++) out[i] = values[i] ? 1 : 0;
      return out;
    }
    default:
      return Float32Array.from(values as ArrayLike<number>, Number);
  }
}

function dtypeOfTypedArray(data: AnyTypedArray): DType {
  if (data instanceof Float64Array) return 'float64';
  if (data instanceof BigInt64Array) return 'int64';
  if (data instanceof Int32Array) return 'int32';
  if (data instanceof Int16Array) return 'int16';
  if (data instanceof Int8Array) return 'int8';
  if (data instanceof Uint8Array) return 'uint8';
  return 'float32';
}

/**
 * A tensor from JavaScript data: a number, nested arrays, or a typed array (with `shape`, default 1-d).
 * The dtype defaults to the typed array's, or float32 for numbers (int64 for bigints, bool for booleans).
 */
export function tensor(data: Nested | AnyTypedArray, options: CreateOptions & { shape?: readonly number[] } = {}): Tensor {
  let values: ArrayLike<number | boolean | bigint>;
  let shape: number[];
  let natural: DType;
  if (ArrayBuffer.isView(data)) {
    values = data as AnyTypedArray;
    shape = options.shape ? [...options.shape] : [(data as AnyTypedArray).length];
    natural = dtypeOfTypedArray(data as AnyTypedArray);
  } else {
    shape = inferShape(data);
    const flat: (number | boolean | bigint)[] = [];
    flatten(data, shape, 0, flat, 'data');
    values = flat;
    const first = flat[0];
    natural = typeof first === 'bigint' ? 'int64' : typeof first === 'boolean' ? 'bool' : 'float32';
    if (options.shape) shape = [...options.shape];
  }
  const dtype = options.dtype ?? natural;
  const half = dtype === 'float16' || dtype === 'bfloat16';
  const storedAs: DType = half ? 'float32' : dtype;
  const bytes =
    ArrayBuffer.isView(data) && dtypeOfTypedArray(data as AnyTypedArray) === storedAs && storedAs !== 'bool'
      ? (data as AnyTypedArray)
      : encode(values, storedAs);
  let t = fromHandle(native.fromBytes(bytes, dtypeCode(storedAs), shape, null));
  if (half || options.device !== undefined) {
    const converted = t.to({ dtype, ...(options.device === undefined ? {} : { device: options.device }) });
    t.dispose();
    t = converted;
  }
  if (options.requiresGrad && !isFloatingPoint(dtype))
    throw new TypeError(`only floating-point tensors can require gradients, not ${dtype}`);
  return finish(t, options);
}

export function empty(shape: readonly number[], options: CreateOptions = {}): Tensor {
  return finish(fromHandle(native.empty([...shape], code(options.dtype), dev(options.device))), options);
}

export function zeros(shape: readonly number[], options: CreateOptions = {}): Tensor {
  return full(shape, 0, options);
}

export function ones(shape: readonly number[], options: CreateOptions = {}): Tensor {
  return full(shape, 1, options);
}

export function full(shape: readonly number[], value: number | boolean, options: CreateOptions = {}): Tensor {
  return finish(fromHandle(native.full([...shape], value, code(options.dtype), dev(options.device))), options);
}

/** Values start, start+step, ... below end. arange(n) counts 0..n-1 (int64, as in PyTorch, for integer bounds). */
export function arange(end: number, options?: CreateOptions): Tensor;
export function arange(start: number, end: number, step?: number, options?: CreateOptions): Tensor;
export function arange(a: number, b?: number | CreateOptions, c?: number, d?: CreateOptions): Tensor {
  const [start, end, step, options] =
    typeof b === 'number' ? [a, b, c ?? 1, d ?? {}] : [0, a, 1, (b as CreateOptions | undefined) ?? {}];
  const integral = Number.isInteger(start) && Number.isInteger(end) && Number.isInteger(step);
  const dtype = options.dtype ?? (integral ? 'int64' : 'float32');
  return finish(fromHandle(native.arange(start, end, step, dtypeCode(dtype), dev(options.device))), options);
}

export function linspace(start: number, end: number, steps: number, options: CreateOptions = {}): Tensor {
  return finish(fromHandle(native.linspace(start, end, steps, code(options.dtype), dev(options.device))), options);
}

export interface RandomOptions extends CreateOptions {
  generator?: Generator;
}

/** Standard normal samples. */
export function randn(shape: readonly number[], options: RandomOptions = {}): Tensor {
  const h = native.randn([...shape], code(options.dtype), dev(options.device), options.generator?.handle ?? null);
  return finish(fromHandle(h), options);
}

/** Uniform samples in [0, 1). */
export function rand(shape: readonly number[], options: RandomOptions = {}): Tensor {
  const h = native.rand([...shape], code(options.dtype), dev(options.device), options.generator?.handle ?? null);
  return finish(fromHandle(h), options);
}

/**
 * One float64 draw uniform in [0, 1) from each generator (null: the default one), as a [S] tensor: what
 * rand([1], { dtype: 'float64', generator }) gives for each, in one native call.
 */
export function uniformPerGenerator(generators: readonly (Generator | null)[], options: { device?: string } = {}): Tensor {
  return fromHandle(
    native.uniformPerGenerator(
      generators.map((g) => g?.handle ?? null),
      dev(options.device),
    ),
  );
}

/** Integers uniform in [low, high). */
export function randint(low: number, high: number, shape: readonly number[], options: RandomOptions = {}): Tensor {
  const h = native.randint(
    low,
    high,
    [...shape],
    code(options.dtype, 'int64'),
    dev(options.device),
    options.generator?.handle ?? null,
  );
  return fromHandle(h);
}

export function zerosLike(t: Tensor): Tensor {
  return fromHandle(native.zerosLike(t.handle));
}

export function onesLike(t: Tensor): Tensor {
  return fromHandle(native.onesLike(t.handle));
}

export function fullLike(t: Tensor, value: number | boolean): Tensor {
  return fromHandle(native.fullLike(t.handle, value));
}

export function emptyLike(t: Tensor): Tensor {
  return fromHandle(native.emptyLike(t.handle));
}
