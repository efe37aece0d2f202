// Settings that used to be parsed and ignored (issue 14): each either works as Trinity-RFT defines it, reaching the
// stage settings (and from there the loops, loaders and monitors), or is refused at validation with a message that
// names the key, says it is not supported here and what to use instead.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { createSelector, loadTaskset } from '../../../src/rft/buffer/index.js';
import { type Config, ConfigError, parseConfig, resolveStages } from '../../../src/rft/run/config/index.js';
import { runConfig, stageSettings } from '../../../src/rft/run/index.js';
import { modelFolder } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-settings-'));
const parse = (text: string): Config => parseConfig(text, { env: {}, cwd: dir });

/** The problems of an invalid config, each `path: message` (without where it was written). */
function problems(text: string): string[] {
  try {
    parse(text);
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    return error.problems.map((p) => `${p.path}: ${p.message}`);
  }
  assert.fail('expected a ConfigError');
}

const MODEL = 'model: {model_path: /m, max_model_len: 64}\n';
const BASE = `${MODEL}buffer:
  batch_size: 2
  explorer_input:
    taskset: {path: /t}
`;
/** The first stage's settings of BASE with `extra` YAML appended (or of the model and `extra`, when it has a buffer). */
const settingsOf = (extra: string, index = 0) => {
  const stage = resolveStages(parse(/^buffer:/m.test(extra) ? `${MODEL}${extra}` : `${BASE}${extra}`))[index];
  assert.ok(stage);
  return stageSettings(stage, '/m');
};

