// Safetensors (https://huggingface.co/docs/safetensors): the weight format of Hugging Face model folders.
//   [8 bytes: header length N, little-endian u64][N bytes: JSON header][data]
//   header: { "__metadata__": {string: string}, "<name>": { "dtype": "F32", "shape": [..], "data_offsets": [begin, end] } }
// Offsets are relative to the start of the data section. Tensor bytes go straight between the file and tensor
// storage (pread in the addon on load, a zero-copy view on save): no large file passes through JS strings.
// Sharded checkpoints: `<prefix>-00001-of-0000N.safetensors` plus `<prefix>.safetensors.index.json`
// ({ "metadata": { "total_size": bytes }, "weight_map": { "<name>": "<file>" } }).
import {
  closeSync,
  existsSync,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileErrorDetail, openRegularFile, pathExists, readRegularFile } from '../util/index.js';
import { empty } from './creation.js';
import { DTYPE_BYTES, type DType } from './dtype.js';
import { native } from './native.js';
import type { Tensor } from './tensor.js';

export class SafetensorsError extends Error {
  constructor(file: string, detail: string) {
    super(`${file}: ${detail}`);
    this.name = 'SafetensorsError';
  }
}

const TO_SAFETENSORS: Readonly<Record<DType, string>> = {
  float32: 'F32',
  float64: 'F64',
  float16: 'F16',
  bfloat16: 'BF16',
  int64: 'I64',
  int32: 'I32',
  int16: 'I16',
  int8: 'I8',
  uint8: 'U8',
  bool: 'BOOL',
};
const FROM_SAFETENSORS = new Map<string, DType>(Object.entries(TO_SAFETENSORS).map(([d, s]) => [s, d as DType]));

const MAX_HEADER_BYTES = 100 * 1024 * 1024;

export interface SafetensorsEntry {
  dtype: DType;
  shape: number[];
  /** Absolute byte offset of the tensor's data in the file. */
  byteOffset: number;
  byteLength: number;
}

export interface SafetensorsHeader {
  metadata: Record<string, string>;
  entries: Map<string, SafetensorsEntry>;
  /** The bytes read for the header: 8 + the JSON's length. */
  headerBytes: number;
}

/** Reads and validates a file's header without reading tensor data. */
export function readSafetensorsHeader(file: string): SafetensorsHeader {
  let fd: number;
  try {
    fd = openRegularFile(file);
  } catch (error) {
    throw new SafetensorsError(file, `cannot open: ${fileErrorDetail(error)}`);
  }
  try {
    const fileSize = fstatSync(fd).size;
    if (fileSize < 8) throw new SafetensorsError(file, `file is ${fileSize} bytes, too small for a safetensors header`);
    const lengthBytes = Buffer.alloc(8);
    readSync(fd, lengthBytes, 0, 8, 0);
    const headerLength = Number(lengthBytes.readBigUInt64LE(0));
    if (headerLength > MAX_HEADER_BYTES || 8 + headerLength > fileSize) {
      throw new SafetensorsError(
        file,
        `header length ${headerLength} does not fit the file (${fileSize} bytes): not a safetensors file or truncated`,
      );
    }
    const headerBytes = Buffer.alloc(headerLength);
    readSync(fd, headerBytes, 0, headerLength, 8);
    let header: unknown;
    try {
      header = JSON.parse(headerBytes.toString('utf8'));
    } catch (error) {
      throw new SafetensorsError(file, `header is not valid JSON: ${(error as Error).message}`);
    }
    if (header === null || typeof header !== 'object' || Array.isArray(header)) {
      throw new SafetensorsError(file, 'header is not a JSON object');
    }
    const dataStart = 8 + headerLength;
    const dataLength = fileSize - dataStart;
    const metadata: Record<string, string> = {};
    const entries = new Map<string, SafetensorsEntry>();
    for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
      if (name === '__metadata__') {
        if (raw !== null && typeof raw === 'object') {
          for (const [k, v] of Object.entries(raw as Record<string, unknown>)) metadata[k] = String(v);
        }
        continue;
      }
      entries.set(name, parseEntry(file, name, raw, dataStart, dataLength));
    }
    return { metadata, entries, headerBytes: dataStart };
  } finally {
    closeSync(fd);
  }
}

