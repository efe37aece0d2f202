// Safetensors interoperability with the Python `safetensors` package and transformers' sharded layout:
//   - files written by Python (test/fixtures/safetensors, from scripts/fixtures/safetensors_interop.py) load here;
//   - every dtype round-trips through our writer and reader, single-file and sharded;
//   - malformed files fail with a SafetensorsError naming the file (and the tensor, where there is one);
//   - files written here load in Python (the script's `verify` mode, run with .cache/python-ref/bin/python).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as torch from '../../src/torch/index.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const FIXTURES = join(ROOT, 'test', 'fixtures', 'safetensors');
const SCRIPT = join(ROOT, 'scripts', 'fixtures', 'safetensors_interop.py');
const PYTHON = join(ROOT, '.cache', 'python-ref', 'bin', 'python');

type Value = number | string | boolean;
interface TensorSpec {
  dtype: torch.DType;
  shape: number[];
  values: Value[];
}
interface Expected {
  files: Record<string, { metadata: Record<string, string> | null; tensors: Record<string, TensorSpec> }>;
  indexes: Record<string, { shards: string[]; tensors: Record<string, TensorSpec> }>;
}

const ALL_DTYPES: torch.DType[] = [
  'float32',
  'float64',
  'float16',
  'bfloat16',
  'int64',
  'int32',
  'int16',
  'int8',
  'uint8',
  'bool',
];

const temporaryDirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'trinity-safetensors-'));
  temporaryDirs.push(dir);
  return dir;
}
after(() => {
  for (const dir of temporaryDirs) rmSync(dir, { recursive: true, force: true });
});

/** Runs fn inside a scope and checks that no tensor handle outlives it. */
function scoped(fn: () => void): void {
  const before = torch.liveTensorCount();
  torch.scope(fn);
  assert.equal(torch.liveTensorCount(), before, 'tensor handles leaked');
}

/** Row-major values in expected.json's encoding: int64 as decimal strings, bool as booleans, halves as float32. */
function valuesOf(t: torch.Tensor): Value[] {
  const flat = t.toTypedArray();
  if (flat instanceof BigInt64Array) return Array.from(flat, (v) => v.toString());
  if (t.dtype === 'bool') return Array.from(flat as Uint8Array, (v) => v !== 0);
  return Array.from(flat as Exclude<typeof flat, BigInt64Array>, Number);
}

function describeTensor(t: torch.Tensor): TensorSpec {
  return { dtype: t.dtype, shape: [...t.shape], values: valuesOf(t) };
}

function assertTensor(where: string, name: string, t: torch.Tensor | undefined, spec: TensorSpec): void {
  assert.ok(t, `${where}: tensor '${name}' missing`);
  assert.equal(t.dtype, spec.dtype, `${where}: tensor '${name}': dtype`);
  assert.deepEqual([...t.shape], spec.shape, `${where}: tensor '${name}': shape`);
  assert.deepEqual(valuesOf(t), spec.values, `${where}: tensor '${name}': values`);
}

function assertTensors(where: string, loaded: Map<string, torch.Tensor>, specs: Record<string, TensorSpec>): void {
  assert.deepEqual([...loaded.keys()].sort(), Object.keys(specs).sort(), `${where}: tensor names`);
  for (const [name, spec] of Object.entries(specs)) assertTensor(where, name, loaded.get(name), spec);
}

