// The training forward: chunked token log-probs/entropy equal the full computation, and forwardBackward (with and
// without activation checkpointing) gives the same gradients as plain autograd.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CausalLM, forwardBackward, type TokenLogProbs, tokenLogProbs } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { type FixtureModel, maxAbsDiff, modelDir } from './helpers/fixtures.js';

function batch() {
  torch.manualSeed(7);
  const ids = torch.randint(3, 120, [3, 13]);
  // row 0 full, row 1 left-padded by 4, row 2 right-padded by 3
  const mask = torch.ones([3, 13], { dtype: 'int64' });
  mask.select(0, 1).narrow(0, 0, 4).zero_();
  mask.select(0, 2).narrow(0, 10, 3).zero_();
  return { ids, mask };
}

/** A PPO-like loss over real target tokens: -mean(lp * advantage) - 0.01 mean(entropy). */
function lossOf(mask: torch.Tensor) {
  return ({ logProbs, entropy }: TokenLogProbs) => {
    const targetMask = mask.slice(1, 1).float();
    const advantage = torch.linspace(-1, 1, logProbs.size(1)).unsqueeze(0);
    const count = targetMask.sum();
    let loss = logProbs.mul(advantage).mul(targetMask).sum().div(count).neg();
    if (entropy !== null) loss = loss.sub(entropy.mul(targetMask).sum().div(count).mul(0.01));
    return loss;
  };
}

for (const name of ['qwen2-tied', 'qwen3-untied'] as FixtureModel[]) {
  test(`${name}: chunked log-probs and entropy equal the full-vocabulary computation`, () => {
    const model = CausalLM.load(modelDir(name));
    torch.scope(() => {
      const { ids, mask } = batch();
      const logits = model.forward(ids, { attentionMask: mask }).float().div(0.7);
      const logSoftmax = logits.slice(1, 0, -1).logSoftmax(-1);
      const expectedLp = logSoftmax.gather(-1, ids.slice(1, 1).unsqueeze(-1)).squeeze(-1);
      const expectedEntropy = logSoftmax.exp().mul(logSoftmax).sum(-1).neg();
      for (const chunkSize of [1, 5, 1000]) {
        const out = tokenLogProbs(model, ids, { attentionMask: mask, chunkSize, entropy: true, temperature: 0.7 });
        assert.deepEqual(out.logProbs.shape, [3, 12]);
        assert.ok(maxAbsDiff(out.logProbs, expectedLp) < 1e-5, `chunk ${chunkSize}: log-probs differ`);
        assert.ok(maxAbsDiff(out.entropy as torch.Tensor, expectedEntropy) < 1e-5, `chunk ${chunkSize}: entropy differs`);
      }
    });
    model.dispose();
  });

  test(`${name}: forwardBackward gradients equal plain autograd, with and without checkpointing`, () => {
    const model = CausalLM.load(modelDir(name), { requiresGrad: true });
    const params = [...model.parameters().entries()];
    torch.scope(() => {
      const { ids, mask } = batch();
      const loss = lossOf(mask);
      const plainLoss = torch.scope(() => {
        const l = loss(tokenLogProbs(model, ids, { attentionMask: mask, entropy: true }));
        l.backward();
        return l.item();
      });
      const reference = new Map(params.map(([n, p]) => [n, (p.grad as torch.Tensor).clone()]));
      for (const [checkpoint, chunkSize] of [
        [false, 4],
        [true, 4],
        [false, 1000], // one chunk: the single-pass path
        [true, 1000],
      ] as const) {
        for (const [, p] of params) p.grad = null;
        const result = forwardBackward(model, ids, loss, { attentionMask: mask, entropy: true, chunkSize, checkpoint });
        assert.ok(Math.abs(result.loss - plainLoss) < 1e-6, `loss ${result.loss} vs ${plainLoss}`);
        assert.deepEqual(result.logProbs.shape, [3, 12]);
        for (const [n, p] of params) {
          const g = p.grad;
          assert.ok(g !== null, `${n} got no gradient (checkpoint=${checkpoint}, chunk ${chunkSize})`);
          const ref = reference.get(n) as torch.Tensor;
          const scale = Math.max(1e-3, ref.abs().max().item());
          assert.ok(maxAbsDiff(g, ref) / scale < 1e-5, `${n}: gradient differs (checkpoint=${checkpoint}, chunk ${chunkSize})`);
        }
      }
      for (const [, p] of params) p.grad = null;
    });
    model.dispose();
  });
}

test('forwardBackward leaks no tensors and checks its inputs', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'), { requiresGrad: true });
  const step = () => {
    torch.scope(() => {
      const { ids, mask } = batch();
      forwardBackward(model, ids, lossOf(mask), { attentionMask: mask, checkpoint: true });
    });
    for (const p of model.parameters().values()) p.grad = null;
  };
  step(); // the first forward caches the rotary frequencies
  const before = torch.liveTensorCount();
  step();
  assert.equal(torch.liveTensorCount(), before);
  torch.scope(() => {
    assert.throws(() => tokenLogProbs(model, torch.zeros([2, 1], { dtype: 'int64' })), /seq >= 2/);
    assert.throws(() => forwardBackward(model, batch().ids, ({ logProbs }) => logProbs.sum(1)), /lossFn must return a scalar/);
  });
  model.dispose();
});
