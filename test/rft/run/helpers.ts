// A tiny end-to-end job for the run tests: a random Qwen2 model with a character tokenizer, an addition taskset and
// a GRPO config (both mode, in-memory buffer, checkpoints every 2 steps).
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initModel, type ModelInitOptions } from '../../../src/model/index.js';
import * as torch from '../../../src/torch/index.js';

export function makeJob(
  options: {
    totalSteps: number;
    saveInterval: number;
    extra?: string;
    /** The YAML of the algorithm section (default: GRPO, 4 samples per task). */
    algorithm?: string;
    /** `trinity model init` options over the default tiny Qwen2 (e.g. a mixture-of-experts architecture). */
    model?: ModelInitOptions;
  } = { totalSteps: 4, saveInterval: 2 },
): {
  root: string;
  configFile: string;
  jobDir: string;
} {
  const root = mkdtempSync(join(tmpdir(), 'rft-run-'));
  initModel(join(root, 'model'), {
    hiddenSize: 32,
    numLayers: 1,
    numHeads: 2,
    seed: 1,
    alphabet: '0123456789+= ',
    ...options.model,
  });
  const rows: string[] = [];
  for (let a = 0; a < 5; a++)
    for (let b = 0; b < 5; b++) rows.push(JSON.stringify({ prompt: `${a}+${b}=`, response: String(a + b) }));
  writeFileSync(join(root, 'tasks.jsonl'), `${rows.join('\n')}\n`);
  mkdirSync(join(root, 'out'));
  const configFile = join(root, 'run.yaml');
  writeFileSync(
    configFile,
    `mode: both
project: test
name: e2e
checkpoint_root_dir: out
model:
  model_path: model
  max_prompt_tokens: 24
  max_response_tokens: 4
  dtype: float32
${
  options.algorithm ??
  `algorithm:
  algorithm_type: grpo
  repeat_times: 4
  optimizer:
    lr: 0.001`
}
buffer:
  batch_size: 2
  total_steps: ${options.totalSteps}
  explorer_input:
    taskset:
      path: tasks.jsonl
      rollout_args:
        temperature: 1.0
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
explorer:
  runner_per_model: 4
  eval_on_startup: false
  rollout_model:
    slots: 8
trainer:
  save_interval: ${options.saveInterval}
  micro_batch_size: 8
  gradient_checkpointing: false
monitor:
  monitor_type: [jsonl]
${options.extra ?? ''}`,
  );
  return { root, configFile, jobDir: join(root, 'out', 'test', 'e2e') };
}

/**
 * Whether a metric measures time or memory (wall seconds, rates, profiler figures, a weight sync's seconds and peak
 * bytes): what differs between two runs that otherwise log the same numbers.
 */
export const measuresTimeOrMemory = (key: string): boolean => /time|per_s|^perf\/|^sync\/(seconds|peak_bytes)$/.test(key);

/**
 * One thread in this process and in the processes of the runs it starts (OMP_NUM_THREADS, which the run's settings
 * read): a learning test's trajectory then does not depend on the machine's core count. Returns the restore.
 */
export function oneThreadForRuns(): () => void {
  const threads = torch.getNumThreads();
  const omp = process.env.OMP_NUM_THREADS;
  torch.setNumThreads(1);
  process.env.OMP_NUM_THREADS = '1';
  return () => {
    torch.setNumThreads(threads);
    if (omp === undefined) delete process.env.OMP_NUM_THREADS;
    else process.env.OMP_NUM_THREADS = omp;
  };
}