function parseEntry(file: string, name: string, raw: unknown, dataStart: number, dataLength: number): SafetensorsEntry {
  const where = `tensor '${name}'`;
  if (raw === null || typeof raw !== 'object') throw new SafetensorsError(file, `${where}: entry is not an object`);
  const { dtype: code, shape, data_offsets: offsets } = raw as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
  const dtype = typeof code === 'string' ? FROM_SAFETENSORS.get(code) : undefined;
  if (dtype === undefined) {
    throw new SafetensorsError(
      file,
      `${where}: unsupported dtype ${JSON.stringify(code)} (supported: ${[...FROM_SAFETENSORS.keys()].join(', ')})`,
    );
  }
  if (!Array.isArray(shape) || !shape.every((s) => Number.isInteger(s) && s >= 0)) {
    throw new SafetensorsError(file, `${where}: shape ${JSON.stringify(shape)} is not a list of non-negative integers`);
  }
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isInteger(o) && o >= 0)) {
    throw new SafetensorsError(file, `${where}: data_offsets ${JSON.stringify(offsets)} is not [begin, end]`);
  }
  const [begin, end] = offsets as [number, number];
  const expected = (shape as number[]).reduce((a, b) => a * b, 1) * DTYPE_BYTES[dtype];
  if (end < begin || end - begin !== expected) {
    throw new SafetensorsError(
      file,
      `${where}: data_offsets [${begin}, ${end}] hold ${end - begin} bytes, but shape [${shape.join(', ')}] of ${dtype} needs ${expected}`,
    );
  }
  if (end > dataLength) {
    throw new SafetensorsError(
      file,
      `${where}: data_offsets end ${end} is past the end of the data (${dataLength} bytes): file truncated?`,
    );
  }
  return { dtype, shape: shape as number[], byteOffset: dataStart + begin, byteLength: expected };
}

export interface LoadOptions {
  /** Load only the tensors for which this returns true. */
  filter?: (name: string) => boolean;
  /** Convert floating-point tensors to this dtype after loading. */
  dtype?: DType;
  device?: string;
}

/** Loads the tensors of one .safetensors file, in file order. */
export function loadSafetensors(file: string, options: LoadOptions = {}): Map<string, Tensor> {
  const { entries } = readSafetensorsHeader(file);
  const out = new Map<string, Tensor>();
  try {
    for (const [name, entry] of entries) {
      if (options.filter && !options.filter(name)) continue;
      out.set(name, readEntry(file, name, entry, options));
    }
  } catch (error) {
    for (const t of out.values()) t.dispose();
    throw error;
  }
  return out;
}

/**
 * Elements [from, from + count) of tensor `name` (its `entry` in the file's header), in row-major order, as a 1-d
 * tensor of its dtype: one positioned read of count x element-size bytes, the rest of the file untouched.
 */
export function readSafetensorsRange(file: string, name: string, entry: SafetensorsEntry, from: number, count: number): Tensor {
  const numel = entry.shape.reduce((a, b) => a * b, 1);
  if (!Number.isInteger(from) || !Number.isInteger(count) || from < 0 || count < 0 || from + count > numel)
    throw new SafetensorsError(file, `tensor '${name}': elements [${from}, ${from + count}) are not inside its ${numel}`);
  const t = empty([count], { dtype: entry.dtype });
  try {
    if (count > 0) native.readFileInto(file, entry.byteOffset + from * DTYPE_BYTES[entry.dtype], t.handle);
  } catch (error) {
    t.dispose();
    throw new SafetensorsError(file, `tensor '${name}': ${(error as Error).message}`);
  }
  return t;
}

