// Weight syncs into a serving model, all or nothing. A sync brings a full set of weights (a trainer's parameters, or a
// Hugging Face folder: a checkpoint, `POST /update_weights_from_disk`), and every tensor is checked before any is
// written, with the checks a fresh load makes (../model/hf-weights.ts checkWeights):
//
//   names    no tensor the model does not have (a tied lm_head equal to embed_tokens, a rotary inv_freq are allowed)
//   present  every weight of the model
//   shapes   exactly the model's ([1] is refused for [64], though copy_ would broadcast it)
//   dtypes   floating point, one dtype of float32 or bfloat16 (the copy converts to the model's dtype)
//
// Only then are they copied, in one synchronous pass on the engine's thread: the engine's loop runs between steps, so
// no forward sees part of a sync. After the checks every copy is same-shape floating point, which copy_ does not
// refuse; what is left to fail there is the device itself (out of memory, a lost GPU).
//
// The folder's config.json is not read: the served model keeps its own config and takes the weights only (as SGLang's
// update_weights_from_disk does).
//
// A folder can also be synced streamed (syncModelWeightsFromDirStreamed, Trinity's weight_sync_buffer_size): the
// checks that need no data run on the safetensors headers first, then the weights are read a bucket at a time, so the
// sync holds one bucket instead of a whole second model.
import {
  checkWeightHeaders,
  checkWeights,
  expectedWeights,
  ModelWeightsError,
  readModelWeights,
  readWeightHeaders,
  type WeightHeader,
} from '../model/hf-weights.js';
import type { CausalLM } from '../model/index.js';
import * as torch from '../torch/index.js';

/**
 * Checks `weights` (Hugging Face names, e.g. a trainer's model.parameters()) against `model`, then copies them into
 * it; returns the number of tensors copied. The caller keeps ownership of `weights`.
 */
export function syncModelWeights(model: CausalLM, weights: ReadonlyMap<string, torch.Tensor>): number {
  const expected = expectedWeights(model.config);
  const unknown = [...weights.keys()].filter((name) => !expected.has(name));
  if (unknown.length > 0) {
    throw new ModelWeightsError(
      'syncWeights',
      `the engine's model has no parameter ${unknown.map((n) => `'${n}'`).join(', ')} (nothing was copied)`,
    );
  }
  checkWeights(model.config, weights, () => 'syncWeights');
  return copyChecked(model, weights);
}

/**
 * Reads the weights of a Hugging Face folder (model.safetensors or a sharded index), checks them against `model`,
 * then copies them into it; returns the number of tensors copied. A folder that fails a check or cannot be read
 * leaves the model unchanged; the error names the file and the tensor. With `streamBufferBytes`, streamed in buckets
 * of at most that many bytes (syncModelWeightsFromDirStreamed).
 */
export function syncModelWeightsFromDir(model: CausalLM, dir: string, streamBufferBytes?: number): number {
  if (streamBufferBytes !== undefined) return syncModelWeightsFromDirStreamed(model, dir, streamBufferBytes).copied;
  const { weights, fileOf } = readModelWeights(dir, model.config, { dtype: model.dtype });
  try {
    checkWeights(model.config, weights, fileOf);
    return copyChecked(model, weights);
  } finally {
    for (const t of weights.values()) t.dispose();
  }
}

/** Copies checked weights into every parameter of `model` (a tied lm_head is embed_tokens, copied once). */
function copyChecked(model: CausalLM, weights: ReadonlyMap<string, torch.Tensor>): number {
  let copied = 0;
  torch.noGrad(() => {
    for (const [name, target] of model.parameters()) {
      target.copy_(weights.get(name) as torch.Tensor);
      copied++;
    }
  });
  return copied;
}

/**
 * Consecutive runs of `names` (in the order given: file by file, by offset) whose bytes add up to at most
 * `bufferBytes`; a tensor larger than that is a bucket of its own.
 */
export function planWeightBuckets(names: readonly string[], bytesOf: (name: string) => number, bufferBytes: number): string[][] {
  const buckets: string[][] = [];
  let current: string[] = [];
  let size = 0;
  for (const name of names) {
    const bytes = bytesOf(name);
    if (current.length > 0 && size + bytes > bufferBytes) {
      buckets.push(current);
      current = [];
      size = 0;
    }
    current.push(name);
    size += bytes;
  }
  if (current.length > 0) buckets.push(current);
  return buckets;
}

