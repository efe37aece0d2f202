// Token-budget micro-batches (trainer.use_dynamic_bsz, src/rft/trainer/token-budget.ts): the plan keeps each
// micro-batch's computed positions within the budget (a row group over it alone, said once), and a step split by a
// token budget (each micro-batch at its own widths) accumulates the gradient of the same step split by rows, for
// every loss_agg_mode (1e-5, float32). The rows have long-tail response lengths and prompts of different lengths, so
// a micro-batch's own widths are narrower than the batch's and a wrong normaliser or a misplaced column shows.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { computedPositions } from '../../../src/model/training.js';
import { LOSS_AGG_MODES, resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { frozenCopyReference } from '../../../src/rft/trainer/reference-policy.js';
import { microBatchTokens, tokenBudgetMicroBatches } from '../../../src/rft/trainer/token-budget.js';
import { rowPromptGroups } from '../../../src/rft/trainer/train-batch.js';
import { TrainStep, type TrainStepSetup } from '../../../src/rft/trainer/train-step.js';
import * as torch from '../../../src/torch/index.js';
import { assertSameGradient, stepGradient } from './gradients.js';
import { loadPolicy, tinyModelDir } from './toy.js';

torch.setNumThreads(1);

// three prompts of 2, 4 and 3 tokens, three samples each; responses of 1 to 21 tokens (a long tail)
const RESPONSE_LENGTHS = [1, 9, 2, 21, 3, 1, 6, 2, 14];
const PROMPTS = [
  [5, 11],
  [6, 13, 7, 8],
  [9, 2, 4],
];
const longTailRows = (): Experience[] =>
  RESPONSE_LENGTHS.map((length, i) => {
    const prompt = PROMPTS[Math.floor(i / 3)] as number[];
    const response = Array.from({ length }, (_, j) => 1 + ((i * 7 + j * 3) % 37));
    return {
      eid: `row-${i}`,
      tokens: [...prompt, ...response],
      promptLength: prompt.length,
      advantages: response.map(() => (i % 2 === 0 ? 1 : -0.7) * (1 + i / 10)),
      logprobs: response.map((_, j) => -1.5 - 0.1 * j),
      reward: i % 2 === 0 ? 1 : 0,
      info: { taskId: `t${Math.floor(i / 3)}`, runId: i % 3 },
    };
  });

let toy: { dir: string; remove: () => void };
before(() => {
  toy = tinyModelDir();
});
after(() => toy.remove());

const gradient = (
  algorithmConfig: Record<string, unknown>,
  batch: Experience[],
  split: Pick<TrainStepSetup, 'microBatchSize' | 'microBatchTokens' | 'checkpoint'>,
) => stepGradient(toy.dir, algorithmConfig, batch, split);

describe('token-budget micro-batches', () => {
  test('the plan: consecutive rows within the budget, counted at their own widths; a row over it alone', () => {
    const rows = longTailRows();
    const groups = rowPromptGroups(rows);
    // rows 0-2 share a 2-token prompt: at their own widths P 2, R 9, plain 3 · 11 = 33 (packed 1·1 + 3·9 = 28 saves
    // less than a fifth, so the forward runs them plain)
    assert.equal(microBatchTokens(rows, groups, 0, 3), computedPositions(3, 11, 2, 1).positions);
    assert.equal(microBatchTokens(rows, groups, 0, 3), 33);
    // rows 6-7 (3-token prompt, responses 6 and 2) with row 5 (4-token prompt): P 4, R 6, 2 prompts: packed
    // 2·3 + 3·6 = 24 ≤ 0.8 · 3 · 10
    assert.equal(microBatchTokens(rows, groups, 5, 3), 24);
    const budget = 40;
    const { plan, oversized } = tokenBudgetMicroBatches(rows, groups, 1, budget);
    assert.deepEqual(oversized, [], 'every row fits a budget of 40');
    assert.deepEqual(
      plan.map(({ start, n }) => start + n),
      [3, 4, 8, 9],
      'micro-batches end where the next row would pass the budget',
    );
    for (const { start, n } of plan) {
      const tokens = microBatchTokens(rows, groups, start, n);
      assert.ok(tokens <= budget || n === 1, `rows ${start}..${start + n - 1}: ${tokens} positions`);
      if (start + n < rows.length) assert.ok(microBatchTokens(rows, groups, start, n + 1) > budget, 'the next row would fit');
    }
    // row 3: a 4-token prompt and a 21-token response, 25 positions: over a budget of 20, a micro-batch of its own
    const tight = tokenBudgetMicroBatches(rows, groups, 1, 20);
    assert.deepEqual(tight.oversized, [{ start: 3, n: 1, tokens: 25 }]);
    assert.ok(tight.plan.some(({ start, n }) => start === 3 && n === 1));
    // rows in pairs (DPO): every micro-batch holds whole pairs
    const pairs = tokenBudgetMicroBatches(rows.slice(0, 8), groups.slice(0, 8), 2, 30);
    assert.ok(pairs.plan.every(({ start, n }) => start % 2 === 0 && n % 2 === 0));
    assert.throws(() => tokenBudgetMicroBatches(rows, groups, 1, 0), /token budget must be a positive integer, got 0/);
  });

  for (const mode of LOSS_AGG_MODES) {
    test(`GRPO (KL loss, entropy bonus), ${mode}: split by tokens = split by rows (1e-5)`, () => {
      const config = {
        algorithm_type: 'grpo',
        loss_agg_mode: mode,
        entropy_loss_fn: 'default',
        entropy_loss_fn_args: { entropy_coef: 0.01 },
      };
      const batch = longTailRows();
      const byRows = gradient(config, batch, { microBatchSize: 2 });
      const byTokens = gradient(config, batch, { microBatchTokens: 40 });
      assertSameGradient(byTokens, byRows, `${mode}: tokens vs rows`, 1e-5);
    });
  }

  test('with gradient checkpointing and without: the same gradient by tokens as by rows', () => {
    const config = { algorithm_type: 'grpo', loss_agg_mode: 'seq-mean-token-mean' };
    const byRows = gradient(config, longTailRows(), { microBatchSize: 3 });
    assertSameGradient(
      gradient(config, longTailRows(), { microBatchTokens: 30, checkpoint: true }),
      byRows,
      'checkpointed',
      1e-5,
    );
  });

  test('a row over the budget is trained alone and said once per run; micro_batches is a step metric', () => {
    const algorithm = resolveAlgorithm({ algorithm_type: 'grpo' });
    const model = loadPolicy(toy.dir);
    const reference = frozenCopyReference(model);
    const told: string[] = [];
    try {
      const step = new TrainStep({
        model,
        optimizer: new torch.AdamW([...model.parameters().values()], { lr: 1e-3 }),
        algorithm,
        reference,
        microBatchTokens: 20,
        warn: (message) => told.push(message),
      });
      const first = step.run(longTailRows());
      step.run(longTailRows());
      assert.equal(told.length, 1, told.join('\n'));
      assert.match(told[0] as string, /a row computes 25 positions, over trainer\.max_token_len_per_gpu \(20\)/);
      assert.equal(first.oversized_micro_batches, 1);
      assert.equal(
        first.micro_batches,
        tokenBudgetMicroBatches(longTailRows(), rowPromptGroups(longTailRows()), 1, 20).plan.length,
      );
      assert.ok(Number.isFinite(first.loss));
    } finally {
      reference.dispose();
      model.dispose();
    }
  });
});
