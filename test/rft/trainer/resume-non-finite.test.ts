// A checkpoint whose weights hold NaN or Inf (a diverged run saved them) is refused when a trainer resumes from it,
// naming the checkpoint and a tensor (src/rft/checkpoint.ts checkFiniteWeights), instead of training on NaN.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { TrainerClient, type TrainerInit } from '../../../src/rft/trainer/trainer.js';
import * as torch from '../../../src/torch/index.js';
import { toyTrainerInit, toyTrainerJob } from './toy.js';

const job = toyTrainerJob('trinity-trainer-nan-');

const init = (jobDir: string, resume: boolean): TrainerInit =>
  toyTrainerInit(job.dir, jobDir, { resume, algorithm: { algorithm_type: 'grpo', optimizer: { lr: 1e-2 } }, totalSteps: 4 });

/** Rewrites the checkpoint's model weights with `name` multiplied by `factor` (NaN, Infinity). */
function poison(checkpointDir: string, name: string, factor: number): void {
  const file = join(checkpointDir, 'model', 'model.safetensors');
  const tensors = torch.loadSafetensors(file);
  const original = tensors.get(name);
  assert.ok(original !== undefined, `no tensor ${name} in ${[...tensors.keys()].join(', ')}`);
  tensors.set(name, original.mul(factor));
  torch.saveSafetensors(file, Object.fromEntries(tensors));
  for (const t of tensors.values()) t.dispose();
  original.dispose();
}

describe('resuming from a checkpoint with non-finite weights', () => {
  test('is refused, naming the checkpoint and the tensor; a finite one resumes', async () => {
    const jobDir = join(job.work, 'job');
    const { trainer } = await TrainerClient.start(init(jobDir, false));
    let checkpointDir: string;
    try {
      await trainer.step(job.batch);
      checkpointDir = await trainer.save(1, {}, 0);
    } finally {
      await trainer.close();
    }
    const resumed = await TrainerClient.start(init(jobDir, true));
    assert.equal(resumed.start.step, 1);
    await resumed.trainer.close();

    const name = 'model.norm.weight';
    poison(checkpointDir, name, Number.NaN);
    const refused = await TrainerClient.start(init(jobDir, true)).then(
      async (started) => {
        await started.trainer.close(); // a trainer that resumed: closed, so that the failing test ends
        return null;
      },
      (error: Error) => error.message,
    );
    assert.ok(refused !== null, 'the trainer resumed from NaN weights');
    assert.match(refused, /the checkpoint's weights are not finite/);
    assert.ok(refused.includes(checkpointDir), refused);
    assert.ok(refused.includes(`${name} holds NaN or Inf`), refused);
  });
});
