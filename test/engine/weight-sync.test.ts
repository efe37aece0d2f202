// RolloutEngine.syncWeights (the run loop's in-memory sync, also what WorkerRolloutEngine.syncWeights runs in its
// worker): a set of weights with one defect is refused before any tensor is written. The weights offered are the
// fixture's changed (×1.5 + 0.01) everywhere but the defect, so a sync that copied part of them would show in the
// greedy log-probs.
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import * as torch from '../../src/torch/index.js';
import { fixtureModelWithTokenizer } from './helpers.js';

const dir = fixtureModelWithTokenizer('qwen2-tied');
const prompts = [[5, 9, 14, 20], [40]];
let engine: RolloutEngine;
let baseline: number[][];

/** Greedy log-probs, one request at a time (one batch shape, so the floats repeat exactly). */
async function greedyLogprobs(e: RolloutEngine = engine): Promise<number[][]> {
  const out: number[][] = [];
  for (const promptIds of prompts) {
    const result = await e.generate({ promptIds, maxTokens: 6, temperature: 0, ignoreEos: true });
    out.push(result.completions[0]?.logprobs ?? []);
  }
  return out;
}

/** The fixture's weights changed by ×1.5 + 0.01, then `edit`ed; disposed after `use`. */
function withTrained(edit: (w: Map<string, torch.Tensor>) => void, use: (w: Map<string, torch.Tensor>) => void): void {
  const weights = torch.loadModelWeights(dir);
  for (const [name, t] of weights) {
    weights.set(name, torch.keep(t.mul(1.5).add(0.01)));
    t.dispose();
  }
  edit(weights);
  try {
    use(weights);
  } finally {
    for (const t of weights.values()) t.dispose();
  }
}

before(async () => {
  torch.setNumThreads(1);
  engine = RolloutEngine.load(dir, { slots: 2 });
  baseline = await greedyLogprobs();
});
after(async () => {
  await engine.close();
});

describe('RolloutEngine.syncWeights', () => {
  const refused: Array<[string, (w: Map<string, torch.Tensor>) => void, RegExp]> = [
    [
      // model.norm.weight comes last in the model's order: every other tensor would have been copied before it
      'a broadcastable shape in the last tensor',
      (w) => {
        w.get('model.norm.weight')?.dispose();
        w.set('model.norm.weight', torch.keep(torch.ones([1])));
      },
      /syncWeights: tensor 'model\.norm\.weight' has shape \[1\], expected \[64\]/,
    ],
    [
      'a missing tensor',
      (w) => {
        w.get('model.layers.1.mlp.up_proj.weight')?.dispose();
        w.delete('model.layers.1.mlp.up_proj.weight');
      },
      /syncWeights: missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight' \(expected shape \[128, 64\]\)/,
    ],
    [
      'a name the model does not have',
      (w) => w.set('model.layers.9.mlp.up_proj.weight', torch.keep(torch.zeros([128, 64]))),
      /the engine's model has no parameter 'model\.layers\.9\.mlp\.up_proj\.weight' \(nothing was copied\)/,
    ],
    [
      'weights that mix dtypes',
      (w) => {
        const t = w.get('model.norm.weight') as torch.Tensor;
        w.set('model.norm.weight', torch.keep(t.to('float32')));
        t.dispose();
      },
      /syncWeights: weights mix dtypes bfloat16, float32/,
    ],
  ];
  for (const [what, edit, message] of refused) {
    it(`refuses ${what}, and the model is unchanged`, async () => {
      withTrained(edit, (weights) => assert.throws(() => engine.syncWeights(weights), message));
      assert.deepEqual(await greedyLogprobs(), baseline);
    });
  }

  it('copies a full set: the log-probs become those of a fresh load of the same weights', async () => {
    const saved = mkdtempSync(join(tmpdir(), 'weight-sync-'));
    let copied = 0;
    withTrained(
      () => {},
      (weights) => {
        torch.saveModelWeights(saved, weights);
        copied = engine.syncWeights(weights);
      },
    );
    assert.equal(copied, engine.model.parameters().size);
    const synced = await greedyLogprobs();
    assert.notDeepEqual(synced, baseline);
    copyFileSync(join(dir, 'config.json'), join(saved, 'config.json'));
    const fresh = RolloutEngine.load(saved, { slots: 2 });
    try {
      assert.deepEqual(synced, await greedyLogprobs(fresh));
    } finally {
      await fresh.close();
    }
  });

  it('is refused after close()', async () => {
    const closed = RolloutEngine.load(dir, { slots: 1 });
    await closed.close();
    assert.throws(
      () => closed.syncWeightsFromDir(dir),
      /RolloutEngine is closed: syncWeightsFromDir\(\) was called after close\(\)/,
    );
  });
});
