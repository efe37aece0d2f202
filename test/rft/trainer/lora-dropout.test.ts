// LoRA dropout in the train step (tiny random model, ./toy.ts): masks are drawn in the policy update's forward and
// backward only, one per adapted projection per micro-batch, and never in the log-probs recomputed for rows without
// rollout log-probs (PPO's old log-probs) or in the reference (adapters disabled); activation checkpointing replays
// them (same update as without); dropout 0 with the adapters in training mode is the eval-mode update exactly.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { LoraModel } from '../../../src/model/lora.js';
import { CausalLM } from '../../../src/model/transformer.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { loraReference } from '../../../src/rft/trainer/reference-policy.js';
import { TrainStep } from '../../../src/rft/trainer/train-step.js';
import * as torch from '../../../src/torch/index.js';
import { rollouts, tinyModelDir } from './toy.js';

torch.setNumThreads(1);
let toy: { dir: string; remove: () => void };
let batch: Experience[];
before(() => {
  toy = tinyModelDir();
  const model = CausalLM.load(toy.dir);
  // half the rows without rollout log-probs: the step recomputes theirs with the current policy
  batch = rollouts(model).map((e, i) => (i % 2 === 0 ? e : { ...e, logprobs: undefined }));
  model.dispose();
});
after(() => toy.remove());

const grpo = resolveAlgorithm({ algorithm_type: 'grpo', optimizer: { lr: 1e-2 } });

interface Options {
  dropout: number;
  /** Give the train step the adapters (false: they stay in eval mode, as before dropout was wired). */
  passLora?: boolean;
  checkpoint?: boolean;
  microBatchSize?: number;
}

/** One GRPO step (KL loss against the adapters-disabled reference) with non-zero adapters; returns metrics and state. */
function loraStep(options: Options) {
  const model = CausalLM.load(toy.dir);
  // initLoraWeights false: B ≠ 0, so dropout reaches the loss and both A's and B's gradients
  const lora = LoraModel.attach(model, {
    r: 4,
    loraAlpha: 8,
    loraDropout: options.dropout,
    targetModules: 'all-linear',
    initLoraWeights: false,
    seed: 1,
    dropoutSeed: 7,
  });
  try {
    const optimizer = new torch.AdamW([...lora.loraParameters().values()], { lr: 1e-2, weightDecay: 0 });
    const step = new TrainStep({
      model,
      ...(options.passLora === false ? {} : { lora }),
      optimizer,
      algorithm: grpo,
      reference: loraReference(lora),
      microBatchSize: options.microBatchSize ?? batch.length,
      ...(options.checkpoint ? { checkpoint: true } : {}),
    });
    const metrics = step.run(batch);
    const weights = new Map([...lora.loraParameters()].map(([name, t]) => [name, t.toTypedArray() as Float32Array]));
    optimizer.dispose();
    return { metrics, weights, draws: lora.randomState().draws, modules: lora.modules.length, training: lora.training };
  } finally {
    lora.dispose();
    model.dispose();
  }
}

function maxDifference(a: Map<string, Float32Array>, b: Map<string, Float32Array>): number {
  let largest = 0;
  for (const [name, x] of a) {
    const y = b.get(name) as Float32Array;
    for (let i = 0; i < x.length; i++) largest = Math.max(largest, Math.abs((x[i] as number) - (y[i] as number)));
  }
  return largest;
}

describe('LoRA dropout in the train step', () => {
  test('masks are drawn in the policy update only (not the old log-probs, not the reference); eval mode after', () => {
    for (const microBatchSize of [batch.length, 3]) {
      const micro = Math.ceil(batch.length / microBatchSize);
      const result = loraStep({ dropout: 0.5, microBatchSize });
      // a recomputation in training mode would add one more forward's masks (old log-probs of the rows without them)
      assert.equal(result.draws, micro * result.modules, `micro-batch size ${microBatchSize}: draws`);
      assert.equal(result.training, false, 'the adapters are left in eval mode');
    }
  });

  test('activation checkpointing replays the masks: the same update as without', () => {
    const plain = loraStep({ dropout: 0.5, microBatchSize: 3 });
    const checkpointed = loraStep({ dropout: 0.5, microBatchSize: 3, checkpoint: true });
    assert.equal(checkpointed.draws, plain.draws);
    for (const [key, value] of Object.entries(plain.metrics)) {
      assert.ok(
        Math.abs(value - (checkpointed.metrics[key] as number)) <= 1e-6,
        `${key}: ${value} vs ${checkpointed.metrics[key]}`,
      );
    }
    const diff = maxDifference(plain.weights, checkpointed.weights);
    assert.ok(diff <= 1e-6, `adapters differ by ${diff}`);
  });

  test('dropout 0 in training mode is the eval-mode update exactly; dropout 0.5 is not', () => {
    const evalMode = loraStep({ dropout: 0, passLora: false });
    const trainMode = loraStep({ dropout: 0 });
    assert.equal(trainMode.draws, 0);
    assert.deepEqual(trainMode.metrics, evalMode.metrics);
    assert.equal(maxDifference(trainMode.weights, evalMode.weights), 0);
    const dropped = loraStep({ dropout: 0.5 });
    assert.ok(
      Math.abs((dropped.metrics.pg_loss as number) - (evalMode.metrics.pg_loss as number)) > 1e-4,
      `dropout 0.5 left the loss at ${dropped.metrics.pg_loss} (no dropout: ${evalMode.metrics.pg_loss})`,
    );
    assert.ok(maxDifference(dropped.weights, evalMode.weights) > 1e-4, 'dropout 0.5 left the update unchanged');
  });
});
