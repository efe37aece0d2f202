// The training forward over a vision-language batch (tokenLogProbs / forwardBackward with options.multimodal from
// VisionLanguageModel.trainingInputs) against a direct forward under plain autograd, on the Qwen2.5-VL and Qwen3-VL
// fixture models and their padded batches of three images: log-probs, entropy, the loss and every gradient (vision
// tower and Qwen3-VL's DeepStack mergers included) agree to 1e-5 in float32, chunked or not, with activation
// checkpointing or not, and a prompt width (which would pack shared prompts for text) leaves the batch padded.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  forwardBackward,
  type GridTHW,
  logitStatistics,
  loadVisionLanguageModel,
  promptGroups,
  tokenLogProbs,
  type VisionLanguageModel,
} from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { disposeAll, fixturesDir, get, maxAbsDiff } from './helpers/fixtures.js';

const TOLERANCE = 1e-5;

for (const fixture of ['qwen2_5-vl', 'qwen3-vl']) describe(fixture, () => trainingForwardTests(`${fixturesDir}${fixture}`));

function trainingForwardTests(dir: string): void {
  let ref: Map<string, torch.Tensor>;
  let model: VisionLanguageModel;
  let images: { grids: GridTHW[]; pixelValues: torch.Tensor };

  before(() => {
    ref = torch.loadSafetensors(`${dir}/reference.safetensors`);
    for (const t of ref.values()) torch.keep(t);
    images = { grids: get(ref, 'image_grid_thw').toArray() as unknown as GridTHW[], pixelValues: get(ref, 'pixel_values') };
    model = loadVisionLanguageModel(dir, { requiresGrad: true });
  });
  after(() => {
    model.dispose();
    disposeAll(ref.values());
  });

  /** Per-token weights of the loss: position-dependent so that each gradient depends on where a token is. */
  const lossWeights = (mask: torch.Tensor) => {
    const [rows, length] = mask.shape as [number, number];
    const ramp = torch
      .arange(length - 1)
      .float()
      .div(length)
      .add(0.5)
      .unsqueeze(0)
      .expand([rows, length - 1]);
    return mask
      .narrow(1, 1, length - 1)
      .float()
      .mul(ramp);
  };

  /** The reference: log-probs and entropy of model.forward's logits, under plain autograd. */
  function directStatistics(ids: torch.Tensor, mask: torch.Tensor) {
    const logits = model.forward(ids, { attentionMask: mask, images }).float();
    const length = ids.size(1);
    return logitStatistics(logits.narrow(1, 0, length - 1), ids.narrow(1, 1, length - 1), { entropy: true });
  }

  test('log-probs and entropy of the image batch equal a direct forward (1e-5)', () => {
    torch.scope(() =>
      torch.noGrad(() => {
        const ids = get(ref, 'mm.ids');
        const mask = get(ref, 'mm.mask');
        const direct = directStatistics(ids, mask);
        const where = mask.narrow(1, 1, ids.size(1) - 1);
        for (const chunkSize of [256, 7]) {
          const ours = tokenLogProbs(model.language, ids, {
            attentionMask: mask,
            entropy: true,
            chunkSize,
            multimodal: model.trainingInputs(ids, mask, images),
          });
          assert.ok(maxAbsDiff(ours.logProbs, direct.logProbs, where) < TOLERANCE, `log-probs, chunk ${chunkSize}`);
          assert.ok(maxAbsDiff(ours.entropy as torch.Tensor, direct.entropy as torch.Tensor, where) < TOLERANCE, 'entropy');
        }
        // without the multimodal inputs the language model sees placeholder embeddings: different log-probs
        const textOnly = tokenLogProbs(model.language, ids, { attentionMask: mask });
        assert.ok(maxAbsDiff(textOnly.logProbs, direct.logProbs, where) > 1e-3, 'images change the log-probs');
      }),
    );
  });

  test('the loss and every gradient (vision tower included) equal plain autograd through the direct forward (1e-5)', () => {
    const ids = get(ref, 'mm.ids');
    const mask = get(ref, 'mm.mask');
    const params = model.parameters();
    const gradients = (run: () => torch.Tensor): { loss: number; grads: Map<string, torch.Tensor> } => {
      for (const p of params.values()) p.grad = null;
      const loss = torch.scope(() => run().item());
      const grads = new Map([...params].map(([name, p]) => [name, torch.keep((p.grad as torch.Tensor).clone())]));
      return { loss, grads };
    };
    const weights = torch.keep(lossWeights(mask));
    const lossOf = (logProbs: torch.Tensor, entropy: torch.Tensor | null) =>
      logProbs
        .mul(weights)
        .sum()
        .add((entropy as torch.Tensor).mul(weights).sum().mul(0.1));
    const direct = gradients(() => {
      const { logProbs, entropy } = directStatistics(ids, mask);
      const loss = lossOf(logProbs, entropy);
      loss.backward();
      return loss.detach();
    });
    const widths = ids.size(1);
    try {
      for (const variant of [
        { chunkSize: 256, checkpoint: false },
        { chunkSize: 9, checkpoint: true },
      ]) {
        const ours = gradients(
          () =>
            forwardBackward(model.language, ids, ({ logProbs, entropy }) => lossOf(logProbs, entropy), {
              attentionMask: mask,
              entropy: true,
              ...variant,
              // a prompt width and groups would pack shared prompts for text rows; image rows stay padded
              promptWidth: widths - 4,
              promptGroups: promptGroups([0, 1]),
              multimodal: model.trainingInputs(ids, mask, images),
            }).loss,
        );
        assert.ok(Math.abs(ours.loss - direct.loss) < TOLERANCE * Math.max(1, Math.abs(direct.loss)), 'the loss');
        for (const [name, g] of direct.grads) {
          const scale = torch.scope(() => g.abs().max().item());
          const diff = maxAbsDiff(ours.grads.get(name) as torch.Tensor, g);
          assert.ok(diff <= TOLERANCE * Math.max(1, scale), `${name}: ${diff} (${JSON.stringify(variant)})`);
        }
        assert.ok(torch.scope(() => (ours.grads.get('visual.patch_embed.proj.weight') as torch.Tensor).abs().sum().item()) > 0);
        disposeAll(ours.grads.values());
      }
    } finally {
      disposeAll(direct.grads.values());
      weights.dispose();
      for (const p of params.values()) p.grad = null;
    }
  });
}
