// A step-wise run whose buffer.train_batch_size is more than one explore step makes (frozen_lake_workflow in
// workflow_args.experience_mode step, sync_offset 0): the trainer waits for experiences while the explorer waits for
// that train step's weights. The run stops at once with an error naming the keys (src/rft/run/explorer-trainer-wait.ts)
// instead of waiting max_read_timeout (1800 s by default, kept here).
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { initModel } from '../../../src/model/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig, resolveStages } from '../../../src/rft/run/config/index.js';
import { stageSettings } from '../../../src/rft/run/config/stage-settings.js';
import { ExplorerTrainerWait } from '../../../src/rft/run/explorer-trainer-wait.js';
import { runStage } from '../../../src/rft/run/index.js';
import type { StageSettings } from '../../../src/rft/settings.js';
import { makeJob } from './helpers.js';

test('step-wise run with train_batch_size above one explore step: a named error, not a wait', async () => {
  const { root, configFile } = makeJob({
    totalSteps: 2,
    saveInterval: 2,
    algorithm: 'algorithm:\n  algorithm_type: multi_step_grpo\n  repeat_times: 2\n  optimizer:\n    lr: 0.001',
  });
  initModel(join(root, 'model'), { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 1 });
  writeFileSync(join(root, 'lake.jsonl'), `${[1, 2].map((seed) => JSON.stringify({ seed, size: 3 })).join('\n')}\n`);
  // 2 maps × 2 episodes × at most 3 moves: an explore step makes 4 to 12 experiences, fewer than 13
  writeFileSync(
    configFile,
    readFileSync(configFile, 'utf8')
      .replace('path: tasks.jsonl', 'path: lake.jsonl\n      workflow_args: {experience_mode: step, max_steps: 3}')
      .replace('batch_size: 2\n', 'batch_size: 2\n  train_batch_size: 13\n')
      .replace('default_workflow_type: simple_workflow', 'default_workflow_type: frozen_lake_workflow')
      .replace('max_prompt_tokens: 24', 'max_prompt_tokens: 200')
      .replace('    default_reward_fn_type: accuracy_reward\n', ''),
  );
  const [stage] = resolveStages(loadConfig(configFile, { resolveAlgorithm }));
  assert.ok(stage);
  const settings = stageSettings(stage, stage.model.model_path, dirname(configFile), null);
  assert.equal(settings.trainBatchSize, 13);
  await assert.rejects(
    runStage(settings, { log: () => {} }),
    /train step 1 waits for buffer\.train_batch_size = 13 experiences and the buffer holds (\d+), while the explorer waits for weights version 1 \(which train step 1 makes\) before explore step 2 \(synchronizer\.sync_style fixed, sync_interval 1, sync_offset 0\): the two would wait on each other\. explore step 1 made \1 experience\(s\) from buffer\.batch_size × repeat_times = 4 rollouts.*Set buffer\.train_batch_size to at most 4/,
  );
});

/** The settings the wait reads: sync_style fixed, batch_size 8 tasks, train_batch_size 400. */
const settings = (offset: number): Pick<StageSettings, 'sync' | 'batchSize' | 'trainBatchSize'> => ({
  sync: { style: 'fixed', interval: 1, offset, timeoutMs: 1000, maxStaleness: null },
  batchSize: 8,
  trainBatchSize: 400,
});

test('the wait is mutual only while the explorer waits for the weights of the train step being filled', () => {
  const wait = new ExplorerTrainerWait(settings(1), 8);
  wait.written(1, 310);
  wait.written(2, 290);
  // sync_offset 1: explore step 2 needs no weights, explore step 3 waits for version 1
  wait.waiting(2);
  assert.equal(wait.explorerWaitsOn(1), null);
  wait.waiting(3);
  const message = wait.explorerWaitsOn(1)?.(600);
  assert.match(
    message ?? '',
    /explore step 1 made 310, explore step 2 made 290 experience\(s\) from buffer\.batch_size × repeat_times = 64 rollouts \(an environment workflow in workflow_args\.experience_mode: step makes one experience per move/,
  );
  assert.match(message ?? '', /the buffer holds 600, while the explorer waits for weights version 1 .*sync_offset 1\)/);
  // train step 2 is not what explore step 3 waits for; nor does anything wait once the weights are there
  assert.equal(wait.explorerWaitsOn(2), null);
  wait.waiting(null);
  assert.equal(wait.explorerWaitsOn(1), null);
  // the styles that never wait for a version are never part of such a wait
  const driven = new ExplorerTrainerWait({ ...settings(0), sync: { ...settings(0).sync, style: 'explorer_driven' } }, 8);
  driven.waiting(2);
  assert.equal(driven.explorerWaitsOn(1), null);
});
