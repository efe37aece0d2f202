// What Trinity-RFT adjusts when it checks a config (src/rft/run/config/trinity-adjustments.ts): an eval_interval
// that is not a multiple of sync_interval is rounded down to one, and the older use_priority_queue switch is
// replay_buffer.enable, each recorded in the "mapped" block. And the keys of upstream examples' agent and judge
// settings that the "ignored on this backend" block reports (src/rft/config/ignored-keys.ts).
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { type Config, parseConfig } from '../../../src/rft/run/config/index.js';
import { modelFolder, tasksetFile, problemsOf } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-adjustments-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));

/** A runnable config (one eval taskset) with `extra` top-level keys; `trainerInput` is buffer.trainer_input. */
function configText(extra: string, trainerInput = '{}'): string {
  return `model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
buffer:
  batch_size: 2
  train_batch_size: 2
  total_steps: 1
  explorer_input:
    taskset: {path: ${tasks}}
    eval_tasksets: [{name: held_out, path: ${tasks}}]
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
  trainer_input: ${trainerInput}
${extra}`;
}

const load = (text: string): Config => parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'run.yaml') });

const problemsIn = (text: string): string[] => problemsOf(load, text);

const mapped = (config: Config, path: string) => config.trinity_keys.mapped.find((m) => m.path === path);

