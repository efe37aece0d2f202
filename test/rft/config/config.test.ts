import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import YAML from 'yaml';
import { configCommand } from '../../../src/cli/config-command.js';
import {
  type Config,
  ConfigError,
  type LoadConfigOptions,
  loadConfig,
  parseConfig,
  resolveStages,
} from '../../../src/rft/run/config/index.js';
import { modelFolder, tasksetFile } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-config-'));
let files = 0;

/** Writes `text` to a new YAML file in a temp folder and returns its path. */
function write(text: string): string {
  const file = join(dir, `c${files++}.yaml`);
  writeFileSync(file, text);
  return file;
}

const load = (text: string, options: LoadConfigOptions = {}): Config =>
  loadConfig(write(text), { env: {}, cwd: dir, ...options });

/** The problems of an invalid config, as `path: message (source)` lines. */
function problems(text: string, options: LoadConfigOptions = {}): string[] {
  try {
    load(text, options);
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    return error.message
      .split('\n')
      .slice(1)
      .map((line) => line.replace(/^ {2}- /, ''));
  }
  assert.fail('expected a ConfigError');
}

/** A problem line without its source (` (/file.yaml:3:5)`, ` (--set ...)`). */
const bare = (line: string): string => line.replace(/ \((?:\/|--set )[^()]*\)$/, '');

const MINIMAL = `
model:
  model_path: models/tiny
  max_model_len: 1024
buffer:
  batch_size: 4
  explorer_input:
    taskset:
      path: data/train.jsonl
`;