/**
 * syncModelWeightsFromDir holding at most `bufferBytes` of the folder's weights at once (or one tensor, when a tensor
 * is larger): the headers pass a full load's checks that need no data (every weight present, none unexpected,
 * shapes: checkWeightHeaders; floating point, one dtype of float32 or bfloat16), then each bucket of tensors (file by
 * file, in offset order) is read, copied into the model and freed. Returns the tensors copied and the largest
 * bucket's bytes (as stored). A folder the headers do not describe plainly, or one that stores a tied lm_head (its
 * values must match embed_tokens'), is loaded whole as syncModelWeightsFromDir does. A read failing after the checks
 * (the disk; the folder rewritten meanwhile) leaves the model with part of the new weights: the error says so.
 */
export function syncModelWeightsFromDirStreamed(
  model: CausalLM,
  dir: string,
  bufferBytes: number,
): { copied: number; largestBucketBytes: number } {
  if (!Number.isInteger(bufferBytes) || bufferBytes <= 0)
    throw new RangeError(`syncWeightsFromDir: the bucket size must be a positive integer of bytes, got ${bufferBytes}`);
  const read = readWeightHeaders(dir);
  const expected = expectedWeights(model.config);
  if (read === null || (read.headers.has('lm_head.weight') && !expected.has('lm_head.weight'))) {
    const copied = syncModelWeightsFromDir(model, dir);
    return { copied, largestBucketBytes: [...(read?.headers.values() ?? [])].reduce((a, h) => a + h.byteLength, 0) };
  }
  checkWeightHeaders(model.config, dir);
  const { headers, fileOf } = read;
  checkHeaderDtypes(expected, headers, fileOf);
  const order = [...expected.keys()].sort((a, b) => {
    const [x, y] = [headers.get(a) as WeightHeader, headers.get(b) as WeightHeader];
    return x.file === y.file ? x.byteOffset - y.byteOffset : x.file < y.file ? -1 : 1;
  });
  const buckets = planWeightBuckets(order, (name) => (headers.get(name) as WeightHeader).byteLength, bufferBytes);
  const targets = model.parameters();
  let copied = 0;
  let largestBucketBytes = 0;
  for (const bucket of buckets) {
    largestBucketBytes = Math.max(
      largestBucketBytes,
      bucket.reduce((a, n) => a + (headers.get(n) as WeightHeader).byteLength, 0),
    );
    const wanted = new Set(bucket);
    for (const file of new Set(bucket.map((n) => (headers.get(n) as WeightHeader).file))) {
      let weights: Map<string, torch.Tensor>;
      try {
        weights = torch.loadSafetensors(file, { filter: (n) => wanted.has(n), dtype: model.dtype });
      } catch (error) {
        throw new ModelWeightsError(
          file,
          `${(error as Error).message} (after ${copied} of ${expected.size} tensors were copied: the model holds part of the new weights)`,
        );
      }
      torch.noGrad(() => {
        for (const [name, t] of weights) {
          (targets.get(name) as torch.Tensor).copy_(t);
          t.dispose();
          copied++;
        }
      });
    }
  }
  return { copied, largestBucketBytes };
}

/** checkWeights' dtype rules on the headers: every weight floating point, all one dtype, float32 or bfloat16. */
function checkHeaderDtypes(
  expected: ReadonlyMap<string, number[]>,
  headers: ReadonlyMap<string, WeightHeader>,
  fileOf: (tensor: string | null) => string,
): void {
  for (const name of expected.keys()) {
    const { dtype } = headers.get(name) as WeightHeader;
    if (!torch.isFloatingPoint(dtype))
      throw new ModelWeightsError(fileOf(name), `tensor '${name}' has dtype ${dtype}, expected floating point`);
  }
  const dtypes = new Set([...expected.keys()].map((n) => (headers.get(n) as WeightHeader).dtype));
  if (dtypes.size !== 1)
    throw new ModelWeightsError(fileOf(null), `weights mix dtypes ${[...dtypes].join(', ')}: load them with one dtype`);
  const [dtype] = dtypes;
  if (dtype !== 'float32' && dtype !== 'bfloat16')
    throw new ModelWeightsError(fileOf(null), `weights are ${dtype}; supported: float32, bfloat16`);
}