/** One small tensor of every dtype, with values exact in its dtype (so halves hold exactly what was written). */
function everyDtype(): Map<string, torch.Tensor> {
  const halfValues = [0.5, -1.25, 3, -0.0078125, 1024, 65504 / 64];
  return new Map<string, torch.Tensor>([
    // Mixed sizes in an order that leaves wider types at odd offsets, as files from other writers may.
    ['flags', torch.tensor([true, false, true], { dtype: 'bool' })],
    ['w.f32', torch.tensor([1.5, -2.25, Math.fround(0.1), 3.4e38, -1e-30, 0], { shape: [2, 3] })],
    ['w.f64', torch.tensor(Float64Array.from([0.1, -1e300, Math.PI, 2 ** -1074]), { shape: [2, 2] })],
    ['i8', torch.tensor(Int8Array.from([127, -128, 0, -1, 5]))],
    ['w.f16', torch.tensor(halfValues, { dtype: 'float16', shape: [3, 2] })],
    ['w.bf16', torch.tensor(halfValues, { dtype: 'bfloat16', shape: [2, 3] })],
    ['u8', torch.tensor(Uint8Array.from([0, 255, 17]), { shape: [1, 3] })],
    ['i64', torch.tensor(BigInt64Array.from([0n, -1n, 2n ** 62n + 1n, -(2n ** 63n), 2n ** 53n + 1n, 7n]), { shape: [3, 2] })],
    ['i32', torch.tensor(Int32Array.from([2 ** 31 - 1, -(2 ** 31), 42]))],
    ['i16', torch.tensor(Int16Array.from([32767, -32768, -3, 9]), { shape: [2, 1, 2] })],
    ['scalar', torch.tensor(Float32Array.from([2.5]), { shape: [] })],
    ['empty', torch.zeros([0, 4], { dtype: 'int32' })],
  ]);
}

// ---------------------------------------------------------------------------------------------------------------

describe('files written by Python load here', () => {
  const expected = JSON.parse(readFileSync(join(FIXTURES, 'expected.json'), 'utf8')) as Expected;

  test('a file with one tensor of every dtype, and its metadata (safetensors.torch.save_file)', () =>
    scoped(() => {
      const file = join(FIXTURES, 'all-dtypes.safetensors');
      const want = expected.files['all-dtypes.safetensors'];
      assert.ok(want);
      const dtypes = new Set(Object.values(want.tensors).map((s) => s.dtype));
      assert.deepEqual([...dtypes].sort(), [...ALL_DTYPES].sort(), 'the fixture covers every dtype');
      const header = torch.readSafetensorsHeader(file);
      assert.deepEqual(header.metadata, want.metadata);
      for (const [name, spec] of Object.entries(want.tensors)) {
        const entry = header.entries.get(name);
        assert.ok(entry, name);
        assert.equal(entry.dtype, spec.dtype);
        assert.deepEqual(entry.shape, spec.shape);
      }
      assertTensors(file, torch.loadSafetensors(file), want.tensors);
    }));

  test('every shard file of the transformers-style checkpoint loads on its own', () =>
    scoped(() => {
      for (const [name, want] of Object.entries(expected.files)) {
        const file = join(FIXTURES, name);
        assert.deepEqual(torch.readSafetensorsHeader(file).metadata, want.metadata ?? {});
        assertTensors(file, torch.loadSafetensors(file), want.tensors);
      }
    }));

  test('the sharded checkpoint loads through its index (loadModelWeights on the folder and on the index)', () =>
    scoped(() => {
      const want = expected.indexes['model.safetensors.index.json'];
      assert.ok(want);
      assert.equal(want.shards.length, 2);
      assertTensors(FIXTURES, torch.loadModelWeights(FIXTURES), want.tensors);
      const index = join(FIXTURES, 'model.safetensors.index.json');
      assertTensors(index, torch.loadModelWeights(index), want.tensors);
      assertTensors(index, torch.loadShardedSafetensors(index), want.tensors);
    }));

  test('load options: filter, floating-point dtype conversion', () =>
    scoped(() => {
      const loaded = torch.loadModelWeights(FIXTURES, { filter: (n) => n.endsWith('.weight'), dtype: 'float32' });
      assert.ok([...loaded.keys()].every((n) => n.endsWith('.weight')));
      assert.equal(loaded.size, 5);
      for (const t of loaded.values()) assert.equal(t.dtype, 'float32');
      const want = expected.indexes['model.safetensors.index.json']?.tensors['model.layers.0.self_attn.q_proj.weight'];
      assert.ok(want);
      assert.deepEqual(valuesOf(loaded.get('model.layers.0.self_attn.q_proj.weight') as torch.Tensor), want.values);
      const ints = torch.loadSafetensors(join(FIXTURES, 'all-dtypes.safetensors'), { dtype: 'float16' });
      assert.equal(ints.get('i64')?.dtype, 'int64', 'integer tensors keep their dtype');
      assert.equal(ints.get('f64')?.dtype, 'float16');
    }));
});