describe('explorer.eval_interval as Trinity adjusts it', () => {
  it('rounds a written interval down to a multiple of sync_interval, and records it', () => {
    // topr_gsm8k: eval_interval 50, sync_interval 8 → 48 = ⌊50 / 8⌋ · 8
    const config = load(configText('explorer: {eval_interval: 50}\nsynchronizer: {sync_interval: 8}\n'));
    assert.equal(config.explorer.eval_interval, 48);
    const record = mapped(config, 'explorer.eval_interval');
    assert.equal(record?.value, 50);
    assert.match(record?.to ?? '', /^48 \(a multiple of synchronizer\.sync_interval 8/);
  });

  it('rounds an interval below sync_interval up to sync_interval (max(⌊e/s⌋, 1) · s)', () => {
    const config = load(configText('explorer: {eval_interval: 3}\nsynchronizer: {sync_interval: 5}\n'));
    assert.equal(config.explorer.eval_interval, 5);
  });

  it('leaves a multiple alone, and records nothing', () => {
    const config = load(configText('explorer: {eval_interval: 40}\nsynchronizer: {sync_interval: 8}\n'));
    assert.equal(config.explorer.eval_interval, 40);
    assert.equal(mapped(config, 'explorer.eval_interval'), undefined);
  });

  it("adjusts a stage's interval against the run's sync_interval", () => {
    const config = load(
      configText(`synchronizer: {sync_interval: 4}
stages:
  - {stage_name: rft, explorer: {eval_interval: 10}}
`),
    );
    assert.equal(config.stages[0]?.explorer?.eval_interval, 8);
    assert.ok(mapped(config, 'stages.0.explorer.eval_interval'));
  });

  it('keeps refusing an unwritten default that is no multiple (nothing of the config to adjust)', () => {
    const problems = problemsIn(configText('synchronizer: {sync_interval: 3}\n'));
    assert.deepEqual(problems, [
      'explorer.eval_interval: (100) must be a multiple of synchronizer.sync_interval (3): evaluation runs at sync points; use 99 or 102',
    ]);
  });
});

describe('experience_buffer.use_priority_queue (Trinity’s older replay switch)', () => {
  it('is replay_buffer.enable', () => {
    const config = load(configText('', '{experience_buffer: {name: exp, storage_type: queue, use_priority_queue: true}}'));
    assert.equal(config.buffer.trainer_input.experience_buffer.replay_buffer.enable, true);
    assert.match(
      mapped(config, 'buffer.trainer_input.experience_buffer.use_priority_queue')?.to ?? '',
      /replay_buffer\.enable true/,
    );
  });

  it('refuses a contradiction with replay_buffer.enable, and a value that is no boolean, at the old key', () => {
    const path = 'buffer.trainer_input.experience_buffer.use_priority_queue';
    assert.deepEqual(
      problemsIn(configText('', '{experience_buffer: {use_priority_queue: true, replay_buffer: {enable: false}}}')),
      [`${path}: is Trinity's older switch of replay_buffer.enable, which is set to false: remove one`],
    );
    assert.deepEqual(problemsIn(configText('', '{experience_buffer: {use_priority_queue: 3}}')), [
      `${path}: expected a boolean (true or false), got 3`,
    ]);
  });
});

describe("upstream examples' agent and judge settings", () => {
  it('are reported in the ignored block with why, for the rollout model and each auxiliary model', () => {
    const config = load(
      configText(`explorer:
  max_repeat_times_per_runner: 1
  env_vars: {TMPDIR: /tmp}
  rollout_model:
    enable_history: true
    enable_auto_tool_choice: true
    tool_call_parser: hermes
    reasoning_parser: deepseek_r1
    max_prompt_tokens: 32
    max_response_tokens: 16
  auxiliary_models:
    - {model_path: ${model}, max_prompt_tokens: 32, max_response_tokens: 8}
trainer: {enable_preview: true}
data_processor: {data_processor_url: 'http://127.0.0.1:5005'}
`).replace('max_model_len: 64}', 'max_model_len: 64, tinker: {enable: true, base_model: Qwen/Qwen3-4B}}'),
    );
    assert.deepEqual(config.trinity_keys.ignored.map((k) => k.path).sort(), [
      'data_processor.data_processor_url',
      'explorer.auxiliary_models.0.max_prompt_tokens',
      'explorer.auxiliary_models.0.max_response_tokens',
      'explorer.env_vars',
      'explorer.max_repeat_times_per_runner',
      'explorer.rollout_model.enable_auto_tool_choice',
      'explorer.rollout_model.enable_history',
      'explorer.rollout_model.max_prompt_tokens',
      'explorer.rollout_model.max_response_tokens',
      'explorer.rollout_model.reasoning_parser',
      'explorer.rollout_model.tool_call_parser',
      'model.tinker',
      'trainer.enable_preview',
    ]);
    for (const key of config.trinity_keys.ignored) assert.ok(key.why.length > 20, key.path);
    assert.equal(config.explorer.auxiliary_models.length, 1, 'the auxiliary model itself stays');
  });
});

describe("Trinity 0.1's flat explorer section (upstream grpo_math/math.yaml)", () => {
  it("names the engine keys' place today, the prefix cache and seed among them", () => {
    const problems = problemsIn(configText('explorer: {enable_prefix_caching: false, seed: 42}\n'));
    const moved = 'an older Trinity-RFT key, renamed or moved since: use explorer.rollout_model';
    assert.deepEqual(problems, [
      `explorer.enable_prefix_caching: unknown key 'enable_prefix_caching'; ${moved}.enable_prefix_caching`,
      `explorer.seed: unknown key 'seed'; ${moved}.seed`,
    ]);
  });
});

describe("Trinity 0.2's task pipeline keys (upstream grpo_gsm8k_task_pipeline)", () => {
  it('name what to write today', () => {
    const problems = problemsIn(
      configText(`data_processor:
  task_pipeline:
    input_buffers: [{name: raw, path: ${tasks}}]
    output_buffer: {name: out, path: ${dir}/out.jsonl}
    dj_process_desc: 'Please compute difficulty scores.'
`),
    );
    const moved = 'an older Trinity-RFT key, renamed or moved since: use data_processor.task_pipeline';
    assert.deepEqual(problems, [
      `data_processor.task_pipeline.input_buffers: unknown key 'input_buffers'; ${moved}.inputs (paths)`,
      `data_processor.task_pipeline.output_buffer: unknown key 'output_buffer'; ${moved}.output (a path)`,
      `data_processor.task_pipeline.dj_process_desc: unknown key 'dj_process_desc'; ${moved}.operators (the operators written out; the recipe-writing agent is gone)`,
    ]);
  });
});

describe("Trinity's keys whose feature is not here (src/rft/config/unsupported-keys.ts)", () => {
  it('are refused saying what is missing, not only as unknown keys', () => {
    const problems = problemsIn(
      configText(
        `explorer:\n  auxiliary_models: [{model_path: ${model}, enable_thinking: false}]\n`,
        `{experience_buffer: {name: e, storage_type: queue}}`,
      ).replace(`taskset: {path: ${tasks}}`, `taskset: {path: ${tasks}, format: {image_key: images, video_key: videos}}`),
    );
    assert.deepEqual(problems, [
      "buffer.explorer_input.taskset.format.video_key: unknown key 'video_key'; Trinity-RFT's key, not supported here: " +
        'videos for a vision-language model: images are supported here (format.image_key), videos are not',
    ]);
  });

  it("a taskset served by Trinity's environment service (storage_type env_service) is refused saying what to use", () => {
    const problems = problemsIn(
      configText('', `{experience_buffer: {name: e, storage_type: queue}}`).replace(
        `taskset: {path: ${tasks}}`,
        `taskset: {path: 'http://localhost:8080', storage_type: env_service}`,
      ),
    );
    assert.equal(problems.length, 1, problems.join('\n'));
    assert.match(
      problems[0] ?? '',
      /^buffer\.explorer_input\.taskset\.storage_type: expected one of 'file', 'sql'; got 'env_service'; Trinity-RFT's value, not supported here: tasks served by an environment service .*storage_type file.*`env\.ts#workflow`.*workflowWithRecording/,
    );
  });
});
