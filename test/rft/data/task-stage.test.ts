// A stage with a task pipeline, end to end on a tiny random model: `trinity run` dedupes the taskset, samples the
// stage's own model 4 times per task through its workflow runner to record pass rates, and then explores the output
// with data_selector difficulty_based reading those pass rates (feature_keys: [pass_rate]). Without the pipeline's
// column the run could not start (the selector needs the feature in every row).
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { initModel } from '../../../src/model/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { createSelector, loadTaskset } from '../../../src/rft/buffer/index.js';
import { loadConfig, parseConfig } from '../../../src/rft/run/config/index.js';
import { PASS_RATE_FIELD } from '../../../src/rft/data/task-pipeline/index.js';
import { runConfig } from '../../../src/rft/run/index.js';

const root = mkdtempSync(join(tmpdir(), 'task-stage-'));
initModel(join(root, 'model'), { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 1, alphabet: '0123456789+= ' });
// 8 distinct tasks, two of them written twice
const prompts = ['1+1=', '2+3=', '4+4=', '0+7=', '5+2=', '3+3=', '6+1=', '2+2=', '1+1=', '4+4='];
writeFileSync(join(root, 'tasks.jsonl'), prompts.map((p) => JSON.stringify({ prompt: p, response: '0' })).join('\n'));

const CONFIG = `mode: both
project: test
name: pipeline
checkpoint_root_dir: out
model:
  model_path: model
  max_prompt_tokens: 24
  max_response_tokens: 4
  dtype: float32
algorithm:
  algorithm_type: grpo
  repeat_times: 4
  optimizer: {lr: 0.001}
data_processor:
  task_pipeline:
    operators:
      - name: document_deduplicator
      - name: difficulty_scorer
        args: {repeat_times: 4}
buffer:
  batch_size: 2
  total_steps: 2
  explorer_input:
    taskset:
      name: math
      path: tasks.jsonl
      rollout_args: {temperature: 1.0}
      # a response that starts with 0-4 passes (about 5 in 13 for the random model): pass rates spread over [0, 1]
      default_reward_fn_type: format_reward
      reward_fn_args: {pattern: "^[0-4]", score: 1}
      data_selector:
        selector_type: difficulty_based
        feature_keys: [pass_rate]
        kwargs: {tau: 0, do_sample: false}
    default_workflow_type: simple_workflow
explorer:
  runner_per_model: 4
  eval_on_startup: false
  rollout_model: {slots: 8}
trainer:
  save_interval: 2
  micro_batch_size: 8
  gradient_checkpointing: false
monitor:
  monitor_type: [jsonl]
`;

test('a stage with a task pipeline (dedupe + difficulty scoring) explores the scored taskset with difficulty_based selection', async () => {
  const configFile = join(root, 'run.yaml');
  writeFileSync(configFile, CONFIG);
  const lines: string[] = [];
  await runConfig(loadConfig(configFile, { resolveAlgorithm }), { log: (l) => lines.push(l), baseDir: root });
  const jobDir = join(root, 'out', 'test', 'pipeline');
  assert.ok(existsSync(join(jobDir, 'done.json')), lines.join('\n'));

  // the output taskset: the 8 distinct prompts in first-seen order, each with a pass rate out of 4 samples
  const output = join(jobDir, 'task_pipeline', 'math.jsonl');
  const rows = readFileSync(output, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { prompt: string; pass_rate: number });
  assert.deepEqual(
    rows.map((r) => r.prompt),
    [...new Set(prompts)],
  );
  for (const r of rows) assert.ok([0, 0.25, 0.5, 0.75, 1].includes(r[PASS_RATE_FIELD]), `pass rate ${r.pass_rate} is k/4`);
  const manifest = JSON.parse(readFileSync(`${output}.manifest.json`, 'utf8')) as {
    operators: { name: string; rowsIn: number; rowsOut: number; counts: Record<string, number> }[];
  };
  assert.deepEqual(
    manifest.operators.map((o) => [o.name, o.rowsIn, o.rowsOut, o.counts.runs ?? null]),
    [
      ['document_deduplicator', 10, 8, null],
      ['difficulty_scorer', 8, 8, 32],
    ],
  );

  // two explore steps ran on it
  const metrics = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8').trim().split('\n');
  assert.equal(metrics.length, 2);

  // difficulty_based reads the pass rates: with tau 0 and no sampling the first batch is the two tasks whose
  // posterior mean (1 + m·p)/(2 + m), m = 2, is nearest 0.5 — i.e. the two smallest |p − 0.5|
  const { tasks } = await loadTaskset({ name: 'math', path: output, format: { featureKeys: [PASS_RATE_FIELD] } });
  const selector = createSelector(tasks, {
    selectorType: 'difficulty_based',
    featureKeys: [PASS_RATE_FIELD],
    tau: 0,
    doSample: false,
  });
  const picked = selector.next(2).map((i) => Math.abs((rows[i]?.pass_rate as number) - 0.5));
  const nearest = rows.map((r) => Math.abs(r.pass_rate - 0.5)).sort((a, b) => a - b);
  assert.deepEqual(
    picked.sort((a, b) => a - b),
    nearest.slice(0, 2),
  );
});

test('data_processor.task_pipeline in the config: Data-Juicer-only keys are refused, one taskset is required', () => {
  const base = CONFIG.replace('checkpoint_root_dir: out', `checkpoint_root_dir: ${join(root, 'other')}`);
  // a recipe (config_path) replaces operators, as in Trinity: both written is refused (recipes: data-juicer.test.ts)
  assert.throws(
    () =>
      parseConfig(base.replace('  task_pipeline:\n', '  task_pipeline:\n    config_path: recipe.yaml\n'), { env: {}, cwd: root }),
    /data_processor\.task_pipeline\.config_path: names a Data-Juicer recipe, whose operators replace 'operators'/,
  );
  assert.throws(
    () => parseConfig(base.replace('  task_pipeline:\n', '  task_pipeline:\n    top_k: 10\n'), { env: {}, cwd: root }),
    /data_processor\.task_pipeline\.top_k/,
  );
  const parsed = parseConfig(
    base.replace('  task_pipeline:\n', '  task_pipeline:\n    inputs: [tasks.jsonl]\n    output: {path: curated.jsonl}\n'),
    { env: {}, cwd: root },
  );
  // paths resolve against the config's folder; Trinity's output mapping {path} is read as its path
  assert.deepEqual(parsed.data_processor.task_pipeline?.inputs, [join(root, 'tasks.jsonl')]);
  assert.equal(parsed.data_processor.task_pipeline?.output, join(root, 'curated.jsonl'));
});
