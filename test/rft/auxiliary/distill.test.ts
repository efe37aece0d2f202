// On-policy distillation end to end: a `both` run whose workflow (on_policy_distill_workflow) asks a teacher
// auxiliary model (explorer.auxiliary_models, an embedded engine on a larger random model) for teacher_logprobs, with
// the on_policy_distill and jsd presets. What must hold: the student moves toward the teacher — on sequences the
// teacher samples, the mean per-token log-ratio log π_teacher − log π_student (a Monte-Carlo estimate of
// KL(teacher ‖ student)) is lower for the trained student than for the initial one — and the teacher's calls are
// metrics, not experiences.
import assert from 'node:assert/strict';
import { readFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { RolloutEngine } from '../../../src/engine/index.js';
import { initModel } from '../../../src/model/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import * as torch from '../../../src/torch/index.js';

const ALPHABET = '0123456789+= ';
let root: string;

before(() => {
  torch.setNumThreads(1);
  root = mkdtempSync(join(tmpdir(), 'rft-distill-'));
  initModel(join(root, 'student'), { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 1, alphabet: ALPHABET });
  initModel(join(root, 'teacher'), { hiddenSize: 64, numLayers: 2, numHeads: 4, seed: 7, alphabet: ALPHABET });
  const rows: string[] = [];
  for (let a = 0; a < 4; a++)
    for (let b = 0; b < 4; b++) rows.push(JSON.stringify({ prompt: `${a}+${b}=`, response: String(a + b) }));
  writeFileSync(join(root, 'tasks.jsonl'), `${rows.join('\n')}\n`);
});

function writeConfig(name: string, algorithm: string): string {
  mkdirSync(join(root, name), { recursive: true });
  const file = join(root, name, 'run.yaml');
  writeFileSync(
    file,
    `mode: both
project: distill
name: ${name}
checkpoint_root_dir: ../out
model:
  model_path: ../student
  max_prompt_tokens: 24
  max_response_tokens: 6
  dtype: float32
algorithm:
  algorithm_type: ${algorithm}
  repeat_times: 4
  optimizer:
    lr: 0.003
buffer:
  batch_size: 2
  total_steps: 8
  explorer_input:
    taskset:
      path: ../tasks.jsonl
      rollout_args: {temperature: 1.0}
    default_workflow_type: on_policy_distill_workflow
explorer:
  runner_per_model: 4
  eval_on_startup: false
  rollout_model: {slots: 8}
  auxiliary_models:
    - {name: teacher, model_path: ../teacher, slots: 4, dtype: float32, device: cpu}
trainer:
  save_interval: 0
  micro_batch_size: 8
  gradient_checkpointing: false
monitor:
  monitor_type: [jsonl]
`,
  );
  return file;
}

/** Mean over tokens of log π_teacher(y_t) − log π_student(y_t) on sequences the teacher samples (fixed seeds). */
async function teacherStudentGap(studentDir: string): Promise<number> {
  const teacher = RolloutEngine.load(join(root, 'teacher'), { slots: 4, maxLength: 32 });
  const student = RolloutEngine.load(studentDir, { slots: 1, maxLength: 32 });
  try {
    let sum = 0;
    let count = 0;
    for (let a = 0; a < 4; a++) {
      const promptIds = (teacher.tokenizer?.encodeChat([{ role: 'user', content: `${a}+${3 - a}=` }], {
        addGenerationPrompt: true,
      }) ?? []) as number[];
      const { completions } = await teacher.generate({ promptIds, n: 4, maxTokens: 6, temperature: 1, seed: 100 + a });
      for (const c of completions) {
        const scored = await student.score([...promptIds, ...c.tokenIds]);
        c.tokenIds.forEach((_, t) => {
          sum += (c.logprobs[t] as number) - (scored.logprobs[promptIds.length + t] as number);
          count++;
        });
      }
    }
    return sum / count;
  } finally {
    await teacher.close();
    await student.close();
  }
}

async function distil(
  name: string,
  algorithm: string,
): Promise<{ gapBefore: number; gapAfter: number; metrics: Record<string, number>[] }> {
  const config = loadConfig(writeConfig(name, algorithm), { resolveAlgorithm });
  const result = await runConfig(config, { log: () => {} });
  assert.ok(result.finalModelDir, 'the run saves the final model');
  const metrics = readFileSync(join(root, 'out', 'distill', name, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, number>);
  return {
    gapBefore: await teacherStudentGap(join(root, 'student')),
    gapAfter: await teacherStudentGap(result.finalModelDir),
    metrics,
  };
}

describe('on-policy distillation from a teacher auxiliary model', () => {
  for (const algorithm of ['on_policy_distill', 'jsd']) {
    it(`${algorithm}: the student's log-probs on teacher samples move toward the teacher's`, async () => {
      const { gapBefore, gapAfter, metrics } = await distil(algorithm, algorithm);
      assert.ok(gapAfter < gapBefore * 0.9, `KL(teacher ‖ student) estimate: before ${gapBefore}, after ${gapAfter}`);
      // the teacher's calls are metrics: one logprobs() call per response (2 tasks × 4 responses a step)
      const explored = metrics.filter((m) => m['auxiliary/teacher/calls'] !== undefined);
      assert.ok(explored.length >= 1, 'auxiliary/teacher/* metrics are logged');
      for (const m of explored) {
        assert.equal(m['auxiliary/teacher/calls'], 8);
        assert.equal(m['auxiliary/teacher/failed'], 0);
        assert.ok((m['auxiliary/teacher/tokens'] as number) > 8 * 5);
        assert.equal(m['rollout/experiences'], 8, 'teacher calls are not experiences');
        assert.equal(typeof m['rollout/kl_divergence/mean'], 'number');
      }
    });
  }
});