describe('loadConfig: defaults and derived keys', () => {
  it('fills Trinity-RFT defaults and derives the rest', () => {
    const config = load(MINIMAL);
    assert.equal(config.mode, 'both');
    assert.equal(config.project, 'Trinity-RFT');
    assert.equal(config.name, 'rft');
    assert.equal(config.checkpoint_root_dir, join(dir, 'checkpoints'));
    assert.equal(config.checkpoint_job_dir, join(dir, 'checkpoints', 'Trinity-RFT', 'rft'));
    assert.equal(config.continue_from_checkpoint, true);
    assert.deepEqual(config.model, {
      model_path: join(dir, 'models/tiny'),
      critic_model_path: null, // the critic starts from the stage's policy weights
      max_prompt_tokens: 512, // half of max_model_len, as Trinity
      max_response_tokens: 512,
      max_model_len: 1024,
      enable_prompt_truncation: true,
      dtype: 'bfloat16',
      lora: null,
    });
    assert.equal(config.algorithm.algorithm_type, 'ppo');
    assert.equal(config.algorithm.repeat_times, 1);
    assert.deepEqual(config.algorithm.optimizer, {
      lr: 1e-6,
      lr_warmup_steps: -1,
      lr_warmup_steps_ratio: 0,
      min_lr_ratio: 0.01,
      lr_scheduler_type: 'constant',
      optimizer_type: 'adam',
      betas: [0.9, 0.999],
      weight_decay: 0.01,
      clip_grad: 1,
    });
    assert.equal(config.buffer.train_batch_size, 4); // batch_size * repeat_times
    assert.equal(config.buffer.total_epochs, 1);
    const [taskset] = config.buffer.explorer_input.tasksets;
    assert.ok(taskset);
    assert.equal(taskset.name, 'taskset_0');
    assert.equal(taskset.path, join(dir, 'data/train.jsonl'));
    assert.equal(taskset.split, 'train');
    assert.equal(taskset.format.prompt_key, 'prompt');
    assert.equal(taskset.format.messages_key, 'message');
    assert.equal(taskset.task_selector.selector_type, 'sequential');
    assert.deepEqual(
      { ...taskset.rollout_args },
      { temperature: 1, top_p: 1, top_k: -1, min_p: 0, max_tokens: 512, seed: null, stop: null, stop_token_ids: null },
    );
    assert.equal(taskset.repeat_times, 1);
    assert.deepEqual(config.buffer.trainer_input.experience_buffer, {
      name: 'experience_buffer',
      storage_type: 'queue',
      path: null,
      capacity: 10000,
      max_read_timeout: 1800,
      replay_buffer: { enable: false, priority_fn: 'linear_decay', reuse_cooldown_time: null, priority_fn_args: { decay: 2 } },
      split: 'train',
      subset_name: null,
      format: config.buffer.trainer_input.experience_buffer.format,
    });
    assert.deepEqual(config.explorer, {
      name: null, // mode explore's process name among several; 'explorer' (Trinity's) when left out
      runner_per_model: 8,
      max_timeout: 1800,
      max_retry_times: 2,
      workflow_max_heap_mb: 1024,
      eval_interval: 100,
      eval_on_startup: true,
      bench_on_latest_checkpoint: false,
      rollout_model: {
        engine_type: 'embedded',
        engine_num: 1,
        engine_process: false, // embedded engines on worker threads
        weight_sync_buffer_size: null, // Trinity's 1024 MB: an embedded engine loads a weights folder in such buckets
        slots: 8,
        enable_prefix_caching: false, // vLLM's key: the paged KV cache keeps full blocks for prompts with the same prefix
        enable_chunked_prefill: false, // vLLM's key: a long prompt is prefilled in chunks between decode steps
        max_num_batched_tokens: null, // vLLM's key: a step's token budget; null: 8192
        base_url: null,
        api_key: null,
        model_name: null,
        device: 'auto',
        seed: null, // the workflow runs' seed base: the first taskset's selector seed, else 42
        enable_thinking: null, // not passed to the chat template (its own default)
      },
      auxiliary_models: [],
      proxy_port: 8010,
      listen_address: '127.0.0.1',
      api_key: null,
      serve_max_tokens: null,
      serve_max_prompt_tokens: null,
      serve_max_body_bytes: 1048576,
      serve_max_n: 16,
    });
    assert.deepEqual(config.trainer, {
      save_interval: 0,
      max_checkpoints_to_keep: 0,
      grad_clip: 1,
      micro_batch_size: 1,
      use_dynamic_bsz: false, // micro-batches of micro_batch_size rows (Trinity's default is true: see docs/trinity-configs.md)
      max_token_len_per_gpu: 2048, // 2 · model.max_model_len, Trinity's default; read only with use_dynamic_bsz
      ppo_max_token_len_per_gpu: null, // veRL's name of the budget
      gradient_checkpointing: true,
      use_remove_padding: null, // each forward packs its rows when that saves a fifth of the positions (Trinity: true)
      total_steps: null,
      device: 'auto',
      param_dtype: 'bfloat16', // model.dtype
      master_dtype: 'float32', // verl FSDP's float32 parameters under bf16 compute
      zero_stage: 0, // data-parallel ranks keep the whole AdamW state (1: each its shard)
      trainer_strategy: null, // data parallelism: every rank the whole policy (fsdp/fsdp2: sharded)
      param_offload: false,
      optimizer_offload: false,
      stop_when: null, // train the stage's total_steps
      bitwise_on_policy: false, // the sampler's and trainer's forwards keep their own kernels
      distributed_timeout: 600, // veRL's nccl_timeout
    });
    assert.deepEqual(config.synchronizer, {
      sync_method: 'memory', // mode both; Trinity's nccl
      sync_interval: 1,
      sync_offset: 0,
      sync_timeout: 3600,
      sync_style: 'fixed',
      max_staleness: null,
    });
    assert.deepEqual(config.monitor, { monitor_type: ['tensorboard'], monitor_args: {}, detailed_stats: false });
    assert.deepEqual(config.stages, []);
  });

  it('round-trips: the printed config loads back to the same config', () => {
    const config = load(MINIMAL);
    const { stages: _stages, trinity_keys: _trinityKeys, ...run } = config;
    assert.deepEqual(load(YAML.stringify(run)), config);
  });

  it('derives lengths, train_batch_size and the sql buffer path; takes numbers written as strings', () => {
    const config = load(`
project: p
name: n
checkpoint_root_dir: /ckpt
mode: explore
model: {model_path: /m, max_prompt_tokens: 100, max_response_tokens: "300"}
algorithm: {repeat_times: 8}
buffer:
  batch_size: 2
  explorer_input:
    tasksets: [{path: /a.jsonl}, {name: b, path: /b.jsonl, rollout_args: {max_tokens: 50}}]
    default_workflow_type: math_workflow
  trainer_input:
    experience_buffer: {storage_type: sql}
monitor: {monitor_type: wandb}
`);
    assert.equal(config.model.max_model_len, 400);
    assert.equal(config.buffer.train_batch_size, 16);
    assert.deepEqual(
      config.buffer.explorer_input.tasksets.map((t) => [
        t.name,
        t.repeat_times,
        t.rollout_args.max_tokens,
        t.default_workflow_type,
      ]),
      [
        ['taskset_0', 8, 300, 'math_workflow'],
        ['b', 8, 50, 'math_workflow'],
      ],
    );
    assert.equal(config.buffer.trainer_input.experience_buffer.path, '/ckpt/p/n/buffer/experience_buffer.db');
    assert.equal(config.synchronizer.sync_method, 'checkpoint');
    assert.deepEqual(config.monitor.monitor_type, ['wandb']);
  });

  it('a key set to null takes its default', () => {
    const config = load(`${MINIMAL}\nexplorer: {runner_per_model: null}\ntrainer:\n`);
    assert.equal(config.explorer.runner_per_model, 8);
    assert.equal(config.trainer.grad_clip, 1);
  });
});

