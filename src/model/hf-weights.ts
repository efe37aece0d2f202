// Hugging Face model folders: the weight names and shapes a config implies (transformers' state_dict keys), the
// checks a set of weights must pass before it becomes a model, and reading and writing a folder
// (config.json, model.safetensors or shards with model.safetensors.index.json, tokenizer and generation files).
//
//   model.embed_tokens.weight                         [vocab, hidden]
//   model.layers.{i}.input_layernorm.weight           [hidden]
//   model.layers.{i}.self_attn.q_proj.weight          [heads*headDim, hidden]
//   model.layers.{i}.self_attn.{k,v}_proj.weight      [kvHeads*headDim, hidden]
//   model.layers.{i}.self_attn.o_proj.weight          [hidden, heads*headDim]
//   model.layers.{i}.self_attn.{q,k}_norm.weight      [headDim]                  (Qwen3)
//   model.layers.{i}.post_attention_layernorm.weight  [hidden]
//   model.layers.{i}.mlp.{gate,up}_proj.weight        [intermediate, hidden]
//   model.layers.{i}.mlp.down_proj.weight             [hidden, intermediate]
//   (sparse layers of a mixture of experts, instead of the three above:)
//   model.layers.{i}.mlp.gate.weight                  [experts, hidden]          the router
//   model.layers.{i}.mlp.experts.{e}.{gate,up}_proj.weight  [moeIntermediate, hidden]
//   model.layers.{i}.mlp.experts.{e}.down_proj.weight       [hidden, moeIntermediate]
//   model.layers.{i}.mlp.shared_expert.{gate,up,down}_proj.weight, mlp.shared_expert_gate.weight [1, hidden]
//                                                     (qwen2_moe: shared [sharedIntermediate, hidden] / transposed)
//     (the layout save_pretrained writes: transformers 5 fuses experts into 3-d tensors in memory only)
//   model.norm.weight                                 [hidden]
//   lm_head.weight                                    [vocab, hidden]            (absent when tied to embed_tokens)
// plus .bias beside q/k/v (qkvBias), o (outputBias) and the MLP (mlpBias) where the config says so.
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { DType, Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { copyRegularFile, pathExists, readRegularFile } from '../util/index.js';
import type { ModelConfig } from './config.js';

/** Every weight the config implies, in Hugging Face's names and order, with its shape. */
export function expectedWeights(config: ModelConfig): Map<string, number[]> {
  const { hiddenSize: h, intermediateSize: m, numAttentionHeads: heads, numKeyValueHeads: kv, headDim: d } = config;
  const out = new Map<string, number[]>([['model.embed_tokens.weight', [config.vocabSize, h]]]);
  const linear = (name: string, outFeatures: number, inFeatures: number, bias: boolean) => {
    out.set(`${name}.weight`, [outFeatures, inFeatures]);
    if (bias) out.set(`${name}.bias`, [outFeatures]);
  };
  for (let i = 0; i < config.numHiddenLayers; i++) {
    const p = `model.layers.${i}`;
    out.set(`${p}.input_layernorm.weight`, [h]);
    linear(`${p}.self_attn.q_proj`, heads * d, h, config.qkvBias);
    linear(`${p}.self_attn.k_proj`, kv * d, h, config.qkvBias);
    linear(`${p}.self_attn.v_proj`, kv * d, h, config.qkvBias);
    linear(`${p}.self_attn.o_proj`, h, heads * d, config.outputBias);
    if (config.qkNorm) {
      out.set(`${p}.self_attn.q_norm.weight`, [d]);
      out.set(`${p}.self_attn.k_norm.weight`, [d]);
    }
    out.set(`${p}.post_attention_layernorm.weight`, [h]);
    const moe = config.moe;
    if (moe?.sparseLayers[i]) {
      linear(`${p}.mlp.gate`, moe.numExperts, h, false);
      for (let e = 0; e < moe.numExperts; e++) {
        linear(`${p}.mlp.experts.${e}.gate_proj`, moe.moeIntermediateSize, h, false);
        linear(`${p}.mlp.experts.${e}.up_proj`, moe.moeIntermediateSize, h, false);
        linear(`${p}.mlp.experts.${e}.down_proj`, h, moe.moeIntermediateSize, false);
      }
      const shared = moe.sharedExpertIntermediateSize;
      if (shared !== null) {
        linear(`${p}.mlp.shared_expert.gate_proj`, shared, h, false);
        linear(`${p}.mlp.shared_expert.up_proj`, shared, h, false);
        linear(`${p}.mlp.shared_expert.down_proj`, h, shared, false);
        linear(`${p}.mlp.shared_expert_gate`, 1, h, false);
      }
      continue;
    }
    linear(`${p}.mlp.gate_proj`, m, h, config.mlpBias);
    linear(`${p}.mlp.up_proj`, m, h, config.mlpBias);
    linear(`${p}.mlp.down_proj`, h, m, config.mlpBias);
  }
  out.set('model.norm.weight', [h]);
  if (!config.tieWordEmbeddings) out.set('lm_head.weight', [config.vocabSize, h]);
  return out;
}

/** Buffers that old checkpoints carry and that are recomputed here. */
const IGNORABLE_WEIGHT = /(^|\.)rotary_emb\.inv_freq$/;

export class ModelWeightsError extends Error {
  constructor(file: string, detail: string) {
    super(`${file}: ${detail}`);
    this.name = 'ModelWeightsError';
  }
}

// Files of a model folder besides config and weights that save() carries over, so transformers loads the result.
const COPIED_FILES = [
  'generation_config.json',
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'added_tokens.json',
  'vocab.json',
  'merges.txt',
  'tokenizer.model',
  'chat_template.jinja',
  'chat_template.json',
  'preprocessor_config.json', // a vision-language model's image processor (./vision/image-processor.ts)
  'processor_config.json', // the same, as transformers 5 saves a processor (image_processor nested)
];

/**
 * Checks `weights` against the config (every expected tensor with its shape, floating point, one dtype of float32 or
 * bfloat16, nothing unexpected but a tied lm_head equal to embed_tokens); returns their dtype. `fileOf(tensor)` names
 * the file a tensor came from (null: the weights as a whole) in errors.
 */
export function checkWeights(
  config: ModelConfig,
  weights: ReadonlyMap<string, Tensor>,
  fileOf: (tensor: string | null) => string,
): 'float32' | 'bfloat16' {
  const file = fileOf(null);
  const expected = expectedWeights(config);
  for (const [name, shape] of expected) {
    const t = weights.get(name);
    if (t === undefined) throw missingTensor(file, name, shape);
    if (!sameShape(t.shape, shape)) throw wrongShape(fileOf(name), name, t.shape, shape);
    if (!torch.isFloatingPoint(t.dtype))
      throw new ModelWeightsError(fileOf(name), `tensor '${name}' has dtype ${t.dtype}, expected floating point`);
  }
  const dtypes = new Set([...expected.keys()].map((n) => (weights.get(n) as Tensor).dtype));
  if (dtypes.size !== 1)
    throw new ModelWeightsError(file, `weights mix dtypes ${[...dtypes].join(', ')}: load them with one dtype`);
  const dtype = [...dtypes][0] as DType;
  if (dtype !== 'float32' && dtype !== 'bfloat16')
    throw new ModelWeightsError(file, `weights are ${dtype}; supported: float32, bfloat16`);
  const unexpected = [...weights.keys()].filter((n) => !expected.has(n) && !IGNORABLE_WEIGHT.test(n));
  if (unexpected.length > 0) {
    const tiedHead = config.tieWordEmbeddings && unexpected.length === 1 && unexpected[0] === 'lm_head.weight';
    if (!tiedHead || !sameValues(weights.get('lm_head.weight') as Tensor, weights.get('model.embed_tokens.weight') as Tensor)) {
      throw unexpectedTensors(config, unexpected, fileOf);
    }
  }
  return dtype;
}

/**
 * checkWeights' name and shape checks on the safetensors headers of a folder, before any tensor data is read: a
 * missing, misshapen or unexpected tensor (an extra 2 GB one, say) is refused without reading the weights, with
 * checkWeights' messages. A tied lm_head passes here when its shape is embed_tokens'; checkWeights compares values.
 * A folder these headers do not describe plainly (no weights file, an unreadable or inconsistent index) is left to
 * the load, which names its problem.
 */
export function checkWeightHeaders(config: ModelConfig, dir: string): void {
  const headers = headerShapes(dir);
  if (headers === null) return;
  const { shapes, fileOf } = headers;
  const expected = expectedWeights(config);
  for (const [name, shape] of expected) {
    const actual = shapes.get(name);
    if (actual === undefined) throw missingTensor(fileOf(null), name, shape);
    if (!sameShape(actual, shape)) throw wrongShape(fileOf(name), name, actual, shape);
  }
  const unexpected = [...shapes.keys()].filter((n) => !expected.has(n) && !IGNORABLE_WEIGHT.test(n));
  const embed = expected.get('model.embed_tokens.weight') as number[];
  const tiedHead =
    config.tieWordEmbeddings &&
    unexpected.length === 1 &&
    unexpected[0] === 'lm_head.weight' &&
    sameShape(shapes.get('lm_head.weight') as number[], embed);
  if (unexpected.length > 0 && !tiedHead) throw unexpectedTensors(config, unexpected, fileOf);
}

/** A weight as a folder's safetensors headers describe it: dtype, shape, where its bytes are, and its file. */
export interface WeightHeader extends torch.SafetensorsEntry {
  file: string;
}

/**
 * Tensor name → header entry from a folder's model.safetensors or shards (weights read without reading their data),
 * and the file to name for a tensor in errors; null when the headers do not describe the folder plainly.
 */
export function readWeightHeaders(
  dir: string,
): { headers: Map<string, WeightHeader>; fileOf: (tensor: string | null) => string } | null {
  const headers = new Map<string, WeightHeader>();
  const indexFile = join(dir, 'model.safetensors.index.json');
  if (!existsSync(indexFile)) {
    const single = join(dir, 'model.safetensors');
    if (!existsSync(single)) return null;
    for (const [name, entry] of torch.readSafetensorsHeader(single).entries) headers.set(name, { ...entry, file: single });
    return { headers, fileOf: () => single };
  }
  let weightMap: unknown;
  try {
    weightMap = (JSON.parse(readRegularFile(indexFile, 'utf8')) as { weight_map?: unknown }).weight_map;
  } catch {
    return null;
  }
  if (weightMap === null || typeof weightMap !== 'object') return null;
  const map = weightMap as Record<string, unknown>;
  for (const shard of new Set(Object.values(map))) {
    if (typeof shard !== 'string' || shard.includes('/') || shard.includes('\\')) return null;
    const file = join(dir, shard);
    if (!existsSync(file)) return null;
    for (const [name, entry] of torch.readSafetensorsHeader(file).entries)
      if (map[name] === shard) headers.set(name, { ...entry, file });
  }
  // a listed tensor its shard lacks: the load's own message says so
  if (Object.keys(map).some((name) => !headers.has(name))) return null;
  return {
    headers,
    fileOf: (tensor) => (tensor !== null && typeof map[tensor] === 'string' ? join(dir, map[tensor]) : indexFile),
  };
}

/** Tensor name → shape from the headers of a folder's model.safetensors or shards, with the file of each. */
function headerShapes(dir: string): { shapes: Map<string, readonly number[]>; fileOf: (tensor: string | null) => string } | null {
  const read = readWeightHeaders(dir);
  if (read === null) return null;
  return { shapes: new Map([...read.headers].map(([name, h]) => [name, h.shape])), fileOf: read.fileOf };
}

const sameShape = (actual: readonly number[], expected: readonly number[]): boolean =>
  actual.length === expected.length && actual.every((s, i) => s === expected[i]);

const missingTensor = (file: string, name: string, shape: readonly number[]) =>
  new ModelWeightsError(file, `missing tensor '${name}' (expected shape [${shape.join(', ')}])`);

const wrongShape = (file: string, name: string, actual: readonly number[], expected: readonly number[]) =>
  new ModelWeightsError(file, `tensor '${name}' has shape [${actual.join(', ')}], expected [${expected.join(', ')}]`);

function unexpectedTensors(config: ModelConfig, unexpected: readonly string[], fileOf: (tensor: string | null) => string) {
  return new ModelWeightsError(
    fileOf(unexpected[0] ?? null),
    `unexpected tensors ${unexpected.map((n) => `'${n}'`).join(', ')} (not part of a ${config.architecture} with this config${
      config.tieWordEmbeddings && unexpected.includes('lm_head.weight')
        ? '; tie_word_embeddings is true but lm_head.weight differs from embed_tokens'
        : ''
    })`,
  );
}

function sameValues(a: Tensor, b: Tensor): boolean {
  if (a.shape.length !== b.shape.length || a.shape.some((s, i) => s !== b.shape[i])) return false;
  return torch.scope(() => a.eq(b).all().item() === 1);
}

/**
 * Reads the weights of a folder (model.safetensors or a sharded index) in `dtype`, kept (they outlive any enclosing
 * scope), with `fileOf(tensor)`: the file a tensor came from, for errors (null: the weights as a whole). Their names
 * and shapes are checked against `config` from the headers first (checkWeightHeaders), so no data is read for a
 * folder that would be refused.
 */
export function readModelWeights(
  dir: string,
  config: ModelConfig,
  options: { dtype: 'float32' | 'bfloat16'; device?: string },
): { weights: Map<string, Tensor>; fileOf: (tensor: string | null) => string } {
  checkWeightHeaders(config, dir);
  const weights = torch.loadModelWeights(dir, options);
  for (const t of weights.values()) torch.keep(t);
  // loadModelWeights validated the index; here it only names the shard of a tensor in errors
  const indexFile = join(dir, 'model.safetensors.index.json');
  const weightMap = existsSync(indexFile)
    ? (JSON.parse(readRegularFile(indexFile, 'utf8')) as torch.ShardIndex).weight_map
    : null;
  const fileOf = (tensor: string | null): string => {
    if (weightMap === null) return join(dir, 'model.safetensors');
    const shard = tensor === null ? undefined : weightMap[tensor];
    return shard === undefined ? indexFile : join(dir, shard);
  };
  return { weights, fileOf };
}

export interface SaveModelOptions {
  /** Largest safetensors shard in bytes (default 5 GB, as transformers); more weights give a sharded index. */
  maxShardBytes?: number;
}

/**
 * Writes a Hugging Face folder: config.json (the source keys `rawConfig`, dtype updated), model.safetensors or shards
 * + index, and `sourceDir`'s generation_config.json and tokenizer files. Returns the files written.
 */
export function writeModelFolder(
  dir: string,
  model: {
    rawConfig: Readonly<Record<string, unknown>>;
    dtype: DType;
    parameters: Map<string, Tensor>;
    sourceDir: string | null;
  },
  options: SaveModelOptions = {},
): string[] {
  mkdirSync(dir, { recursive: true });
  // stale weights from an earlier save would shadow or mix with the new ones
  for (const name of readdirSync(dir)) {
    if (name === 'model.safetensors' || name === 'model.safetensors.index.json' || /^model-\d+-of-\d+\.safetensors$/.test(name)) {
      rmSync(join(dir, name));
    }
  }
  const config: Record<string, unknown> = { ...model.rawConfig, dtype: model.dtype };
  if ('torch_dtype' in config) config.torch_dtype = model.dtype;
  const written = [join(dir, 'config.json')];
  writeFileSync(written[0] as string, `${JSON.stringify(config, null, 2)}\n`);
  written.push(
    ...torch.saveModelWeights(
      dir,
      model.parameters,
      options.maxShardBytes === undefined ? {} : { maxShardBytes: options.maxShardBytes },
    ),
  );
  if (model.sourceDir !== null && resolve(model.sourceDir) !== resolve(dir)) {
    for (const name of COPIED_FILES) {
      const source = join(model.sourceDir, name);
      if (pathExists(source)) {
        copyRegularFile(source, join(dir, name));
        written.push(join(dir, name));
      }
    }
  }
  return written;
}
