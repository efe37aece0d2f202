// A runs folder with what a real `trinity run` needs, for the config builder, run control and feedback tests: a tiny
// random Qwen2 model (character tokenizer) and an addition taskset inside it, and a GRPO config whose job folder is
// in the runs folder (as test/rft/run/helpers.ts makes one for the run tests).
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initModel } from '../../src/model/index.js';

export function makeRunsFolder(prefix: string): string {
  const root = mkdtempSync(join(tmpdir(), prefix));
  mkdirSync(join(root, 'assets'));
  initModel(join(root, 'assets', 'model'), { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 1, alphabet: '0123456789+= ' });
  const rows: string[] = [];
  for (let a = 0; a < 5; a++)
    for (let b = 0; b < 5; b++) rows.push(JSON.stringify({ prompt: `${a}+${b}=`, response: String(a + b) }));
  writeFileSync(join(root, 'assets', 'tasks.jsonl'), `${rows.join('\n')}\n`);
  return root;
}

/** A GRPO config for configs/<file> of the runs folder (paths relative to configs/); its run id is studio/<name>. */
export function tinyConfig(root: string, name: string, totalSteps: number, saveInterval = 2): string {
  return `mode: both
project: studio
name: ${name}
checkpoint_root_dir: ${root}
model:
  model_path: ../assets/model
  max_prompt_tokens: 24
  max_response_tokens: 4
  dtype: float32
algorithm:
  algorithm_type: grpo
  repeat_times: 4
  optimizer:
    lr: 0.001
buffer:
  batch_size: 2
  total_steps: ${totalSteps}
  explorer_input:
    taskset:
      path: ../assets/tasks.jsonl
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
explorer:
  runner_per_model: 4
  eval_on_startup: false
  rollout_model:
    slots: 8
trainer:
  save_interval: ${saveInterval}
  micro_batch_size: 8
  gradient_checkpointing: false
monitor:
  monitor_type: [jsonl]
`;
}

/** The steps of a job folder's metrics.jsonl, in order (one per training step). */
export function metricSteps(jobDir: string): number[] {
  const file = join(jobDir, 'metrics.jsonl');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => (JSON.parse(l) as { step: number }).step);
}
