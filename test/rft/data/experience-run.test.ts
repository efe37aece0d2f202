// A real `trinity run` (tiny random model, GRPO, mode both) with data_processor.experience_pipeline:
// reward_std_filter then reward_shaping_mapper. The raw experiences are saved (save_input); from them the test
// recomputes by hand what the pipeline must keep and how it shapes the rewards, and checks that each train step
// received exactly those experiences (its count and its mean reward).
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from '../run/helpers.js';

test('reward_std_filter + reward_shaping_mapper in a run: the trainer receives exactly the kept, shaped experiences', async () => {
  const steps = 4;
  const { root, configFile, jobDir } = makeJob({
    totalSteps: steps,
    saveInterval: 100,
    extra: `data_processor:
  experience_pipeline:
    operators:
      - {name: reward_std_filter, args: {threshold: 0}}
      - {name: reward_shaping_mapper, args: {reward_shaping_configs: [{stats_key: length, op_type: ADD, weight: 0.25}]}}
    save_input: true
    input_save_path: raw.jsonl
`,
  });
  // a reward that is often equal within a group (so whole groups are dropped) and a statistic to shape with
  writeFileSync(
    join(root, 'reward.ts'),
    `export const score = ({ response }: { response: string }) => ({
  reward: response.includes('7') ? 1 : 0,
  metrics: { length: response.length },
});
`,
  );
  writeFileSync(configFile, readFileSync(configFile, 'utf8').replace('accuracy_reward', `${join(root, 'reward.ts')}#score`));
  await runConfig(loadConfig(configFile, { resolveAlgorithm }), { log: () => {} });

  const raw = readFileSync(join(root, 'raw.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Experience);
  const metrics = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
  assert.equal(metrics.length, steps);
  let keptTotal = 0;
  let droppedTotal = 0;
  for (const m of metrics) {
    const step = m.step as number;
    const input = raw.filter((e) => e.info.step === step);
    assert.equal(input.length, 8, `step ${step}: 2 tasks × 4 responses saved raw`);
    // by hand: groups (task) whose rewards all agree are dropped (np.std = 0 ≤ 0); the rest get r + 0.25·length
    const byTask = new Map<string, Experience[]>();
    for (const e of input) byTask.set(e.info.taskId as string, [...(byTask.get(e.info.taskId as string) ?? []), e]);
    const kept = [...byTask.values()].filter((g) => new Set(g.map((e) => e.reward)).size > 1).flat();
    const shaped = kept.map((e) => (e.reward as number) + 0.25 * (e.metrics?.length as number));
    keptTotal += kept.length;
    droppedTotal += input.length - kept.length;
    assert.equal(m['experience_pipeline/input'], 8);
    assert.equal(m['experience_pipeline/reward_std_filter/kept'], kept.length, `step ${step}: filter kept`);
    assert.equal(m['experience_pipeline/reward_std_filter/dropped'], 8 - kept.length);
    assert.equal(m['experience_pipeline/reward_shaping_mapper/kept'], kept.length);
    assert.ok(m['experience_pipeline/reward_std_filter/seconds'] !== undefined);
    // the trainer's batch: exactly the kept experiences, with the shaped rewards (GRPO's reward_mean is their mean)
    assert.equal(m['sample/count'], kept.length, `step ${step}: experiences trained`);
    if (kept.length > 0) {
      const mean = shaped.reduce((a, b) => a + b, 0) / shaped.length;
      assert.ok(Math.abs((m['actor/advantage/reward_mean'] as number) - mean) < 1e-5, `step ${step}: shaped reward mean`);
    }
  }
  // the run exercised both sides of the filter (the model and sampling are seeded, so this run is the same every time)
  assert.ok(keptTotal > 0 && droppedTotal > 0, `kept ${keptTotal}, dropped ${droppedTotal}`);
});
