// gigpo over a module-path workflow that writes no info.env_state_hash: config check cannot know what the workflow
// writes, so the run starts, and its first train step says (once) that the batch has no state hash and every
// step-level advantage is 0 (src/rft/run/stage-parts.ts, missingStateKeyWarning).
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { ProgressReporter } from '../../../src/rft/monitor/progress.js';
import { loadConfig, resolveStages } from '../../../src/rft/run/config/index.js';
import { stageSettings } from '../../../src/rft/run/config/stage-settings.js';
import { runStage } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

test('gigpo on a module-path workflow without state hashes: the first train step warns, once', async () => {
  const { root, configFile, jobDir } = makeJob({
    totalSteps: 2,
    saveInterval: 2,
    algorithm: 'algorithm:\n  algorithm_type: gigpo\n  repeat_times: 2\n  optimizer:\n    lr: 0.001',
  });
  // one chat call per run: experiences with no info.env_state_hash
  writeFileSync(
    join(root, 'answer.ts'),
    `export const run = async ({ task, model, repeatTimes, seed }) => {
  const result = await model.chat([{ role: 'user', content: task.prompt ?? '' }], { n: repeatTimes, seed });
  return result.choices.map((c) => model.toExperience(c, { reward: c.message.content === task.response ? 1 : 0 }));
};
`,
  );
  writeFileSync(
    configFile,
    readFileSync(configFile, 'utf8').replace('default_workflow_type: simple_workflow', 'default_workflow_type: answer.ts#run'),
  );
  const [stage] = resolveStages(loadConfig(configFile, { resolveAlgorithm }));
  assert.ok(stage);
  const settings = stageSettings(stage, stage.model.model_path, root, null);
  const sink = new PassThrough();
  let printed = '';
  sink.on('data', (chunk: Buffer) => {
    printed += chunk.toString();
  });
  const progress = new ProgressReporter({ label: 'gigpo', total: 2, stream: sink, live: false });
  await runStage(settings, { progress, log: (line) => progress.log(line) });
  const warnings = printed.split('\n').filter((line) => line.includes('has info.env_state_hash'));
  assert.equal(warnings.length, 1, printed);
  assert.match(
    warnings[0] ?? '',
    /^\[\w+\] train step 1: advantage_fn 'gigpo': none of the 4 experiences of this batch has info\.env_state_hash, so no two steps share an anchor state and every step-level advantage is 0 \(anchor_groups_total 0\)/,
  );
  // the metric says the same
  const firstStep = JSON.parse(readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8').split('\n')[0] ?? '{}');
  const anchors = Object.entries(firstStep).find(([key]) => key.endsWith('gigpo/anchor_groups_total'));
  assert.deepEqual(anchors?.[1], 0);
});
