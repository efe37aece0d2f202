// Trinity 0.1's config form (src/rft/run/config/trinity-v01-form.ts; upstream's grpo_math/math.yaml): its data
// section and flat explorer keys are read as today's keys, each mapping printed; its keys with no meaning since are
// ignored with why; a v0.1 key beside the key it became, an unknown data key and a taskset database are refused.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { type Config, parseConfig } from '../../../src/rft/run/config/index.js';
import { modelFolder, problemsOf, tasksetFile } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-v01-'));
const model = modelFolder(join(dir, 'model'));
mkdirSync(join(dir, 'math'));
tasksetFile(join(dir, 'math', 'train.jsonl'));
tasksetFile(join(dir, 'math', 'test.jsonl'));

const V01 = `data:
  dataset_path: math
  train_split: train
  eval_split: test
  format: {prompt_key: prompt, response_key: response}
  db_url: ''
  total_epochs: 3
  batch_size: 2
  default_workflow_type: math_workflow
model: {model_path: ${model}, max_model_len: 64, checkpoint_path: runs}
buffer: {train_dataset: {name: math_buffer, storage_type: queue}}
explorer: {engine_num: 1, dtype: float32, temperature: 0.7, repeat_times: 4, use_ray: false, max_waiting_steps: 4}
trainer: {algorithm_type: grpo, sft_warmup_steps: 0, eval_interval: 10}
monitor: {project: p, name: n, cache_root_dir: ''}
`;

const load = (text: string): Config => parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'math.yaml') });

describe("Trinity 0.1's config form", () => {
  it("reads data, the flat explorer section, trainer's algorithm and monitor's names as today's keys", () => {
    const config = load(V01);
    const [taskset] = config.buffer.explorer_input.tasksets;
    assert.equal(taskset?.path, join(dir, 'math'), 'dataset_path resolved against the config folder');
    assert.equal(taskset?.split, 'train');
    assert.equal(taskset?.rollout_args.temperature, 0.7);
    assert.deepEqual(
      config.buffer.explorer_input.eval_tasksets.map((t) => [t.name, t.path, t.split, t.format.prompt_key]),
      [['taskset_eval', join(dir, 'math'), 'test', 'prompt']],
    );
    assert.deepEqual([config.buffer.batch_size, config.buffer.total_epochs], [2, 3]);
    assert.equal(config.buffer.explorer_input.default_workflow_type, 'math_workflow');
    assert.equal(config.checkpoint_root_dir, join(dir, 'runs'));
    assert.deepEqual([config.algorithm.algorithm_type, config.algorithm.repeat_times], ['grpo', 4]);
    assert.deepEqual([config.project, config.name], ['p', 'n']);
    assert.equal(config.explorer.rollout_model.engine_num, 1);
    const mapped = Object.fromEntries(config.trinity_keys.mapped.map((m) => [m.path, m.to]));
    assert.equal(mapped['data.dataset_path'], "buffer.explorer_input.taskset.path (Trinity 0.1's key)");
    assert.equal(mapped['explorer.repeat_times'], "algorithm.repeat_times (Trinity 0.1's key)");
    assert.equal(mapped['data.eval_split'], 'buffer.explorer_input.eval_tasksets: taskset_eval (split test of the same dataset)');
    assert.equal(mapped['data.db_url'], 'nothing (empty: the taskset is read from dataset_path)');
    assert.deepEqual(config.trinity_keys.ignored.map((k) => k.path).sort(), [
      'explorer.max_waiting_steps',
      'explorer.use_ray',
      'monitor.cache_root_dir',
    ]);
    assert.equal(config.explorer.eval_interval, 10, "trainer.eval_interval: v0.1's place of explorer.eval_interval");
  });

  it('refuses an unknown data key, a taskset database and a v0.1 key beside the key it became', () => {
    const text = V01.replace("  db_url: ''\n", "  db_url: 'sqlite:///tasks.db'\n  shuffle: true\n");
    assert.deepEqual(problemsOf(load, `${text}algorithm: {algorithm_type: ppo}\n`), [
      "data.shuffle: unknown key of Trinity 0.1's data section (known: dataset_path, train_split, format, total_epochs, batch_size, default_workflow_type, default_reward_fn_type, eval_split, db_url)",
      "data.db_url: is Trinity 0.1's taskset database: write the taskset as storage_type sql with that path",
      "trainer.algorithm_type: is Trinity 0.1's algorithm.algorithm_type, which is set too: remove one",
    ]);
  });

  it("a v0.1 key in a file without v0.1's data section still names today's key", () => {
    const today = `model: {model_path: ${model}, max_model_len: 64}\nbuffer: {batch_size: 2, explorer_input: {taskset: {path: math}}}\nexplorer: {engine_num: 1}\n`;
    assert.deepEqual(problemsOf(load, today), [
      "explorer.engine_num: unknown key 'engine_num'; an older Trinity-RFT key, renamed or moved since: use explorer.rollout_model.engine_num",
    ]);
  });
});
