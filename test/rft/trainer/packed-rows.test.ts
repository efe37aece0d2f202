// trainer.use_remove_padding (TrainStepSetup.removePadding): a train step whose forwards run the rows packed end to
// end without pads (src/model/packed-rows.ts) accumulates the gradients of the same step run padded and reports the
// same loss metrics (1e-5, float32), for every algorithm preset (the critic's gradients too: PPO), on llama, qwen2 and
// qwen3, and with LoRA. The rows have prompts of 7 and 5 tokens and responses of 1 to 9, in
// micro-batches of 3 rows, so a misplaced column, a wrong position or attention across rows shows.
// (2 data-parallel ranks: test/rft/trainer/distributed.test.ts's packed scenarios.)
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { type CausalLM, initModel, type ModelType } from '../../../src/model/index.js';
import { LoraModel } from '../../../src/model/lora.js';
import { ALGORITHM_TYPES, Critic, type ResolvedAlgorithm, resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { frozenCopyReference, loraReference } from '../../../src/rft/trainer/reference-policy.js';
import { microBatchTokens, tokenBudgetMicroBatches } from '../../../src/rft/trainer/token-budget.js';
import { rowPromptGroups } from '../../../src/rft/trainer/train-batch.js';
import { TrainStep, type TrainStepSetup } from '../../../src/rft/trainer/train-step.js';
import * as torch from '../../../src/torch/index.js';
import { assertSameGradient, GradientRecorder } from './gradients.js';
import { loadPolicy, responseLogprobs } from './toy.js';

torch.setNumThreads(1);

const FAMILIES: ModelType[] = ['qwen2', 'llama', 'qwen3'];
const dirs = new Map<ModelType, string>();
let work: string;
before(() => {
  work = mkdtempSync(join(tmpdir(), 'trinity-packed-'));
  for (const architecture of FAMILIES) {
    const dir = join(work, architecture);
    initModel(dir, { architecture, hiddenSize: 32, numLayers: 2, numHeads: 4, numKeyValueHeads: 2, seed: 5 });
    dirs.set(architecture, dir);
  }
});
after(() => rmSync(work, { recursive: true, force: true }));

const PROMPTS = [
  [5, 11, 17, 23, 29, 31, 37],
  [6, 13, 19, 21, 27],
];
const RESPONSE_LENGTHS = [1, 9, 3, 6];

/**
 * The batch of `algorithm`'s schema: 4 responses per prompt (1 to 9 tokens) with rollout log-probs near `model`'s
 * (ratios within every clip range); mix: one demonstration per prompt.
 */
function batch(algorithm: ResolvedAlgorithm, model: CausalLM, lengths = RESPONSE_LENGTHS): Experience[] {
  if (algorithm.schema === 'dpo')
    return PROMPTS.flatMap((prompt, task) =>
      [0, 1].map((pair) => ({
        eid: `pair-${task}-${pair}`,
        tokens: [...prompt],
        promptLength: prompt.length,
        chosen: [40 + pair, 42, 43, 44, 45].slice(0, 2 + 3 * pair),
        rejected: [50 + pair, 52],
        info: { taskId: `t${task}` },
      })),
    );
  const rows = PROMPTS.flatMap((prompt, task) =>
    lengths.map((length, run): Experience => {
      const response = Array.from({ length }, (_, j) => 40 + ((task * 7 + run * 3 + j * 5) % 20));
      return {
        eid: `t${task}-r${run}`,
        tokens: [...prompt, ...response],
        promptLength: prompt.length,
        logprobs: responseLogprobs(model, prompt, response).map((lp, j) => lp + ((run + j) % 3) / 20),
        teacherLogprobs: response.map((_, j) => -1 - j / 10),
        reward: (run + task) % 3,
        info: { taskId: `t${task}`, runId: run },
      };
    }),
  );
  if (algorithm.sampleStrategy.name !== 'mix') return rows;
  return rows.concat(
    PROMPTS.map((prompt, task) => ({
      eid: `expert-${task}`,
      tokens: [...prompt, 45, 46, 47, 48].slice(0, prompt.length + 2 + task),
      promptLength: prompt.length,
      info: { isExpert: true },
    })),
  );
}

interface StepResult {
  policy: Float32Array[];
  critic: Float32Array[];
  metrics: Record<string, number>;
  /** The policy's forwards: tokens each ran and whether packed. */
  passes: { tokens: number; packed: boolean }[];
}

/** One step of `config` on a fresh policy from `architecture`'s folder: the gradients it accumulates, its metrics. */
function step(
  config: Record<string, unknown>,
  architecture: ModelType,
  removePadding: boolean | null,
  withLora = false,
  split: Pick<TrainStepSetup, 'microBatchSize' | 'microBatchTokens'> = { microBatchSize: 3 },
  lengths = RESPONSE_LENGTHS,
): StepResult {
  const algorithm = resolveAlgorithm(config);
  const model = loadPolicy(dirs.get(architecture) as string);
  const rows = batch(algorithm, model, lengths);
  const passes: StepResult['passes'] = [];
  const beginPass = model.beginPass.bind(model);
  model.beginPass = (ids, options = {}) => {
    passes.push({ tokens: ids.numel, packed: options.packed !== undefined });
    return beginPass(ids, options);
  };
  const lora = withLora ? LoraModel.attach(model, { r: 4, loraAlpha: 8, targetModules: 'all-linear', seed: 0 }) : null;
  const trained = lora === null ? [...model.parameters().values()] : [...lora.loraParameters().values()];
  const optimizer = new GradientRecorder(trained, { lr: 1 });
  const reference = !algorithm.useReference ? null : lora === null ? frozenCopyReference(model) : loraReference(lora);
  const critic = algorithm.useCritic ? Critic.fromPolicy(model, { seed: 1 }) : null;
  const criticOptimizer = critic && new GradientRecorder(critic.parameters(), { lr: 1 });
  try {
    const metrics = new TrainStep({
      model,
      lora,
      optimizer,
      algorithm,
      reference,
      critic: critic && { critic, optimizer: criticOptimizer as GradientRecorder },
      ...split,
      maxGradNorm: 1e9,
      removePadding,
    }).run(rows);
    return { policy: optimizer.grads, critic: criticOptimizer?.grads ?? [], metrics, passes };
  } finally {
    if (reference !== null && 'dispose' in reference) (reference as { dispose(): void }).dispose();
    critic?.dispose();
    lora?.dispose();
    model.dispose();
  }
}

function assertSameStep(packed: StepResult, padded: StepResult, label: string): void {
  // the packed step ran packed forwards only, over fewer tokens (no pads)
  const tokens = (r: StepResult) => r.passes.reduce((a, p) => a + p.tokens, 0);
  assert.ok(packed.passes.length > 0 && packed.passes.every((p) => p.packed), `${label}: packed forwards`);
  assert.ok(
    padded.passes.every((p) => !p.packed),
    `${label}: padded forwards`,
  );
  assert.ok(tokens(packed) < tokens(padded), `${label}: ${tokens(packed)} packed tokens vs ${tokens(padded)} padded`);
  assertSameGradient(packed.policy, padded.policy, `${label}: policy`, 1e-5);
  if (padded.critic.length > 0) assertSameGradient(packed.critic, padded.critic, `${label}: critic`, 1e-5);
  assert.deepEqual(Object.keys(packed.metrics).sort(), Object.keys(padded.metrics).sort(), `${label}: metric names`);
  // dpo's accuracy_mean counts pairs with chosen log-ratio > rejected log-ratio: at the first step both are 0 up to
  // rounding (policy = reference), so it flips with the forward's summation order (0.25 vs 0 on an AVX2-only CPU);
  // the log-ratios' means (chosen_reward, rejected_reward, compared like the rest) show when that is so
  const atReference = ['policy/chosen_reward', 'policy/rejected_reward'].every((k) => Math.abs(padded.metrics[k] ?? 1) < 1e-5);
  for (const [key, value] of Object.entries(padded.metrics)) {
    if (key === 'policy/accuracy_mean' && atReference) continue;
    const got = packed.metrics[key] as number;
    if (Number.isNaN(value)) assert.ok(Number.isNaN(got), `${label}: ${key}`);
    else assert.ok(Math.abs(got - value) <= 1e-5 * Math.max(1, Math.abs(value)), `${label}: ${key} ${got} vs ${value}`);
  }
}

describe('packed rows (use_remove_padding) train steps equal padded ones', () => {
  for (const type of ALGORITHM_TYPES) {
    test(`${type}: llama, qwen2, qwen3`, () => {
      for (const architecture of FAMILIES) {
        const config = { algorithm_type: type };
        assertSameStep(step(config, architecture, true), step(config, architecture, false), `${type} on ${architecture}`);
      }
    });
  }

  // LoRA dropout draws its masks over the forward's tensors, packed [1, N, H] or padded [B, L, H]: different masks, so
  // the comparison runs without dropout
  test('GRPO and PPO with LoRA adapters (the reference: adapters disabled)', () => {
    for (const config of [{ algorithm_type: 'grpo' }, { algorithm_type: 'ppo' }])
      for (const architecture of FAMILIES)
        assertSameStep(
          step(config, architecture, true, true),
          step(config, architecture, false, true),
          `${config.algorithm_type} + LoRA on ${architecture}`,
        );
  });

  test('token-budget micro-batches (use_dynamic_bsz) count packed tokens, and the step equals the padded row split', () => {
    const model = loadPolicy(dirs.get('qwen2') as string);
    const rows = batch(resolveAlgorithm({ algorithm_type: 'grpo' }), model);
    model.dispose();
    const groups = rowPromptGroups(rows);
    // rows 0-3: one 7-token prompt (6 tokens but its last) and responses of 1, 9, 3, 6; row 4 opens a 5-token prompt
    assert.equal(microBatchTokens(rows, groups, 0, 4, true), 6 + 19);
    assert.equal(microBatchTokens(rows, groups, 0, 5, true), 6 + 19 + 4 + 1);
    assert.ok(microBatchTokens(rows, groups, 0, 4) > 25, 'padded, the same rows compute pads');
    assert.deepEqual(
      tokenBudgetMicroBatches(rows, groups, 1, 25, true).plan.map(({ start, n }) => [start, n]),
      [
        [0, 4],
        [4, 4],
      ],
    );
    const config = { algorithm_type: 'grpo' };
    const packed = step(config, 'qwen2', true, false, { microBatchTokens: 25 });
    assert.equal(packed.passes.length, 2, 'two micro-batches');
    assert.equal(packed.metrics.micro_batches, 2);
    const padded = step(config, 'qwen2', false, false, { microBatchTokens: 25 });
    assert.ok((padded.metrics.micro_batches as number) > 2, 'padded, the budget holds fewer rows');
    const { micro_batches: _a, ...packedMetrics } = packed.metrics;
    const { micro_batches: _b, ...paddedMetrics } = padded.metrics;
    assertSameStep({ ...packed, metrics: packedMetrics }, { ...padded, metrics: paddedMetrics }, 'grpo by a token budget');
  });

  test('use_remove_padding unset: a forward packs its rows when that saves a fifth of the positions, else pads', () => {
    const config = { algorithm_type: 'grpo' };
    // responses of 1 to 9 tokens: micro-batches of 3 rows pack (e.g. rows 0-2: 6 + 13 = 19 of 1·6 + 3·9 = 33 padded)
    const longTail = step(config, 'qwen2', null);
    assert.ok(longTail.passes.every((p) => p.packed));
    assertSameStep(longTail, step(config, 'qwen2', false), 'grpo, long tail, unset');
    // equal responses of 4 tokens: packed 6 + 12 = 18 of 1·6 + 3·4 = 18 padded saves nothing: padded
    const even = step(config, 'qwen2', null, false, { microBatchSize: 3 }, [4, 4, 4, 4]);
    assert.ok(even.passes.every((p) => !p.packed));
  });
});
