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
import { checkWeights, expectedWeights, ModelWeightsError, readModelWeights } from '../model/hf-weights.js';
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
 * leaves the model unchanged; the error names the file and the tensor.
 */
export function syncModelWeightsFromDir(model: CausalLM, dir: string): number {
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