describe('loadConfig: errors', () => {
  it('unknown key: full path, the closest key, and file:line:column', () => {
    const text = `${MINIMAL}      fromat: {prompt_key: q}\n`;
    const file = write(text);
    assert.throws(
      () => loadConfig(file, { env: {}, cwd: dir }),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError);
        assert.equal(
          error.message,
          `invalid config ${file}: 1 problem\n` +
            `  - buffer.explorer_input.taskset.fromat: unknown key 'fromat'; did you mean 'format'? (${file}:10:7)`,
        );
        assert.deepEqual(error.problems[0]?.path, 'buffer.explorer_input.taskset.fromat');
        return true;
      },
    );
  });

  it('unknown key with nothing close lists the keys of that mapping', () => {
    const [line] = problems(`${MINIMAL}synchronizer: {zzz: 1}\n`);
    assert.match(
      line ?? '',
      /^synchronizer\.zzz: unknown key 'zzz'; expected one of: sync_method, sync_interval, sync_offset, sync_timeout, sync_style, max_staleness \(.*:10:16\)$/,
    );
  });

  it('wrong type, bad enum value, out of range: key path and what was expected', () => {
    const lines = problems(`
mode: bothh
model: {model_path: /m, max_model_len: 1024, dtype: 16}
buffer: {batch_size: eight, total_epochs: 0, explorer_input: {taskset: {path: /t, rollout_args: {top_p: 2}}}}
explorer: {eval_on_startup: maybe}
algorithm: {optimizer: {betas: [0.9]}}
`).map(bare);
    assert.deepEqual(lines.sort(), [
      'algorithm.optimizer.betas.1: item 1 is missing (expected a number)',
      'buffer.batch_size: expected an integer, got the string "eight"',
      'buffer.explorer_input.taskset.rollout_args.top_p: must be <= 1, got 2',
      'buffer.total_epochs: must be >= 1, got 0',
      'explorer.eval_on_startup: expected a boolean (true or false), got the string "maybe"',
      "mode: expected one of 'both', 'explore', 'train', 'bench', 'serve', 'colocate'; got 'bothh'; did you mean 'both'?",
      "model.dtype: expected one of 'float32', 'bfloat16'; got 16",
    ]);
  });

  it('missing required keys', () => {
    assert.deepEqual(problems('buffer: {batch_size: 2}\n'), ['model: required key is missing (expected a mapping)']);
    const lines = problems('model: {max_model_len: 8}\nbuffer: {explorer_input: {eval_tasksets: [{name: x}]}}\n');
    assert.deepEqual(lines.map(bare), [
      'model.model_path: required key is missing (expected a string)',
      'buffer.explorer_input.eval_tasksets.0.path: required key is missing (expected a string)',
    ]);
  });

  it('env interpolation: values, defaults, an unset variable names the key and the variable', () => {
    const text = `
name: \${RUN:-run}-\${SUFFIX}
checkpoint_root_dir: \${oc.env:ROOT,/tmp/ckpt}
model:
  model_path: \${MODEL_DIR}/tiny
  max_model_len: \${LEN:-64}
buffer:
  batch_size: \${BATCH}
  explorer_input: {taskset: {path: /t, workflow_args: {template: "$\${literal}"}}}
`;
    const config = load(text, { env: { SUFFIX: 'a', MODEL_DIR: '/models', BATCH: '3' } });
    assert.equal(config.name, 'run-a');
    assert.equal(config.checkpoint_root_dir, '/tmp/ckpt');
    assert.equal(config.model.model_path, '/models/tiny');
    assert.equal(config.model.max_model_len, 64);
    assert.equal(config.buffer.batch_size, 3);
    assert.deepEqual(config.buffer.explorer_input.tasksets[0]?.workflow_args, { template: '$' + '{literal}' });
    const lines = problems(text, { env: { SUFFIX: 'a', BATCH: '3' } });
    assert.equal(lines.length, 1);
    assert.match(
      lines[0] ?? '',
      /^model\.model_path: environment variable MODEL_DIR is not set \(in '\$\{MODEL_DIR\}'\); set it or give a default: \$\{MODEL_DIR:-value\} \(.*:5:3\)$/,
    );
  });

  it('YAML syntax error: the message with line and column', () => {
    const file = write('model:\n  model_path: /m\nbuffer: [1, 2\nmode: both\n');
    assert.throws(
      () => loadConfig(file, { env: {} }),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError);
        assert.match(
          error.message,
          new RegExp(`^invalid config ${file}: 1 problem\\n  - YAML syntax error: .+ \\(${file}:4:1\\)$`),
        );
        return true;
      },
    );
    assert.deepEqual(problems('a: 1\na: 2\n').map(bare), ['YAML syntax error: Map keys must be unique']);
  });

  it('reports every problem at once and runs nothing', () => {
    const lines = problems(`${MINIMAL}trainer: {grad_clip: -1, savee_interval: 3}\nexplorer: {max_timeout: x}\n`);
    assert.equal(lines.length, 3);
  });

  it('cross-field rules, each with its message', () => {
    const strip = (lines: string[]) => lines.map(bare);
    const base = 'model: {model_path: /m, max_model_len: 64}\n';
    assert.deepEqual(strip(problems(`${base}mode: explore\n`)), [
      'buffer.explorer_input.taskset: mode explore explores tasks: set a taskset (or tasksets)',
      'buffer.trainer_input.experience_buffer.storage_type: mode explore writes experiences for a separate train process: use a shared buffer, storage_type sql (got queue)',
    ]);
    assert.deepEqual(strip(problems(`${base}mode: bench\n`)), [
      'buffer.explorer_input.eval_tasksets: mode bench evaluates checkpoints on eval_tasksets: set at least one',
    ]);
    assert.deepEqual(
      strip(problems(`${base}mode: train\nbuffer: {train_batch_size: 8}\nsynchronizer: {sync_method: memory}\n`)),
      [
        "synchronizer.sync_method: 'memory' hands weights over inside one process (mode both); mode train needs 'checkpoint'",
        'buffer.trainer_input.experience_buffer: mode train needs experiences to read: an experience_buffer with storage_type sql (shared with an explore process) or file (a dataset)',
      ],
    );
    assert.deepEqual(
      strip(
        problems(
          `${base}mode: train\nalgorithm: {algorithm_type: sft}\nbuffer: {trainer_input: {sft_warmup_dataset: {path: /d}, sft_warmup_steps: 10}}\n`,
        ),
      ),
      [
        "buffer.train_batch_size: is required when mode is 'train' (there are no explore steps to derive it from)",
        // the RL stage after the warm-up has nothing to read (it used to wait sync_timeout for an empty queue)
        "buffer.trainer_input.experience_buffer: mode train needs experiences to read: an experience_buffer with storage_type sql (shared with an explore process) or file (a dataset) (in stage 'rft', made from buffer.trainer_input.sft_warmup_dataset/sft_warmup_steps)",
      ],
    );
    assert.deepEqual(
      strip(
        problems(`model: {model_path: /m, max_model_len: 64, max_prompt_tokens: 60, max_response_tokens: 8, lora: {dropout: 0.1}}
buffer:
  explorer_input:
    taskset: {path: /t, repeat_times: 3}
    tasksets: [{path: /u}]
    eval_tasksets: [{name: taskset_0, path: /e}, {name: taskset_0, path: /f}]
synchronizer: {sync_method: memory, sync_interval: 3, sync_offset: 2, max_staleness: 1}
explorer: {rollout_model: {engine_type: openai}}
`),
      ),
      [
        'model.max_model_len: max_prompt_tokens + max_response_tokens (60 + 8) exceeds max_model_len (64)',
        'buffer.explorer_input.taskset: set either taskset or tasksets, not both',
        'buffer.explorer_input.taskset.repeat_times: a training taskset repeats each task algorithm.repeat_times (1) times; set algorithm.repeat_times instead',
        // an eval taskset may share a training taskset's name (Trinity's grpo_frozen_lake does), not another eval's
        "buffer.explorer_input.eval_tasksets.1.name: taskset name 'taskset_0' is already used by buffer.explorer_input.eval_tasksets.0",
        "synchronizer.sync_method: 'memory' cannot reach an external server (engine_type openai): use 'checkpoint' (the server reloads from disk)",
        'synchronizer.max_staleness: (1) is less than sync_offset (2): every experience would be too stale',
        'explorer.eval_interval: (100) must be a multiple of synchronizer.sync_interval (3): evaluation runs at sync points; use 99 or 102',
        'explorer.rollout_model.base_url: is required with engine_type openai',
      ],
    );
    assert.deepEqual(strip(problems('model: {model_path: /m}\nbuffer: {explorer_input: {taskset: {path: /t}}}\n')), [
      'model.max_model_len: cannot be derived: set it, or both max_prompt_tokens and max_response_tokens',
    ]);
  });

  it('an algorithm resolver checks the algorithm section and supplies repeat_times', () => {
    const config = load(`${MINIMAL}algorithm: {algorithm_type: grpo}\n`, { resolveAlgorithm: () => ({ repeatTimes: 8 }) });
    assert.equal(config.algorithm.repeat_times, 8);
    assert.equal(config.buffer.train_batch_size, 32);
    const lines = problems(`${MINIMAL}algorithm: {policy_loss_fn: ppoo}\n`, {
      resolveAlgorithm: (section) => {
        throw new Error(
          `algorithm.policy_loss_fn: unknown policy_loss_fn '${String(section.policy_loss_fn)}'; did you mean 'ppo'?`,
        );
      },
    });
    assert.deepEqual(lines.map(bare), ["algorithm.policy_loss_fn: unknown policy_loss_fn 'ppoo'; did you mean 'ppo'?"]);
  });
});

