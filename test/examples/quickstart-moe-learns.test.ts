// The quickstart on a mixture of experts, shortened: examples/quickstart/config.yaml (base bench, SFT until held-out
// greedy accuracy reaches a threshold, then GRPO with an exact verifier reward) with router replay on, on a tiny random
// qwen3_moe and one-digit addition (make-data.ts with max 10: "3+4=" → "07"; 20 held out, 40 demonstrations). SFT
// stops at 30% held-out accuracy; GRPO then samples the 40 demonstrated problems at temperature 1 (16 problems × 16
// samples a step, 24 steps) and must raise the reward of the rollouts it trains on: the mean of the last 6 steps at
// least 0.05 above the first 6's (measured: 0.66 → 0.79; a step's mean varies by about ±0.05). Every row trains
// through the experts its rollout chose (router_replay/rows = 1), and with the trainer routing as the engine did, its
// log-probs equal the engine's (rollout_corr/abs_logprob_diff, float32: below 1e-4; measured ~2e-7). The test fixes
// the intra-op threads at 1.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { makeAdditionData } from '../../examples/quickstart/make-data.js';
import { initModel } from '../../src/model/index.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { writeJsonlSets } from '../../src/rft/buffer/index.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { runConfig } from '../../src/rft/run/index.js';
import * as torch from '../../src/torch/index.js';

const example = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples', 'quickstart');
let root: string;
let threads: number;

before(() => {
  threads = torch.getNumThreads();
  torch.setNumThreads(1);
  root = mkdtempSync(join(tmpdir(), 'quickstart-moe-'));
  initModel(join(root, 'model'), {
    architecture: 'qwen3_moe',
    hiddenSize: 64,
    numLayers: 2,
    numHeads: 4,
    numExperts: 4,
    numExpertsPerTok: 2,
    maxPositionEmbeddings: 32,
    seed: 0,
    alphabet: '0123456789+=',
  });
  writeJsonlSets(root, makeAdditionData(0, 10, 20, 40)); // 20 held out, 40 demonstrations, 40 GRPO problems
});
after(() => {
  torch.setNumThreads(threads);
  rmSync(root, { recursive: true, force: true });
});

const lines = (stage: string) =>
  readFileSync(join(root, 'runs', 'quickstart', 'addition', stage, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, number>);

/** The values of the metric whose name is or ends with `/key`, per line that has it. */
const series = (rows: Record<string, number>[], key: string) =>
  rows.flatMap((r) =>
    Object.entries(r)
      .filter(([name, value]) => (name === key || name.endsWith(`/${key}`)) && typeof value === 'number')
      .map(([, value]) => value),
  );

test('examples/quickstart on a tiny qwen3_moe with router replay: GRPO raises the reward', async () => {
  const config = loadConfig(join(example, 'config.yaml'), {
    resolveAlgorithm,
    overrides: [
      `checkpoint_root_dir=${join(root, 'runs')}`,
      `model.model_path=${join(root, 'model')}`,
      'algorithm.enable_router_replay=true',
      `buffer.explorer_input.taskset.path=${join(root, 'sft.jsonl')}`, // GRPO sharpens what SFT began
      ...[0, 1].map((i) => `buffer.explorer_input.eval_tasksets.${i}.path=${join(root, 'eval.jsonl')}`),
      'buffer.batch_size=16',
      'buffer.total_steps=24',
      'algorithm.repeat_times=16',
      'algorithm.optimizer.lr=0.001',
      'buffer.explorer_input.taskset.rollout_args.temperature=1',
      'algorithm.optimizer.lr_warmup_steps=0',
      'explorer.eval_interval=24',
      'trainer.save_interval=0',
      'monitor.monitor_type=[jsonl]',
      `stages.0.buffer.explorer_input.eval_tasksets.0.path=${join(root, 'eval.jsonl')}`,
      `stages.1.buffer.trainer_input.experience_buffer.path=${join(root, 'sft.jsonl')}`,
      `stages.1.buffer.explorer_input.eval_tasksets.0.path=${join(root, 'eval.jsonl')}`,
      'stages.1.buffer.train_batch_size=20',
      'stages.1.buffer.total_steps=200',
      'stages.1.algorithm.optimizer.lr=0.01',
      'stages.1.algorithm.optimizer.lr_warmup_steps=0',
      'stages.1.trainer.save_interval=0',
      'stages.1.trainer.stop_when.at_least=0.3',
    ],
  });
  const result = await runConfig(config, { log: () => {} });
  assert.ok(result.finalModelDir);
  const grpo = lines('grpo');
  const reward = series(grpo, 'rollout/reward/mean');
  assert.equal(reward.length, 24);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const [first, last] = [mean(reward.slice(0, 6)), mean(reward.slice(-6))];
  assert.ok(last >= first + 0.05, `rollout reward: first 4 steps ${first}, last 4 steps ${last}`);
  assert.deepEqual(series(grpo, 'router_replay/rows'), Array(24).fill(1));
  const gap = series(grpo, 'rollout_corr/abs_logprob_diff');
  assert.equal(gap.length, 24);
  assert.ok(Math.max(...gap) < 1e-4, `train/rollout log-prob gap with replay: ${gap.join(', ')}`);
});
