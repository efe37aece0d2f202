// Trinity-RFT configs as they are written: its defaults and derivations (train_batch_size 0 or unset, derived per
// stage), its names and aliases (sync_style dynamic_by_explorer, FIXED), its LoRA key (model.lora_configs), and the
// messages for keys that moved between its versions. Each case is a config Trinity accepts, or a refusal that says
// what to write instead.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { type Config, ConfigError, loadConfig, resolveStages } from '../../../src/rft/run/config/index.js';
import { loraAdapterName } from '../../../src/rft/explorer/engines.js';
import { stageSettings } from '../../../src/rft/run/index.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-semantics-'));
let files = 0;

const load = (text: string): Config => {
  const file = join(dir, `c${files++}.yaml`);
  writeFileSync(file, text);
  return loadConfig(file, { env: {}, cwd: dir });
};

/** The settings of a single-stage config's run. */
const stageSettingsOf = (config: Config) => {
  const [stage] = resolveStages(config);
  assert.ok(stage);
  return stageSettings(stage, stage.model.model_path);
};

/** The problems of an invalid config, as `path: message` lines (the source left out). */
function problems(text: string): string[] {
  try {
    load(text);
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    return error.problems.map((p) => `${p.path}: ${p.message}`);
  }
  assert.fail('expected a ConfigError');
}

const RL = `
model: {model_path: /m, max_model_len: 64}
algorithm: {algorithm_type: grpo, repeat_times: 4}
buffer:
  batch_size: 3
  explorer_input: {taskset: {path: /t.jsonl}}
`;

describe('buffer.train_batch_size as Trinity derives it', () => {
  it('unset or 0 (Trinity default) is batch_size × repeat_times; a value written is kept', () => {
    assert.equal(load(RL).buffer.train_batch_size, 12);
    assert.equal(load(`${RL}  train_batch_size: 0\n`).buffer.train_batch_size, 12);
    assert.equal(load(`${RL}  train_batch_size: 5\n`).buffer.train_batch_size, 5);
  });

  it('is required for sft/dpo and mode train, also when written as 0', () => {
    const sft = `
mode: train
model: {model_path: /m, max_model_len: 64}
algorithm: {algorithm_type: sft}
buffer:
  train_batch_size: 0
  trainer_input: {experience_buffer: {storage_type: file, path: /sft.jsonl}}
`;
    assert.deepEqual(problems(sft), [
      "buffer.train_batch_size: is required when mode is 'train' (there are no explore steps to derive it from)",
    ]);
  });

  it("a multi-stage file's top level needs none: each stage derives or sets its own", () => {
    // the top level is an SFT run that never runs by itself; Trinity validates each stage, not the top level
    const config = load(`
name: run
checkpoint_root_dir: /ckpt
mode: train
model: {model_path: /m, max_model_len: 64}
algorithm: {algorithm_type: sft}
buffer:
  batch_size: 2
  trainer_input: {experience_buffer: {storage_type: file, path: /sft.jsonl}}
stages:
  - stage_name: sft
    buffer: {train_batch_size: 6}
  - stage_name: grpo
    mode: both
    algorithm: {algorithm_type: grpo, repeat_times: 4}
    buffer:
      explorer_input: {taskset: {path: /t.jsonl}}
      trainer_input: {experience_buffer: {storage_type: queue, path: null}}
`);
    const [sft, grpo] = resolveStages(config);
    assert.equal(sft?.buffer.train_batch_size, 6);
    assert.equal(grpo?.buffer.train_batch_size, 8); // 2 × 4
  });

  it('a stage that trains SFT without it names the stage', () => {
    const lines = problems(`
name: run
checkpoint_root_dir: /ckpt
${RL.trim()}
stages:
  - stage_name: warm
    mode: train
    algorithm: {algorithm_type: sft}
    buffer:
      explorer_input: null
      trainer_input: {experience_buffer: {storage_type: file, path: /sft.jsonl}}
`);
    assert.deepEqual(lines, [
      "stages.0.buffer.train_batch_size: is required when mode is 'train' (there are no explore steps to derive it from)",
    ]);
  });
});

describe('synchronizer.sync_style: Trinity names, aliases and any case', () => {
  const styled = (style: string) => `${RL}synchronizer: {sync_style: ${style}}\n`;
  for (const [written, style] of [
    ['fixed', 'fixed'],
    ['FIXED', 'fixed'],
    ['trainer_driven', 'trainer_driven'],
    ['Explorer_Driven', 'explorer_driven'],
    ['dynamic_by_trainer', 'trainer_driven'],
    ['dynamic_by_explorer', 'explorer_driven'],
    ['DYNAMIC_BY_EXPLORER', 'explorer_driven'],
  ] as const) {
    it(`${written} → ${style}`, () => {
      assert.equal(load(styled(written)).synchronizer.sync_style, style);
    });
  }

  it('anything else is refused, naming the styles and the closest', () => {
    const [line] = problems(styled('dynamic_by_explorr'));
    assert.match(
      line ?? '',
      /^synchronizer\.sync_style: expected one of 'fixed', 'trainer_driven', 'explorer_driven'.*; got 'dynamic_by_explorr'/,
    );
  });
});