describe('loadConfig: overrides and paths', () => {
  it('--set: dotted paths, list indices, YAML values, null for the default', () => {
    const config = load(`${MINIMAL}    eval_tasksets: [{path: e.jsonl}]\nmonitor: {monitor_type: [jsonl]}\n`, {
      overrides: [
        'buffer.batch_size=16',
        'buffer.explorer_input.eval_tasksets.0.name=math500',
        'buffer.explorer_input.eval_tasksets.1.path=/e2.jsonl',
        'monitor.monitor_type=[tensorboard, jsonl]',
        'project=my project',
        'model.dtype=float32',
        'trainer.gradient_checkpointing=false',
        'explorer.max_timeout=',
      ],
    });
    assert.equal(config.buffer.batch_size, 16);
    assert.deepEqual(
      config.buffer.explorer_input.eval_tasksets.map((t) => [t.name, t.path]),
      [
        ['math500', join(dir, 'e.jsonl')],
        ['eval_taskset_1', '/e2.jsonl'],
      ],
    );
    assert.deepEqual(config.monitor.monitor_type, ['tensorboard', 'jsonl']);
    assert.equal(config.project, 'my project');
    assert.equal(config.model.dtype, 'float32');
    assert.equal(config.trainer.gradient_checkpointing, false);
    assert.equal(config.explorer.max_timeout, 1800);
  });

  it('--set problems name the override', () => {
    assert.deepEqual(
      problems(MINIMAL, { overrides: ['buffer.batch_size=x', 'nokey', 'model.model_path.y=1', 'stages.2.mode=train'] }),
      [
        "override 'nokey' is not key.path=value (--set nokey)",
        'model.model_path: is the string "models/tiny", not a mapping or list (--set model.model_path.y=1)',
        'stages: has 0 item(s); index 2 is out of range (0 appends) (--set stages.2.mode=train)',
        'buffer.batch_size: expected an integer, got the string "x" (--set buffer.batch_size=x)',
      ],
    );
  });

  it('relative paths resolve against the config file folder; --set paths against the working directory', () => {
    const sub = join(dir, 'sub');
    mkdirSync(sub, { recursive: true });
    const file = join(sub, 'run.yaml');
    writeFileSync(
      file,
      `checkpoint_root_dir: ../ckpt
model: {model_path: ./m, max_model_len: 64, lora: {path: ~/adapters/a}}
buffer:
  explorer_input:
    taskset: {path: data/t.jsonl}
  trainer_input:
    experience_buffer: {storage_type: sql, path: sqlite:///buffer.db}
    auxiliary_buffers: {sft: {path: /abs/sft.jsonl}}
`,
    );
    const cwd = join(dir, 'work');
    const config = loadConfig(file, { env: {}, cwd, overrides: ['model.critic_model_path=critic'] });
    assert.equal(config.checkpoint_root_dir, join(dir, 'ckpt'));
    assert.equal(config.model.model_path, join(sub, 'm'));
    assert.equal(config.model.critic_model_path, join(cwd, 'critic'));
    assert.equal(config.model.lora?.path, resolve(process.env.HOME ?? '/', 'adapters/a'));
    assert.equal(config.buffer.explorer_input.tasksets[0]?.path, join(sub, 'data/t.jsonl'));
    // SQLAlchemy's sqlite:///relative.db is a file relative to the config's folder, as the other paths
    assert.equal(config.buffer.trainer_input.experience_buffer.path, join(sub, 'buffer.db'));
    assert.equal(config.buffer.trainer_input.auxiliary_buffers.sft?.path, '/abs/sft.jsonl');
    assert.equal(config.buffer.trainer_input.auxiliary_buffers.sft?.name, 'sft');
  });
});

