// Qwen3-VL (Qwen3VLForConditionalGeneration): the shared vision-language model (./vision-language-model.ts) with
// Qwen3-VL's vision tower (./vision-tower-qwen3.ts: learned positions, LayerNorm, GELU MLP, full attention, DeepStack
// features), a Qwen3 decoder (q/k RMSNorms), interleaved M-RoPE (./mrope.ts) and DeepStack: tower feature k added to
// language layer k's output at the image tokens.
//
// Weights: transformers 5 (and the Hub's Qwen3-VL checkpoints) name them model.language_model.*, model.visual.* and
// lm_head.weight; save() writes those names, load() reads them and the dense ones (model.layers.*, visual.*).
import { loadQwen3VLConfig, type Qwen3VLConfig } from './config-qwen3-vl.js';
import type { Tensor } from '../../torch/index.js';
import {
  type LoadVisionLanguageOptions,
  type VisionLanguageBuildOptions,
  type VisionLanguageFamily,
  VisionLanguageModel,
} from './vision-language-model.js';
import { expectedQwen3VisionWeights, Qwen3VisionTower } from './vision-tower-qwen3.js';

const QWEN3_VL: VisionLanguageFamily<Qwen3VLConfig> = {
  expectedVisionWeights: (config) => expectedQwen3VisionWeights(config.vision),
  makeTower: (config, weights) => new Qwen3VisionTower(config.vision, weights),
  checkpointName: (name) =>
    name.startsWith('visual.') ? `model.${name}` : name.startsWith('model.') ? `model.language_model.${name.slice(6)}` : name,
};

export class Qwen3VLModel extends VisionLanguageModel<Qwen3VLConfig> {
  /** Builds the model from weights with the in-memory names (model.layers.*, visual.*); the model takes ownership. */
  constructor(config: Qwen3VLConfig, weights: Map<string, Tensor>, options: VisionLanguageBuildOptions = {}) {
    super(QWEN3_VL, config, weights, options);
  }

  /** Loads a Hugging Face folder: config.json (model_type qwen3_vl) and model.safetensors (or a sharded index). */
  static load(dir: string, options: LoadVisionLanguageOptions = {}): Qwen3VLModel {
    const config = loadQwen3VLConfig(dir);
    const { weights, weightsFile } = VisionLanguageModel.loadWeights(dir, options);
    const layout = options.layout ?? 'training';
    const model = new Qwen3VLModel(config, weights, { sourceDir: dir, fileOf: () => weightsFile, layout });
    if (options.requiresGrad) for (const t of model.parameters().values()) t.requiresGrad_(true);
    return model;
  }
}
