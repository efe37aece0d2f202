// On-policy distillation's training signal, checked link by link against independent computations (issue 51: a
// distilled student's KL to the teacher fell while its accuracy did not rise; these rule out the plumbing):
//   (a) alignment     each experience's teacher_logprobs are the teacher's log-probs of exactly the student's sampled
//                     tokens at the same positions: teacher_logprobs[j] = log_softmax(z_teacher[P − 1 + j] / τ)[y_j],
//                     compared with a direct forward of the teacher over the experience's tokens, for responses of
//                     different lengths (EOS early), beside the student's own logprobs at the same positions
//   (b) temperature   Trinity's on_policy_distill_workflow: the student samples (and records log-probs) at its
//                     rollout_args.temperature τ_s; the teacher scores at workflow_args.temperature, default 1.0
//                     (not τ_s); the experience carries τ_s for the trainer's recomputation
//   (c) sign, scale   one train step (on_policy_distill preset: PPO loss, token-mean) on a batch with known teacher
//                     log-probs, against a hand computation: A_t = t_t − s_t (kl_coef 1), and since the ratio is 1 on
//                     the step's own samples, ∇L = −(1/N) Σ_t A_t ∇ log π(y_t) over the N response tokens, so one
//                     SGD step moves θ by +(η/N) Σ_t A_t ∇ log π(y_t); pg_loss = −(1/N) Σ_t A_t = mean KL per token
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { WorkerRolloutEngine } from '../../../src/engine/index.js';
import { CausalLM, initModel, tokenLogProbs } from '../../../src/model/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { type AuxiliaryModelSet, startAuxiliaryModels } from '../../../src/rft/auxiliary/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import type { Task } from '../../../src/rft/task.js';
import { TrainStep } from '../../../src/rft/trainer/train-step.js';
import { EngineModelHandle, WorkflowRunner } from '../../../src/rft/workflow/index.js';
import * as torch from '../../../src/torch/index.js';

const ALPHABET = '0123456789+= ';
let root: string;

before(() => {
  torch.setNumThreads(1);
  root = mkdtempSync(join(tmpdir(), 'rft-distill-signal-'));
  initModel(join(root, 'student'), { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 1, alphabet: ALPHABET });
  initModel(join(root, 'teacher'), { hiddenSize: 48, numLayers: 2, numHeads: 2, seed: 9, alphabet: ALPHABET });
});
after(() => rmSync(root, { recursive: true, force: true }));

/** log_softmax(z[P − 1 + j] / τ)[ids[P + j]] for each response token j, by a direct full forward of the model. */
function directResponseLogprobs(modelDir: string, ids: readonly number[], promptLength: number, temperature: number): number[] {
  const model = CausalLM.load(modelDir);
  try {
    return torch.noGrad(() =>
      torch.scope(() => {
        const n = ids.length - promptLength;
        const rows = model
          .forward(torch.tensor([ids.map(BigInt)]))
          .select(0, 0)
          .narrow(0, promptLength - 1, n)
          .float()
          .div(temperature)
          .logSoftmax(-1)
          .toArray() as number[][];
        return rows.map((row, j) => row[ids[promptLength + j] as number] as number);
      }),
    );
  } finally {
    model.dispose();
  }
}

function assertAllClose(got: readonly number[], expected: readonly number[], what: string, tolerance = 1e-4): void {
  assert.equal(got.length, expected.length, `${what}: length`);
  for (const [j, v] of got.entries())
    assert.ok(Math.abs(v - (expected[j] as number)) < tolerance, `${what}[${j}]: ${v} vs ${expected[j]}`);
}

describe('on_policy_distill_workflow: the teacher log-probs the student trains on', () => {
  let engine: WorkerRolloutEngine;
  let handle: EngineModelHandle;
  let auxiliary: AuxiliaryModelSet;
  let runner: WorkflowRunner;

  before(async () => {
    engine = await WorkerRolloutEngine.start(join(root, 'student'), { slots: 8, maxLength: 48, numThreads: 1 });
    handle = new EngineModelHandle(engine);
    auxiliary = await startAuxiliaryModels([
      {
        type: 'embedded',
        name: 'teacher',
        modelPath: join(root, 'teacher'),
        engineNum: 1,
        slots: 8,
        maxLength: 48,
        dtype: 'float32',
        device: 'cpu',
        numThreads: 1,
      },
    ]);
    runner = new WorkflowRunner({ models: handle, auxiliaryModels: auxiliary, maxRetryTimes: 0, baseDir: root });
  });

  after(async () => {
    runner?.close();
    await handle?.close();
    await engine?.close();
    await auxiliary?.close();
  });

  async function distilledExperiences(workflowArgs: Record<string, unknown>): Promise<Experience[]> {
    const tasks: Task[] = ['12+34=', '7+8='].map((prompt, index) => ({
      id: `t${index}`,
      taskset: 'distill',
      index,
      raw: {},
      prompt,
      workflow: 'on_policy_distill_workflow',
      rolloutArgs: { temperature: 0.7, max_tokens: 6 },
      workflowArgs,
    }));
    const { experiences, statuses } = await runner.runStep(tasks, { step: 1, repeatTimes: 6 });
    for (const status of statuses) assert.ok(status.ok, status.error);
    assert.equal(experiences.length, 12);
    return experiences;
  }

  it('(a, b) are the teacher’s at workflow_args.temperature (default 1) on exactly the sampled tokens', async () => {
    for (const teacherTemperature of [undefined, 1.6]) {
      const experiences = await distilledExperiences(teacherTemperature === undefined ? {} : { temperature: teacherTemperature });
      const lengths = new Set(experiences.map((e) => e.tokens.length - e.promptLength));
      assert.ok(lengths.size > 1, `responses of different lengths (EOS early) are covered: ${[...lengths]}`);
      for (const e of experiences) {
        const n = e.tokens.length - e.promptLength;
        assert.ok(e.teacherLogprobs !== undefined && e.logprobs !== undefined);
        // (b) the student's log-probs are at its sampling temperature, which the experience carries to the trainer
        assert.equal(e.temperature, 0.7);
        assertAllClose(e.logprobs, directResponseLogprobs(join(root, 'student'), e.tokens, e.promptLength, 0.7), 'student');
        // (a, b) the teacher's: same tokens, same positions, at workflow_args.temperature (Trinity's default 1.0)
        const expected = directResponseLogprobs(join(root, 'teacher'), e.tokens, e.promptLength, teacherTemperature ?? 1);
        assertAllClose(e.teacherLogprobs, expected, `teacher (τ ${teacherTemperature ?? 'default'})`);
        assert.equal(e.teacherLogprobs.length, n);
        // the monitored KL is Σ_j (student − teacher) over the same positions
        const kl = e.logprobs.reduce((sum, s, j) => sum + s - (e.teacherLogprobs?.[j] as number), 0);
        assert.ok(Math.abs((e.metrics?.kl_divergence as number) - kl) < 1e-6);
      }
    }
  });
});