describe('stages', () => {
  const STAGED = `
name: run
checkpoint_root_dir: /ckpt
model: {model_path: /m, max_model_len: 64}
algorithm: {algorithm_type: grpo, repeat_times: 4, policy_loss_fn_args: {clip_range: 0.2}}
buffer:
  batch_size: 8
  explorer_input: {taskset: {path: /t.jsonl, format: {prompt_key: question}}}
stages:
  - stage_name: sft
    mode: train
    algorithm: {algorithm_type: sft}
    buffer:
      train_batch_size: 32
      explorer_input: null
      trainer_input: {experience_buffer: {storage_type: file, path: /sft.jsonl}}
  - stage_name: grpo
    buffer:
      batch_size: 2
      explorer_input: {taskset: {format: {response_key: answer}}}
`;

  it('a plain config is one stage', () => {
    const config = load(MINIMAL);
    const stages = resolveStages(config);
    assert.equal(stages.length, 1);
    const { stage_name, ...run } = stages[0] as (typeof stages)[number];
    assert.equal(stage_name, '');
    const { stages: _s, trinity_keys: _keys, ...top } = config; // the record of Trinity keys is the whole run's
    assert.deepEqual(run, top);
  });

  it('each stage deep-merges its overrides onto the top level and is resolved in full', () => {
    const config = load(STAGED);
    const [sft, grpo] = resolveStages(config);
    assert.ok(sft && grpo);
    assert.equal(sft.stage_name, 'sft');
    assert.equal(sft.name, 'run/sft');
    assert.equal(sft.checkpoint_job_dir, '/ckpt/Trinity-RFT/run/sft');
    assert.equal(sft.mode, 'train');
    assert.equal(sft.synchronizer.sync_method, 'checkpoint');
    // another algorithm_type replaces the section: grpo's repeat_times and arguments (policy_loss_fn_args) do not leak
    // into sft; bypass_old_logprobs and rollout_correction are the schema's defaults of every algorithm section
    assert.deepEqual(Object.keys(sft.algorithm), [
      'algorithm_type',
      'repeat_times',
      'optimizer',
      'bypass_old_logprobs',
      'rollout_correction',
    ]);
    assert.equal(sft.algorithm.repeat_times, 1);
    assert.deepEqual(sft.buffer.explorer_input.tasksets, []); // removed by null
    assert.equal(sft.buffer.trainer_input.experience_buffer.path, '/sft.jsonl');
    assert.equal(sft.buffer.train_batch_size, 32);

    assert.equal(grpo.name, 'run/grpo');
    assert.equal(grpo.mode, 'both');
    assert.deepEqual(grpo.algorithm.policy_loss_fn_args, { clip_range: 0.2 });
    assert.equal(grpo.buffer.batch_size, 2);
    assert.equal(grpo.buffer.train_batch_size, 8); // derived from the stage's batch_size: 2 * 4
    const format = grpo.buffer.explorer_input.tasksets[0]?.format;
    assert.deepEqual([format?.prompt_key, format?.response_key], ['question', 'answer']);
    assert.equal(config.buffer.train_batch_size, 32); // the top level: 8 * 4
  });

  it('problems in a stage name the stage', () => {
    const lines = problems(`${STAGED}    trainer: {grad_clipp: 1}\n  - stage_name: sft\n    mode: explore\n`).map(bare);
    assert.deepEqual(lines, [
      "stages.1.trainer.grad_clipp: unknown key 'grad_clipp'; did you mean 'grad_clip'?",
      "stages.2.stage_name: 'sft' is already the name of stages.0",
      "buffer.trainer_input.experience_buffer.storage_type: mode explore writes experiences for a separate train process: use a shared buffer, storage_type sql (got queue) (in stage 'sft')",
    ]);
    assert.deepEqual(problems(`${STAGED}  - {stage_name: x, model: {}}\n`).map(bare), [
      "stages.2.model: unknown key 'model'; it is a key of the top level: move it there",
    ]);
    // a key of many sections: the one nearest the top (Trinity's gomoku example has this key at the top level)
    const [misplaced] = problems(`${STAGED}default_workflow_type: math_workflow\n`).map(bare);
    assert.match(
      misplaced ?? '',
      /^default_workflow_type: unknown key 'default_workflow_type'; it is a key of buffer\.explorer_input \(and of \d+ other sections\): move it there$/,
    );
  });

  it('--set reaches into stages by index', () => {
    const config = load(STAGED, {
      overrides: ['stages.1.mode=explore', 'stages.1.buffer.trainer_input.experience_buffer.storage_type=sql'],
    });
    assert.equal(config.stages[1]?.mode, 'explore');
    assert.equal(
      config.stages[1]?.buffer.trainer_input.experience_buffer.path,
      '/ckpt/Trinity-RFT/run/grpo/buffer/experience_buffer.db',
    );
  });
});

