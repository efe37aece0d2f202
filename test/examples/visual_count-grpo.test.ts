// examples/visual_count/grpo.yaml in a shortened form: SFT on the rendered images stops early (trainer.stop_when on
// held-out greedy accuracy, evaluated on the rollout engine with the images as chat content parts), then GRPO in mode
// both: the explorer's vision-language engine samples answers to image prompts, the exact verifier rewards the right
// count, the trainer trains the image rows (their pixels through the vision tower) and the weights sync back to the
// engine. On the example's data with fewer steps (SFT at most 150, GRPO 70 of 120), the GRPO stage's sampled reward
// rises: its last 10 steps' mean beats its first 10 steps' by 0.05 or more (metrics.jsonl's rollout/reward/mean; the
// example's run: 0.23 -> 0.38) and so does the held-out images' sampled accuracy (mean@8, by 0.1 or more), and no
// rollout fails.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { makeVisualCountData } from '../../examples/visual_count/make-data.js';
import { VISUAL_COUNT_MODEL } from '../../examples/visual_count/make-model.js';
import { initVisionLanguageModel } from '../../src/model/index.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { runConfig } from '../../src/rft/run/index.js';
import { oneThreadForRuns } from '../rft/run/helpers.js';

const example = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples', 'visual_count');
const GRPO_STEPS = 70;
let root = '';
let restoreThreads = () => {};

before(async () => {
  // one thread here and in the run (OMP_NUM_THREADS, read by the run's settings): the fastest on a shared machine
  restoreThreads = oneThreadForRuns();
  root = mkdtempSync(join(tmpdir(), 'visual-count-grpo-'));
  await makeVisualCountData(join(root, 'data'), { seed: 0, train: 2000, heldout: 200 }); // the example's data
  initVisionLanguageModel(join(root, 'model'), { ...VISUAL_COUNT_MODEL, seed: 1 });
});
after(() => {
  restoreThreads();
  rmSync(root, { recursive: true, force: true });
});

/** Each train step's value of `key` in a stage's metrics.jsonl, in step order. */
function stepMetric(file: string, key: string): number[] {
  const rows = readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as Record<string, number>);
  return rows.filter((row) => typeof row[key] === 'number').map((row) => row[key] as number);
}

const mean = (values: readonly number[]): number => values.reduce((a, v) => a + v, 0) / values.length;

test('GRPO after early-stopped SFT on image prompts raises the sampled reward', async (t) => {
  const data = (file: string) => join(root, 'data', file);
  const config = loadConfig(join(example, 'grpo.yaml'), {
    resolveAlgorithm,
    overrides: [
      `checkpoint_root_dir=${join(root, 'runs')}`,
      `model.model_path=${join(root, 'model')}`,
      `buffer.explorer_input.taskset.path=${data('train.jsonl')}`,
      `buffer.explorer_input.eval_tasksets.0.path=${data('heldout.jsonl')}`,
      `buffer.explorer_input.eval_tasksets.1.path=${data('heldout.jsonl')}`,
      `stages.0.buffer.explorer_input.eval_tasksets.0.path=${data('heldout.jsonl')}`,
      `buffer.total_steps=${GRPO_STEPS}`,
      `explorer.eval_interval=${GRPO_STEPS}`, // GRPO evaluates before and after; SFT every 10 steps (stop_when)
      'stages.0.buffer.total_steps=150',
      `stages.0.buffer.trainer_input.experience_buffer.path=${data('train.jsonl')}`,
    ],
  });
  const result = await runConfig(config, { log: () => {} });
  assert.equal(result.stages.length, 2);
  const [sft, grpo] = result.stages;
  assert.ok(sft !== undefined && grpo !== undefined);
  assert.ok(sft.steps < 150, `SFT ran ${sft.steps} steps: stop_when should end it before its 150`);
  assert.equal(grpo.steps, GRPO_STEPS);
  const metrics = join(root, 'runs', 'visual_count', 'sft_grpo', 'grpo', 'metrics.jsonl');
  const rewards = stepMetric(metrics, 'rollout/reward/mean');
  assert.equal(rewards.length, GRPO_STEPS);
  const failed = stepMetric(metrics, 'rollout/runs/failed');
  assert.equal(mean(failed), 0, 'every rollout of an image prompt succeeds');
  const first = mean(rewards.slice(0, 10));
  const last = mean(rewards.slice(-10));
  const heldout = stepMetric(metrics, 'eval/heldout/mean@1');
  const sampled = stepMetric(metrics, 'eval/heldout_sampled/mean@8'); // before GRPO and after its last step
  t.diagnostic(
    `SFT ${sft.steps} steps; GRPO reward ${first.toFixed(3)} -> ${last.toFixed(3)}; held-out greedy ${heldout.join(' ')}, ` +
      `mean@8 ${sampled.join(' ')}`,
  );
  assert.ok(last >= first + 0.05, `GRPO's sampled reward ${first.toFixed(3)} (first 10 steps) -> ${last.toFixed(3)} (last 10)`);
  // the held-out images' sampled accuracy rises with it (the example's run: 0.200 -> 0.429 at step 70)
  assert.equal(sampled.length, 2);
  assert.ok((sampled[1] as number) >= (sampled[0] as number) + 0.1, `held-out mean@8 ${sampled.join(' -> ')}`);
});
