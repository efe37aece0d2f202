// `trinity quickstart`: the run it makes and the job folder its summary and report are read from. A `--set` that
// moves the job (name, checkpoint_root_dir) must move where the summary and report come from too: they used to be
// read from the seed's default folder, i.e. another run's.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { quickstartJobDir, quickstartPlan, quickstartRunsDir } from '../../src/cli/quickstart.js';

const ROOT = join(import.meta.dirname, '..', '..');
const RUNS = join(ROOT, 'runs');
const runs = join(RUNS, 'quickstart');

describe('trinity quickstart', () => {
  test('seed 0 without threads is the config as committed, in runs/quickstart/addition', () => {
    const plan = quickstartPlan(ROOT, RUNS, 0, null, []);
    assert.equal(plan.configFile, join(ROOT, 'examples', 'quickstart', 'config.yaml'));
    assert.deepEqual(plan.overrides, [`model.model_path=${join(runs, 'model')}`]);
    assert.equal(quickstartJobDir(plan), join(runs, 'addition'));
  });

  test('a seed and a thread count get their own model, task order and job folder', () => {
    const plan = quickstartPlan(ROOT, RUNS, 3, 2, []);
    assert.equal(plan.modelDir, join(runs, 'model-seed3'));
    assert.deepEqual(plan.overrides, [
      `model.model_path=${join(runs, 'model-seed3')}`,
      'name=addition-seed3-threads2',
      'buffer.explorer_input.taskset.task_selector.seed=3',
    ]);
    assert.equal(quickstartJobDir(plan), join(runs, 'addition-seed3-threads2'));
  });

  test('--arch qwen3_moe: a mixture-of-experts model of its own (8 experts, top 2, half the MLP width each) and job', () => {
    const plan = quickstartPlan(ROOT, RUNS, 2, null, ['algorithm.enable_router_replay=true'], 'qwen3_moe');
    assert.equal(plan.modelDir, join(runs, 'model-moe-seed2'));
    assert.deepEqual(plan.modelInit, {
      hiddenSize: 128,
      numLayers: 4,
      numHeads: 4,
      numKeyValueHeads: 2,
      maxPositionEmbeddings: 64,
      architecture: 'qwen3_moe',
      numExperts: 8,
      numExpertsPerTok: 2,
      moeIntermediateSize: 176,
      seed: 2,
    });
    assert.equal(quickstartJobDir(plan), join(runs, 'addition-moe-seed2'));
    assert.equal(quickstartPlan(ROOT, RUNS, 0, null, []).modelInit.architecture, 'qwen2');
  });

  test("the user's --set comes last and moves the job folder the summary and report are read from", () => {
    assert.equal(quickstartJobDir(quickstartPlan(ROOT, RUNS, 1, 2, ['name=addition-avx2'])), join(runs, 'addition-avx2'));
    assert.equal(
      quickstartJobDir(quickstartPlan(ROOT, RUNS, 0, null, ['checkpoint_root_dir=/tmp/elsewhere', 'project=p'])),
      join('/tmp/elsewhere', 'p', 'addition'),
    );
  });

  test('an installed copy (under node_modules) writes its runs in the working directory, not in the package', () => {
    const installed = join('/home/me/project', 'node_modules', 'trinity-rft');
    const runsDir = quickstartRunsDir(installed, '/home/me/project');
    assert.equal(runsDir, join('/home/me/project', 'runs'));
    assert.equal(quickstartRunsDir(ROOT, '/somewhere/else'), RUNS);
    const plan = quickstartPlan(installed, runsDir, 0, null, []);
    assert.equal(plan.configFile, join(installed, 'examples', 'quickstart', 'config.yaml'));
    assert.equal(plan.modelDir, join(runsDir, 'quickstart', 'model'));
    assert.deepEqual(plan.overrides, [
      `checkpoint_root_dir=${runsDir}`,
      `model.model_path=${join(runsDir, 'quickstart', 'model')}`,
    ]);
  });
});
