// gigpo in real runs (a tiny random model, a few steps): over frozen_lake_workflow in experience_mode step the steps
// carry info.env_state_hash (in mode episode each episode lists its turns') and the train steps find anchor groups; over a module-path workflow that writes none
// (config check cannot know what it writes, so the run starts) the first train step says, once, that the batch has
// no state hash and every step-level advantage is 0 (src/rft/run/stage-parts.ts, missingStateKeyWarning).
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { initModel } from '../../../src/model/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { ProgressReporter } from '../../../src/rft/monitor/progress.js';
import { loadConfig, resolveStages } from '../../../src/rft/run/config/index.js';
import { stageSettings } from '../../../src/rft/run/config/stage-settings.js';
import { runStage } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

const GIGPO = 'algorithm:\n  algorithm_type: gigpo\n  repeat_times: 2\n  optimizer:\n    lr: 0.001';

/** Runs the job's one stage; what it printed (its progress and log lines) and its metrics rows. */
async function runJob(configFile: string, jobDir: string): Promise<{ printed: string; metrics: Record<string, unknown>[] }> {
  const [stage] = resolveStages(loadConfig(configFile, { resolveAlgorithm }));
  assert.ok(stage);
  const sink = new PassThrough();
  let printed = '';
  sink.on('data', (chunk: Buffer) => {
    printed += chunk.toString();
  });
  const progress = new ProgressReporter({ label: 'gigpo', total: 2, stream: sink, live: false });
  await runStage(stageSettings(stage, stage.model.model_path, dirname(configFile), null), {
    progress,
    log: (line) => progress.log(line),
  });
  const lines = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8').trim().split('\n');
  return { printed, metrics: lines.map((line) => JSON.parse(line) as Record<string, unknown>) };
}

/** The value of the metric whose name ends with `suffix` (the trainer prefixes actor/advantage/). */
const metric = (row: Record<string, unknown> | undefined, suffix: string) =>
  Object.entries(row ?? {}).find(([key]) => key.endsWith(suffix))?.[1];

for (const mode of ['step', 'episode']) {
  test(`gigpo over frozen_lake_workflow in experience_mode ${mode}: every train step finds anchor groups`, async () => {
    const { root, configFile, jobDir } = makeJob({ totalSteps: 2, saveInterval: 2, algorithm: GIGPO });
    // a model whose tokenizer writes the grid (the job's own knows digits only)
    initModel(join(root, 'model'), { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 1 });
    writeFileSync(join(root, 'lake.jsonl'), `${[1, 2].map((seed) => JSON.stringify({ seed, size: 3 })).join('\n')}\n`);
    writeFileSync(
      configFile,
      readFileSync(configFile, 'utf8')
        .replace('path: tasks.jsonl', `path: lake.jsonl\n      workflow_args: {experience_mode: ${mode}, max_steps: 3}`)
        .replace('default_workflow_type: simple_workflow', 'default_workflow_type: frozen_lake_workflow')
        .replace('max_prompt_tokens: 24', 'max_prompt_tokens: 200')
        .replace('    default_reward_fn_type: accuracy_reward\n', ''),
    );
    const { printed, metrics } = await runJob(configFile, jobDir);
    assert.equal(metrics.length, 2);
    for (const row of metrics) {
      // the step experiences of a train batch act from states they share (at least the start of each map)
      assert.ok((metric(row, 'gigpo/anchor_groups_total') as number) > 0, JSON.stringify(row));
      assert.ok((metric(row, 'gigpo/anchor_groups_size_gt1') as number) > 0, JSON.stringify(row));
    }
    assert.doesNotMatch(printed, /has info\.env_state_hash/);
  });
}

test('gigpo on a module-path workflow without state hashes: the first train step warns, once', async () => {
  const { root, configFile, jobDir } = makeJob({
    totalSteps: 2,
    saveInterval: 2,
    algorithm: GIGPO,
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
  const { printed, metrics } = await runJob(configFile, jobDir);
  const warnings = printed.split('\n').filter((line) => line.includes('has info.env_state_hash'));
  assert.equal(warnings.length, 1, printed);
  assert.match(
    warnings[0] ?? '',
    /^\[\w+\] train step 1: advantage_fn 'gigpo': none of the 4 experiences of this batch has info\.env_state_hash, so no two steps share an anchor state and every step-level advantage is 0 \(anchor_groups_total 0\)/,
  );
  // the metric says the same
  assert.equal(metric(metrics[0], 'gigpo/anchor_groups_total'), 0);
});
