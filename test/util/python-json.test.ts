// Python's json module's text (src/util/python-json.ts): reading keeps ints and floats apart, writing matches
// json.dumps byte for byte. The expected strings are what CPython 3 prints for the same calls (written beside each).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PyFloat, PyInt, parsePythonJson, pythonFloatRepr, pythonJsonDumps, toPyValue } from '../../src/util/python-json.js';

describe('python-json', () => {
  test('json.dumps: separators, ensure_ascii, key order, sort_keys', () => {
    const value = parsePythonJson('{"b":[1,2.5,"é",true,null],"a":{"y":1.0,"x":-0}}');
    // json.dumps(json.loads(...)) → '{"b": [1, 2.5, "\\u00e9", true, null], "a": {"y": 1.0, "x": 0}}'
    assert.equal(pythonJsonDumps(value), '{"b": [1, 2.5, "\\u00e9", true, null], "a": {"y": 1.0, "x": 0}}');
    // json.dumps(..., sort_keys=True) → '{"a": {"x": 0, "y": 1.0}, "b": [...]}'
    assert.equal(pythonJsonDumps(value, { sortKeys: true }), '{"a": {"x": 0, "y": 1.0}, "b": [1, 2.5, "\\u00e9", true, null]}');
    assert.equal(pythonJsonDumps(parsePythonJson('{}')), '{}');
    assert.equal(pythonJsonDumps(parsePythonJson(' [ ] ')), '[]');
    assert.equal(pythonJsonDumps('tab\there "q" \\ \u0001 😀'), '"tab\\there \\"q\\" \\\\ \\u0001 \\ud83d\\ude00"');
  });

  test("floats print as Python's repr", () => {
    // repr(x) in CPython for each x
    const cases: [number, string][] = [
      [1, '1.0'],
      [0.1, '0.1'],
      [2e-5, '2e-05'],
      [0.0001, '0.0001'],
      [1e16, '1e+16'],
      [1.5e16, '1.5e+16'],
      [123456789012345.6, '123456789012345.6'],
      [1e15, '1000000000000000.0'],
      [-2.5, '-2.5'],
      [-0, '-0.0'],
      [1.7976931348623157e308, '1.7976931348623157e+308'],
      [5e-324, '5e-324'],
    ];
    for (const [x, repr] of cases) assert.equal(pythonFloatRepr(x), repr, String(x));
    assert.equal(pythonJsonDumps(parsePythonJson('[NaN, Infinity, -Infinity, 1E2]')), '[NaN, Infinity, -Infinity, 100.0]');
  });

  test('ints and floats stay apart; big ints are exact', () => {
    const [one, oneFloat, big] = parsePythonJson('[1, 1.0, 123456789012345678901234567890]') as [PyInt, PyFloat, PyInt];
    assert.ok(one instanceof PyInt && oneFloat instanceof PyFloat);
    assert.equal(big.value, 123456789012345678901234567890n);
    assert.notEqual(pythonJsonDumps(one), pythonJsonDumps(oneFloat));
    assert.equal(pythonJsonDumps(toPyValue({ n: 3, f: 0.5, l: [1, 'x'] })), '{"n": 3, "f": 0.5, "l": [1, "x"]}');
  });

  test('text that json.loads refuses is refused, naming the offset', () => {
    assert.throws(() => parsePythonJson('{"a": 1,}'), /expected a key at offset 8/);
    assert.throws(() => parsePythonJson('[1] x'), /extra data at offset 4/);
    assert.throws(() => parsePythonJson('"a\nb"'), /a control character in a string at offset 2/);
    assert.throws(() => parsePythonJson('01'), /extra data at offset 1/);
    assert.throws(() => parsePythonJson('"abc'), /an unterminated string/);
  });
});
