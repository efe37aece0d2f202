// A fully sharded rank's start from a model folder (./fsdp.ts) without the whole weights in memory or read from disk:
//
//   skeleton  the CausalLM of the folder's config.json in the compute dtype, each parameter a stride-0 view of one
//             zero element (torch.expand: [vocab, hidden] and [hidden] alike hold one element), so the model's shape
//             checks pass and its modules are wired (LoRA attaches to it by shape) while its weights take no memory;
//             the FullyShardedModel swaps placeholders in for these views at once
//   source    the folder's safetensors headers (model.safetensors, or model-0000x-of-0000y.safetensors through
//             model.safetensors.index.json), checked against the config as a load checks them; rank r reads, for each
//             flat class, its range flat[rL, min((r+1)L, n)) (ownRange) as positioned reads of the parameters the range
//             covers (torch.readSafetensorsRange through ./fsdp-resume.ts's CheckpointReads, which counts the bytes),
//             cast from the file's dtype (bfloat16 or float32) to the shards' master dtype
//
// So a rank reads about 1/W of the folder's weight bytes (plus the headers) and holds only its shards: W ranks read
// the folder once between them (resuming from a sharded checkpoint, whose shards replace these, only the headers). A tied lm_head is embed_tokens (the model lists it once); a file's lm_head.weight
// beside a tied embedding is left unread. The same serves the folder a checkpoint's model/ holds (a one-process
// checkpoint resumed on W ranks) and LoRA's frozen base.
import {
  CausalLM,
  checkWeightHeaders,
  expectedWeights,
  loadModelConfig,
  readWeightHeaders,
  type WeightHeader,
} from '../../model/index.js';
import * as torch from '../../torch/index.js';
import type { DType, Tensor } from '../../torch/index.js';
import type { ShardSource } from './fsdp.js';
import type { CheckpointReads } from './fsdp-resume.js';

const missingWeights = (dir: string) =>
  new Error(
    `${dir}: no model.safetensors, or a model.safetensors.index.json whose shards do not hold the tensors it lists ` +
      '(a fully sharded rank reads its ranges of them)',
  );

/**
 * The model of folder `dir` with no weights: every parameter a stride-0 view of one zero element in `dtype` on
 * `device` (see the header). Only fit to be sharded: a forward before that reads zeros.
 */
export function weightlessModel(dir: string, options: { dtype: 'float32' | 'bfloat16'; device: string }): CausalLM {
  const config = loadModelConfig(dir);
  if (readWeightHeaders(dir) === null) throw missingWeights(dir);
  checkWeightHeaders(config, dir);
  const weights = torch.noGrad(() =>
    torch.scope(() => {
      const zero = torch.zeros([1], { dtype: options.dtype, device: options.device });
      return new Map(
        [...expectedWeights(config)].map(([name, shape]) => [name, torch.keep(zero.reshape(shape.map(() => 1)).expand(shape))]),
      );
    }),
  );
  return new CausalLM(config, weights, { sourceDir: dir });
}

/**
 * Positioned reads of folder `dir`'s weights for `model` (its parameters' names and shapes), into shards of `dtype`
 * on `device`; `reads` counts the bytes read (each file's header, and the ranges). `overwritten`: the caller replaces the shards' values (a resume from a
 * sharded checkpoint, ./fsdp-resume.ts), so only the headers are read and the shards start as zeros.
 */
export function folderSource(
  dir: string,
  model: CausalLM,
  options: { dtype: DType; device: string; overwritten?: boolean },
  reads: CheckpointReads,
): ShardSource {
  const found = readWeightHeaders(dir);
  if (found === null) throw missingWeights(dir);
  const shapes = new Map([...model.parameters()].map(([name, t]) => [name, t.shape]));
  const entries = new Map<string, WeightHeader>();
  for (const [name, shape] of shapes) {
    const entry = found.headers.get(name);
    if (entry === undefined) throw new Error(`${found.fileOf(null)}: missing tensor '${name}'`);
    if (!torch.isFloatingPoint(entry.dtype))
      throw new Error(`${entry.file}: tensor '${name}' has dtype ${entry.dtype}, expected floating point`);
    if (entry.shape.length !== shape.length || entry.shape.some((s, i) => s !== shape[i]))
      throw new Error(`${entry.file}: tensor '${name}' has shape [${entry.shape.join(', ')}], expected [${shape.join(', ')}]`);
    entries.set(name, entry);
  }
  for (const { file } of found.headers.values()) reads.header(file); // every header is read (counted once a file)
  return {
    shapes,
    dtype: options.dtype,
    device: options.device,
    read(name: string, from: number, count: number): Tensor {
      if (options.overwritten) return torch.zeros([count], { dtype: options.dtype, device: options.device });
      const entry = entries.get(name) as WeightHeader;
      const range = reads.range(entry.file, name, from, count);
      try {
        return range.to({ dtype: options.dtype, device: options.device }); // a new handle (the same storage when no cast)
      } finally {
        range.dispose();
      }
    },
  };
}
