// The grid examples' shortened learning runs (frozen_lake-learns, sokoban-learns), one piece for both: an example's
// own config.yaml (its workflow, algorithms and stages) on a tiny random model with the test's data, a few SFT and
// GRPO steps, pinned to one thread (oneThreadForRuns), GRPO trained and measured on the same small set of tasks.
// checkGrpoRaisesSuccess then asserts what the examples claim at full size: GRPO raises the success rate of the
// sampled policy over the SFT model's, both in the rollouts it trains on (at the config's training temperature: the
// mean over the last `window` of its steps against the first) and in the sampled eval (temperature 1) after GRPO
// against the one after SFT.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { initModel } from '../../src/model/index.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { writeJsonlSets } from '../../src/rft/buffer/index.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { runConfig } from '../../src/rft/run/index.js';

export const examplesDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples');

export interface ShortenedRun {
  /** The example's folder under examples/; its config.yaml has eval tasksets [greedy, sampled] and stages [bench, sft, grpo]. */
  example: string;
  /** The config's project and name: the GRPO stage's metrics are at runs/<project>/<name>/grpo. */
  job: { project: string; name: string };
  root: string;
  /** Every character the model must read or write (the tiny model's character vocabulary). */
  alphabet: string;
  maxPositions: number;
  data: { sft: object[]; train: object[] };
  /** workflow_args set on the training taskset, both eval tasksets and the base bench's. */
  workflowArgs: Record<string, number>;
  sftSteps: number;
  grpoSteps: number;
  /** Attempts per task of the sampled eval. */
  sampledRepeats: number;
  /** Further --set overrides (a tiny model's rates, prompt length). */
  overrides: string[];
}

/** Runs the example shortened (see the header) and returns the GRPO stage's metric rows. */
export async function runShortenedExample(run: ShortenedRun): Promise<Record<string, number>[]> {
  const { root } = run;
  initModel(join(root, 'model'), {
    hiddenSize: 64,
    numLayers: 2,
    numHeads: 4,
    maxPositionEmbeddings: run.maxPositions,
    seed: 0,
    alphabet: [...new Set(run.alphabet)].join(''),
  });
  // GRPO trains and is measured on the same tasks: the check is that the reward on them rises
  writeJsonlSets(root, { sft: run.data.sft, train: run.data.train, eval: run.data.train });
  const args = (taskset: string) =>
    Object.entries(run.workflowArgs).map(([key, value]) => `${taskset}.workflow_args.${key}=${value}`);
  const config = loadConfig(join(examplesDir, run.example, 'config.yaml'), {
    resolveAlgorithm,
    overrides: [
      `checkpoint_root_dir=${join(root, 'runs')}`,
      `model.model_path=${join(root, 'model')}`,
      `buffer.explorer_input.taskset.path=${join(root, 'train.jsonl')}`,
      ...args('buffer.explorer_input.taskset'),
      ...[0, 1].flatMap((i) => [
        `buffer.explorer_input.eval_tasksets.${i}.path=${join(root, 'eval.jsonl')}`,
        ...args(`buffer.explorer_input.eval_tasksets.${i}`),
      ]),
      `buffer.explorer_input.eval_tasksets.1.repeat_times=${run.sampledRepeats}`,
      `buffer.total_steps=${run.grpoSteps}`,
      `explorer.eval_interval=${run.grpoSteps}`,
      'trainer.save_interval=0',
      'monitor.monitor_type=[jsonl]',
      `stages.0.buffer.explorer_input.eval_tasksets.0.path=${join(root, 'eval.jsonl')}`,
      ...args('stages.0.buffer.explorer_input.eval_tasksets.0'),
      `stages.1.buffer.trainer_input.experience_buffer.path=${join(root, 'sft.jsonl')}`,
      `stages.1.buffer.total_steps=${run.sftSteps}`,
      ...run.overrides,
    ],
  });
  const result = await runConfig(config, { log: () => {} });
  assert.ok(result.finalModelDir);
  return readFileSync(join(root, 'runs', run.job.project, run.job.name, 'grpo', 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, number>);
}

/**
 * GRPO raised the success rate the SFT model reaches sampled: the rollouts' success rate over the last `window`
 * steps by at least `margin` over the first `window`, and the sampled eval after GRPO above the one after SFT.
 */
export function checkGrpoRaisesSuccess(
  rows: Record<string, number>[],
  { grpoSteps, sampledRepeats, window, margin }: { grpoSteps: number; sampledRepeats: number; window: number; margin: number },
): void {
  const success = rows
    .filter((r) => typeof r['rollout/success/mean'] === 'number')
    .map((r) => r['rollout/success/mean'] as number);
  assert.equal(success.length, grpoSteps);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const [first, last] = [mean(success.slice(0, window)), mean(success.slice(-window))];
  assert.ok(
    last >= first + margin,
    `rollout success rate: first ${window} steps ${first}, last ${window} steps ${last} (per step: ${success.map((x) => x.toFixed(2)).join(' ')})`,
  );
  const key = `eval/eval_sampled/mean@${sampledRepeats}`;
  const sampled = rows.filter((r) => typeof r[key] === 'number');
  assert.deepEqual(
    sampled.map((r) => r.step),
    [0, grpoSteps],
  );
  const [afterSft, afterGrpo] = sampled.map((r) => r[key] as number) as [number, number];
  assert.ok(afterGrpo > afterSft, `success rate sampled: after SFT ${afterSft}, after GRPO ${afterGrpo}`);
}