describe('parseConfig', () => {
  it('takes YAML text; an empty document is an empty mapping', () => {
    assert.deepEqual(
      (() => {
        try {
          parseConfig('', { env: {} });
        } catch (error) {
          return (error as ConfigError).problems.map((p) => p.path);
        }
        return [];
      })(),
      ['model'],
    );
    assert.throws(() => parseConfig('- a\n- b\n', { env: {} }), /the top level must be a mapping/);
  });
});

describe('example configs', () => {
  it('every examples/**/*.yaml run config validates', () => {
    const root = resolve(import.meta.dirname, '../../../examples');
    const found: string[] = [];
    const walk = (d: string) => {
      for (const entry of readdirSync(d)) {
        const path = join(d, entry);
        if (statSync(path).isDirectory()) walk(path);
        else if (/\.ya?ml$/.test(entry)) found.push(path);
      }
    };
    try {
      walk(root);
    } catch {
      return; // no examples folder
    }
    for (const file of found) {
      const doc: unknown = YAML.parse(readFileSync(file, 'utf8'));
      if (typeof doc !== 'object' || doc === null || !('model' in doc)) continue; // not a run config
      assert.doesNotThrow(() => loadConfig(file, { env: { ...process.env } }), file);
    }
  });
});

describe('trinity config check', () => {
  async function run(args: string[]): Promise<{ code: number; out: string; err: string }> {
    let out = '';
    let err = '';
    const output = { stdout: { write: (text: string) => (out += text) }, stderr: { write: (text: string) => (err += text) } };
    return { code: await configCommand(args, output), out, err };
  }

  it('prints the resolved config as YAML, api keys masked', async () => {
    const file = write(
      `${MINIMAL}mode: bench\nexplorer: {rollout_model: {engine_type: openai, base_url: http://x/v1, api_key: sk-secret}}\n`,
    );
    // bench on an external server: the pre-run checks read only the eval taskset (the server has the model)
    const evalFile = tasksetFile(join(dir, 'eval.jsonl'));
    const { code, out, err } = await run([
      'check',
      file,
      '--no-algorithm-check',
      '--set',
      `buffer.explorer_input.eval_tasksets.0.path=${evalFile}`,
    ]);
    assert.equal(code, 0, err);
    const printed = YAML.parse(out) as Config;
    assert.equal(printed.mode, 'bench');
    assert.equal(printed.explorer.rollout_model.api_key, '***');
    assert.equal(printed.buffer.explorer_input.eval_tasksets[0]?.path, evalFile);
    assert.ok(!out.includes('sk-secret'));
  });

  it('prints one document per stage', async () => {
    const model = modelFolder(join(dir, 'stages-model'));
    const tasks = tasksetFile(join(dir, 'stages-tasks.jsonl'));
    const file = write(
      `model: {model_path: ${model}, max_model_len: 8}\nbuffer: {explorer_input: {taskset: {path: ${tasks}}}}\ncheckpoint_root_dir: ${dir}/runs\nstages: [{stage_name: a}, {stage_name: b}]\n`,
    );
    const { code, out, err } = await run(['check', file, '--no-algorithm-check']);
    assert.equal(code, 0, err);
    assert.deepEqual(
      YAML.parseAllDocuments(out).map((d) => (d.toJS() as { stage_name: string }).stage_name),
      ['a', 'b'],
    );
  });

  it('prints the problems and exits 1; --help exits 0', async () => {
    const file = write('model: {model_path: /m}\nbufer: {}\n');
    const { code, err } = await run(['check', file, '--no-algorithm-check']);
    assert.equal(code, 1);
    assert.match(err, /bufer: unknown key 'bufer'; did you mean 'buffer'\?/);
    assert.equal((await run(['check', '--help'])).code, 0);
    assert.equal((await run(['check'])).code, 2);
  });

  it('takes the file as --config FILE too, as trinity run does (one file: not both forms)', async () => {
    const file = write('model: {model_path: /m}\nbufer: {}\n');
    const { code, err } = await run(['check', '--config', file, '--no-algorithm-check']);
    assert.equal(code, 1);
    assert.match(err, /bufer: unknown key 'bufer'/);
    const both = await run(['check', '--config', file, file, '--no-algorithm-check']);
    assert.equal(both.code, 2);
    assert.match(both.err, /give exactly one config file/);
  });
});
