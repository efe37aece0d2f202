// CausalLM.replaceParameters (src/model/transformer.ts): the modules read the tensors swapped in, by Hugging Face
// name (a fully sharded trainer swaps a layer's gathered weights in and empty placeholders out), and the model hands
// back the tensors they replace.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CausalLM, initModel } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';

test('replaceParameters: the forward reads the swapped tensors; placeholders make it fail; the originals come back', () => {
  const dir = mkdtempSync(join(tmpdir(), 'trinity-replace-'));
  try {
    initModel(dir, { hiddenSize: 32, numLayers: 2, numHeads: 2, numKeyValueHeads: 1, seed: 3 });
    const a = CausalLM.load(dir);
    initModel(dir, { hiddenSize: 32, numLayers: 2, numHeads: 2, numKeyValueHeads: 1, seed: 4 });
    const b = CausalLM.load(dir);
    const ids = torch.tensor(new BigInt64Array([5n, 11n, 40n]), { dtype: 'int64' }).reshape([1, 3]);
    const logits = (m: CausalLM) => torch.scope(() => [...(m.forward(ids).toTypedArray() as Float32Array)]);
    const expected = logits(b);
    assert.notDeepEqual(logits(a), expected);
    // every parameter of b into a (copies, so that both models keep owning their own)
    const copies = new Map([...b.parameters()].map(([name, t]) => [name, torch.keep(t.clone())]));
    const originals = a.replaceParameters(copies);
    assert.deepEqual(logits(a), expected);
    // a layer's weights swapped for empty placeholders: its first product fails
    const layer = [...copies.keys()].filter((n) => n.startsWith('model.layers.1.'));
    const taken = a.replaceParameters(new Map(layer.map((n) => [n, torch.keep(torch.zeros([0]))])));
    assert.throws(() => a.forward(ids));
    a.replaceParameters(taken);
    assert.deepEqual(logits(a), expected);
    assert.throws(
      () => a.replaceParameters(new Map([['model.layers.9.mlp.up_proj.weight', torch.zeros([1])]])),
      /not a parameter/,
    );
    for (const t of originals.values()) t.dispose();
    a.dispose();
    b.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
