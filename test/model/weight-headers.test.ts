// A model folder's safetensors headers are checked against config.json before any tensor data is read
// (src/model/hf-weights.ts checkWeightHeaders): a folder with an extra large tensor is refused having read none of
// its weights. Before, every tensor was read (the extra one in full) and only then rejected (issue 49).
import assert from 'node:assert/strict';
import { closeSync, copyFileSync, ftruncateSync, mkdtempSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CausalLM, ModelWeightsError } from '../../src/model/index.js';
import { native } from '../../src/torch/native.js';
import { modelDir } from './helpers/fixtures.js';

const EXTRA_BYTES = 256 * 1024 * 1024;

/** qwen2-tied's folder with one more tensor, 'extra.weight' (F32, EXTRA_BYTES), its data a sparse hole at the end. */
function folderWithExtraTensor(): string {
  const dir = mkdtempSync(join(tmpdir(), 'extra-tensor-'));
  copyFileSync(join(modelDir('qwen2-tied'), 'config.json'), join(dir, 'config.json'));
  const bytes = readFileSync(join(modelDir('qwen2-tied'), 'model.safetensors'));
  const headerLength = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8')) as Record<string, unknown>;
  const data = bytes.subarray(8 + headerLength);
  header['extra.weight'] = { dtype: 'F32', shape: [EXTRA_BYTES / 4], data_offsets: [data.length, data.length + EXTRA_BYTES] };
  const headerBytes = Buffer.from(JSON.stringify(header), 'utf8');
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(headerBytes.length));
  const file = join(dir, 'model.safetensors');
  writeFileSync(file, Buffer.concat([length, headerBytes, data]));
  const fd = openSync(file, 'r+');
  ftruncateSync(fd, 8 + headerBytes.length + data.length + EXTRA_BYTES);
  closeSync(fd);
  return dir;
}

test('an extra large tensor is refused from the header, before any tensor data is read', () => {
  const dir = folderWithExtraTensor();
  const readFileInto = native.readFileInto;
  let reads = 0;
  native.readFileInto = (...args: Parameters<typeof readFileInto>) => {
    reads++;
    return readFileInto.apply(native, args);
  };
  try {
    assert.throws(
      () => CausalLM.load(dir),
      (error: Error) =>
        error instanceof ModelWeightsError &&
        error.message.startsWith(`${join(dir, 'model.safetensors')}: unexpected tensors 'extra.weight'`),
    );
  } finally {
    native.readFileInto = readFileInto;
  }
  assert.equal(reads, 0, 'no tensor data was read');
});
