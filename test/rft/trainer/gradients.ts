// One train step's gradient, for tests that compare two ways of running the same step (micro-batch splits by rows or
// by a token budget, gradient accumulation): a recorder that keeps the accumulated, unclipped gradients instead of
// moving the weights, the step on a fresh copy of the toy policy, and an element-wise comparison that also refuses a
// gradient too small to show a wrong weighting.
import assert from 'node:assert/strict';
import type { CausalLM } from '../../../src/model/transformer.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { frozenCopyReference } from '../../../src/rft/trainer/reference-policy.js';
import { TrainStep, type TrainStepSetup } from '../../../src/rft/trainer/train-step.js';
import * as torch from '../../../src/torch/index.js';
import { loadPolicy } from './toy.js';

/** An SGD whose step() records the (accumulated, unclipped) gradients instead of moving the weights. */
export class GradientRecorder extends torch.SGD {
  grads: Float32Array[] = [];
  override step(): void {
    this.grads = this.groups.flatMap((g) => g.params).map((p) => p.grad?.float().toTypedArray() as Float32Array);
  }
}

/** The gradient one train step of `algorithmConfig` accumulates on `batch`, the policy loaded from `modelDir`. */
export function stepGradient(
  modelDir: string,
  algorithmConfig: Record<string, unknown>,
  batch: Experience[],
  split: Pick<TrainStepSetup, 'microBatchSize' | 'microBatchTokens' | 'checkpoint'>,
): Float32Array[] {
  const algorithm = resolveAlgorithm(algorithmConfig);
  const model: CausalLM = loadPolicy(modelDir);
  const optimizer = new GradientRecorder([...model.parameters().values()], { lr: 1 });
  const reference = algorithm.useReference ? frozenCopyReference(model) : null;
  try {
    new TrainStep({ model, optimizer, algorithm, reference, maxGradNorm: 1e9, ...split }).run(batch);
    return optimizer.grads;
  } finally {
    reference?.dispose();
    model.dispose();
  }
}

/** Asserts `a` equals `b` element-wise within `tolerance`, and that the gradient is not ~0 (> 1e-3 somewhere). */
export function assertSameGradient(a: Float32Array[], b: Float32Array[], label: string, tolerance: number): void {
  assert.equal(a.length, b.length);
  let largest = 0;
  a.forEach((ga, i) => {
    const gb = b[i] as Float32Array;
    for (let j = 0; j < ga.length; j++) {
      largest = Math.max(largest, Math.abs(ga[j] as number));
      const diff = Math.abs((ga[j] as number) - (gb[j] as number));
      assert.ok(diff <= tolerance, `${label}: parameter ${i}[${j}] ${ga[j]} vs ${gb[j]} (differs by ${diff})`);
    }
  });
  assert.ok(largest > 1e-3, `${label}: the gradient is ~0 (${largest}): the test would not see a wrong weighting`);
}
