// Every key of the config schema is either read by the run or refused: a setting can no longer be parsed and then
// ignored. A config with every key set runs through the config → StageSettings translation (runConfig with every
// stage already done: resolveStages and stageSettings for each stage; then the algorithm resolver the stage hands
// settings.algorithm to) with a recording Proxy over the resolved config; each schema leaf must have been read, be
// in the refusal table that validation uses (REFUSED_SETTINGS), or be folded by validation into a key that was read
// (FOLDED_SETTINGS). The failure names the key.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { POLICY_LOSS_FN } from '../../../src/rft/algorithm/policy-loss/index.js';
import { snakeToCamel } from '../../../src/rft/algorithm/registry.js';
import {
  type Config,
  ConfigSchema,
  FOLDED_SETTINGS,
  IGNORED_KEYS,
  matchesPath,
  parseConfig,
  REFUSED_SETTINGS,
  resolveStages,
  schemaLeafPaths,
} from '../../../src/rft/run/config/index.js';
import { runConfig, stageSettings } from '../../../src/rft/run/index.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-coverage-'));

/** Every key set (to a value other than its default where the run accepts one), every optional section present. */
const FULL = `
mode: both
project: cov
name: all
checkpoint_root_dir: ${dir}/ckpt
continue_from_checkpoint: true
model:
  model_path: /models/policy
  critic_model_path: /models/critic
  max_prompt_tokens: 96
  max_response_tokens: 32
  max_model_len: 128
  enable_prompt_truncation: false
  dtype: float32
  lora: {rank: 4, alpha: 8, dropout: 0, target_modules: [q_proj, v_proj], path: /adapters/start}
algorithm:
  algorithm_type: grpo
  repeat_times: 4
  optimizer:
    lr: 2.0e-6
    lr_warmup_steps: 2
    lr_warmup_steps_ratio: 0.1
    min_lr_ratio: 0.1
    lr_scheduler_type: cosine
    optimizer_type: adamw
    betas: [0.9, 0.95]
    weight_decay: 0.0
    clip_grad: 0.5
  sample_strategy: default
  sample_strategy_args: {}
  advantage_fn: grpo
  advantage_fn_args: {epsilon: 1.0e-6}
  policy_loss_fn: ppo
  policy_loss_fn_args: {clip_range: 0.2}
  kl_penalty_fn: none
  kl_penalty_fn_args: {}
  kl_loss_fn: k2
  kl_loss_fn_args: {kl_coef: 0.001}
  entropy_loss_fn: default
  entropy_loss_fn_args: {entropy_coef: 0.0}
  loss_agg_mode: token-mean
  enable_router_replay: true
buffer:
  batch_size: 2
  train_batch_size: 8
  total_epochs: 2
  total_steps: 5
  explorer_input:
    taskset:
      name: math
      storage_type: file
      path: /data/math
      split: train
      format:
        prompt_type: messages
        prompt_key: question
        response_key: answer
        messages_key: conversation
        tools_key: functions
        system_prompt_key: system
        system_prompt: Be brief.
        reply_prefix: "<think>"
        workflow_key: workflow
        reward_fn_key: reward
      data_selector: {selector_type: offline_easy2hard, seed: 7, feature_keys: [pass_rate], kwargs: {descending: false}}
      rollout_args: {temperature: 0.7, top_p: 0.9, top_k: 20, min_p: 0.05, max_tokens: 16, seed: 3, stop: ["\\n\\n"], stop_token_ids: [2]}
      workflow_args: {with_think: true}
      reward_fn_args: {scale: 1}
      default_workflow_type: math_workflow
      default_reward_fn_type: math_reward
      repeat_times: 4
    eval_tasksets:
      - name: math_eval
        path: /data/math
        split: test
        format: {prompt_key: question, response_key: answer, tools_key: functions}
        rollout_args: {temperature: 0}
        workflow_args: {with_think: true}
        reward_fn_args: {scale: 1}
        default_workflow_type: math_workflow
        default_reward_fn_type: math_reward
        repeat_times: 2
    default_workflow_type: simple_workflow
    default_eval_workflow_type: math_eval_workflow
    default_reward_fn_type: accuracy_reward
  trainer_input:
    experience_buffer:
      name: exps
      storage_type: queue
      capacity: 64
      max_read_timeout: 30
      replay_buffer: {enable: true, priority_fn: decay_limit_randomization, reuse_cooldown_time: 1, priority_fn_args: {decay: 1, use_count_limit: 2, sigma: 0.1}}
      split: train
      format: {prompt_type: messages, messages_key: conversation, system_prompt_key: system, system_prompt: Hi, tools_key: functions, chosen_key: better, rejected_key: worse, enable_concatenated_multi_turn: true, image_key: pictures}
    sft_warmup_dataset:
      path: /data/sft
      split: train
      format: {prompt_key: q, response_key: a}
    sft_warmup_steps: 3
    auxiliary_buffers:
      expert: {name: expert, path: /data/expert, split: train, format: {prompt_key: q, response_key: a, tools_key: functions, system_prompt_key: system}}
explorer:
  runner_per_model: 2
  max_timeout: 60
  max_retry_times: 1
  eval_interval: 2
  eval_on_startup: false
  bench_on_latest_checkpoint: true
  rollout_model: {engine_type: openai, engine_num: 1, slots: 4, base_url: "http://127.0.0.1:9/v1", api_key: k, model_name: m}
  auxiliary_models:
    - {name: teacher, model_path: /models/teacher, engine_type: embedded, engine_num: 2, slots: 2, max_model_len: 64, dtype: float32, device: cpu}
    - {engine_type: openai, base_url: "http://127.0.0.1:9/v1", api_key: k, model_name: judge, model_path: /models/judge}
  proxy_port: 8011
  listen_address: 127.0.0.2
  api_key: serve-key
  serve_max_tokens: 64
  serve_max_prompt_tokens: 64
  serve_max_body_bytes: 4096
  serve_max_n: 2
trainer:
  save_interval: 2
  max_checkpoints_to_keep: 1
  grad_clip: 0.25
  micro_batch_size: 2
  use_dynamic_bsz: true
  ppo_max_token_len_per_gpu: 4096
  gradient_checkpointing: false
  use_remove_padding: false
  total_steps: 4
synchronizer:
  sync_method: checkpoint
  sync_interval: 2
  sync_offset: 1
  sync_timeout: 10
  sync_style: trainer_driven
  max_staleness: 2
monitor:
  monitor_type: [tensorboard, wandb, mlflow]
  monitor_args: {base_url: "http://127.0.0.1:9", api_key: w, uri: "http://127.0.0.1:9", username: u, password: p}
  detailed_stats: false
data_processor:
  task_pipeline:
    operators: [{name: document_deduplicator, args: {lowercase: true}}]
    num_process: 2
    inputs: [/data/raw.jsonl]
    output: {path: /data/curated.jsonl}
    target_fields: [question, answer]
  experience_pipeline:
    operators: [{name: reward_std_filter, args: {threshold: 0.1}}]
    save_input: true
    input_save_path: ${dir}/raw.jsonl
`;

