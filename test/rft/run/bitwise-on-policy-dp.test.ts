// trainer.bitwise_on_policy under data parallelism: `trinity run --nproc-per-node 2` (CPU, Gloo) of the tiny GRPO job
// with the old log-probs recomputed, micro-batches of 2 rows (a step's 8 rows: 2 micro-batches on each rank). Each
// rank's forward is batch-invariant, so the recomputed old log-probs equal the sampler's (rollout_corr/kl exactly 0);
// the rows are in canonical order before rank 0 shards them, each rank sums its micro-batches in that order, and the
// all-reduce adds two ranks' sums (x + y, the same bits either way round), so two runs with the same seed, another
// engine_num and another arrival order end with bit-identical weights. Real processes, OMP_NUM_THREADS=1 (what 2 ranks
// on this 2-core machine get anyway; set so the two runs compute on one count wherever they run); every wait is on a
// process exit.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as torch from '../../../src/torch/index.js';
import { runProcess } from '../../helpers/run-process.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

const ALGORITHM = `algorithm:
  algorithm_type: grpo
  repeat_times: 4
  bypass_old_logprobs: false
  optimizer:
    lr: 0.001`;

/** A 3-step bitwise run on 2 ranks with `sets`: its metrics and the final weights' bytes by name. */
async function twoRankRun(sets: string[]): Promise<{ metrics: Record<string, number>[]; weights: Map<string, number[]> }> {
  const { configFile, jobDir } = makeJob({ totalSteps: 3, saveInterval: 100, algorithm: ALGORITHM });
  const args = ['trainer.bitwise_on_policy=true', 'trainer.micro_batch_size=2', ...sets].flatMap((s) => ['--set', s]);
  const run = await runProcess(process.execPath, [trinity, 'run', '--config', configFile, ...args, '--nproc-per-node', '2'], {
    env: { ...process.env, OMP_NUM_THREADS: '1' },
    guard: { seconds: 540, what: 'trinity run --nproc-per-node 2 (bitwise_on_policy)' },
  });
  assert.equal(run.code, 0, run.output);
  assert.match(run.output, /\[rank1\]: \[run\] rank 1: rank 0 ended the stage; trained 3 steps from step 0/);
  const metrics = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
  const tensors = torch.loadSafetensors(join(jobDir, 'final_model', 'model.safetensors'));
  const weights = new Map([...tensors].map(([name, t]) => [name, Array.from(t.toTypedArray() as Float32Array)]));
  for (const t of tensors.values()) t.dispose();
  return { metrics, weights };
}

test('bitwise_on_policy on 2 ranks: rollout_corr/kl 0 every step; two runs end with bit-identical weights', {
  timeout: 1_200_000,
}, async (t) => {
  if (!torch.packedLinearSupported()) return t.skip('needs a CPU with AVX2/FMA');
  const first = await twoRankRun(['explorer.rollout_model.engine_num=1', 'explorer.runner_per_model=4']);
  assert.deepEqual(
    first.metrics.map((m) => m.step),
    [1, 2, 3],
  );
  for (const m of first.metrics) {
    assert.equal(m['actor/rollout_corr/kl'], 0, `step ${m.step}: rollout_corr/kl`);
    assert.equal(m['actor/rollout_corr/abs_logprob_diff'], 0, `step ${m.step}: rollout_corr/abs_logprob_diff`);
  }
  const second = await twoRankRun(['explorer.rollout_model.engine_num=2', 'explorer.runner_per_model=3']);
  assert.deepEqual(
    second.metrics.map((m) => m['rollout/reward/mean']),
    first.metrics.map((m) => m['rollout/reward/mean']),
  );
  assert.deepEqual([...second.weights.keys()].sort(), [...first.weights.keys()].sort());
  let unequal = 0;
  for (const [name, w] of first.weights) {
    const other = second.weights.get(name) as number[];
    unequal += w.filter((x, i) => !Object.is(x, other[i])).length;
  }
  assert.equal(unequal, 0, `${unequal} weights differ between the two runs`);
});