describe('round trips through our writer', () => {
  test('every dtype through saveSafetensors / loadSafetensors, with metadata, in order', () =>
    scoped(() => {
      const tensors = everyDtype();
      const file = join(tempDir(), 'all.safetensors');
      torch.saveSafetensors(file, tensors, { format: 'pt', step: '12' });
      const header = torch.readSafetensorsHeader(file);
      assert.deepEqual(header.metadata, { format: 'pt', step: '12' });
      const dataStart = 8 + Number(readFileSync(file).readBigUInt64LE(0));
      assert.equal(dataStart % 8, 0, 'the data section starts 8-byte aligned');
      const loaded = torch.loadSafetensors(file);
      assert.deepEqual([...loaded.keys()], [...tensors.keys()]);
      for (const [name, t] of tensors) assertTensor(file, name, loaded.get(name), describeTensor(t));
      assert.deepEqual(new Set(ALL_DTYPES), new Set([...tensors.values()].map((t) => t.dtype)));
    }));

  test('a non-contiguous view is written as its row-major values', () =>
    scoped(() => {
      const t = torch.arange(12, { dtype: 'float32' }).reshape([3, 4]).t();
      assert.equal(t.isContiguous, false);
      const file = join(tempDir(), 'view.safetensors');
      torch.saveSafetensors(file, { t });
      assertTensor(file, 't', torch.loadSafetensors(file).get('t'), describeTensor(t));
    }));

  test('saveModelWeights with a small maxShardBytes writes several shards and an index that loads back', () =>
    scoped(() => {
      const tensors = everyDtype();
      const dir = tempDir();
      const files = torch.saveModelWeights(dir, tensors, { maxShardBytes: 40 });
      const index = files[files.length - 1] as string;
      assert.equal(basename(index), 'model.safetensors.index.json');
      const shards = files.slice(0, -1).map((f) => basename(f));
      assert.ok(shards.length >= 3, `expected several shards, got ${shards.join(', ')}`);
      shards.forEach((name, i) => {
        assert.equal(name, `model-${String(i + 1).padStart(5, '0')}-of-${String(shards.length).padStart(5, '0')}.safetensors`);
      });
      const parsed = JSON.parse(readFileSync(index, 'utf8')) as torch.ShardIndex;
      let bytes = 0;
      for (const t of tensors.values()) bytes += t.numel * torch.DTYPE_BYTES[t.dtype];
      assert.equal(parsed.metadata.total_size, bytes);
      assert.deepEqual(Object.keys(parsed.weight_map).sort(), [...tensors.keys()].sort());
      assert.deepEqual([...new Set(Object.values(parsed.weight_map))].sort(), shards);
      for (const shard of shards) {
        const header = torch.readSafetensorsHeader(join(dir, shard));
        assert.deepEqual(header.metadata, { format: 'pt' });
        let size = 0;
        for (const e of header.entries.values()) size += e.byteLength;
        assert.ok(size <= 40 || header.entries.size === 1, `${shard} holds ${size} bytes in ${header.entries.size} tensors`);
      }
      for (const loaded of [torch.loadModelWeights(dir), torch.loadModelWeights(index)]) {
        assert.equal(loaded.size, tensors.size);
        for (const [name, t] of tensors) assertTensor(dir, name, loaded.get(name), describeTensor(t));
      }
      // Weights that fit one shard: a single model.safetensors, no index.
      const single = tempDir();
      assert.deepEqual(torch.saveModelWeights(single, tensors), [join(single, 'model.safetensors')]);
      assert.deepEqual(readdirSync(single), ['model.safetensors']);
      assert.equal(torch.loadModelWeights(single).size, tensors.size);
    }));

  test('saveModelWeights over an earlier save leaves no stale index or shards behind', () =>
    scoped(() => {
      const dir = join(tempDir(), 'nested', 'checkpoint'); // created as needed
      const make = (n: number) => new Map(Array.from({ length: n }, (_, i) => [`w${i}`, torch.full([4], i)] as const));
      const files4 = torch.saveModelWeights(dir, make(4), { maxShardBytes: 16 });
      assert.equal(files4.length, 5);
      const files2 = torch.saveModelWeights(dir, make(2), { maxShardBytes: 16 });
      assert.deepEqual(readdirSync(dir).sort(), files2.map((f) => basename(f)).sort());
      assert.equal(torch.loadModelWeights(dir).size, 2);
      torch.saveModelWeights(dir, make(3));
      assert.deepEqual(readdirSync(dir), ['model.safetensors']);
      assert.deepEqual([...torch.loadModelWeights(dir).keys()], ['w0', 'w1', 'w2']);
      torch.saveModelWeights(dir, make(2), { maxShardBytes: 16 });
      assert.ok(!readdirSync(dir).includes('model.safetensors'));
      assert.deepEqual([...torch.loadModelWeights(dir).keys()].sort(), ['w0', 'w1']);
      const index = JSON.parse(readFileSync(join(dir, 'model.safetensors.index.json'), 'utf8')) as torch.ShardIndex;
      assert.deepEqual(index.metadata, { total_parameters: 8, total_size: 32 });
    }));

  test('a 64 MB tensor round-trips intact (tensor bytes go between file and storage, not through JS strings)', () =>
    scoped(() => {
      const n = 16 * 1024 * 1024; // float32 values 0..2^24-1 are exact
      const big = torch.arange(0, n, 1, { dtype: 'float32' }).reshape([4096, 4096]);
      const small = torch.tensor([1, 2, 3], { dtype: 'int16' });
      const file = join(tempDir(), 'big.safetensors');
      torch.saveSafetensors(file, { small, big });
      assert.ok(statSync(file).size > 64 * 1024 * 1024);
      const loaded = torch.loadSafetensors(file);
      const back = loaded.get('big');
      assert.ok(back);
      assert.deepEqual([...back.shape], [4096, 4096]);
      assert.equal(back.eq(big).all().item(), 1, 'every value equal');
      assert.equal(back.select(0, 4095).select(0, 4095).item(), n - 1);
      assert.deepEqual(loaded.get('small')?.toArray(), [1, 2, 3]);
    }));
});

