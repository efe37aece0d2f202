// Mix's expert data in Trinity-RFT's forms (src/rft/run/config/trinity-mix-mappings.ts, src/rft/buffer/config.ts):
// the older trainer_input.sft_warmup_dataset (v0.2, read by mix when no warm-up steps are set) becomes
// auxiliary_buffers.<sft_dataset_name>; in the newer auxiliary_buffers an entry's name may differ from its key (the
// strategy looks it up by the key) and total_epochs bounds its reads. The older mix form's loss arguments are in the
// ignored block, and its buffer / algorithm keys (and model.max_token_len, algorithm.add_strategy) are read as today's
// (src/rft/run/config/trinity-older-forms.ts).
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { type Config, parseConfig, resolveStages, type StageConfig } from '../../../src/rft/run/config/index.js';
import { stageSettings } from '../../../src/rft/run/config/stage-settings.js';
import { modelFolder, tasksetFile, problemsOf } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-mix-keys-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));
const sft = tasksetFile(join(dir, 'sft.jsonl'));

function configText(algorithm: string, trainerInput: string): string {
  return `model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
algorithm: ${algorithm}
buffer:
  batch_size: 2
  total_steps: 1
  explorer_input:
    taskset: {path: ${tasks}}
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
  trainer_input: ${trainerInput}
`;
}

const load = (text: string): Config => parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'run.yaml') });
const settingsOf = (config: Config) => stageSettings(resolveStages(config)[0] as StageConfig, model);

const problemsIn = (text: string): string[] => problemsOf(load, text);

