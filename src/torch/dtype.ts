// Data types: names as users write them, codes as libtorch's c10::ScalarType numbers them.

export type DType = 'float32' | 'float64' | 'float16' | 'bfloat16' | 'int64' | 'int32' | 'int16' | 'int8' | 'uint8' | 'bool';

export const DTYPE_CODES: Readonly<Record<DType, number>> = {
  uint8: 0,
  int8: 1,
  int16: 2,
  int32: 3,
  int64: 4,
  float16: 5,
  float32: 6,
  float64: 7,
  bool: 11,
  bfloat16: 15,
};

const byCode = new Map<number, DType>(Object.entries(DTYPE_CODES).map(([name, code]) => [code, name as DType]));

export function dtypeFromCode(code: number): DType {
  const name = byCode.get(code);
  if (name === undefined) throw new Error(`unsupported libtorch dtype code ${code}`);
  return name;
}

export function dtypeCode(dtype: DType): number {
  const code = DTYPE_CODES[dtype];
  if (code === undefined) {
    throw new TypeError(`unknown dtype '${String(dtype)}'; expected one of ${Object.keys(DTYPE_CODES).join(', ')}`);
  }
  return code;
}

export const DTYPE_BYTES: Readonly<Record<DType, number>> = {
  uint8: 1,
  int8: 1,
  int16: 2,
  int32: 4,
  int64: 8,
  float16: 2,
  float32: 4,
  float64: 8,
  bool: 1,
  bfloat16: 2,
};

export function isFloatingPoint(dtype: DType): boolean {
  return dtype === 'float32' || dtype === 'float64' || dtype === 'float16' || dtype === 'bfloat16';
}

/** The typed array that holds a dtype's values when read back into JavaScript (half types widen to float32). */
export type TypedArrayFor<D extends DType> = D extends 'int64'
  ? BigInt64Array
  : D extends 'float64'
    ? Float64Array
    : D extends 'int32'
      ? Int32Array
      : D extends 'int16'
        ? Int16Array
        : D extends 'int8'
          ? Int8Array
          : D extends 'uint8' | 'bool'
            ? Uint8Array
            : Float32Array;

export type AnyTypedArray = Float32Array | Float64Array | BigInt64Array | Int32Array | Int16Array | Int8Array | Uint8Array;
