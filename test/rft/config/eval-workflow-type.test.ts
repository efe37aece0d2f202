// buffer.explorer_input.default_eval_workflow_type (Trinity-RFT's decoupled evaluation): the workflow of the eval
// tasksets that name none of their own, before default_workflow_type; the training tasksets keep theirs. A name that
// is not a workflow is a problem at that key, and workflow_args that its workflow drops are reported as ignored.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { ConfigError } from '../../../src/rft/config/errors.js';
import { parseConfig, resolveStages, type StageConfig } from '../../../src/rft/run/config/index.js';
import { checkConfigText } from '../../../src/rft/run/config/check.js';
import { modelFolder, tasksetFile } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-eval-workflow-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));

function configText(evalWorkflow: string): string {
  return `model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
buffer:
  batch_size: 2
  total_steps: 1
  explorer_input:
    taskset: {path: ${tasks}}
    eval_tasksets:
      - {name: plain, path: ${tasks}}
      - {name: own, path: ${tasks}, default_workflow_type: math_boxed_workflow}
    default_workflow_type: math_workflow
    default_eval_workflow_type: ${evalWorkflow}
`;
}

describe('buffer.explorer_input.default_eval_workflow_type', () => {
  it("is the eval tasksets' workflow where they name none; training keeps default_workflow_type", () => {
    const config = parseConfig(configText('math_eval_workflow'), { env: {}, cwd: dir, file: join(dir, 'c.yaml') });
    const [stage] = resolveStages(config) as StageConfig[];
    const input = stage?.buffer.explorer_input;
    assert.deepEqual(
      input?.eval_tasksets.map((t) => t.default_workflow_type),
      ['math_eval_workflow', 'math_boxed_workflow'],
    );
    assert.equal(input?.tasksets[0]?.default_workflow_type, 'math_workflow');
  });

  it("an eval taskset's workflow_args under math_eval_workflow are reported as ignored, as Trinity dropped them", () => {
    const text = configText('math_eval_workflow').replace(
      '- {name: plain, path: ',
      '- {name: plain, workflow_args: {with_think: true}, path: ',
    );
    const config = parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'c.yaml') });
    const ignored = config.trinity_keys.ignored.find(
      (k) => k.path === 'buffer.explorer_input.eval_tasksets.0.workflow_args.with_think',
    );
    assert.match(ignored?.why ?? '', /MathEvalWorkflow reads no workflow_args/);
    assert.deepEqual(config.buffer.explorer_input.eval_tasksets[0]?.workflow_args, {});
  });

  it('a name that is no workflow is a problem at that key', async () => {
    const error = await checkConfigText(configText('math_evl_workflow'), join(dir, 'c.yaml'), { resolveAlgorithm, env: {} }).then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
    const problems = error.problems.map((p) => `${p.path}: ${p.message}`);
    assert.equal(problems.length, 1, problems.join('\n'));
    assert.match(
      problems[0] as string,
      /^buffer\.explorer_input\.default_eval_workflow_type: .*math_evl_workflow.*math_eval_workflow/,
    );
  });
});
