// The train step on a tiny random model (hidden 32, one layer) and a toy problem with a known answer (./toy.ts): each
// preset runs a few real steps and raises the probability of the rewarded (or expert, or chosen) token; the batch
// layout, gradient accumulation, the critic, the LoRA reference and the errors are checked on the side.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { LoraModel } from '../../../src/model/lora.js';
import { promptGroups, tokenLogProbs } from '../../../src/model/training.js';
import type { CausalLM } from '../../../src/model/transformer.js';
import { ALGORITHM_TYPES, Critic, type ResolvedAlgorithm, resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { frozenCopyReference, loraReference } from '../../../src/rft/trainer/reference-policy.js';
import { buildBatch, rowPromptGroups } from '../../../src/rft/trainer/train-batch.js';
import { TrainStep } from '../../../src/rft/trainer/train-step.js';
import * as torch from '../../../src/torch/index.js';
import {
  BAD,
  expertData,
  GOOD,
  goodProbability,
  loadPolicy,
  PROMPTS,
  preferencePairs,
  responseLogprobs,
  rollouts,
  tinyModelDir,
} from './toy.js';

torch.setNumThreads(1);
let toy: { dir: string; remove: () => void };
before(() => {
  toy = tinyModelDir();
});
after(() => toy.remove());

/** Mean log P(GOOD) − log P(BAD) over the prompts. */
const margin = (model: CausalLM) =>
  PROMPTS.reduce(
    (a, p) => a + (responseLogprobs(model, p, [GOOD])[0] as number) - (responseLogprobs(model, p, [BAD])[0] as number),
    0,
  ) / PROMPTS.length;

/** The batch of one step for `algorithm`, as its sample strategy delivers it (built here: mix appends expert rows). */
function sampleBatch(algorithm: ResolvedAlgorithm, model: CausalLM): Experience[] {
  if (algorithm.schema === 'sft' || algorithm.schema === 'cpt') return expertData();
  if (algorithm.schema === 'dpo') return preferencePairs();
  const data = rollouts(model, { teacher: ['on_policy_distill', 'jsd'].includes(algorithm.advantageFn?.name ?? '') });
  // reward_filter (RAFT) keeps each group's best response: GOOD, the first of each toy group
  if (algorithm.sampleStrategy.name === 'reward_filter') return data.filter((e) => e.reward === 1);
  if (algorithm.sampleStrategy.name !== 'mix') return data;
  const mark = (e: Experience, isExpert: boolean): Experience => ({ ...e, info: { ...e.info, isExpert } });
  return [...data.map((e) => mark(e, false)), ...expertData().map((e) => mark(e, true))];
}

function trainer(model: CausalLM, algorithm: ResolvedAlgorithm, options: { lr?: number; microBatchSize?: number } = {}) {
  const optimizer = new torch.AdamW([...model.parameters().values()], { lr: options.lr ?? 1e-2, weightDecay: 0 });
  const reference = algorithm.useReference ? frozenCopyReference(model) : null;
  const critic = algorithm.useCritic ? Critic.fromPolicy(model, { seed: 1 }) : null;
  const step = new TrainStep({
    model,
    optimizer,
    algorithm,
    reference,
    critic: critic && { critic, optimizer: new torch.AdamW(critic.parameters(), { lr: 1e-2, weightDecay: 0 }) },
    ...(options.microBatchSize ? { microBatchSize: options.microBatchSize } : {}),
  });
  const dispose = () => {
    reference?.dispose();
    critic?.dispose();
  };
  return { step, dispose };
}

describe('train step', () => {
  for (const type of ALGORITHM_TYPES) {
    test(`${type}: three steps raise the probability of the rewarded token`, () => {
      const algorithm = resolveAlgorithm({ algorithm_type: type });
      const model = loadPolicy(toy.dir);
      const { step, dispose } = trainer(model, algorithm);
      const p0 = goodProbability(model);
      const m0 = margin(model);
      for (let i = 0; i < 3; i++) {
        const metrics = step.run(sampleBatch(algorithm, model));
        for (const key of ['loss', 'pg_loss', 'grad_norm', 'lr', 'tokens']) {
          assert.ok(Number.isFinite(metrics[key]), `${type}: metric ${key} = ${metrics[key]}`);
        }
        assert.ok((metrics.grad_norm as number) > 0, `${type}: no gradient`);
      }
      assert.ok(goodProbability(model) > p0 * 1.5, `${type}: P(good) ${p0} → ${goodProbability(model)}`);
      assert.ok(margin(model) > m0 + 0.1, `${type}: log P(good) − log P(bad) ${m0} → ${margin(model)}`);
      dispose();
      model.dispose();
    });
  }

  test('ppo: the critic lowers its clipped value loss', () => {
    const algorithm = resolveAlgorithm({ algorithm_type: 'ppo' });
    const model = loadPolicy(toy.dir);
    const { step, dispose } = trainer(model, algorithm, { lr: 1e-3 });
    const losses: number[] = [];
    for (let i = 0; i < 5; i++) {
      const metrics = step.run(rollouts(model));
      losses.push(metrics['critic/vf_loss'] as number);
      assert.ok(Number.isFinite(metrics['critic/grad_norm']));
    }
    assert.ok((losses.at(-1) as number) < (losses[0] as number) * 0.7, `vf_loss ${losses.join(' → ')}`);
    dispose();
    model.dispose();
  });

  test('micro-batches with gradient accumulation give the whole-batch update', () => {
    for (const config of [
      { algorithm_type: 'grpo' },
      { algorithm_type: 'gspo' },
      { algorithm_type: 'dpo' },
      { algorithm_type: 'mix' },
    ]) {
      const algorithm = resolveAlgorithm(config);
      const whole = loadPolicy(toy.dir);
      const split = loadPolicy(toy.dir);
      const batch = sampleBatch(algorithm, whole);
      const run = (model: CausalLM, microBatchSize: number) => {
        const optimizer = new torch.SGD([...model.parameters().values()], { lr: 0.5 });
        const reference = algorithm.useReference ? frozenCopyReference(model) : null;
        const metrics = new TrainStep({ model, optimizer, algorithm, reference, microBatchSize, maxGradNorm: 1e9 }).run(batch);
        reference?.dispose();
        return metrics;
      };
      const a = run(whole, batch.length * 2);
      const b = run(split, 3);
      assert.ok(
        Math.abs((a.loss as number) - (b.loss as number)) < 1e-5,
        `${config.algorithm_type}: loss ${a.loss} vs ${b.loss}`,
      );
      torch.scope(() => {
        const pb = split.parameters();
        for (const [name, p] of whole.parameters()) {
          const diff = p
            .sub(pb.get(name) as torch.Tensor)
            .abs()
            .max()
            .item();
          assert.ok(diff < 1e-5, `${config.algorithm_type}: ${name} differs by ${diff}`);
        }
      });
      whole.dispose();
      split.dispose();
    }
  });

  test('with LoRA the reference is the model with adapters disabled; only the adapters train', () => {
    const model = loadPolicy(toy.dir);
    const lora = LoraModel.attach(model, { r: 4, loraAlpha: 8, targetModules: 'all-linear', seed: 0 });
    const algorithm = resolveAlgorithm({ algorithm_type: 'grpo' });
    const optimizer = new torch.AdamW([...lora.loraParameters().values()], { lr: 2e-2, weightDecay: 0 });
    const step = new TrainStep({ model, optimizer, algorithm, reference: loraReference(lora) });
    const embed = torch.keep(model.parameters().get('model.embed_tokens.weight')?.clone() as torch.Tensor);
    const p0 = goodProbability(model);
    const first = step.run(rollouts(model));
    assert.ok(Math.abs(first.kl as number) < 1e-6, `new adapters are the base model: kl ${first.kl}`);
    for (let i = 0; i < 3; i++) step.run(rollouts(model));
    const later = step.run(rollouts(model));
    assert.ok((later.kl as number) > 1e-6, 'the policy moved away from the reference');
    assert.ok(goodProbability(model) > p0, `P(good) ${p0} → ${goodProbability(model)}`);
    torch.scope(() =>
      assert.equal(model.parameters().get('model.embed_tokens.weight')?.sub(embed).abs().max().item(), 0, 'base weights frozen'),
    );
    embed.dispose();
    lora.dispose();
    model.dispose();
  });

  test('batch layout: prompts left-padded, responses right-padded, per-token tensors on the next-token positions', () => {
    torch.scope(() => {
      const batch = buildBatch(
        [
          { eid: 'a', tokens: [7, 8, 9], promptLength: 1, logprobs: [-1, -2], actionMask: [1, 0], reward: 1, info: {} },
          { eid: 'b', tokens: [4, 5, 6, 3], promptLength: 3, logprobs: [-3], reward: 0.5, info: {} },
        ],
        0,
      );
      // P = 3, R = 2: a = [pad pad 7 | 8 9], b = [4 5 6 | 3 pad]
      assert.deepEqual([batch.promptWidth, batch.responseWidth], [3, 2]);
      assert.deepEqual(batch.inputIds.toArray(), [
        [0, 0, 7, 8, 9],
        [4, 5, 6, 3, 0],
      ]);
      assert.deepEqual(batch.attentionMask.toArray(), [
        [0, 0, 1, 1, 1],
        [1, 1, 1, 1, 0],
      ]);
      assert.deepEqual(batch.actionMask.toArray(), [
        [1, 0],
        [1, 0],
      ]);
      assert.deepEqual(batch.logprobs.toArray(), [
        [-1, -2],
        [-3, 0],
      ]);
      // the outcome reward sits on the last generated token
      assert.deepEqual(batch.tokenLevelRewards?.toArray(), [
        [1, 0],
        [0.5, 0],
      ]);
      // log-prob position P − 1 + j predicts response token j: it must equal tokenLogProbs of the unpadded row
      const model = loadPolicy(toy.dir);
      const padded = torch.noGrad(() => tokenLogProbs(model, batch.inputIds, { attentionMask: batch.attentionMask }).logProbs);
      const response = padded.narrow(1, batch.promptWidth - 1, batch.responseWidth);
      const a = responseLogprobs(model, [7], [8, 9]);
      const b = responseLogprobs(model, [4, 5, 6], [3]);
      const got = response.toArray() as number[][];
      assert.ok(
        Math.abs((got[0]?.[0] as number) - (a[0] as number)) < 1e-5 &&
          Math.abs((got[0]?.[1] as number) - (a[1] as number)) < 1e-5,
      );
      assert.ok(Math.abs((got[1]?.[0] as number) - (b[0] as number)) < 1e-5);
      model.dispose();
    });
  });

  test('prompt groups from the experiences: rows whose padded columns before the last prompt token are equal', () => {
    torch.scope(() => {
      const row = (eid: string, prompt: number[]): Experience => ({
        eid,
        tokens: [...prompt, 40, 41],
        promptLength: prompt.length,
        info: {},
      });
      // P = 4: the packed prefix is columns 0..2; the prompt's last token starts each row's continuation
      const rows = [
        row('a', [1, 2, 3]), // [pad 1 2 | 3]
        row('b', [1, 2, 4]), // [pad 1 2 | 4]: a's prefix
        row('c', [9, 1, 2, 3]), // [9 1 2 | 3]
        row('d', [5]), // [pad pad pad | 5]
        row('e', [7]), // [pad pad pad | 7]: d's prefix
        row('f', [2, 3]), // [pad pad 2 | 3]
        row('g', [1, 2, 3]),
      ];
      assert.deepEqual(rowPromptGroups(rows), [0, 0, 1, 2, 2, 3, 0]);
      // the same packing as the ids read back would give: the same log-probs, bit for bit
      const batch = buildBatch(rows, 0);
      const model = loadPolicy(toy.dir);
      const options = { attentionMask: batch.attentionMask, promptWidth: batch.promptWidth };
      const readBack = torch.noGrad(() => tokenLogProbs(model, batch.inputIds, options).logProbs);
      const known = torch.noGrad(
        () => tokenLogProbs(model, batch.inputIds, { ...options, promptGroups: promptGroups(rowPromptGroups(rows)) }).logProbs,
      );
      assert.deepEqual(known.toArray(), readBack.toArray());
      model.dispose();
    });
  });

  test('group advantages can drop rows (std_threshold): they leave the batch and are counted', () => {
    const model = loadPolicy(toy.dir);
    const algorithm = resolveAlgorithm({ algorithm_type: 'grpo', kl_loss_fn: 'none', advantage_fn_args: { std_threshold: 0 } });
    const { step, dispose } = trainer(model, algorithm);
    const batch = rollouts(model).map((e) => (e.info.taskId === 't0' ? { ...e, reward: 1 } : e));
    const metrics = step.run(batch);
    assert.deepEqual([metrics.dropped, metrics.rows, metrics.tokens], [2, 6, 6]);
    dispose();
    model.dispose();
  });

  test('missing pieces are precise errors', () => {
    const model = loadPolicy(toy.dir);
    const optimizer = new torch.AdamW([...model.parameters().values()]);
    assert.throws(
      () => new TrainStep({ model, optimizer, algorithm: resolveAlgorithm({ algorithm_type: 'grpo' }) }),
      /grpo needs reference log-probs \(kl_loss_fn 'k2'\); pass reference/,
    );
    assert.throws(
      () => new TrainStep({ model, optimizer, algorithm: resolveAlgorithm({ algorithm_type: 'ppo', kl_loss_fn: 'none' }) }),
      /ppo \(advantage_fn 'ppo', GAE\) needs a critic/,
    );
    const dpo = new TrainStep({
      model,
      optimizer,
      algorithm: resolveAlgorithm({ algorithm_type: 'dpo' }),
      reference: frozenCopyReference(model),
    });
    assert.throws(() => dpo.run(expertData()), /experience 'expert-0' needs non-empty chosen and rejected responses/);
    const grpo = new TrainStep({ model, optimizer, algorithm: resolveAlgorithm({ algorithm_type: 'grpo', kl_loss_fn: 'none' }) });
    const noTask = rollouts(model).map((e) => ({ ...e, info: {} }));
    assert.throws(() => grpo.run(noTask), /needs input\.groupIds \(set info\.taskId on every experience\)/);
    assert.throws(() => grpo.run([]), /the batch is empty/);
    assert.throws(
      () => grpo.run([{ eid: 'x', tokens: [1, 2], promptLength: 1, logprobs: [0, 0], info: {} }]),
      /experience 'x': logprobs must have one entry per response token \(1\), got 2/,
    );
    model.dispose();
  });
});