// ---------------------------------------------------------------------------------------------------------------

/** A safetensors file from a header (object or raw JSON text) and data bytes. */
function rawFile(file: string, header: object | string, data: Buffer = Buffer.alloc(0), headerLength?: number): string {
  const json = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header), 'utf8');
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(headerLength ?? json.length));
  writeFileSync(file, Buffer.concat([length, json, data]));
  return file;
}

function assertSafetensorsError(fn: () => unknown, file: string, ...parts: (string | RegExp)[]): void {
  const before = torch.liveTensorCount();
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof torch.SafetensorsError, `expected a SafetensorsError, got ${String(error)}`);
    assert.equal(error.name, 'SafetensorsError');
    assert.ok(error.message.includes(file), `message names the file: ${error.message}`);
    for (const part of parts) {
      if (typeof part === 'string') assert.ok(error.message.includes(part), `message has '${part}': ${error.message}`);
      else assert.match(error.message, part);
    }
    return true;
  });
  assert.equal(torch.liveTensorCount(), before, 'a failed load frees what it had loaded');
}

describe('malformed files give a SafetensorsError naming the file and the tensor', () => {
  const dir = tempDir();
  const f32 = (name: string, shape: number[], offsets: [number, number]) => ({
    [name]: { dtype: 'F32', shape, data_offsets: offsets },
  });

  test('truncated file: the tensor past the end is named', () =>
    scoped(() => {
      const file = join(dir, 'truncated.safetensors');
      torch.saveSafetensors(file, { first: torch.ones([4]), 'layers.1.weight': torch.ones([16, 16]) });
      truncateSync(file, statSync(file).size - 10);
      assertSafetensorsError(() => torch.loadSafetensors(file), file, "tensor 'layers.1.weight'", /past the end of the data/);
      assertSafetensorsError(() => torch.readSafetensorsHeader(file), file, "tensor 'layers.1.weight'");
      // Cut inside the header, and below the 8-byte length.
      truncateSync(file, 20);
      assertSafetensorsError(() => torch.loadSafetensors(file), file, /header length \d+ does not fit the file \(20 bytes\)/);
      truncateSync(file, 5);
      assertSafetensorsError(() => torch.loadSafetensors(file), file, /5 bytes, too small/);
    }));

  test('header length past the end of the file', () =>
    scoped(() => {
      const file = rawFile(join(dir, 'length.safetensors'), f32('x', [1], [0, 4]), Buffer.alloc(4), 1_000_000);
      assertSafetensorsError(() => torch.loadSafetensors(file), file, /header length 1000000 does not fit/);
      const huge = rawFile(join(dir, 'huge.safetensors'), '{}', Buffer.alloc(0), 2 ** 40);
      assertSafetensorsError(() => torch.loadSafetensors(huge), huge, /does not fit/);
    }));

  test('invalid JSON header, and a header that is not an object', () =>
    scoped(() => {
      const file = rawFile(join(dir, 'json.safetensors'), '{"x": {"dtype": "F32", ');
      assertSafetensorsError(() => torch.loadSafetensors(file), file, /header is not valid JSON/);
      const list = rawFile(join(dir, 'list.safetensors'), '[1, 2]');
      assertSafetensorsError(() => torch.loadSafetensors(list), list, /not a JSON object/);
    }));

  test('unknown dtype', () =>
    scoped(() => {
      const file = rawFile(
        join(dir, 'dtype.safetensors'),
        { 'model.q.weight': { dtype: 'C64', shape: [1], data_offsets: [0, 8] } },
        Buffer.alloc(8),
      );
      assertSafetensorsError(() => torch.loadSafetensors(file), file, "tensor 'model.q.weight'", /unsupported dtype "C64"/);
    }));

  test('data_offsets that do not match the shape, and malformed shape/offsets', () =>
    scoped(() => {
      const file = rawFile(
        join(dir, 'offsets.safetensors'),
        { ...f32('ok', [2], [0, 8]), ...f32('bad', [2, 3], [8, 28]) },
        Buffer.alloc(28),
      );
      assertSafetensorsError(
        () => torch.loadSafetensors(file),
        file,
        "tensor 'bad'",
        /hold 20 bytes, but shape \[2, 3\] of float32 needs 24/,
      );
      const reversed = rawFile(join(dir, 'reversed.safetensors'), f32('r', [0], [8, 4]), Buffer.alloc(8));
      assertSafetensorsError(() => torch.loadSafetensors(reversed), reversed, "tensor 'r'");
      const shape = rawFile(join(dir, 'shape.safetensors'), f32('s', [-1], [0, 4]), Buffer.alloc(4));
      assertSafetensorsError(() => torch.loadSafetensors(shape), shape, "tensor 's'", /shape \[-1\]/);
      const offsets = rawFile(
        join(dir, 'offsets2.safetensors'),
        { o: { dtype: 'F32', shape: [1], data_offsets: [0] } },
        Buffer.alloc(4),
      );
      assertSafetensorsError(() => torch.loadSafetensors(offsets), offsets, "tensor 'o'", /data_offsets/);
    }));

  test('an index naming a tensor its shard lacks, a missing shard, a bad index', () =>
    scoped(() => {
      const sharded = join(dir, 'sharded');
      const files = torch.saveModelWeights(sharded, { a: torch.ones([8]), b: torch.zeros([8]) }, { maxShardBytes: 32 });
      const index = files[files.length - 1] as string;
      const parsed = JSON.parse(readFileSync(index, 'utf8')) as torch.ShardIndex;
      const shard = parsed.weight_map.a as string;
      writeFileSync(index, JSON.stringify({ ...parsed, weight_map: { ...parsed.weight_map, 'lm_head.weight': shard } }));
      assertSafetensorsError(() => torch.loadModelWeights(sharded), index, "tensor 'lm_head.weight'", shard);
      writeFileSync(
        index,
        JSON.stringify({ ...parsed, weight_map: { ...parsed.weight_map, c: 'model-00009-of-00009.safetensors' } }),
      );
      assertSafetensorsError(
        () => torch.loadModelWeights(sharded),
        join(sharded, 'model-00009-of-00009.safetensors'),
        /cannot open/,
      );
      writeFileSync(index, JSON.stringify({ ...parsed, weight_map: { a: '../elsewhere.safetensors' } }));
      assertSafetensorsError(() => torch.loadModelWeights(sharded), index, /invalid shard file/);
      writeFileSync(index, '{"metadata": {}');
      assertSafetensorsError(() => torch.loadModelWeights(sharded), index, /cannot read the shard index/);
      writeFileSync(index, '{"metadata": {}}');
      assertSafetensorsError(() => torch.loadModelWeights(sharded), index, /no 'weight_map'/);
      const nothing = tempDir();
      assertSafetensorsError(() => torch.loadModelWeights(nothing), nothing, /no model.safetensors/);
      assertSafetensorsError(
        () => torch.loadSafetensors(join(nothing, 'x.safetensors')),
        join(nothing, 'x.safetensors'),
        /cannot open/,
      );
    }));
});

