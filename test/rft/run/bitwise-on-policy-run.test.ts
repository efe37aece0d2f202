// trainer.bitwise_on_policy in real GRPO runs (mode both, tiny random model, the old log-probs recomputed:
// algorithm.bypass_old_logprobs false): the trainer's log-probs equal the sampler's, so rollout_corr/kl and
// rollout_corr/abs_logprob_diff are exactly 0 (and the first update's ratio exactly 1) at every step; and two runs with
// the same seed but another engine_num and runner_per_model (other batch companions and arrival order in the engines)
// sample the same bits and end with bit-identical weights. The runs leave the thread count to the run (the machine's
// cores): the engines' workers set the process's count when they start, and the trainer sets its own again before
// each step (src/rft/trainer/trainer-threads.ts; without that the engine_num 2 run trained with the engines' count and
// ended 52 weights apart after one step on a 2-core machine). With LoRA (the engine samples with the merged weights
// each sync sends it), with the rows packed without pads (trainer.use_remove_padding true) and with a mixture of
// experts, the old log-probs equal the sampler's too.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { ModelInitOptions } from '../../../src/model/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import type { Experience } from '../../../src/rft/experience.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import * as torch from '../../../src/torch/index.js';
import { makeJob } from './helpers.js';

const ALGORITHM = `algorithm:
  algorithm_type: grpo
  repeat_times: 4
  bypass_old_logprobs: false
  optimizer:
    lr: 0.001`;

interface RunResult {
  metrics: Record<string, number>[];
  rollouts: { tokens: number[]; logprobs: number[] }[];
  weights: Map<string, torch.Tensor>;
}

/**
 * A 3-step bitwise run with `overrides` (and `model`: `trinity model init` options): its metrics, rollouts (by step,
 * task, sample) and final weights.
 */
async function bitwiseRun(overrides: string[], model?: ModelInitOptions): Promise<RunResult> {
  const { root, configFile, jobDir } = makeJob({
    totalSteps: 3,
    saveInterval: 100,
    algorithm: ALGORITHM,
    ...(model ? { model } : {}),
    extra: 'data_processor:\n  experience_pipeline:\n    save_input: true\n    input_save_path: raw.jsonl\n',
  });
  const config = loadConfig(configFile, { resolveAlgorithm, overrides: ['trainer.bitwise_on_policy=true', ...overrides] });
  const result = await runConfig(config, { log: () => {} });
  const lines = (file: string) => readFileSync(file, 'utf8').trim().split('\n');
  const experiences = lines(join(root, 'raw.jsonl')).map((l) => JSON.parse(l) as Experience);
  const key = (e: Experience) => `${e.info.step} ${e.info.taskId} ${String(e.info.runId ?? '')}`;
  experiences.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  return {
    metrics: lines(join(jobDir, 'metrics.jsonl')).map((l) => JSON.parse(l) as Record<string, number>),
    rollouts: experiences.map((e) => ({ tokens: [...e.tokens], logprobs: [...(e.logprobs ?? [])] })),
    weights: torch.loadSafetensors(join(result.finalModelDir as string, 'model.safetensors')),
  };
}