/** A train stage that stops at an eval metric (trainer.stop_when is refused in FULL's mode both). */
const STOP_WHEN = `
mode: train
project: cov
name: stop
checkpoint_root_dir: ${dir}/ckpt
model: {model_path: /models/policy, max_model_len: 64}
algorithm: {algorithm_type: sft}
buffer:
  total_steps: 4
  train_batch_size: 4
  explorer_input: {eval_tasksets: [{name: eval, path: /data/eval.jsonl}]}
  trainer_input: {experience_buffer: {storage_type: file, path: /data/sft.jsonl}}
trainer:
  stop_when: {metric: eval/eval/mean@1, at_least: 0.5}
`;

/** The schema paths (with `*`) of the concrete path `path` into the resolved config (a stage's keys are the run's). */
function normalize(path: readonly (string | number)[]): string {
  const out: string[] = [];
  const segments = path[0] === 'stages' ? path.slice(2) : path;
  for (const [i, segment] of segments.entries()) {
    const parent = out.join('.');
    const starred =
      typeof segment === 'number' ||
      (parent === 'buffer.trainer_input.auxiliary_buffers' && i === 3) ||
      /^(algorithm\.[a-z_]+_args|monitor\.monitor_args|.*workflow_args|.*reward_fn_args|.*kwargs|.*priority_fn_args)$/.test(
        parent,
      );
    out.push(starred ? '*' : String(segment));
  }
  return out.join('.');
}