function readEntry(file: string, name: string, entry: SafetensorsEntry, options: LoadOptions): Tensor {
  const t = empty(entry.shape, { dtype: entry.dtype });
  try {
    if (entry.byteLength > 0) native.readFileInto(file, entry.byteOffset, t.handle);
  } catch (error) {
    t.dispose();
    throw new SafetensorsError(file, `tensor '${name}': ${(error as Error).message}`);
  }
  const floating = entry.dtype.startsWith('float') || entry.dtype === 'bfloat16';
  const dtype = options.dtype !== undefined && floating && options.dtype !== entry.dtype ? options.dtype : undefined;
  if (dtype === undefined && options.device === undefined) return t;
  const converted = t.to({ ...(dtype ? { dtype } : {}), ...(options.device ? { device: options.device } : {}) });
  t.dispose();
  return converted;
}

/** Writes tensors to one .safetensors file (atomically: a temporary file is renamed into place). */
export function saveSafetensors(
  file: string,
  tensors: Map<string, Tensor> | Record<string, Tensor>,
  metadata: Record<string, string> = {},
): void {
  const list = tensors instanceof Map ? [...tensors.entries()] : Object.entries(tensors);
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  for (const [name, t] of list) {
    const nbytes = t.numel * DTYPE_BYTES[t.dtype];
    header[name] = { dtype: TO_SAFETENSORS[t.dtype], shape: [...t.shape], data_offsets: [offset, offset + nbytes] };
    offset += nbytes;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8); // align the data section to 8 bytes, as the Python writer does
  const headerBytes = Buffer.from(json, 'utf8');
  const lengthBytes = Buffer.alloc(8);
  lengthBytes.writeBigUInt64LE(BigInt(headerBytes.length));
  const temporary = `${file}.tmp-${process.pid}`;
  const fd = openSync(temporary, 'w');
  try {
    try {
      writeSync(fd, lengthBytes);
      writeSync(fd, headerBytes);
      for (const [, t] of list) {
        if (t.numel === 0) continue;
        const bytes = new Uint8Array(t.bytes(false)); // zero-copy view of the tensor's memory
        let written = 0;
        while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
      }
    } finally {
      closeSync(fd);
    }
    renameSync(temporary, file);
  } catch (error) {
    if (existsSync(temporary)) unlinkSync(temporary);
    throw error;
  }
}

export interface ShardIndex {
  metadata: { total_size: number; [key: string]: unknown };
  weight_map: Record<string, string>;
}

/**
 * Loads a model's weights from a folder or file: `model.safetensors`, or a sharded `*.safetensors.index.json`
 * (or the path of either).
 */
export function loadModelWeights(path: string, options: LoadOptions = {}): Map<string, Tensor> {
  const indexFile = path.endsWith('.index.json') ? path : join(path, 'model.safetensors.index.json');
  if (pathExists(indexFile)) return loadShardedSafetensors(indexFile, options);
  const single = path.endsWith('.safetensors') ? path : join(path, 'model.safetensors');
  if (!pathExists(single)) throw new SafetensorsError(path, 'no model.safetensors or model.safetensors.index.json found');
  return loadSafetensors(single, options);
}

export function loadShardedSafetensors(indexFile: string, options: LoadOptions = {}): Map<string, Tensor> {
  let index: ShardIndex;
  try {
    index = JSON.parse(readRegularFile(indexFile, 'utf8')) as ShardIndex;
  } catch (error) {
    throw new SafetensorsError(indexFile, `cannot read the shard index: ${fileErrorDetail(error)}`);
  }
  if (!index || typeof index.weight_map !== 'object' || index.weight_map === null) {
    throw new SafetensorsError(indexFile, "the shard index has no 'weight_map' object");
  }
  const shards = [...new Set(Object.values(index.weight_map))];
  const out = new Map<string, Tensor>();
  try {
    for (const shard of shards) {
      if (typeof shard !== 'string' || shard.includes('/') || shard.includes('\\')) {
        throw new SafetensorsError(indexFile, `weight_map names an invalid shard file ${JSON.stringify(shard)}`);
      }
      const wanted = (name: string) => index.weight_map[name] === shard && (options.filter ? options.filter(name) : true);
      const file = join(dirname(indexFile), shard);
      for (const [name, t] of loadSafetensors(file, { ...options, filter: wanted })) out.set(name, t);
    }
    for (const name of Object.keys(index.weight_map)) {
      if (!out.has(name) && (!options.filter || options.filter(name))) {
        throw new SafetensorsError(
          indexFile,
          `tensor '${name}' is listed in weight_map under '${index.weight_map[name]}' but that file does not contain it`,
        );
      }
    }
  } catch (error) {
    for (const t of out.values()) t.dispose();
    throw error;
  }
  return out;
}