describe("model.lora_configs: Trinity's LoRA key", () => {
  const withLora = (loras: string) =>
    RL.replace(
      'model: {model_path: /m, max_model_len: 64}',
      `model:\n  model_path: /m\n  max_model_len: 64\n  lora_configs:\n${loras}`,
    );

  it('one adapter becomes model.lora: rank, alpha, targets, name; path null is a new adapter (Trinity: a dummy one)', () => {
    const config = load(withLora('  - {name: lora, lora_rank: 16, lora_alpha: 8, target_modules: [q_proj, v_proj]}\n'));
    assert.deepEqual(config.model.lora, {
      rank: 16,
      alpha: 8,
      dropout: 0,
      target_modules: ['q_proj', 'v_proj'],
      path: null,
      name: 'lora',
    });
    assert.equal('lora_configs' in config.model, false);
  });

  it("Trinity's defaults: all-linear, rank and alpha 32 for a new adapter; a path is resolved against the file", () => {
    const config = load(withLora('  - {path: adapters/a}\n'));
    assert.equal(config.model.lora?.path, join(dir, 'adapters/a'));
    // an adapter folder's own rank, alpha and targets (the trainer checks any written here against it)
    assert.deepEqual([config.model.lora?.rank, config.model.lora?.alpha, config.model.lora?.target_modules], [null, null, null]);
    const fresh = load(withLora('  - {name: lora}\n'));
    assert.deepEqual(stageSettingsOf(fresh).lora, {
      rank: 32,
      alpha: 32,
      dropout: 0,
      targetModules: 'all-linear',
      adapterName: 'lora',
    });
  });

  it('what has no counterpart is refused with what to write instead', () => {
    const lines = problems(
      withLora(
        '  - {name: a, base_model_name: Qwen, lora_dtype: float16, exclude_modules: lm_head, target_modules: ".*proj"}\n' +
          '  - {name: b}\n',
      ),
    );
    assert.deepEqual(lines, [
      "model.lora_configs.0.base_model_name: got 'Qwen': names the base model in vLLM's list of served adapters; here the adapter always sits on model.model_path: remove it",
      "model.lora_configs.0.lora_dtype: got 'float16': the adapter's weights take the trainer's dtype here (trainer.param_dtype): use 'auto' or remove it",
      "model.lora_configs.0.exclude_modules: got 'lm_head': excluding modules is not supported here: list the modules to adapt in target_modules instead",
      'model.lora_configs: lists 2 adapters; one is supported (as in Trinity-RFT): keep one',
      "model.lora_configs.0.target_modules: got '.*proj': a string other than 'all-linear' is a PEFT regular expression over module paths, which is not supported here: list the module names (e.g. ['q_proj', 'v_proj']) or use 'all-linear'",
    ]);
  });

  it("the adapter's name is the one an external server serves it under (else the run's name)", () => {
    const external = `explorer:\n  rollout_model: {engine_type: openai, base_url: "http://127.0.0.1:9/v1", model_name: base}\n`;
    const named = stageSettingsOf(load(`${withLora('  - {name: math-lora}\n')}${external}`));
    assert.equal(loraAdapterName(named), 'math-lora');
    const unnamed = stageSettingsOf(load(`name: run1\n${withLora('  - {lora_rank: 8}\n')}${external}`));
    assert.equal(loraAdapterName(unnamed), 'run1');
  });

  it('model.lora and model.lora_configs together are refused', () => {
    const lines = problems(withLora('  - {name: a}\n  lora: {rank: 4}\n'));
    assert.deepEqual(lines, ["model.lora_configs: is Trinity's form of model.lora: set one of them"]);
  });
});

describe('unknown keys say what to write instead', () => {
  it("an older Trinity-RFT key names today's key", () => {
    const lines = problems(
      `${RL}synchronizer: {sync_iteration_interval: 2}\ntrainer: {algorithm_type: grpo}\n` +
        'explorer: {engine_num: 2, repeat_times: 4, temperature: 0.7}\nmonitor: {project: p}\nglobal_config: {batch_size: 4}\n',
    );
    assert.deepEqual(lines, [
      "explorer.engine_num: unknown key 'engine_num'; an older Trinity-RFT key, renamed or moved since: use explorer.rollout_model.engine_num",
      "explorer.repeat_times: unknown key 'repeat_times'; an older Trinity-RFT key, renamed or moved since: use algorithm.repeat_times",
      "explorer.temperature: unknown key 'temperature'; an older Trinity-RFT key, renamed or moved since: use buffer.explorer_input.taskset.rollout_args.temperature",
      "trainer.algorithm_type: unknown key 'algorithm_type'; an older Trinity-RFT key, renamed or moved since: use algorithm.algorithm_type",
      "synchronizer.sync_iteration_interval: unknown key 'sync_iteration_interval'; an older Trinity-RFT key, renamed or moved since: use synchronizer.sync_interval",
      "monitor.project: unknown key 'project'; an older Trinity-RFT key, renamed or moved since: use project",
      "global_config: unknown key 'global_config'; an older Trinity-RFT key, renamed or moved since: use buffer (batch_size, total_epochs) and explorer (eval_interval)",
    ]);
  });

  it('a misspelt key gets the closest key of its mapping', () => {
    assert.deepEqual(problems(`${RL}synchronizer: {sync_intervall: 2}\n`), [
      "synchronizer.sync_intervall: unknown key 'sync_intervall'; did you mean 'sync_interval'?",
    ]);
  });

  it('a key written in the wrong section names the section that has it', () => {
    assert.deepEqual(problems(`${RL}trainer: {eval_interval: 4}\n`), [
      "trainer.eval_interval: unknown key 'eval_interval'; it is a key of explorer: move it there",
    ]);
  });
});
