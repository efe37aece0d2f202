// Mixed precision (trainer.param_dtype bfloat16, trainer.master_dtype float32; src/rft/trainer/master-weights.ts):
//   - the master weights are float32 and keep updates smaller than bf16's resolution, which a bf16 weight updated in
//     place rounds away (the control below shows that it does);
//   - the trainer computes in bf16, hands the explorer bf16 weights, and checkpoints float32 master weights;
//   - three GRPO steps stay close to float32 training (bound stated at the assertion).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { MasterWeights } from '../../../src/rft/trainer/master-weights.js';
import { TrainerClient, type TrainerInit } from '../../../src/rft/trainer/trainer.js';
import * as torch from '../../../src/torch/index.js';
import { toyTrainerInit, toyTrainerJob } from './toy.js';

describe('MasterWeights', () => {
  // AdamW with a constant gradient moves a weight by exactly lr per step (m̂ = g, v̂ = g², eps negligible). At w = 1
  // bf16's spacing just below 1 is 2^-8 = 0.00390625, so an update of lr = 1e-3 (< half of it) rounds back to 1.
  const lr = 1e-3;
  const steps = 10;
  const train = (param: torch.Tensor, afterBackward: () => void, afterStep: () => void, optimized: torch.Tensor) => {
    const optimizer = new torch.AdamW([optimized], { lr, weightDecay: 0 });
    for (let i = 0; i < steps; i++) {
      torch.scope(() => param.mul(1).sum().backward()); // d/dw = 1
      afterBackward();
      optimizer.step();
      optimizer.zeroGrad();
      afterStep();
    }
    optimizer.dispose();
  };

  test('float32 master weights accumulate updates below bf16 resolution; the bf16 copy follows them', () => {
    const compute = torch.keep(torch.ones([4], { dtype: 'bfloat16' }).requiresGrad_());
    const master = torch.keep(torch.ones([4], { dtype: 'float32' }).requiresGrad_());
    const weights = new MasterWeights([compute], [master]);
    train(
      compute,
      () => weights.accumulateGradients(),
      () => weights.publish(),
      master,
    );
    assert.equal(master.dtype, 'float32');
    assert.equal(compute.dtype, 'bfloat16');
    assert.equal(compute.grad, null, 'the bf16 gradient moved to the master weight');
    const m = [...(master.toTypedArray() as Float32Array)];
    for (const v of m) assert.ok(Math.abs(v - (1 - steps * lr)) < 1e-6, `master ${v}, expected ${1 - steps * lr}`);
    // bf16(0.99): the nearest multiple of 2^-8 is 253/256 = 0.98828125
    const c = [...(compute.float().toTypedArray() as Float32Array)];
    assert.deepEqual(c, [0.98828125, 0.98828125, 0.98828125, 0.98828125]);
    compute.dispose();
    master.dispose();
  });

  test('control: the same updates applied to bf16 weights directly are lost', () => {
    const direct = torch.keep(torch.ones([4], { dtype: 'bfloat16' }).requiresGrad_());
    train(
      direct,
      () => {},
      () => {},
      direct,
    );
    assert.deepEqual([...(direct.float().toTypedArray() as Float32Array)], [1, 1, 1, 1]);
    direct.dispose();
  });

  test('refuses tensors that do not pair up', () => {
    const a = torch.zeros([2]);
    const b = torch.zeros([3]);
    assert.throws(() => new MasterWeights([a], [b]), /tensor 0 is \[2\] in compute and \[3\] in master/);
    assert.throws(() => new MasterWeights([a], []), /1 compute tensors for 0 master tensors/);
    a.dispose();
    b.dispose();
  });
});

describe('trainer with param_dtype bfloat16, master_dtype float32', () => {
  const job = toyTrainerJob('trinity-mixed-');
  const init = (jobDir: string, overrides: Partial<TrainerInit>): TrainerInit =>
    toyTrainerInit(job.dir, jobDir, {
      algorithm: { algorithm_type: 'grpo', repeat_times: 2, optimizer: { lr: 1e-3 } },
      microBatchSize: 4,
      ...overrides,
    });

  test('bf16 weights to the explorer, float32 master weights in checkpoints, close to float32 training', async () => {
    const fp32 = (await TrainerClient.start(init(join(job.work, 'fp32'), {}))).trainer;
    const mixed = (await TrainerClient.start(init(join(job.work, 'mixed'), { dtype: 'bfloat16', masterDtype: 'float32' })))
      .trainer;
    try {
      const losses: [number, number][] = [];
      for (let i = 0; i < 3; i++) {
        const a = await fp32.step(job.batch);
        const b = await mixed.step(job.batch);
        losses.push([a.loss as number, b.loss as number]);
      }
      const synced = await mixed.beginSync();
      const dtypes = new Set([...synced.values()].map((t) => t.dtype));
      const bf16 = new Map([...synced].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
      await mixed.endSync();
      assert.deepEqual([...dtypes], ['bfloat16'], 'the explorer is handed bf16 weights');
      const reference = await fp32.beginSync();
      const f32 = new Map([...reference].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
      await fp32.endSync();

      const dir = await mixed.save(3, {}, 0);
      const saved = torch.loadModelWeights(join(dir, 'model'));
      try {
        assert.deepEqual(new Set([...saved.values()].map((t) => t.dtype)), new Set(['float32']), 'master weights saved');
        // the master weights are finer than the bf16 copy: some differ from it by less than bf16 could express
        let finer = 0;
        for (const [name, t] of saved) {
          const m = t.toTypedArray() as Float32Array;
          const c = bf16.get(name) as Float32Array;
          for (let i = 0; i < m.length; i++) if (m[i] !== c[i]) finer++;
        }
        assert.ok(finer > 0, 'the saved master weights equal their bf16 copy: nothing is kept beyond bf16');
        // Bound: Adam moves each weight by at most ~lr per step whatever the gradient's size, so bf16 noise in the
        // gradients can move a weight differently by at most 2·lr per step: 3 steps · 2 · 1e-3 = 6e-3, plus bf16's
        // rounding of the weight itself (|w| < 1 here: 2^-9 ≈ 2e-3 against the float32 run).
        let largest = 0;
        for (const [name, a] of f32) {
          const b = saved.get(name)?.toTypedArray() as Float32Array;
          for (let i = 0; i < a.length; i++) largest = Math.max(largest, Math.abs((a[i] as number) - (b[i] as number)));
        }
        assert.ok(largest <= 6e-3, `master weights differ from float32 training by ${largest} (bound 6e-3)`);
        // and the losses agree to bf16's precision (2^-8 relative, on a loss of order 1)
        for (const [a, b] of losses) assert.ok(Math.abs(a - b) <= 1e-2, `loss ${b} with bf16 compute, ${a} in float32`);
      } finally {
        for (const t of saved.values()) t.dispose();
      }
    } finally {
      await fp32.close();
      await mixed.close();
    }
  });
});