/** A deep Proxy of `value` that adds the normalized path of every property read to `reads`. */
function recording<T>(value: T, reads: Set<string>, path: (string | number)[] = []): T {
  if (value === null || typeof value !== 'object') return value;
  return new Proxy(value as object, {
    get(target, key, receiver) {
      const child = Reflect.get(target, key, receiver);
      if (typeof key === 'symbol' || typeof child === 'function') return child;
      const segment = Array.isArray(target) && /^\d+$/.test(key) ? Number(key) : key;
      if (Array.isArray(target) && typeof segment === 'string') return child; // length etc.
      const childPath = [...path, segment];
      reads.add(normalize(childPath));
      return recording(child, reads, childPath);
    },
  }) as T;
}

/** True when `pattern` matches `path` or a key path above it (a refusal of a mapping covers its keys). */
const covers = (pattern: string, path: string): boolean =>
  matchesPath(pattern, path.split('.').slice(0, pattern.split('.').length).join('.'));

/** The folded form of a schema path (FOLDED_SETTINGS as prefix rewrites, applied until none applies), or null. */
function folded(path: string): string | null {
  let current = path;
  for (let changed = true; changed; ) {
    changed = false;
    for (const [from, to] of Object.entries(FOLDED_SETTINGS)) {
      if (!covers(from, current)) continue;
      current = [to, ...current.split('.').slice(from.split('.').length)].join('.');
      changed = true;
      break;
    }
  }
  return current === path ? null : current;
}

/** The schema leaves that `reads` does not cover (neither read, refused nor folded into a read key), by name. */
function uncovered(reads: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const leaf of schemaLeafPaths(ConfigSchema)) {
    // a stage's overrides are the run's own keys (validated by the same schema after merging): checked as those
    if (/^stages\.\*\.(mode|algorithm|buffer|explorer|trainer|synchronizer)$/.test(leaf)) continue;
    const path = leaf === 'stages.*.stage_name' ? 'stage_name' : leaf;
    if (reads.has(path)) continue;
    if (REFUSED_SETTINGS.some((r) => covers(r.path, path))) continue;
    const target = folded(path);
    if (target !== null && (reads.has(target) || REFUSED_SETTINGS.some((r) => covers(r.path, target)))) continue;
    out.push(target === null ? leaf : `${leaf} (folded into ${target}, which is not read either)`);
  }
  return out;
}

/** The keys read while a config with every key set is translated into the settings of its stages. */
async function translationReads(text = FULL, stageNames = ['sft_warmup', 'rft']): Promise<Set<string>> {
  const config: Config = parseConfig(text, { env: {}, cwd: dir });
  const stages = resolveStages(config);
  assert.deepEqual(
    stages.map((s) => s.stage_name),
    stageNames,
  );
  // every stage finished: runConfig translates each stage's settings and skips it (nothing is loaded or trained)
  for (const stage of stages) {
    mkdirSync(stage.checkpoint_job_dir, { recursive: true });
    writeFileSync(join(stage.checkpoint_job_dir, 'done.json'), '{"finalModelDir": null, "steps": 0}\n');
  }
  const reads = new Set<string>();
  const proxied = recording(config, reads);
  const lines: string[] = [];
  await runConfig(proxied, { log: (line) => lines.push(line) });
  assert.equal(lines.filter((l) => l.includes('finished earlier')).length, stageNames.length);
  // what the stage does with settings.algorithm: the algorithm layer resolves every key of it
  for (const stage of resolveStages(proxied)) resolveAlgorithm(stageSettings(stage, '/models/policy').algorithm);
  return reads;
}

