// `POST /update_weights_from_disk` on `trinity serve --model` (serveModel over WorkerRolloutEngine.syncWeightsFromDir,
// the path the run loop's checkpoint syncs take): a folder that a fresh load would refuse is refused whole, and one
// outside the reload root through a symlink is refused; the served model's greedy log-probs stay exactly as they were.
// Every bad folder holds *changed* values in all its other tensors, so a reload that copied any tensor before failing
// would show in the log-probs.
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import { type ServedModel, serveModel } from '../../src/serve/index.js';
import * as torch from '../../src/torch/index.js';
import { fixtureModelWithTokenizer } from '../engine/helpers.js';

const modelDir = fixtureModelWithTokenizer('qwen2-tied');
const root = mkdtempSync(join(tmpdir(), 'reload-root-'));
const outside = mkdtempSync(join(tmpdir(), 'reload-outside-'));
const prompts = [[5, 9, 14, 20], [40], [7, 7, 7]];

/** The fixture's weights, each changed (×1.5 + 0.01): what a training step's checkpoint would hold. */
function trainedWeights(): Map<string, torch.Tensor> {
  const weights = torch.loadModelWeights(modelDir);
  for (const [name, t] of weights) {
    weights.set(name, torch.keep(t.mul(1.5).add(0.01)));
    t.dispose();
  }
  return weights;
}

/** A Hugging Face folder `dir` with the fixture's config and `edit` applied to the trained weights. */
function writeFolder(dir: string, edit: (weights: Map<string, torch.Tensor>) => void = () => {}): string {
  mkdirSync(dir, { recursive: true });
  copyFileSync(join(modelDir, 'config.json'), join(dir, 'config.json'));
  const weights = trainedWeights();
  edit(weights);
  torch.saveModelWeights(dir, weights);
  for (const t of weights.values()) t.dispose();
  return dir;
}

function replace(weights: Map<string, torch.Tensor>, name: string, make: (old: torch.Tensor) => torch.Tensor): void {
  const old = weights.get(name);
  assert.ok(old, name);
  weights.set(name, torch.keep(make(old)));
  old.dispose();
}

let served: ServedModel;
let baseline: number[][];

/**
 * Greedy log-probs of the fixed prompts, one request at a time: a batch of one row each time, so the floats are the
 * same run after run (rounding may differ between batch shapes).
 */
async function greedyLogprobs(engine: Pick<RolloutEngine, 'generate'> = served.engine): Promise<number[][]> {
  const out: number[][] = [];
  for (const promptIds of prompts) {
    const result = await engine.generate({ promptIds, maxTokens: 8, temperature: 0, ignoreEos: true });
    out.push(result.completions[0]?.logprobs ?? []);
  }
  return out;
}

async function reload(modelPath: string): Promise<{ status: number; message: string }> {
  const res = await fetch(`${served.server.url}/update_weights_from_disk`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model_path: modelPath }),
  });
  const body = (await res.json()) as { error?: { message: string }; message?: string };
  return { status: res.status, message: body.error?.message ?? body.message ?? '' };
}

before(async () => {
  torch.setNumThreads(1);
  served = await serveModel({ modelDir, port: 0, modelName: 'tiny', reloadRoot: root, slots: 4, numThreads: 1 });
  baseline = await greedyLogprobs();
});
after(async () => {
  await served.close();
});

describe('POST /update_weights_from_disk', () => {
  const refused: Array<[string, () => string, RegExp]> = [
    [
      'a wrong shape',
      () =>
        writeFolder(join(root, 'wrong-shape'), (w) =>
          replace(w, 'model.layers.1.mlp.down_proj.weight', (t) => t.narrow(1, 0, 64).contiguous()),
        ),
      /tensor 'model\.layers\.1\.mlp\.down_proj\.weight' has shape \[64, 64\], expected \[64, 128\]/,
    ],
    [
      'a shape that copy_ would broadcast ([1] into [64])',
      () => writeFolder(join(root, 'broadcast'), (w) => replace(w, 'model.norm.weight', () => torch.ones([1]))),
      /tensor 'model\.norm\.weight' has shape \[1\], expected \[64\]/,
    ],
    [
      'a missing tensor',
      () =>
        writeFolder(join(root, 'missing'), (w) => {
          w.get('model.layers.1.self_attn.v_proj.bias')?.dispose();
          w.delete('model.layers.1.self_attn.v_proj.bias');
        }),
      /missing tensor 'model\.layers\.1\.self_attn\.v_proj\.bias' \(expected shape \[32\]\)/,
    ],
    [
      'an extra tensor',
      () => writeFolder(join(root, 'extra'), (w) => w.set('model.layers.2.input_layernorm.weight', torch.keep(torch.ones([64])))),
      /unexpected tensors 'model\.layers\.2\.input_layernorm\.weight'/,
    ],
    [
      'an integer tensor',
      () =>
        writeFolder(join(root, 'integer'), (w) => replace(w, 'model.norm.weight', () => torch.ones([64], { dtype: 'int64' }))),
      /tensor 'model\.norm\.weight' has dtype int64, expected floating point/,
    ],
    [
      'a symlinked folder that leads outside the root',
      () => {
        const target = writeFolder(join(outside, 'good'));
        symlinkSync(target, join(root, 'folder-link'));
        return join(root, 'folder-link');
      },
      /folder-link resolves to .*reload-outside-.*good, outside the reload root/,
    ],
    [
      'a symlinked weight file that leads outside the root',
      () => {
        const target = writeFolder(join(outside, 'good-file'));
        const dir = join(root, 'file-link');
        mkdirSync(dir);
        copyFileSync(join(modelDir, 'config.json'), join(dir, 'config.json'));
        symlinkSync(join(target, 'model.safetensors'), join(dir, 'model.safetensors'));
        return dir;
      },
      /file-link\/model\.safetensors resolves to .*reload-outside-.*good-file\/model\.safetensors, outside the reload root/,
    ],
    ['a folder that does not exist', () => join(root, 'nothing-here'), /nothing-here: no such file or folder/],
  ];
  for (const [what, make, message] of refused) {
    it(`refuses ${what} with a 4xx naming it, and the served model is unchanged`, async () => {
      const reply = await reload(make());
      assert.ok(reply.status >= 400 && reply.status < 500, `status ${reply.status}: ${reply.message}`);
      assert.match(reply.message, message);
      assert.deepEqual(await greedyLogprobs(), baseline);
    });
  }

  it('reloads a good folder: the served log-probs become those of a fresh load of it', async () => {
    const good = writeFolder(join(root, 'good'));
    const reply = await reload('good'); // relative to the root, as SGLang's model_path
    assert.equal(reply.status, 200, reply.message);
    const reloaded = await greedyLogprobs();
    assert.notDeepEqual(reloaded, baseline);
    const fresh = RolloutEngine.load(good, { slots: 4 });
    try {
      assert.deepEqual(reloaded, await greedyLogprobs(fresh));
    } finally {
      await fresh.close();
    }
  });

  it('follows a symlink that stays inside the root', async () => {
    symlinkSync(writeFolder(join(root, 'inside-target')), join(root, 'inside-link'));
    const reply = await reload('inside-link');
    assert.equal(reply.status, 200, reply.message);
  });
});