describe('trainer.bitwise_on_policy in GRPO runs', { timeout: 600_000 }, () => {
  let first: RunResult;

  test('the recomputed old log-probs equal the rollout log-probs: rollout_corr/kl and abs_logprob_diff are 0', async (t) => {
    if (!torch.packedLinearSupported()) return t.skip('needs a CPU with AVX2/FMA');
    first = await bitwiseRun(['explorer.rollout_model.engine_num=1', 'explorer.runner_per_model=4']);
    assert.equal(first.metrics.length, 3);
    for (const m of first.metrics) {
      assert.equal(m['actor/rollout_corr/kl'], 0, `step ${m.step}: rollout_corr/kl`);
      assert.equal(m['actor/rollout_corr/abs_logprob_diff'], 0, `step ${m.step}: rollout_corr/abs_logprob_diff`);
      // one micro-batch, one epoch: the policy being trained is the recomputed old policy, ratio exactly 1
      assert.equal(m['actor/policy/ratio_mean'], 1, `step ${m.step}: ratio_mean`);
      assert.equal(m['actor/ppo_kl'], 0, `step ${m.step}: ppo_kl`);
    }
  });

  test('another engine_num and arrival order: the same samples and bit-identical weights', async (t) => {
    if (!torch.packedLinearSupported() || first === undefined) return t.skip('needs the first run');
    const second = await bitwiseRun(['explorer.rollout_model.engine_num=2', 'explorer.runner_per_model=3']);
    assert.deepEqual(second.rollouts, first.rollouts);
    assert.deepEqual([...second.weights.keys()].sort(), [...first.weights.keys()].sort());
    for (const [name, w] of first.weights) {
      const other = second.weights.get(name) as torch.Tensor;
      assert.deepStrictEqual(
        Array.from(other.toTypedArray() as Float32Array),
        Array.from(w.toTypedArray() as Float32Array),
        name,
      );
    }
  });

  test('rows packed without pads (use_remove_padding true): rollout_corr/kl and abs_logprob_diff are 0', async (t) => {
    if (!torch.packedLinearSupported()) return t.skip('needs a CPU with AVX2/FMA');
    const run = await bitwiseRun(['trainer.use_remove_padding=true', 'explorer.rollout_model.engine_num=1']);
    assert.equal(run.metrics.length, 3);
    for (const m of run.metrics) {
      assert.equal(m['actor/rollout_corr/kl'], 0, `step ${m.step}: rollout_corr/kl`);
      assert.equal(m['actor/rollout_corr/abs_logprob_diff'], 0, `step ${m.step}: rollout_corr/abs_logprob_diff`);
      assert.equal(m['actor/policy/ratio_mean'], 1, `step ${m.step}: ratio_mean`);
    }
  });

  test('a mixture of experts (qwen2_moe, top 3 of 6 and a shared expert): rollout_corr/kl is 0', async (t) => {
    if (!torch.packedLinearSupported()) return t.skip('needs a CPU with AVX2/FMA');
    const moe = { architecture: 'qwen2_moe', numExperts: 6, numExpertsPerTok: 3 } as const;
    const run = await bitwiseRun(['explorer.rollout_model.engine_num=1'], moe);
    assert.equal(run.metrics.length, 3);
    for (const m of run.metrics) {
      assert.equal(m['actor/rollout_corr/kl'], 0, `step ${m.step}: rollout_corr/kl`);
      assert.equal(m['actor/rollout_corr/abs_logprob_diff'], 0, `step ${m.step}: rollout_corr/abs_logprob_diff`);
      assert.equal(m['actor/policy/ratio_mean'], 1, `step ${m.step}: ratio_mean`);
    }
  });

  test('LoRA: the old log-probs equal the rollout log-probs at every step', async (t) => {
    if (!torch.packedLinearSupported()) return t.skip('needs a CPU with AVX2/FMA');
    const run = await bitwiseRun(['model.lora={rank: 4, alpha: 8}', 'explorer.rollout_model.engine_num=1']);
    assert.equal(run.metrics.length, 3);
    for (const m of run.metrics) {
      assert.equal(m['actor/rollout_corr/kl'], 0, `step ${m.step}: rollout_corr/kl`);
      assert.equal(m['actor/rollout_corr/abs_logprob_diff'], 0, `step ${m.step}: rollout_corr/abs_logprob_diff`);
      assert.equal(m['actor/policy/ratio_mean'], 1, `step ${m.step}: ratio_mean`);
    }
    // the adapters were trained (a zero gradient every step would leave the engine on the base weights)
    assert.ok(
      run.metrics.some((m) => (m['actor/grad_norm'] ?? 0) > 0),
      'some step has a nonzero gradient',
    );
  });
});