describe("mix's expert data in Trinity's forms", () => {
  it('sft_warmup_dataset (v0.2) is the mix expert data when no warm-up steps are set', () => {
    const config = load(
      configText(
        '{algorithm_type: mix_chord}',
        `{sft_warmup_dataset: {name: SFT_data, storage_type: file, algorithm_type: sft, path: ${sft}}}`,
      ),
    );
    assert.deepEqual(Object.keys(settingsOf(config).auxiliaryDatasets), ['sft_dataset']);
    assert.equal(settingsOf(config).auxiliaryDatasets.sft_dataset?.name, 'SFT_data');
    const line = config.trinity_keys.mapped.find((m) => m.path === 'buffer.trainer_input.sft_warmup_dataset');
    assert.match(line?.to ?? '', /^buffer\.trainer_input\.auxiliary_buffers\.sft_dataset \(mix's expert data/);
    // sample_strategy_args.sft_dataset_name names the key
    const named = load(
      configText(
        '{algorithm_type: mix, sample_strategy_args: {sft_dataset_name: expert}}',
        `{sft_warmup_dataset: {path: ${sft}}}`,
      ),
    );
    assert.deepEqual(Object.keys(settingsOf(named).auxiliaryDatasets), ['expert']);
  });

  it('stays an SFT warm-up with warm-up steps, and is not moved for an algorithm that does not sample with mix', () => {
    const warmup = load(
      configText(
        '{algorithm_type: mix}',
        `{sft_warmup_dataset: {path: ${sft}}, sft_warmup_steps: 1, auxiliary_buffers: {sft_dataset: {path: ${sft}}}}`,
      ),
    );
    assert.equal(warmup.trinity_keys.mapped.length, 0);
    assert.deepEqual(problemsIn(configText('{algorithm_type: grpo}', `{sft_warmup_dataset: {path: ${sft}}}`)), [
      'buffer.trainer_input.sft_warmup_dataset: is set but sft_warmup_steps is 0, so it would never be read',
    ]);
    assert.deepEqual(
      problemsIn(configText('{algorithm_type: mix}', `{sft_warmup_dataset: {path: ${sft}, algorithm_type: dpo}}`)),
      [
        'buffer.trainer_input.sft_warmup_dataset.algorithm_type: mix\'s expert rows are SFT rows: expected sft, got the string "dpo"',
      ],
    );
  });

  it("auxiliary_buffers: the key is the look-up, the name Trinity's storage name; total_epochs is read", () => {
    const config = load(
      configText('{algorithm_type: mix}', `{auxiliary_buffers: {sft_dataset: {name: SFT_data, total_epochs: 25, path: ${sft}}}}`),
    );
    const expert = settingsOf(config).auxiliaryDatasets.sft_dataset;
    assert.deepEqual([expert?.name, expert?.totalEpochs], ['SFT_data', 25]);
    assert.equal(
      settingsOf(load(configText('{algorithm_type: mix}', `{auxiliary_buffers: {x: {path: ${sft}}}}`))).auxiliaryDatasets.x
        ?.totalEpochs,
      null,
    );
  });
});

describe("the older mix form's keys (mix_math, grpo_math's math_mix)", () => {
  it("policy_loss_fn_args' repeat_times and read_batch_size_expert/_usual are reported in the ignored block", () => {
    const config = load(
      configText(
        '{algorithm_type: mix, policy_loss_fn_args: {mu: 0.1, repeat_times: 8, read_batch_size_expert: 64, read_batch_size_usual: 192}}',
        `{sft_warmup_dataset: {path: ${sft}}}`,
      ),
    );
    const ignored = config.trinity_keys.ignored.map((k) => k.path).sort();
    assert.deepEqual(ignored, [
      'algorithm.policy_loss_fn_args.read_batch_size_expert',
      'algorithm.policy_loss_fn_args.read_batch_size_usual',
      'algorithm.policy_loss_fn_args.repeat_times',
    ]);
    assert.equal(config.algorithm.policy_loss_fn_args?.mu, 0.1);
  });

  it("the older mix form's algorithm.mu, buffer.expert_data_ratio and explore_batch_size are read as today's keys", () => {
    const text = configText('{algorithm_type: mix, mu: 0.1, repeat_times: 4}', `{sft_warmup_dataset: {path: ${sft}}}`).replace(
      '  batch_size: 2\n',
      '  batch_size: 3\n  explore_batch_size: 2\n  expert_data_ratio: 0.25\n',
    );
    const config = load(text);
    assert.equal(config.algorithm.policy_loss_fn_args?.mu, 0.1);
    assert.equal(config.algorithm.sample_strategy_args?.expert_data_ratio, 0.25);
    // explore_batch_size is the explore step's tasks; the older batch_size the train step's, in tasks: 3 · 4 = 12
    assert.equal(config.buffer.batch_size, 2);
    assert.equal(config.buffer.train_batch_size, 12);
    const mapped = Object.fromEntries(config.trinity_keys.mapped.map((m) => [m.path, m.to]));
    assert.equal(mapped['algorithm.mu'], "algorithm.policy_loss_fn_args.mu (the mix loss's SFT weight)");
    assert.equal(
      mapped['buffer.expert_data_ratio'],
      "algorithm.sample_strategy_args.expert_data_ratio (mix's share of expert rows in a train batch)",
    );
    assert.match(mapped['buffer.batch_size'] ?? '', /^buffer\.train_batch_size 12 \(= batch_size · repeat_times 4: /);
    assert.equal(
      mapped['buffer.explore_batch_size'],
      'buffer.batch_size (tasks per explore step, as buffer.batch_size means today)',
    );
  });

  it('an older key beside the key it became is refused naming both', () => {
    const withBoth = configText(
      '{algorithm_type: mix, mu: 0.1, policy_loss_fn_args: {mu: 0.2}}',
      `{sft_warmup_dataset: {path: ${sft}}}`,
    ).replace('  batch_size: 2\n', '  batch_size: 2\n  train_batch_size: 16\n  explore_batch_size: 2\n');
    assert.deepEqual(problemsIn(withBoth), [
      "algorithm.mu: is Trinity's older name of algorithm.policy_loss_fn_args.mu, which is set too: remove one",
      "buffer.explore_batch_size: is the older mix form's batch of an explore step, whose buffer.batch_size sized the " +
        "train step; buffer.train_batch_size is set too: write today's form (batch_size for an explore step, train_batch_size)",
    ]);
  });

  it("model.max_token_len (modelscope's older dapo_math) is model.max_model_len", () => {
    const config = load(configText('{algorithm_type: grpo}', '{}').replace('max_model_len: 64', 'max_token_len: 64'));
    assert.equal(config.model.max_model_len, 64);
    assert.deepEqual(
      config.trinity_keys.mapped.filter((m) => m.path === 'model.max_token_len').map((m) => m.to),
      ['model.max_model_len (prompt + response: its older name)'],
    );
  });

  it("algorithm.add_strategy (Trinity 0.2, the agentscope_* examples' step_wise_grpo) is algorithm.advantage_fn", () => {
    const config = load(configText('{algorithm_type: grpo, add_strategy: step_wise_grpo}', '{}'));
    assert.equal(config.algorithm.advantage_fn, 'step_wise_grpo');
    assert.match(
      config.trinity_keys.mapped.find((m) => m.path === 'algorithm.add_strategy')?.to ?? '',
      /^algorithm\.advantage_fn \(Trinity 0\.2's add strategy/,
    );
    assert.deepEqual(problemsIn(configText('{algorithm_type: grpo, add_strategy: grpo, advantage_fn: opmd}', '{}')), [
      "algorithm.add_strategy: is Trinity's older name of algorithm.advantage_fn, which is set too: remove one",
    ]);
  });
});
