// Checkpoints: resuming from one continues exactly as if the run never stopped; partial writes are ignored.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CausalLM, initModel } from '../../src/model/index.js';
import { Critic } from '../../src/rft/algorithm/critic.js';
import {
  latestCheckpoint,
  listCheckpoints,
  loadCriticState,
  loadOptimizerState,
  saveCheckpoint,
} from '../../src/rft/checkpoint.js';
import * as torch from '../../src/torch/index.js';

const base = mkdtempSync(join(tmpdir(), 'ckpt-model-'));
initModel(base, { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 4 });

function trainSteps(model: CausalLM, optimizer: torch.AdamW, steps: number, from: number): void {
  for (let s = from; s < from + steps; s++) {
    torch.scope(() => {
      const ids = torch.randint(4, 60, [2, 8], { generator: new torch.Generator(100 + s) });
      const logits = model.forward(ids).slice(1, 0, -1);
      torch.crossEntropy(logits.reshape([-1, logits.size(-1)]), ids.slice(1, 1).reshape([-1])).backward();
    });
    optimizer.step();
    optimizer.zeroGrad();
  }
}

const snapshot = (model: CausalLM) => new Map([...model.parameters()].map(([n, p]) => [n, p.toTypedArray() as Float32Array]));

test('resume from a checkpoint: model, optimizer and state continue exactly', () => {
  const jobDir = mkdtempSync(join(tmpdir(), 'ckpt-job-'));
  const model = CausalLM.load(base, { requiresGrad: true });
  const optimizer = new torch.AdamW([...model.parameters().values()], { lr: 1e-2 });
  trainSteps(model, optimizer, 2, 0);
  saveCheckpoint(jobDir, 2, { model, optimizer, state: { trainer: { step: 2 }, selector: { cursor: 5 } } });
  trainSteps(model, optimizer, 2, 2);
  const uninterrupted = snapshot(model);

  const checkpoint = latestCheckpoint(jobDir);
  assert.ok(checkpoint !== null && checkpoint.modelDir !== null);
  assert.equal(checkpoint.step, 2);
  assert.deepEqual(checkpoint.state.selector, { cursor: 5 });
  const resumed = CausalLM.load(checkpoint.modelDir, { requiresGrad: true });
  const resumedOptimizer = new torch.AdamW([...resumed.parameters().values()], { lr: 1e-2 });
  loadOptimizerState(checkpoint, resumedOptimizer);
  trainSteps(resumed, resumedOptimizer, 2, 2);
  for (const [name, values] of snapshot(resumed)) assert.deepEqual(values, uninterrupted.get(name), name);
  for (const o of [optimizer, resumedOptimizer]) o.dispose();
  model.dispose();
  resumed.dispose();
});

test('a half-written checkpoint is ignored; old checkpoints beyond `keep` are removed', () => {
  const jobDir = mkdtempSync(join(tmpdir(), 'ckpt-job-'));
  const model = CausalLM.load(base);
  for (const step of [1, 2, 3]) saveCheckpoint(jobDir, step, { model, state: {} }, 2);
  assert.deepEqual(listCheckpoints(jobDir), [2, 3]);
  // a crash while writing step 4: the temporary folder exists, the latest file still says 3
  mkdirSync(join(jobDir, 'checkpoints', 'global_step_4.tmp', 'model'), { recursive: true });
  assert.equal(latestCheckpoint(jobDir)?.step, 3);
  // a latest file naming a checkpoint that is not there falls back to the newest complete one
  writeFileSync(join(jobDir, 'checkpoints', 'latest_checkpointed_iteration.txt'), '9\n');
  assert.equal(latestCheckpoint(jobDir)?.step, 3);
  assert.equal(latestCheckpoint(mkdtempSync(join(tmpdir(), 'empty-'))), null);
  model.dispose();
});

test('a failed write names the checkpoint, the part and the file (EISDIR: a folder where the file goes)', () => {
  const jobDir = mkdtempSync(join(tmpdir(), 'ckpt-job-'));
  const model = CausalLM.load(base);
  const latest = join(jobDir, 'checkpoints', 'latest_checkpointed_iteration.txt');
  mkdirSync(join(latest, 'in-the-way'), { recursive: true });
  assert.throws(
    () => saveCheckpoint(jobDir, 3, { model, state: {} }),
    (error: Error & { code?: string }) => {
      assert.equal(error.code, 'EISDIR');
      assert.ok(
        error.message.startsWith(`cannot write checkpoint 3's latest-checkpoint marker to ${latest}: EISDIR`),
        error.message,
      );
      return true;
    },
  );
  model.dispose();
});

test('a checkpoint with a critic restores its weights and optimizer; one without it is refused', () => {
  const model = CausalLM.load(base);
  const critic = Critic.fromPolicy(model, { seed: 1 });
  const optimizer = new torch.AdamW(critic.parameters(), { lr: 0.1 });
  torch.scope(() => {
    critic
      .values(torch.tensor([[1n, 2n, 3n]]))
      .sum()
      .backward();
  });
  optimizer.step();
  const jobDir = mkdtempSync(join(tmpdir(), 'ckpt-critic-'));
  saveCheckpoint(jobDir, 1, { model, critic: { critic, optimizer }, trainer: { note: 1 }, state: {} });
  const checkpoint = latestCheckpoint(jobDir);
  assert.ok(checkpoint);
  assert.equal(checkpoint.trainer?.note, 1);
  const fresh = Critic.fromPolicy(model, { seed: 2 });
  const freshOptimizer = new torch.AdamW(fresh.parameters(), { lr: 0.1 });
  loadCriticState(checkpoint, fresh, freshOptimizer);
  torch.scope(() => {
    for (const [name, t] of critic.namedTensors()) {
      assert.equal(
        t
          .sub(fresh.namedTensors().get(name) as torch.Tensor)
          .abs()
          .max()
          .item(),
        0,
        name,
      );
    }
  });
  assert.deepEqual(Object.keys(freshOptimizer.stateDict().tensors).sort(), Object.keys(optimizer.stateDict().tensors).sort());
  saveCheckpoint(jobDir, 2, { model, state: {} });
  assert.throws(
    () => loadCriticState(latestCheckpoint(jobDir) as NonNullable<ReturnType<typeof latestCheckpoint>>, fresh, freshOptimizer),
    /the checkpoint has no critic/,
  );
  for (const c of [critic, fresh]) c.dispose();
  optimizer.dispose();
  freshOptimizer.dispose();
  model.dispose();
  rmSync(jobDir, { recursive: true, force: true });
});