describe('on_policy_distill: one train step against the hand computation', () => {
  const prompts = [
    [3, 4, 5],
    [6, 7],
  ];
  const responses = [
    [8, 9, 10],
    [11, 12],
  ];
  const teacher = [
    [-0.5, -3.0, -1.2],
    [-6.0, -0.1],
  ];

  /** log π(y_j | prefix) of each response token, with or without the graph. */
  function responseLogprobTensors(model: CausalLM): torch.Tensor[] {
    return prompts.map((prompt, i) => {
      const ids = torch.tensor([[...prompt, ...(responses[i] as number[])].map(BigInt)]);
      return tokenLogProbs(model, ids)
        .logProbs.narrow(1, prompt.length - 1, (responses[i] as number[]).length)
        .flatten();
    });
  }

  it('(c) advantages are teacher − student, the loss their token-mean, the update +(η/N) Σ A ∇log π', () => {
    const lr = 0.05;
    const dir = join(root, 'student');
    // the hand computation: A_t = t_t − s_t; L = −(1/N) Σ_t A_t log π(y_t) (A constant); θ' = θ − η ∇L
    const reference = CausalLM.load(dir, { requiresGrad: true });
    const student = torch.noGrad(() => responseLogprobTensors(reference).map((t) => [...(t.toTypedArray() as Float32Array)]));
    const advantages = teacher.map((row, i) => row.map((t, j) => t - (student[i]?.[j] as number)));
    const N = advantages.flat().length;
    const handLoss = -advantages.flat().reduce((a, b) => a + b, 0) / N;
    const expectedDelta = new Map<string, Float32Array>();
    torch.scope(() => {
      const objective = responseLogprobTensors(reference)
        .map((lp, i) => lp.mul(torch.tensor(Float32Array.from(advantages[i] as number[]))).sum())
        .reduce((a, b) => a.add(b))
        .div(-N);
      objective.backward();
      for (const [name, p] of reference.parameters()) expectedDelta.set(name, p.grad?.mul(-lr).toTypedArray() as Float32Array);
    });
    reference.dispose();

    // the trainer: the on_policy_distill preset, one SGD step on the same batch (rollout log-probs = the policy's)
    const model = CausalLM.load(dir, { requiresGrad: true });
    const before = new Map([...model.parameters()].map(([name, p]) => [name, p.toTypedArray() as Float32Array]));
    const batch: Experience[] = prompts.map((prompt, i) => ({
      eid: `e${i}`,
      tokens: [...prompt, ...(responses[i] as number[])],
      promptLength: prompt.length,
      logprobs: student[i] as number[],
      teacherLogprobs: teacher[i] as number[],
      reward: 0,
      info: { taskId: `t${i}`, runId: 0 },
    }));
    const step = new TrainStep({
      model,
      optimizer: new torch.SGD([...model.parameters().values()], { lr }),
      algorithm: resolveAlgorithm({ algorithm_type: 'on_policy_distill' }),
      reference: null,
      critic: null,
      maxGradNorm: 1e9,
    });
    const metrics = step.run(batch);
    assert.ok(Math.abs((metrics.pg_loss as number) - handLoss) < 1e-5, `pg_loss ${metrics.pg_loss} vs ${handLoss}`);
    const klPerSequence = advantages.map((row) => -row.reduce((a, b) => a + b, 0));
    const meanKl = klPerSequence.reduce((a, b) => a + b, 0) / klPerSequence.length;
    assert.ok(Math.abs((metrics['advantage/kl/mean'] as number) - meanKl) < 1e-5, `kl/mean ${metrics['advantage/kl/mean']}`);
    let largest = 0;
    for (const [name, p] of model.parameters()) {
      const after = p.toTypedArray() as Float32Array;
      const was = before.get(name) as Float32Array;
      const expected = expectedDelta.get(name) as Float32Array;
      for (let k = 0; k < after.length; k++) {
        const delta = (after[k] as number) - (was[k] as number);
        largest = Math.max(largest, Math.abs(expected[k] as number));
        assert.ok(Math.abs(delta - (expected[k] as number)) < 1e-6 + 1e-3 * Math.abs(expected[k] as number), `${name}[${k}]`);
      }
    }
    assert.ok(largest > 1e-4, 'the step moves the weights');
    model.dispose();
  });
});
