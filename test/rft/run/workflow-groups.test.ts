// A workflow may emit experiences of groups that are no task of the taskset: math_trainable_ruler_workflow trains
// the policy's judge samples as task `<id>-ruler`. With pass_rate_calculator in the experience pipeline the
// selectors' feedback is per task id, and such a group used to stop the run at its first step ("scheduler feedback:
// unknown task id '…-ruler'"); the step's own tasks get their feedback and the run trains.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

describe("a workflow's own groups beside the taskset's tasks", () => {
  test('math_trainable_ruler_workflow with pass_rate_calculator trains its steps', { timeout: 240_000 }, async () => {
    const job = makeJob({
      totalSteps: 2,
      saveInterval: 2,
      // the judge prompt (instructions, the responses) is words: every printable character, room for it
      model: { alphabet: Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)).join('') },
      extra: 'data_processor:\n  experience_pipeline:\n    operators:\n      - name: pass_rate_calculator\n',
    });
    const config = loadConfig(job.configFile, {
      resolveAlgorithm,
      overrides: [
        'buffer.explorer_input.default_workflow_type=math_trainable_ruler_workflow',
        'buffer.explorer_input.taskset.workflow_args.probability_ground_truth_available=1',
        'algorithm.advantage_fn_args.std_threshold=null',
        'model.max_prompt_tokens=1500',
        'model.max_model_len=1600',
      ],
    });
    await runConfig(config, { log: () => {} });
    const done = JSON.parse(readFileSync(join(job.jobDir, 'done.json'), 'utf8')) as { steps?: number };
    assert.ok(existsSync(join(job.jobDir, 'done.json')));
    assert.equal(done.steps, 2);
  });
});