// ---------------------------------------------------------------------------------------------------------------

describe('files written here load in Python', () => {
  test('safetensors (load_file, safe_open) and transformers (sharded index) read our files', () => {
    assert.ok(
      existsSync(PYTHON),
      `the reference Python environment is missing (${PYTHON}): run \`bash scripts/python-env.sh\` to create it, then rerun this test`,
    );
    const dir = tempDir();
    scoped(() => {
      const expected: Expected = { files: {}, indexes: {} };
      const tensors = everyDtype();
      const metadata = { format: 'pt', producer: 'trinity-rft', 'unicode é': 'ünï' };
      torch.saveSafetensors(join(dir, 'all-dtypes.safetensors'), tensors, metadata);
      expected.files['all-dtypes.safetensors'] = {
        metadata,
        tensors: Object.fromEntries([...tensors].map(([name, t]) => [name, describeTensor(t)])),
      };
      const model = new Map<string, torch.Tensor>([
        ['model.embed_tokens.weight', torch.randn([16, 8])],
        ['model.layers.0.self_attn.q_proj.weight', torch.randn([8, 8]).bfloat16()],
        ['model.layers.0.self_attn.q_proj.bias', torch.randn([8])],
        ['model.norm.weight', torch.randn([8]).half()],
        ['lm_head.weight', torch.randn([16, 8])],
        ['position_ids', torch.arange(5)],
      ]);
      const files = torch.saveModelWeights(dir, model, { maxShardBytes: 600 });
      const index = JSON.parse(readFileSync(files[files.length - 1] as string, 'utf8')) as torch.ShardIndex;
      const shards = files.slice(0, -1).map((f) => basename(f));
      assert.ok(shards.length >= 2);
      for (const shard of shards) {
        const names = Object.keys(index.weight_map).filter((n) => index.weight_map[n] === shard);
        expected.files[shard] = {
          metadata: { format: 'pt' },
          tensors: Object.fromEntries(names.map((n) => [n, describeTensor(model.get(n) as torch.Tensor)])),
        };
      }
      expected.indexes['model.safetensors.index.json'] = {
        shards,
        tensors: Object.fromEntries([...model].map(([name, t]) => [name, describeTensor(t)])),
      };
      writeFileSync(join(dir, 'expected.json'), JSON.stringify(expected, null, 1));
    });
    const run = spawnSync(PYTHON, [SCRIPT, 'verify', dir], { encoding: 'utf8', timeout: 300_000 });
    const output = `${run.stdout}${run.stderr}`.trim();
    if (run.error) assert.fail(`cannot run ${PYTHON}: ${run.error.message}; run \`bash scripts/python-env.sh\``);
    const hint = /ModuleNotFoundError|No module named/.test(output) ? ' (run `bash scripts/python-env.sh`)' : '';
    assert.equal(run.status, 0, `Python could not load our files${hint}:\n${output}`);
    assert.match(output, /verified \d+ files and 1 indexes/);
  });
});