describe('buffer.trainer_input.sft_warmup_dataset / sft_warmup_steps', () => {
  it('become an SFT stage (mode train, algorithm sft, the dataset as a file buffer) before the RL stage', () => {
    const config = parse(`${MODEL}
algorithm: {algorithm_type: grpo, repeat_times: 4, optimizer: {lr: 3.0e-6}}
buffer:
  batch_size: 2
  explorer_input: {taskset: {path: /t}}
  trainer_input:
    sft_warmup_dataset: {path: /sft, split: train, format: {prompt_key: q, response_key: a}}
    sft_warmup_steps: 5
`);
    const [sft, rl] = resolveStages(config);
    assert.ok(sft && rl);
    assert.equal(sft.stage_name, 'sft_warmup');
    assert.equal(sft.mode, 'train');
    assert.equal(sft.algorithm.algorithm_type, 'sft');
    assert.equal(sft.algorithm.optimizer.lr, 3e-6, "the warm-up trains with the run's optimizer");
    assert.equal(sft.buffer.total_steps, 5);
    assert.equal(sft.buffer.train_batch_size, 8, 'batch_size * repeat_times of the RL stage');
    assert.equal(sft.buffer.explorer_input.tasksets.length, 0, 'the warm-up explores nothing');
    const sftSettings = stageSettings(sft, '/m');
    assert.equal(sftSettings.buffer.storageType, 'file');
    assert.equal(sftSettings.buffer.path, '/sft');
    assert.equal(sftSettings.buffer.format?.promptKey, 'q');
    assert.equal(sftSettings.totalSteps, 5);
    assert.deepEqual(sftSettings.explorer.engine, {
      type: 'embedded',
      weightSync: 'checkpoint',
      engineNum: 1,
      engineProcess: false,
      prefixCaching: false,
      prefill: { chunkedPrefill: false },
      weightSyncBufferBytes: 1024 * 1024 * 1024,
    });

    assert.equal(rl.stage_name, 'rft');
    assert.equal(rl.mode, 'both');
    assert.equal(rl.algorithm.algorithm_type, 'grpo');
    assert.equal(rl.buffer.trainer_input.sft_warmup_dataset, null);
    assert.equal(rl.buffer.trainer_input.experience_buffer.storage_type, 'queue');
    assert.equal(rl.buffer.explorer_input.tasksets[0]?.path, '/t');
    assert.notEqual(sft.checkpoint_job_dir, rl.checkpoint_job_dir);
  });

  it('a mode train run with only the warm-up is refused (it used to wait sync_timeout for an empty queue)', () => {
    assert.deepEqual(
      problems(`${MODEL}mode: train
buffer:
  train_batch_size: 4
  trainer_input: {sft_warmup_dataset: {path: /sft}, sft_warmup_steps: 3}
`),
      [
        'buffer.trainer_input.experience_buffer: mode train needs experiences to read: an experience_buffer with ' +
          "storage_type sql (shared with an explore process) or file (a dataset) (in stage 'rft', made from " +
          'buffer.trainer_input.sft_warmup_dataset/sft_warmup_steps)',
      ],
    );
  });

  it('with stages it is refused, pointing at a stage', () => {
    const lines = problems(`${MODEL}
buffer:
  explorer_input: {taskset: {path: /t}}
  trainer_input: {sft_warmup_dataset: {path: /sft}, sft_warmup_steps: 3}
stages: [{stage_name: one}]
`);
    assert.equal(lines.length, 1);
    assert.match(
      lines[0] ?? '',
      /^buffer\.trainer_input\.sft_warmup_dataset: cannot be combined with stages: write the SFT warm-up as the first stage \(mode: train, algorithm_type: sft/,
    );
  });
});

describe('trainer.grad_clip and algorithm.optimizer.clip_grad: one max gradient norm', () => {
  const clipOf = (yaml: string) => {
    const settings = settingsOf(yaml);
    // the trainer clips with what the algorithm layer resolves from settings.algorithm
    return resolveAlgorithm(settings.algorithm).optimizer.clipGrad;
  };
  it('trainer.grad_clip first (what Trinity clips with), else optimizer.clip_grad, else 1.0', () => {
    assert.equal(clipOf('trainer: {grad_clip: 0.3}\n'), 0.3);
    assert.equal(clipOf('algorithm: {optimizer: {clip_grad: 0.7}}\n'), 0.7);
    assert.equal(clipOf('trainer: {grad_clip: 0.3}\nalgorithm: {optimizer: {clip_grad: 0.7}}\n'), 0.3);
    assert.equal(clipOf(''), 1.0);
    const config = parse(`${BASE}trainer: {grad_clip: 0.3}\n`);
    assert.equal(config.trainer.grad_clip, 0.3);
    assert.equal(config.algorithm.optimizer.clip_grad, 0.3);
  });
});

describe('refused settings name the key, say it is not supported here, and what to use', () => {
  it('algorithm.optimizer.optimizer_type other than AdamW', () => {
    assert.deepEqual(problems(`${BASE}algorithm: {optimizer: {optimizer_type: sgd}}\n`), [
      "algorithm.optimizer.optimizer_type: got 'sgd': this optimizer is not supported here: the trainer has AdamW only " +
        "(decoupled weight decay, as Trinity's FSDP trainer runs 'adam' and 'adamw'); use 'adam' or 'adamw'",
    ]);
    assert.equal(parse(`${BASE}algorithm: {optimizer: {optimizer_type: AdamW}}\n`).algorithm.optimizer.optimizer_type, 'AdamW');
  });

  it("explorer.rollout_model.enable_prefix_caching switches the embedded engine's prefix cache; an external server is told to drop it", () => {
    const engine = settingsOf('explorer: {rollout_model: {enable_prefix_caching: true}}\n').explorer.engine;
    assert.equal(engine.type === 'embedded' && engine.prefixCaching, true);
    assert.deepEqual(
      problems(`${BASE}explorer: {rollout_model: {engine_type: openai, base_url: http://a/v1, enable_prefix_caching: true}}\n`),
      [
        "explorer.rollout_model.enable_prefix_caching: switches the embedded engine's prefix cache; an external server sets its own: remove it",
      ],
    );
  });

  it("explorer.rollout_model.enable_chunked_prefill and max_num_batched_tokens reach the embedded engine's options", () => {
    const engineOf = (rollout: string) => settingsOf(`explorer: {rollout_model: {${rollout}}}\n`).explorer.engine;
    const prefill = (rollout: string) => {
      const engine = engineOf(rollout);
      return engine.type === 'embedded' ? engine.prefill : null;
    };
    assert.deepEqual(prefill('enable_chunked_prefill: true'), { chunkedPrefill: true });
    assert.deepEqual(prefill('enable_chunked_prefill: true, max_num_batched_tokens: 512'), {
      chunkedPrefill: true,
      maxPrefillTokens: 512,
    });
    assert.deepEqual(prefill('max_num_batched_tokens: 512'), { chunkedPrefill: false, maxPrefillTokens: 512 });
    assert.deepEqual(
      problems(`${BASE}explorer: {rollout_model: {slots: 16, enable_chunked_prefill: true, max_num_batched_tokens: 8}}\n`),
      [
        'explorer.rollout_model.max_num_batched_tokens: (8) is below slots (16): with enable_chunked_prefill each decoding ' +
          "sequence takes one token of a step's budget: raise it to at least slots",
      ],
    );
    const server = `${BASE}explorer: {rollout_model: {engine_type: openai, base_url: http://a/v1, enable_chunked_prefill: true, max_num_batched_tokens: 64}}\n`;
    assert.deepEqual(problems(server), [
      "explorer.rollout_model.enable_chunked_prefill: schedules the embedded engine's steps; an external server sets its own: remove it",
      "explorer.rollout_model.max_num_batched_tokens: schedules the embedded engine's steps; an external server sets its own: remove it",
    ]);
  });

  it('explorer.rollout_model.engine_num > 1: engine pools (no longer refused); an external pool takes one per base_url', () => {
    // embedded: two engines reach the stage (test/rft/run/engine-pool-config.test.ts checks the rest of the pool's keys)
    assert.deepEqual(settingsOf('explorer: {rollout_model: {engine_num: 2}}\n').explorer.engine, {
      type: 'embedded',
      weightSync: 'memory',
      engineNum: 2,
      engineProcess: false,
      prefixCaching: false,
      prefill: { chunkedPrefill: false },
      weightSyncBufferBytes: 1024 * 1024 * 1024,
    });
    // what is still refused names the key, the value and what to use
    assert.deepEqual(
      problems(`${BASE}explorer: {rollout_model: {engine_type: openai, engine_num: 2, base_url: http://a/v1}}\n`),
      [
        'explorer.rollout_model.engine_num: (2) an external pool has one engine per base_url (1 given): list the servers in ' +
          'base_url, and set engine_num to their number or leave it out',
      ],
    );
  });

  it('monitor.detailed_stats', () => {
    const [line] = problems(`${BASE}monitor: {detailed_stats: true}\n`);
    assert.match(line ?? '', /^monitor\.detailed_stats: got true: detailed_stats is not supported here: .*; use false$/);
  });

  it('storage_type sql for training datasets (tasksets read SQLite tables)', () => {
    assert.deepEqual(
      problems(`model: {model_path: /m, max_model_len: 64}
buffer:
  explorer_input:
    taskset: {path: /t, storage_type: sql}
  trainer_input:
    sft_warmup_dataset: {path: /s, storage_type: sql}
    sft_warmup_steps: 2
    auxiliary_buffers: {expert: {path: /x, storage_type: sql}}
`),
      ['buffer.trainer_input.sft_warmup_dataset.storage_type', 'buffer.trainer_input.auxiliary_buffers.expert.storage_type'].map(
        (path) =>
          `${path}: got 'sql': storage_type sql (SFT rows in an SQL table) is not supported here for training datasets: ` +
          'export the rows to JSONL and use storage_type file with that path (an SQLite experience buffer is ' +
          'buffer.trainer_input.experience_buffer; tasksets do read SQLite tables)',
      ),
    );
  });

  it('format keys of the other kind of data, and selectors on eval tasksets', () => {
    assert.deepEqual(
      problems(`${BASE.replace('{path: /t}', '{path: /t, format: {chosen_key: good}}')}
  trainer_input:
    experience_buffer: {storage_type: queue, format: {reply_prefix: "<think>"}}
`),
      [
        "buffer.trainer_input.experience_buffer.format.reply_prefix: got '<think>': reply_prefix applies to tasksets (the rollouts of a task); a training row holds its whole answer: remove it",
        "buffer.explorer_input.taskset.format.chosen_key: got 'good': chosen_key applies to training datasets (buffer.trainer_input), not to tasks: remove it",
      ],
    );
    const [line] = problems(`model: {model_path: /m, max_model_len: 64}
buffer:
  explorer_input:
    taskset: {path: /t}
    eval_tasksets: [{path: /e, data_selector: {selector_type: shuffle}}]
`);
    assert.equal(
      line,
      'buffer.explorer_input.eval_tasksets.0.data_selector: got a mapping: a selector is not used for eval tasksets (each evaluation runs every task of the taskset): remove it',
    );
  });
});

describe('settings that reach the stage', () => {
  it('explorer.bench_on_latest_checkpoint and experience_buffer.max_read_timeout', () => {
    const settings = settingsOf(`explorer: {bench_on_latest_checkpoint: true}
buffer:
  batch_size: 2
  explorer_input: {taskset: {path: /t}}
  trainer_input: {experience_buffer: {max_read_timeout: 12.5}}
`);
    assert.deepEqual(settings.bench, { onLatestCheckpoint: true });
    assert.equal(settings.buffer.maxReadTimeoutMs, 12_500);
    assert.deepEqual(settingsOf('').bench, { onLatestCheckpoint: false });
    assert.equal(settingsOf('').buffer.maxReadTimeoutMs, 1_800_000, "Trinity's 1800 s");
  });

  it('explorer.workflow_max_heap_mb (default 1024 MB; at least 16)', () => {
    assert.equal(settingsOf('explorer: {workflow_max_heap_mb: 256}\n').explorer.workflowMaxHeapMb, 256);
    assert.equal(settingsOf('').explorer.workflowMaxHeapMb, 1024);
    assert.deepEqual(problems(`${BASE}explorer: {workflow_max_heap_mb: 8}\n`), [
      'explorer.workflow_max_heap_mb: must be >= 16, got 8',
    ]);
  });

  it('model.lora.path and model.critic_model_path (relative paths resolve against the config folder)', () => {
    assert.equal(settingsOf('').loraPath, null, 'no adapter: a new one');
    const config = parseConfig(
      'model: {model_path: /m, max_model_len: 64, critic_model_path: critic, lora: {path: adapter}}\nbuffer: {explorer_input: {taskset: {path: /t}}}\n',
      { env: {}, cwd: dir, file: join(dir, 'run.yaml') },
    );
    const [stage] = resolveStages(config);
    assert.ok(stage);
    const s = stageSettings(stage, '/m');
    assert.equal(s.loraPath, join(dir, 'adapter'));
    assert.equal(s.criticModelPath, join(dir, 'critic'));
    const plain = stageSettings(resolveStages(parse(BASE))[0] as never, '/m');
    assert.equal(plain.criticModelPath, null, "null: the critic starts from the stage's policy weights");
    // an adapter folder brings its own rank, alpha and targets (the trainer checks any set here against it) ...
    assert.deepEqual(s.lora, { rank: null, alpha: null, dropout: 0, targetModules: null, adapterName: null });
    // ... a new adapter gets Trinity's defaults (lora_rank 32, lora_alpha 32, all-linear)
    const fresh = settingsOf('', 0);
    assert.equal(fresh.lora, null);
    const freshLora = stageSettings(
      resolveStages(
        parse(`model: {model_path: /m, max_model_len: 64, lora: {dropout: 0.1}}\n${BASE.slice(MODEL.length)}`),
      )[0] as never,
      '/m',
    );
    assert.deepEqual(freshLora.lora, { rank: 32, alpha: 32, dropout: 0.1, targetModules: 'all-linear', adapterName: null });
  });

  it('monitor.monitor_args reach the monitors; keys of other backends are refused', () => {
    const settings = settingsOf(
      'monitor: {monitor_type: [wandb, mlflow], monitor_args: {base_url: "http://w", api_key: k, uri: "http://m", username: u, password: p}}\n',
    );
    assert.deepEqual(settings.monitorArgs, { baseUrl: 'http://w', apiKey: 'k', uri: 'http://m', username: 'u', password: 'p' });
    assert.deepEqual(problems(`${BASE}monitor: {monitor_type: tensorboard, monitor_args: {uri: "http://m"}}\n`), [
      'monitor.monitor_args.uri: is not an argument of monitor_type tensorboard; they take none',
    ]);
    assert.deepEqual(problems(`${BASE}monitor: {monitor_type: wandb, monitor_args: {uri: "http://m"}}\n`), [
      'monitor.monitor_args.uri: is not an argument of monitor_type wandb; expected one of: base_url, api_key',
    ]);
  });

  it('experience_buffer.name, priority_fn_args (use_count_limit, sigma), and their checks', () => {
    const settings = settingsOf(`buffer:
  batch_size: 2
  explorer_input: {taskset: {path: /t}}
  trainer_input:
    experience_buffer:
      name: shared
      replay_buffer: {enable: true, priority_fn: decay_limit_randomization, priority_fn_args: {decay: 1, use_count_limit: 4, sigma: 0.5}}
`);
    assert.equal(settings.buffer.name, 'shared');
    assert.deepEqual(settings.buffer.replay, {
      priorityFn: 'decay_limit_randomization',
      decay: 1,
      useCountLimit: 4,
      sigma: 0.5,
      reuseCooldownMs: null,
    });
    assert.deepEqual(
      problems(
        `${BASE}  trainer_input: {experience_buffer: {replay_buffer: {priority_fn: linear_decay, priority_fn_args: {sigma: 1}}}}\n`,
      ),
      [
        'buffer.trainer_input.experience_buffer.replay_buffer.priority_fn_args.sigma: is not an argument of linear_decay; expected one of: decay',
      ],
    );
  });

  it('continue_from_checkpoint: false starts afresh in <job dir>_<timestamp>, leaving the earlier folder', async () => {
    const root = mkdtempSync(join(tmpdir(), 'trinity-fresh-'));
    const model = modelFolder(join(root, 'model'));
    // mode serve: the stage itself is the stand-in below (the rft layer hands serve stages to the serving layer)
    const config = parseConfig(
      `model: {model_path: ${model}, max_model_len: 64}
mode: serve
buffer: {trainer_input: {experience_buffer: {storage_type: sql}}}
checkpoint_root_dir: ${root}
continue_from_checkpoint: false
name: fresh
stages: [{stage_name: a}]
`,
      { env: {}, cwd: dir },
    );
    const [stage] = resolveStages(config);
    assert.ok(stage);
    mkdirSync(stage.checkpoint_job_dir, { recursive: true });
    writeFileSync(join(stage.checkpoint_job_dir, 'done.json'), '{"finalModelDir": null, "steps": 1}\n');
    const lines: string[] = [];
    const ran: string[] = [];
    await runConfig(config, {
      log: (l) => lines.push(l),
      serveStage: async (settings) => {
        ran.push(settings.jobDir);
        return { finalModelDir: null, steps: 0 };
      },
    });
    const project = join(root, 'Trinity-RFT');
    const fresh = readdirSync(project).find((f) => /^fresh_\d{8}T\d{6}$/.test(f));
    assert.ok(fresh, readdirSync(project).join(', '));
    assert.deepEqual(ran, [join(project, fresh, 'a')], 'the finished stage runs again, in the new folder');
    assert.ok(existsSync(join(stage.checkpoint_job_dir, 'done.json')), 'the earlier run is left as it is');
    assert.ok(existsSync(join(project, fresh, 'a', 'done.json')));
    assert.ok(lines.some((l) => l.includes('continue_from_checkpoint is false')));
  });
});

describe('tasksets from YAML', () => {
  const data = mkdtempSync(join(tmpdir(), 'trinity-tasks-'));
  const rows = [
    { prompt: 'a', pass_rate: 0.2 },
    { prompt: 'b', pass_rate: 0.9 },
    { prompt: 'c', pass_rate: 0.5 },
  ];
  writeFileSync(join(data, 'train.jsonl'), `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);

  it('offline_easy2hard with feature_keys from YAML: the features reach the loader and the selector', async () => {
    for (const key of ['data_selector', 'task_selector']) {
      const settings = settingsOf(`buffer:
  batch_size: 3
  explorer_input:
    taskset: {path: ${data}, ${key}: {selector_type: offline_easy2hard, feature_keys: [pass_rate]}}
`);
      const entry = settings.tasksets[0];
      assert.ok(entry);
      const taskset = await loadTaskset(entry.taskset);
      const selector = createSelector(taskset.tasks, entry.selector);
      assert.deepEqual(
        selector.next(3).map((i) => taskset.tasks[i]?.prompt),
        ['b', 'c', 'a'],
        `${key}: highest pass rate (easiest) first`,
      );
    }
  });

  it('storage_type sql: the rows of the table named after the taskset, raw_task JSON in id order', async () => {
    const db = join(data, 'tasks.db');
    const sqlite = new Database(db);
    sqlite.exec('CREATE TABLE math (id INTEGER PRIMARY KEY, raw_task TEXT)');
    const insert = sqlite.prepare('INSERT INTO math (id, raw_task) VALUES (?, ?)');
    insert.run(2, JSON.stringify({ question: 'second', answer: '2' }));
    insert.run(1, JSON.stringify({ question: 'first', answer: '1' }));
    sqlite.close();
    const settings = settingsOf(`buffer:
  batch_size: 2
  explorer_input:
    taskset: {name: math, storage_type: sql, path: "sqlite:///${db}", format: {prompt_key: question, response_key: answer}}
`);
    const entry = settings.tasksets[0];
    assert.ok(entry);
    const { tasks } = await loadTaskset(entry.taskset);
    assert.deepEqual(
      tasks.map((t) => [t.prompt, t.response]),
      [
        ['first', '1'],
        ['second', '2'],
      ],
    );
    await assert.rejects(
      loadTaskset({ ...entry.taskset, name: 'other' }),
      /the database has no table 'other' \(the taskset's name\)/,
    );
    assert.deepEqual(problems(`${BASE.replace('{path: /t}', '{path: /t.db, storage_type: sql, split: test}')}`), [
      'buffer.explorer_input.taskset.split: applies to files; an sql taskset reads its table (named after the taskset): remove it',
    ]);
    // the experience buffer: split and subset_name pick dataset files, a queue or an sql table has none
    const withBuffer = (fields: string) => `${BASE}  trainer_input:\n    experience_buffer: {storage_type: sql, ${fields}}\n`;
    assert.deepEqual(problems(withBuffer('split: test, subset_name: main')), [
      'buffer.trainer_input.experience_buffer.split: applies to a dataset (storage_type file), not to sql: remove it',
      'buffer.trainer_input.experience_buffer.subset_name: applies to a dataset (storage_type file), not to sql: remove it',
    ]);
  });

  it('data_selector kwargs are checked against the selector type and reach it in its own names', () => {
    const settings = settingsOf(`buffer:
  batch_size: 3
  explorer_input:
    taskset: {path: /t, data_selector: {selector_type: difficulty_based, kwargs: {target_reward: 0.3, tau: 0.5, do_sample: false}}}
`);
    assert.deepEqual(settings.tasksets[0]?.selector, {
      selectorType: 'difficulty_based',
      seed: 42,
      targetReward: 0.3,
      tau: 0.5,
      doSample: false,
    });
    assert.deepEqual(
      problems(`model: {model_path: /m, max_model_len: 64}
buffer:
  explorer_input:
    taskset: {path: /t, data_selector: {selector_type: difficulty_based, kwargs: {target: 0.3}}, task_selector: {}}
`),
      [
        'buffer.explorer_input.taskset.task_selector: set data_selector (its name since Trinity 0.5.2) or task_selector, not both',
        'buffer.explorer_input.taskset.data_selector.kwargs.target: unknown argument of selector_type difficulty_based; expected one of: target_reward, tau, do_sample, prior_strength, m, lamb, rho, adaptive_rho',
      ],
    );
    assert.deepEqual(problems(`${BASE.replace('{path: /t}', '{path: /t, data_selector: {selector_type: offline_easy2hard}}')}`), [
      'buffer.explorer_input.taskset.data_selector.feature_keys: offline_easy2hard sorts tasks by these columns: set at least one',
    ]);
  });
});
