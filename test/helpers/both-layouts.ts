// A tiny random Qwen2 model in both weight layouts, for tests of which path each layout's forward takes.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CausalLM, initModel } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';

/**
 * Writes a 2-layer model (hidden 24, 2 heads / 1 kv head) made from `seed`, loads it in the training and the inference
 * layout (in `dtype`) and runs `fn` with both and token ids [2, 5], without gradients, in a scope; then frees the
 * models and the folder.
 */
export function withBothLayouts(
  seed: number,
  fn: (models: { training: CausalLM; inference: CausalLM; ids: torch.Tensor }) => void,
  dtype: 'float32' | 'bfloat16' = 'float32',
): void {
  const dir = mkdtempSync(join(tmpdir(), 'trinity-layouts-'));
  try {
    initModel(dir, { hiddenSize: 24, numLayers: 2, numHeads: 2, numKeyValueHeads: 1, intermediateSize: 40, seed });
    const training = CausalLM.load(dir, { dtype });
    const inference = CausalLM.load(dir, { dtype, layout: 'inference' });
    try {
      torch.noGrad(() =>
        torch.scope(() => {
          const ids = torch.randint(0, inference.config.vocabSize, [2, 5], { generator: new torch.Generator(seed + 1) });
          fn({ training, inference, ids });
        }),
      );
    } finally {
      training.dispose();
      inference.dispose();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
