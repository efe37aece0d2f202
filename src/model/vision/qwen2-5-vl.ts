// Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration): the shared vision-language model (./vision-language-model.ts) with
// Qwen2.5-VL's vision tower (./vision-tower.ts: window attention, RMSNorm, SwiGLU), a Qwen2 decoder, M-RoPE in
// contiguous sections and no DeepStack.
//
// Weights: the language model's under the dense names (model.embed_tokens, model.layers.*, model.norm, lm_head), as
// the Hub's checkpoints and transformers 5's save_pretrained write them, and visual.*; the in-memory names of
// transformers 5 (model.language_model.*, model.visual.*) are read as well.
import { loadQwen2_5VLConfig, type Qwen2_5VLConfig } from './config.js';
import type { Tensor } from '../../torch/index.js';
import {
  type LoadVisionLanguageOptions,
  type VisionLanguageBuildOptions,
  type VisionLanguageFamily,
  VisionLanguageModel,
} from './vision-language-model.js';
import { expectedVisionWeights, VisionTower } from './vision-tower.js';

const QWEN2_5_VL: VisionLanguageFamily<Qwen2_5VLConfig> = {
  expectedVisionWeights: (config) => expectedVisionWeights(config.vision),
  makeTower: (config, weights) => new VisionTower(config.vision, weights),
  checkpointName: (name) => name,
};

export class Qwen2_5VLModel extends VisionLanguageModel<Qwen2_5VLConfig> {
  /** Builds the model from weights with Hugging Face names, checked against the config; the model takes ownership. */
  constructor(config: Qwen2_5VLConfig, weights: Map<string, Tensor>, options: VisionLanguageBuildOptions = {}) {
    super(QWEN2_5_VL, config, weights, options);
  }

  /** Loads a Hugging Face folder: config.json (model_type qwen2_5_vl) and model.safetensors (or a sharded index). */
  static load(dir: string, options: LoadVisionLanguageOptions = {}): Qwen2_5VLModel {
    const config = loadQwen2_5VLConfig(dir);
    const { weights, weightsFile } = VisionLanguageModel.loadWeights(dir, options);
    const layout = options.layout ?? 'training';
    const model = new Qwen2_5VLModel(config, weights, { sourceDir: dir, fileOf: () => weightsFile, layout });
    if (options.requiresGrad) for (const t of model.parameters().values()) t.requiresGrad_(true);
    return model;
  }
}
