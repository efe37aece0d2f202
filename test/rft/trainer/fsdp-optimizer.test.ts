// ShardedAdamW's checkpoint layout (src/rft/trainer/fsdp-optimizer.ts, fsdp-checkpoint.ts): a state one process's
// AdamW wrote (over torch.weightDecayGroups of the model's parameters) loads into the shards, and the sharded
// checkpoint written from them reads back as the same tensors under the same names, with the model's weights. One
// rank in this process (the layout, not the slicing, which test/rft/trainer/fsdp.test.ts covers on 2 ranks).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CausalLM, initModel } from '../../../src/model/index.js';
import { FullyShardedModel } from '../../../src/rft/trainer/fsdp.js';
import { writeRankShards } from '../../../src/rft/trainer/fsdp-checkpoint.js';
import { readShardedCheckpoint } from '../../../src/rft/trainer/fsdp-resume.js';
import { ShardedAdamW } from '../../../src/rft/trainer/fsdp-optimizer.js';
import * as torch from '../../../src/torch/index.js';

test("a one-process AdamW state loads into the shards, and their sharded checkpoint reads back as the same file's tensors", () => {
  const dir = mkdtempSync(join(tmpdir(), 'trinity-fsdp-optimizer-'));
  try {
    initModel(dir, { hiddenSize: 32, numLayers: 2, numHeads: 2, numKeyValueHeads: 1, seed: 3 });
    // one process: two AdamW steps with gradients made up per parameter
    const model = CausalLM.load(dir, { requiresGrad: true });
    const named = model.parameters();
    const adamW = new torch.AdamW(torch.weightDecayGroups(named, 0.1), { lr: 1e-2 });
    for (let step = 0; step < 2; step++) {
      torch.noGrad(() => {
        [...named.values()].forEach((p, i) => {
          p.grad = torch.full(p.shape, 0.01 * (i + 1) * (step + 1));
        });
      });
      adamW.step();
      adamW.zeroGrad();
    }
    const saved = adamW.stateDict();
    // the shards of another copy of the model (the initial weights) take it, then write and read it back
    const other = CausalLM.load(dir, { requiresGrad: true });
    const initial = new Map([...other.parameters()].map(([name, t]) => [name, [...(t.toTypedArray() as Float32Array)]]));
    const sharded = new FullyShardedModel(other, other.parameters(), { rank: 0, worldSize: 1, computeDtype: 'float32' });
    const optimizer = new ShardedAdamW(sharded, { lr: 1e-2, weightDecay: 0.1 });
    optimizer.loadStateDict(saved);
    writeRankShards(sharded, optimizer, join(dir, 'sharded'));
    const { weights, optimizer: back } = readShardedCheckpoint(join(dir, 'sharded'));
    for (const [name, values] of initial)
      assert.deepEqual([...((weights.get(name) as torch.Tensor).toTypedArray() as Float32Array)], values, name);
    assert.deepEqual(Object.keys(back.tensors).sort(), Object.keys(saved.tensors).sort());
    for (const [key, t] of Object.entries(saved.tensors)) {
      const u = back.tensors[key] as torch.Tensor;
      assert.deepEqual(u.shape, t.shape, key);
      assert.deepEqual([...(u.toTypedArray() as Float32Array)], [...(t.toTypedArray() as Float32Array)], key);
    }
    assert.deepEqual(
      back.groups.map((g) => g.weightDecay),
      saved.groups.map((g) => g.weightDecay),
    );
    optimizer.dispose();
    sharded.dispose();
    other.dispose();
    adamW.dispose();
    model.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
