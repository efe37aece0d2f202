// On-policy distillation raises a student's accuracy, not only lowers its KL (issue 51), in the configuration that
// learns (examples/distill/README.md): the student starts from an SFT checkpoint that answers some problems, not from
// random weights. Shortened to a tiny model and a 16-problem task (one-digit sums), two runs of configs:
//   teacher   a random model SFT'd on the task's answers until it answers them (trainer.stop_when: greedy accuracy
//             ≥ 0.9, measured every 10 steps; at least 0.8 after its 300 steps), a checkpoint every 10 steps
//   student   the teacher's last checkpoint that answers at most half of the problems, then 30 steps of
//             on_policy_distill from the teacher: its greedy accuracy (eval at the start and the end) rises by at
//             least 2 of the 16 problems, and the per-response KL to the teacher on its own samples
//             (rollout/kl_divergence/mean) falls by 40% (figures: examples/distill/README.md)
// 32 samples per problem: with 8 the single-sample advantages of several nats are too noisy for a model this small
// (examples/distill/README.md, "Learning rate, samples and scale"); 30 steps: at 40 a constant 5e-3 jumps back up.
// One thread in the test and in the run's processes (OMP_NUM_THREADS, read by the run's settings): the trainer's update
// rounds differently at another thread count, and a model this small follows its rounding to another trajectory (with
// the machine's 2 threads it stayed at 8 of 16), so the figures above are those of 1 thread. The instruction set
// moves it too: on an AVX-512 machine the teacher reached 0.9; on an AVX2-only one it stays at 13 of 16 from step
// 230 to 600 (0.8125) and the student, from the step-70 checkpoint (7 of 16), reaches 10 of 16 (KL 6.1 → 2.0).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { initModel } from '../../../src/model/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { oneThreadForRuns } from '../run/helpers.js';

const ALPHABET = '0123456789+= ';
let root: string;
let restoreThreads = () => {};

before(() => {
  restoreThreads = oneThreadForRuns();
  root = mkdtempSync(join(tmpdir(), 'rft-distill-learns-'));
  initModel(join(root, 'teacher-init'), { hiddenSize: 64, numLayers: 2, numHeads: 4, seed: 7, alphabet: ALPHABET });
  const rows: string[] = [];
  for (let a = 0; a < 4; a++)
    for (let b = 0; b < 4; b++) rows.push(JSON.stringify({ prompt: `${a}+${b}=`, response: String(a + b) }));
  writeFileSync(join(root, 'tasks.jsonl'), `${rows.join('\n')}\n`);
});
after(() => {
  restoreThreads();
  rmSync(root, { recursive: true, force: true });
});

/** The YAML both runs share: the model, greedy eval on the task, metrics as JSONL. */
const common = (name: string, modelPath: string) => `project: distill
name: ${name}
checkpoint_root_dir: out
model: {model_path: ${modelPath}, max_prompt_tokens: 24, max_response_tokens: 4, dtype: float32}
monitor: {monitor_type: [jsonl]}
`;

/** Runs the config; its final model and its metrics.jsonl rows. */
async function run(name: string, yaml: string): Promise<{ finalModelDir: string; metrics: Record<string, number>[] }> {
  const file = join(root, `${name}.yaml`);
  writeFileSync(file, yaml);
  const result = await runConfig(loadConfig(file, { resolveAlgorithm }), { log: () => {} });
  assert.ok(result.finalModelDir, `${name}: the run saves its final model`);
  const metrics = readFileSync(join(root, 'out', 'distill', name, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, number>);
  return { finalModelDir: result.finalModelDir, metrics };
}

/** [step, greedy accuracy] of each evaluation. */
const evaluations = (rows: Record<string, number>[]): [number, number][] =>
  rows.flatMap((m) => (m['eval/eval/mean@1'] === undefined ? [] : [[m.step as number, m['eval/eval/mean@1']]]));
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

describe('on-policy distillation from an SFT start', () => {
  it("raises the student's greedy accuracy while its KL to the teacher falls", async (t) => {
    const teacher = await run(
      'teacher',
      `${common('teacher', 'teacher-init')}mode: train
algorithm:
  algorithm_type: sft
  optimizer: {lr: 0.01}
buffer:
  train_batch_size: 16
  total_steps: 300
  trainer_input:
    experience_buffer: {storage_type: file, path: tasks.jsonl}
  explorer_input:
    eval_tasksets: [{name: eval, path: tasks.jsonl, rollout_args: {temperature: 0}}]
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
explorer: {eval_interval: 10, eval_on_startup: false}
trainer:
  save_interval: 10
  gradient_checkpointing: false
  stop_when: {metric: eval/eval/mean@1, at_least: 0.9}
`,
    );
    const teacherEvaluations = evaluations(teacher.metrics);
    assert.ok((teacherEvaluations.at(-1)?.[1] ?? 0) >= 0.8, `the teacher answers the task: ${teacherEvaluations}`);
    const start = teacherEvaluations.findLast(([, accuracy]) => accuracy <= 0.5);
    assert.ok(start !== undefined, `a checkpoint that answers at most half: ${teacherEvaluations}`);
    const studentDir = join(root, 'out', 'distill', 'teacher', 'checkpoints', `global_step_${start[0]}`, 'model');

    const student = await run(
      'student',
      `${common('student', studentDir)}mode: both
algorithm:
  algorithm_type: on_policy_distill
  repeat_times: 32
  optimizer: {lr: 0.005}
buffer:
  batch_size: 16
  total_steps: 30
  explorer_input:
    taskset: {path: tasks.jsonl, rollout_args: {temperature: 1.0}}
    eval_tasksets: [{name: eval, path: tasks.jsonl, default_workflow_type: simple_workflow, rollout_args: {temperature: 0}}]
    default_workflow_type: on_policy_distill_workflow
    default_reward_fn_type: accuracy_reward
explorer:
  runner_per_model: 16
  eval_interval: 10
  eval_on_startup: true
  rollout_model: {slots: 512}
  auxiliary_models: [{name: teacher, model_path: ${teacher.finalModelDir}, slots: 512, dtype: float32, device: cpu}]
trainer: {save_interval: 0, micro_batch_size: 512, gradient_checkpointing: false}
`,
    );
    const kl = student.metrics.flatMap((m) =>
      m['rollout/kl_divergence/mean'] === undefined ? [] : [m['rollout/kl_divergence/mean']],
    );
    const studentEvaluations = evaluations(student.metrics);
    const [before, after] = [studentEvaluations[0]?.[1] ?? 1, studentEvaluations.at(-1)?.[1] ?? 0];
    t.diagnostic(`student greedy accuracy by step: ${studentEvaluations.join(' ')}; KL: ${kl.map((x) => x.toFixed(2))}`);
    assert.equal(before, start[1], "the student starts at its checkpoint's accuracy");
    assert.ok(after >= before + 0.12, `greedy accuracy ${before} → ${after}`);
    assert.equal(kl.length, 30, 'KL logged each step');
    const [klFirst, klLast] = [mean(kl.slice(0, 5)), mean(kl.slice(-5))];
    assert.ok(klLast < klFirst * 0.6, `KL to the teacher per response: first steps ${klFirst}, last ${klLast}`);
  });
});
