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

const dir = mkdtempSync(join(tmpdir(), 'trinity-semantics-'));
let files = 0;

const load = (text: string): Config => {
  const file = join(dir, `c${files++}.yaml`);
  writeFileSync(file, text);
  return loadConfig(file, { env: {}, cwd: dir });
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