test('every schema key is read by the run, refused by validation, or folded into a key that is read', async () => {
  const missing = uncovered(new Set([...(await translationReads()), ...(await translationReads(STOP_WHEN, ['']))]));
  assert.deepEqual(missing, [], `schema keys neither read by the run nor refused:\n  ${missing.join('\n  ')}`);
});

test('the coverage check names a key that nothing reads', async () => {
  const reads = new Set([...(await translationReads()), ...(await translationReads(STOP_WHEN, ['']))]);
  reads.delete('explorer.max_timeout');
  reads.delete('buffer.trainer_input.experience_buffer.max_read_timeout');
  assert.deepEqual(uncovered(reads), ['buffer.trainer_input.experience_buffer.max_read_timeout', 'explorer.max_timeout']);
});

test('every refusal names a schema key, and the default of each refused key is accepted', () => {
  const leaves = schemaLeafPaths(ConfigSchema);
  for (const refusal of REFUSED_SETTINGS) {
    assert.ok(
      leaves.some((leaf) => matchesPath(refusal.path, leaf) || leaf.startsWith(`${refusal.path}.`)),
      `${refusal.path} is not a key of the schema`,
    );
  }
  // a config with every default passes validation (no refusal fires on a default)
  assert.doesNotThrow(() =>
    parseConfig(
      'model: {model_path: /m, max_model_len: 64}\nbuffer: {explorer_input: {taskset: {path: /t}, eval_tasksets: [{path: /e}]}, trainer_input: {auxiliary_buffers: {x: {path: /x}}}}\n',
      { env: {}, cwd: dir },
    ),
  );
  for (const from of Object.keys(FOLDED_SETTINGS)) {
    assert.ok(
      leaves.some((leaf) => matchesPath(from, leaf) || leaf.startsWith(`${from}.`)),
      `${from} is not a key of the schema`,
    );
  }
});

// a pattern and a path name the same key when they match segment by segment, `*` matching anything on either side
function overlaps(a: string, b: string): boolean {
  const [p, q] = [a.split('.'), b.split('.')];
  return p.slice(0, Math.min(p.length, q.length)).every((s, i) => s === '*' || q[i] === '*' || s === q[i]);
}

/** The schema key at `path` or below it (a mapping of the schema), or undefined. */
const schemaKeyAt = (path: string): string | undefined =>
  schemaLeafPaths(ConfigSchema).find((leaf) => overlaps(path, leaf) && leaf.split('.').length >= path.split('.').length);

test('every ignored Trinity key is listed once and is no key of the schema, of a refusal or of a policy loss', () => {
  const paths = IGNORED_KEYS.map((k) => k.path);
  assert.deepEqual(
    paths.filter((p, i) => paths.indexOf(p) !== i),
    [],
    'listed twice',
  );
  const lossArguments = new Set(POLICY_LOSS_FN.names().flatMap((name) => Object.keys(POLICY_LOSS_FN.get(name).defaults)));
  for (const path of paths) {
    const schemaKey = schemaKeyAt(path);
    assert.equal(schemaKey, undefined, `${path} is ignored, but the schema has ${schemaKey}: a key read here is not ignored`);
    const refusal = REFUSED_SETTINGS.find((r) => overlaps(path, r.path));
    assert.equal(refusal, undefined, `${path} is ignored and refused`);
    const argument = /^algorithm\.policy_loss_fn_args\.(.+)$/.exec(path)?.[1];
    if (argument !== undefined)
      assert.ok(!lossArguments.has(snakeToCamel(argument)), `${path} is ignored, but a policy loss reads it`);
  }
});

test('the ignored-key check finds the schema key a pattern names', () => {
  assert.equal(schemaKeyAt('explorer.rollout_model.seed'), 'explorer.rollout_model.seed');
  assert.equal(
    schemaKeyAt('buffer.explorer_input.tasksets.*.rollout_args.top_k'),
    'buffer.explorer_input.tasksets.*.rollout_args.top_k',
  );
  assert.equal(schemaKeyAt('trainer.use_dynamic_bsz'), 'trainer.use_dynamic_bsz');
  assert.equal(schemaKeyAt('trainer.trainer_type'), undefined);
});
