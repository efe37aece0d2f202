// `trinity quickstart`: the run it makes and the job folder its summary and report are read from. A `--set` that
// moves the job (name, checkpoint_root_dir) must move where the summary and report come from too: they used to be
// read from the seed's default folder, i.e. another run's.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { quickstartJobDir, quickstartPlan } from '../../src/cli/quickstart.js';

const ROOT = join(import.meta.dirname, '..', '..');
const runs = join(ROOT, 'runs', 'quickstart');

describe('trinity quickstart', () => {
  test('seed 0 without threads is the config as committed, in runs/quickstart/addition', () => {
    const plan = quickstartPlan(ROOT, 0, null, []);
    assert.equal(plan.configFile, join(ROOT, 'examples', 'quickstart', 'config.yaml'));
    assert.deepEqual(plan.overrides, [`model.model_path=${join(runs, 'model')}`]);
    assert.equal(quickstartJobDir(plan), join(runs, 'addition'));
  });

  test('a seed and a thread count get their own model, task order and job folder', () => {
    const plan = quickstartPlan(ROOT, 3, 2, []);
    assert.equal(plan.modelDir, join(runs, 'model-seed3'));
    assert.deepEqual(plan.overrides, [
      `model.model_path=${join(runs, 'model-seed3')}`,
      'name=addition-seed3-threads2',
      'buffer.explorer_input.taskset.task_selector.seed=3',
    ]);
    assert.equal(quickstartJobDir(plan), join(runs, 'addition-seed3-threads2'));
  });

  test("the user's --set comes last and moves the job folder the summary and report are read from", () => {
    assert.equal(quickstartJobDir(quickstartPlan(ROOT, 1, 2, ['name=addition-avx2'])), join(runs, 'addition-avx2'));
    assert.equal(
      quickstartJobDir(quickstartPlan(ROOT, 0, null, ['checkpoint_root_dir=/tmp/elsewhere', 'project=p'])),
      join('/tmp/elsewhere', 'p', 'addition'),
    );
  });
});
