// advantage_fn gigpo over workflows without states (src/rft/run/config/state-hashes.ts): `trinity config check` and
// `trinity run` refuse training tasks whose built-in workflow writes no info.env_state_hash (every step-level advantage
// would be 0), naming the taskset, the row and the fix; the environment workflows write it in both experience modes;
// a module-path workflow is left to the first step's warning.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ConfigError, parseConfig } from '../../../src/rft/run/config/index.js';
import { preflightProblems } from '../../../src/rft/run/config/preflight.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { modelFolder, tasksetFile } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-states-'));
const model = modelFolder(join(dir, 'model'), 100);
const lakeRows = tasksetFile(join(dir, 'lake.jsonl'), [
  { seed: 1, size: 3 },
  { seed: 2, size: 3, experience_mode: 'episode' },
]);
const mathRows = tasksetFile(join(dir, 'math.jsonl'));
writeFileSync(join(dir, 'my-workflow.ts'), 'export const run = async () => [];\n');

let jobs = 0;
function config(overrides: string[]) {
  const text = `
model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
name: job${jobs++}
algorithm: {algorithm_type: gigpo, repeat_times: 2}
buffer:
  batch_size: 2
  explorer_input:
    taskset: {name: lake, path: ${lakeRows}, workflow_args: {experience_mode: step}}
    default_workflow_type: frozen_lake_workflow
`;
  return parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'config.yaml'), overrides });
}
const check = async (overrides: string[] = []) =>
  (await preflightProblems(config(overrides), { baseDir: dir })).map((p) => `${p.path}: ${p.message}`);

const taskset = 'buffer.explorer_input.taskset';
const needs = "advantage_fn 'gigpo' groups steps by the state they acted from (info.env_state_hash)";
const mathOverrides = [
  `${taskset}.workflow_args={}`,
  `${taskset}.path=${mathRows}`,
  `${taskset}.default_workflow_type=math_workflow`,
];

describe('gigpo needs workflows that write environment states', () => {
  it('passes environment workflows in both experience modes (an episode experience lists its turns)', async () => {
    assert.deepEqual(await check(), []);
    assert.deepEqual(await check([`${taskset}.workflow_args={}`]), [], "the environments' default mode, episode");
    // sokoban's rows, the same; an eval taskset trains nothing and is not checked
    assert.deepEqual(
      await check([
        'buffer.explorer_input.eval_tasksets=[{name: held, path: math.jsonl}]',
        'buffer.explorer_input.default_workflow_type=sokoban_workflow',
      ]),
      [],
    );
  });

  it('refuses a workflow that writes no state, naming the taskset row', async () => {
    assert.deepEqual(await check(mathOverrides), [
      `${taskset}.workflow_args: ${needs}, but workflow 'math_workflow' (taskset 'lake' row 1) writes no state, so ` +
        'every step-level advantage would be 0 (use an environment workflow, or another algorithm)',
    ]);
  });

  it('refuses a state key the workflows do not write', async () => {
    assert.deepEqual(await check(['algorithm.advantage_fn_args={env_state_hash_key: cell}']), [
      `${taskset}.workflow_args: advantage_fn 'gigpo' groups steps by the state they acted from (info.cell), but ` +
        "workflow 'frozen_lake_workflow' (taskset 'lake' row 1) writes info.env_state_hash, not info.cell",
    ]);
  });

  it('leaves a module-path workflow, another algorithm and a stage that does not explore alone', async () => {
    assert.deepEqual(
      await check([
        `${taskset}.workflow_args={}`,
        `${taskset}.path=${mathRows}`,
        'buffer.explorer_input.default_workflow_type=my-workflow.ts#run',
      ]),
      [],
    );
    assert.deepEqual(await check(['algorithm.algorithm_type=multi_step_grpo']), []);
    const rows = `{storage_type: file, path: ${mathRows}}`;
    assert.deepEqual(
      await check(['mode=train', 'buffer.train_batch_size=4', `buffer.trainer_input.experience_buffer=${rows}`]),
      [],
    );
  });

  it('`trinity run` refuses before anything runs', async () => {
    await assert.rejects(runConfig(config(mathOverrides)), (error: unknown) => {
      assert.ok(error instanceof ConfigError);
      assert.match(error.message, /workflow 'math_workflow' \(taskset 'lake' row 1\) writes no state/);
      return true;
    });
  });
});
