// Keys that Trinity accepted and dropped, in configs written for it (src/rft/run/config/trinity-workflow-args.ts,
// src/rft/config/ignored-keys.ts): a taskset's workflow_args under simple_mm_workflow (mix_vlm's with_think, which
// Trinity's SimpleMMWorkflow never read) and a dataset's schema_type (which Trinity sets itself) are reported in the
// ignored block with why, not refused; workflow_args of a workflow that reads some are still checked.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { type Config, parseConfig } from '../../../src/rft/run/config/index.js';
import type { ConfigError } from '../../../src/rft/config/errors.js';
import { checkConfigText } from '../../../src/rft/run/config/check.js';
import { modelFolder, problemsOf, tasksetFile } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-workflow-args-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));

/** A config whose explorer_input is `input` (YAML lines indented by four spaces) and trainer_input `trainerInput`. */
function configText(input: string, trainerInput = '{}'): string {
  return `mode: both
model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
buffer:
  batch_size: 2
  train_batch_size: 2
  total_steps: 1
  explorer_input:
${input}
  trainer_input: ${trainerInput}
`;
}

const load = (text: string): Config => parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'run.yaml') });
const ignoredOf = (config: Config) => new Map(config.trinity_keys.ignored.map((k) => [k.path, k]));

describe("a taskset's workflow_args that its workflow drops, as Trinity's did", () => {
  it('simple_mm_workflow: each key is reported with its value and why, and the taskset reads none', () => {
    const config = load(
      configText(`    taskset: {path: ${tasks}, workflow_args: {with_think: true, format_score_coef: 0.2}}
    eval_tasksets:
      - {name: held, path: ${tasks}, default_workflow_type: async_simple_mm_workflow, workflow_args: {with_think: false}}
    default_workflow_type: simple_mm_workflow`),
    );
    const ignored = ignoredOf(config);
    assert.deepEqual([...ignored.keys()].sort(), [
      'buffer.explorer_input.eval_tasksets.0.workflow_args.with_think',
      'buffer.explorer_input.taskset.workflow_args.format_score_coef',
      'buffer.explorer_input.taskset.workflow_args.with_think',
    ]);
    const withThink = ignored.get('buffer.explorer_input.taskset.workflow_args.with_think');
    assert.equal(withThink?.value, true);
    assert.match(withThink?.why ?? '', /simple_mm_workflow reads no workflow_args.*reward_fn_args/);
    const input = config.buffer.explorer_input;
    assert.deepEqual(input.tasksets[0]?.workflow_args, {});
    assert.deepEqual(input.eval_tasksets[0]?.workflow_args, {});
  });

  it("rows that name their workflow (format.workflow_key) keep them, and another workflow's unknown key is refused", async () => {
    const perRow = load(
      configText(`    taskset: {path: ${tasks}, format: {workflow_key: wf}, workflow_args: {with_think: true}}
    default_workflow_type: simple_mm_workflow`),
    );
    assert.equal(ignoredOf(perRow).size, 0);
    assert.deepEqual(perRow.buffer.explorer_input.tasksets[0]?.workflow_args, { with_think: true });
    const text = configText(`    taskset: {path: ${tasks}, workflow_args: {with_thinks: true}}
    default_workflow_type: math_boxed_workflow`);
    await assert.rejects(checkConfigText(text, join(dir, 'run.yaml')), (error: ConfigError) => {
      const problems = error.problems.map((p) => `${p.path}: ${p.message}`).join('\n');
      assert.match(
        problems,
        /buffer\.explorer_input\.taskset\.workflow_args\.with_thinks: unknown argument 'with_thinks' of workflow 'math_boxed_workflow'; did you mean 'with_think'/,
      );
      return true;
    });
  });
});

describe("a dataset's schema_type (Trinity sets it from the dataset's use)", () => {
  it('is reported as ignored, with why, wherever a dataset is', () => {
    const config = load(
      configText(
        `    taskset: {path: ${tasks}, schema_type: task}
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward`,
        `{auxiliary_buffers: {sft_dataset: {path: ${tasks}, schema_type: sft}}}`,
      ),
    );
    const ignored = ignoredOf(config);
    assert.deepEqual([...ignored.keys()].sort(), [
      'buffer.explorer_input.taskset.schema_type',
      'buffer.trainer_input.auxiliary_buffers.sft_dataset.schema_type',
    ]);
    assert.match(ignored.get('buffer.explorer_input.taskset.schema_type')?.why ?? '', /the use decides/);
    const [problem, ...more] = problemsOf(load, configText(`    taskset: {path: ${tasks}, schema_type: {kind: sft}}`));
    assert.equal(more.length, 0);
    assert.match(problem ?? '', /^buffer\.explorer_input\.taskset\.schema_type: expected a string, got /);
  });
});
