// JSON as Python's `json` module reads and writes it, for ports whose prompts or comparisons depend on its text:
//
//   parsePythonJson('{"x": 1.0, "n": 2}')       → Map { x → PyFloat(1), n → PyInt(2n) }   (1.0 and 1 stay apart)
//   pythonJsonDumps(value)                       → '{"x": 1.0, "n": 2}'   json.dumps: ", " and ": ", ensure_ascii
//   pythonJsonDumps(value, { sortKeys: true })   → keys sorted, as json.dumps(..., sort_keys=True)
//
// Python keeps an integer and a float apart (json.loads("1") is int 1, "1.0" is float 1.0; they dump as "1" and
// "1.0"), which JSON.parse cannot; objects keep their key order (a repeated key: its first place, its last value);
// NaN, Infinity and -Infinity are read and written as Python does. A float dumps as Python's repr: the shortest
// digits that read back, fixed notation for 1e-4 <= |x| < 1e16 (with ".0" when whole), else d.ddde±XX.

export class PyInt {
  constructor(readonly value: bigint) {}
}

export class PyFloat {
  constructor(readonly value: number) {}
}

export type PyValue = null | boolean | string | PyInt | PyFloat | PyValue[] | Map<string, PyValue>;

/** Python's json.loads; throws a SyntaxError naming the offset on text that is not JSON. */
export function parsePythonJson(text: string): PyValue {
  let at = 0;
  const fail = (what: string): never => {
    throw new SyntaxError(`${what} at offset ${at}`);
  };
  const space = (): void => {
    while (at < text.length && ' \t\n\r'.includes(text[at] as string)) at++;
  };
  const literal = (word: string): boolean => {
    if (!text.startsWith(word, at)) return false;
    at += word.length;
    return true;
  };
  const string = (): string => {
    const start = at;
    at++; // the opening quote
    for (; at < text.length; at++) {
      const c = text.charCodeAt(at);
      if (c === 0x22) break;
      if (c < 0x20) fail('a control character in a string');
      if (c === 0x5c) at++; // an escape: the next character is part of it (JSON.parse checks the escape)
    }
    if (at >= text.length) fail('an unterminated string');
    at++;
    return JSON.parse(text.slice(start, at)) as string;
  };
  const number = (): PyValue => {
    const match = /^-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/.exec(text.slice(at));
    if (match === null) return fail('an unexpected character');
    at += match[0].length;
    return match[1] === undefined && match[2] === undefined ? new PyInt(BigInt(match[0])) : new PyFloat(Number(match[0]));
  };
  const value = (): PyValue => {
    space();
    const c = text[at];
    if (c === '"') return string();
    if (c === '{') {
      at++;
      const object = new Map<string, PyValue>();
      space();
      if (literal('}')) return object;
      for (;;) {
        space();
        if (text[at] !== '"') fail('expected a key');
        const key = string();
        space();
        if (!literal(':')) fail("expected ':'");
        object.set(key, value());
        space();
        if (literal('}')) return object;
        if (!literal(',')) fail("expected ',' or '}'");
      }
    }
    if (c === '[') {
      at++;
      const list: PyValue[] = [];
      space();
      if (literal(']')) return list;
      for (;;) {
        list.push(value());
        space();
        if (literal(']')) return list;
        if (!literal(',')) fail("expected ',' or ']'");
      }
    }
    if (literal('true')) return true;
    if (literal('false')) return false;
    if (literal('null')) return null;
    if (literal('NaN')) return new PyFloat(Number.NaN);
    if (literal('Infinity')) return new PyFloat(Number.POSITIVE_INFINITY);
    if (literal('-Infinity')) return new PyFloat(Number.NEGATIVE_INFINITY);
    return number();
  };
  const result = value();
  space();
  if (at < text.length) fail('extra data');
  return result;
}

/** A value JSON.parse gave (or any plain data) as Python would hold it: whole numbers as ints, others as floats. */
export function toPyValue(value: unknown): PyValue {
  if (value === null || value === undefined) return null;
  if (typeof value === 'boolean' || typeof value === 'string') return value;
  if (typeof value === 'number') return Number.isInteger(value) ? new PyInt(BigInt(value)) : new PyFloat(value);
  if (Array.isArray(value)) return value.map(toPyValue);
  if (value instanceof Map) return new Map([...value].map(([k, v]) => [String(k), toPyValue(v)]));
  if (typeof value === 'object') return new Map(Object.entries(value).map(([k, v]) => [k, toPyValue(v)]));
  throw new TypeError(`a ${typeof value} has no JSON form`);
}

/** Python's json.dumps (default separators, ensure_ascii); `sortKeys` sorts every object's keys. */
export function pythonJsonDumps(value: PyValue, options: { sortKeys?: boolean } = {}): string {
  if (value === null) return 'null';
  if (value === true) return 'true';
  if (value === false) return 'false';
  if (typeof value === 'string') return pythonString(value);
  if (value instanceof PyInt) return value.value.toString();
  if (value instanceof PyFloat) return pythonFloatRepr(value.value);
  if (Array.isArray(value)) return `[${value.map((v) => pythonJsonDumps(v, options)).join(', ')}]`;
  const keys = [...value.keys()];
  if (options.sortKeys) keys.sort();
  return `{${keys.map((k) => `${pythonString(k)}: ${pythonJsonDumps(value.get(k) as PyValue, options)}`).join(', ')}}`;
}

/** A string as json.dumps writes it with ensure_ascii: every character past U+007F as \uXXXX (UTF-16 units). */
function pythonString(text: string): string {
  return JSON.stringify(text).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Python's repr of a float (see the header). */
export function pythonFloatRepr(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? 'Infinity' : '-Infinity';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const [mantissa, exponentText] = x.toExponential().split('e') as [string, string];
  const exponent = Number(exponentText);
  const sign = mantissa.startsWith('-') ? '-' : '';
  const digits = mantissa.replace(/^-/, '').replace('.', '');
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return `${sign}0.${'0'.repeat(-exponent - 1)}${digits}`;
    const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, '0');
    const fraction = digits.slice(exponent + 1);
    return `${sign}${whole}.${fraction === '' ? '0' : fraction}`;
  }
  const head = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${head}e${exponent < 0 ? '-' : '+'}${String(Math.abs(exponent)).padStart(2, '0')}`;
}
