// A toy problem with a known answer for training tests: after a one-token prompt pair, the response is one of two
// tokens; GOOD earns reward 1, BAD reward 0. Every algorithm should raise P(GOOD | prompt).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { CausalLM, initModel, tokenLogProbs } from '../../../src/model/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import type { TrainerInit } from '../../../src/rft/trainer/trainer.js';
import * as torch from '../../../src/torch/index.js';

export const GOOD = 40;
export const BAD = 41;
export const PROMPTS = [
  [5, 11],
  [5, 12],
  [6, 13],
  [6, 14],
];

/** A tiny random qwen2 (hidden 32, one layer) in a temporary folder; remove() deletes the folder. */
export function tinyModelDir(): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'trinity-toy-'));
  initModel(dir, { hiddenSize: 32, numLayers: 1, numHeads: 2, numKeyValueHeads: 1, seed: 3 });
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * The toy job of a trainer test file (or suite): a tiny model folder (`dir`), a work folder for job folders (`work`)
 * and a batch of the model's rollouts (`batch`), made before its tests and removed after them. Read the fields inside
 * the tests: they are filled when the tests start.
 */
export function toyTrainerJob(prefix: string): { readonly dir: string; readonly work: string; readonly batch: Experience[] } {
  const job = { dir: '', work: '', batch: [] as Experience[] };
  let toy: { dir: string; remove: () => void } | undefined;
  before(() => {
    toy = tinyModelDir();
    job.dir = toy.dir;
    job.work = mkdtempSync(join(tmpdir(), prefix));
    const model = loadPolicy(toy.dir);
    job.batch = rollouts(model);
    model.dispose();
  });
  after(() => {
    toy?.remove();
    if (job.work !== '') rmSync(job.work, { recursive: true, force: true });
  });
  return job;
}

/**
 * A trainer's start settings for a test: the model at `modelDir` trained in float32 on one thread, no LoRA, no
 * critic, 8 steps, whole batches; `overrides` replace any of them (the algorithm at least, usually).
 */
export function toyTrainerInit(modelDir: string, jobDir: string, overrides: Partial<TrainerInit> = {}): TrainerInit {
  return {
    jobDir,
    resume: false,
    modelPath: modelDir,
    dtype: 'float32',
    algorithm: { algorithm_type: 'grpo' },
    pluginBaseDir: modelDir,
    lora: null,
    loraPath: null,
    criticModelPath: null,
    totalSteps: 8,
    microBatchSize: null,
    gradientCheckpointing: false,
    padTokenId: 0,
    seed: 1,
    numThreads: 1,
    ...overrides,
  };
}

export function loadPolicy(dir: string): CausalLM {
  return CausalLM.load(dir, { requiresGrad: true });
}

/** log π(response | prompt) of each (prompt, response) under `model`. */
export function responseLogprobs(model: CausalLM, prompt: number[], response: number[]): number[] {
  return torch.scope(() =>
    torch.noGrad(() => {
      const ids = torch.tensor([[...prompt, ...response].map(BigInt)]);
      const lp = tokenLogProbs(model, ids).logProbs.narrow(1, prompt.length - 1, response.length);
      return [...(lp.toTypedArray() as Float32Array)];
    }),
  );
}

/** Mean P(GOOD | prompt) over the prompts. */
export function goodProbability(model: CausalLM): number {
  const ps = PROMPTS.map((p) => Math.exp(responseLogprobs(model, p, [GOOD])[0] as number));
  return ps.reduce((a, b) => a + b, 0) / ps.length;
}

/** One group per prompt: GOOD (reward 1) and BAD (reward 0), with rollout log-probs from `model`. */
export function rollouts(model: CausalLM, options: { version?: number; teacher?: boolean } = {}): Experience[] {
  return PROMPTS.flatMap((prompt, task) =>
    [GOOD, BAD].map((token, run) => ({
      eid: `t${task}-r${run}-v${options.version ?? 0}`,
      tokens: [...prompt, token],
      promptLength: prompt.length,
      logprobs: responseLogprobs(model, prompt, [token]),
      reward: token === GOOD ? 1 : 0,
      ...(options.teacher ? { teacherLogprobs: [Math.log(token === GOOD ? 0.9 : 0.1)] } : {}),
      info: { taskId: `t${task}`, runId: run, modelVersion: options.version ?? 0 },
    })),
  );
}

/** Expert demonstrations: each prompt answered with GOOD (no rollout log-probs). */
export function expertData(): Experience[] {
  return PROMPTS.map((prompt, task) => ({
    eid: `expert-${task}`,
    tokens: [...prompt, GOOD],
    promptLength: prompt.length,
    info: {},
  }));
}

/** Preference pairs: GOOD chosen over BAD. */
export function preferencePairs(): Experience[] {
  return PROMPTS.map((prompt, task) => ({
    eid: `pair-${task}`,
    tokens: [...prompt],
    promptLength: prompt.length,
    chosen: [GOOD],
    rejected: [BAD],
    info: { taskId: `t${task}` },
  }));
}
