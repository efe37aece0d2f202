// examples/frozen_lake in a shortened form: the example's config.yaml (its workflow, workflow_args, algorithms and
// stages) and its data generator (make-data.ts: ε-greedy demonstrations, kept whether they reach the goal or not) on
// a tiny model, 3x3 maps and a few steps. SFT teaches the format and the moves, with the demonstrator's random moves;
// GRPO on the environment must then raise the success rate of the policy as it acts (sampling at temperature 1) on
// the maps it trains on: the rollouts' success rate over the last 4 of 12 steps by at least 0.08 over the first 4,
// and the sampled eval on those maps after GRPO above the one after SFT. SFT leaves the demonstrator's random moves
// in the policy and GRPO removes many of them, a margin float rounding (CPU kind) should not decide; the test fixes
// the intra-op threads at 1.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { makeFrozenLakeData } from '../../examples/frozen_lake/make-data.js';
import { initModel } from '../../src/model/index.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { writeJsonlSets } from '../../src/rft/buffer/index.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { runConfig } from '../../src/rft/run/index.js';
import { FROZEN_LAKE_SYSTEM_PROMPT } from '../../src/rft/workflow/index.js';
import * as torch from '../../src/torch/index.js';

const example = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples', 'frozen_lake');
let root: string;
let threads: number;

before(async () => {
  threads = torch.getNumThreads();
  torch.setNumThreads(1);
  root = mkdtempSync(join(tmpdir(), 'frozen-lake-learns-'));
  const alphabet = [...new Set(`${FROZEN_LAKE_SYSTEM_PROMPT}P_OG\nUpDownLeftRight`)].join('');
  initModel(join(root, 'model'), { hiddenSize: 64, numLayers: 2, numHeads: 4, maxPositionEmbeddings: 320, seed: 0, alphabet });
  const data = await makeFrozenLakeData({
    size: 3,
    p: 0.8,
    corners: true,
    expert: 'optimal',
    epsilon: 0.5, // noisier than the example's 0.25: on 3x3 maps a random move costs less
    maxSteps: 6,
    train: 8,
    eval: 8,
    sft: 400,
  });
  // GRPO trains and is measured on the same maps: the check is that the reward on them rises
  writeJsonlSets(root, { sft: data.sft, train: data.train, eval: data.train });
});
after(() => {
  torch.setNumThreads(threads);
  rmSync(root, { recursive: true, force: true });
});

describe('examples/frozen_lake, shortened', () => {
  it('GRPO raises the success rate the SFT model reaches on the maps it trains on', async () => {
    const args = (taskset: string) => [`${taskset}.workflow_args.size=3`, `${taskset}.workflow_args.max_steps=6`];
    const config = loadConfig(join(example, 'config.yaml'), {
      resolveAlgorithm,
      overrides: [
        `checkpoint_root_dir=${join(root, 'runs')}`,
        `model.model_path=${join(root, 'model')}`,
        'model.max_prompt_tokens=300',
        `buffer.explorer_input.taskset.path=${join(root, 'train.jsonl')}`,
        ...args('buffer.explorer_input.taskset'),
        ...[0, 1].flatMap((i) => [
          `buffer.explorer_input.eval_tasksets.${i}.path=${join(root, 'eval.jsonl')}`,
          ...args(`buffer.explorer_input.eval_tasksets.${i}`),
        ]),
        'buffer.explorer_input.eval_tasksets.1.repeat_times=8',
        'buffer.total_steps=12',
        'explorer.eval_interval=12',
        'algorithm.optimizer.lr=0.001',
        'trainer.save_interval=0',
        'monitor.monitor_type=[jsonl]',
        'stages.0.mode=bench', // the base bench: only its own (greedy) taskset, on the test's maps
        `stages.0.buffer.explorer_input.eval_tasksets.0.path=${join(root, 'eval.jsonl')}`,
        ...args('stages.0.buffer.explorer_input.eval_tasksets.0'),
        `stages.1.buffer.trainer_input.experience_buffer.path=${join(root, 'sft.jsonl')}`,
        'stages.1.buffer.total_steps=60',
        'stages.1.algorithm.optimizer.lr=0.01', // a tiny model learns the format in fewer steps at a higher rate
      ],
    });
    const result = await runConfig(config, { log: () => {} });
    assert.ok(result.finalModelDir);
    const rows = readFileSync(join(root, 'runs', 'frozen_lake', 'grid', 'grpo', 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, number>);
    // the reward of the episodes GRPO trains on: the first 4 steps (the SFT policy and its first updates) against the
    // last 4 (256 episodes each)
    const success = rows
      .filter((r) => typeof r['rollout/success/mean'] === 'number')
      .map((r) => r['rollout/success/mean'] as number);
    assert.equal(success.length, 12);
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const [first, last] = [mean(success.slice(0, 4)), mean(success.slice(-4))];
    assert.ok(last >= first + 0.08, `rollout success rate: first 4 steps ${first}, last 4 steps ${last}`);
    // and the policy evaluated on the same maps (8 attempts each at temperature 1) after SFT and after GRPO
    const sampled = rows.filter((r) => typeof r['eval/eval_sampled/mean@8'] === 'number');
    assert.deepEqual(
      sampled.map((r) => r.step),
      [0, 12],
    );
    const [afterSft, afterGrpo] = sampled.map((r) => r['eval/eval_sampled/mean@8'] as number) as [number, number];
    assert.ok(afterGrpo > afterSft, `success rate sampled: after SFT ${afterSft}, after GRPO ${afterGrpo}`);
  });

  it('the committed data is what make-data.ts writes with its defaults', async () => {
    const data = await makeFrozenLakeData({
      size: 4,
      p: 0.8,
      corners: true,
      expert: 'optimal',
      epsilon: 0.25,
      maxSteps: 8,
      train: 4000,
      eval: 100,
      sft: 2000,
    });
    for (const [set, rows] of Object.entries(data)) {
      const file = readFileSync(join(example, 'data', `${set}.jsonl`), 'utf8');
      assert.equal(file, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`, `${set}.jsonl is stale: rerun make-data.ts`);
    }
  });
});