export interface SaveShardedOptions {
  /** Largest shard in bytes (default 5 GB, as transformers' save_pretrained). */
  maxShardBytes?: number;
  /** File name prefix (default 'model'). */
  prefix?: string;
  metadata?: Record<string, string>;
}

/**
 * Writes weights in Hugging Face's layout (as transformers' save_pretrained): one `<prefix>.safetensors` when they fit
 * a shard, else numbered shards and `<prefix>.safetensors.index.json` ({ metadata: { total_parameters, total_size },
 * weight_map }). Creates `dir` if needed and removes what a previous save left there that would otherwise be loaded
 * or mixed in (a stale index, numbered shards of the same prefix that this save did not write).
 * Returns the files written (index last when sharded).
 */
export function saveModelWeights(
  dir: string,
  tensors: Map<string, Tensor> | Record<string, Tensor>,
  options: SaveShardedOptions = {},
): string[] {
  const list = tensors instanceof Map ? [...tensors.entries()] : Object.entries(tensors);
  const maxBytes = options.maxShardBytes ?? 5e9;
  const prefix = options.prefix ?? 'model';
  const metadata = { format: 'pt', ...options.metadata };
  mkdirSync(dir, { recursive: true });
  const shards: [string, Tensor][][] = [[]];
  let current = 0;
  let total = 0;
  let parameters = 0;
  for (const entry of list) {
    const nbytes = entry[1].numel * DTYPE_BYTES[entry[1].dtype];
    total += nbytes;
    parameters += entry[1].numel;
    if (current > 0 && current + nbytes > maxBytes) {
      shards.push([]);
      current = 0;
    }
    (shards[shards.length - 1] as [string, Tensor][]).push(entry);
    current += nbytes;
  }
  const indexFile = join(dir, `${prefix}.safetensors.index.json`);
  if (shards.length === 1) {
    const file = join(dir, `${prefix}.safetensors`);
    if (existsSync(indexFile)) unlinkSync(indexFile); // else loaders would still follow the old index
    saveSafetensors(file, new Map(list), metadata);
    removeStaleShards(dir, prefix, new Set());
    return [file];
  }
  const files: string[] = [];
  const weightMap: Record<string, string> = {};
  const pad = (n: number) => String(n).padStart(5, '0');
  shards.forEach((shard, i) => {
    const name = `${prefix}-${pad(i + 1)}-of-${pad(shards.length)}.safetensors`;
    const file = join(dir, name);
    saveSafetensors(file, new Map(shard), metadata);
    for (const [tensorName] of shard) weightMap[tensorName] = basename(file);
    files.push(file);
  });
  const index: ShardIndex = { metadata: { total_parameters: parameters, total_size: total }, weight_map: weightMap };
  const temporary = `${indexFile}.tmp-${process.pid}`;
  writeFileSync(temporary, `${JSON.stringify(index, null, 2)}\n`);
  renameSync(temporary, indexFile);
  removeStaleShards(dir, prefix, new Set(files.map((f) => basename(f))));
  const single = join(dir, `${prefix}.safetensors`);
  if (existsSync(single)) unlinkSync(single);
  files.push(indexFile);
  return files;
}

/** Deletes `<prefix>-NNNNN-of-NNNNN.safetensors` files in dir that are not in `keep`. */
function removeStaleShards(dir: string, prefix: string, keep: ReadonlySet<string>): void {
  const escaped = prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const pattern = new RegExp(`^${escaped}-\\d{5}-of-\\d{5}\\.safetensors$`);
  for (const name of readdirSync(dir)) {
    if (pattern.test(name) && !keep.has(name)) unlinkSync(join(dir, name));
  }
}
