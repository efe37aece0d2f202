// A mixture of experts under the batch-invariant forward (trainer.bitwise_on_policy; src/model/moe.ts): a token's
// output does not depend on the tokens routed beside it. Two things followed the batch before the mode covered
// mixtures of experts, and this test fails without either fix: SiLU over an expert's run (ATen's vectorized and scalar
// exp round differently, and a run's row count decides which elements take which: a width of 48 leaves a scalar tail
// for odd counts), and the sum of a token's k > 2 weighted expert outputs (index_put_ with accumulate adds them in an
// order that follows the batch on several threads; the mode adds them in routing rank order).
// (The sampler-vs-trainer equality on the top-2 fixtures, qwen3_moe and qwen2_moe: test/engine/bitwise-on-policy.test.ts.)
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CausalLM, initModel } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';

const tmp = mkdtempSync(join(tmpdir(), 'moe-invariant-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

test('top-4 of 16 experts on 2 threads: a row alone gives the bits it gets in a batch of 128', (t) => {
  if (!torch.packedLinearSupported()) return t.skip('needs a CPU with AVX2/FMA');
  const dir = join(tmp, 'model');
  initModel(dir, { architecture: 'qwen3_moe', hiddenSize: 64, numLayers: 2, numExperts: 16, numExpertsPerTok: 4, seed: 1 });
  const model = CausalLM.load(dir);
  const threads = torch.getNumThreads();
  torch.setNumThreads(2);
  try {
    model.setBatchInvariant(true);
    torch.scope(() => {
      torch.manualSeed(0);
      const ids = torch.randint(3, model.config.vocabSize, [128, 32]);
      const values = (logits: torch.Tensor) => logits.contiguous().toTypedArray() as Float32Array;
      const batch = torch.noGrad(() => model.forward(ids)); // [128, 32, vocab]
      for (const row of [0, 77]) {
        const alone = values(torch.noGrad(() => model.forward(ids.narrow(0, row, 1))));
        const inBatch = values(batch.narrow(0, row, 1));
        const unequal = alone.filter((v, i) => !Object.is(v, inBatch[i])).length;
        assert.equal(unequal, 0, `row ${row}: ${unequal} of ${alone.length} logits differ from the batch's`);
      }
    });
  } finally {
    torch.setNumThreads(threads);
    model.dispose();
  }
});
