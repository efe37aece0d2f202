// The training forward: chunked token log-probs/entropy equal the full computation, and forwardBackward (with and
// without activation checkpointing) gives the same gradients as plain autograd.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CausalLM, forwardBackward, promptGroups, type TokenLogProbs, tokenLogProbs } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { HOST_TRANSFERS, recordNativeCalls } from '../helpers/native-calls.js';
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
        const got = result.loss.item();
        assert.ok(Math.abs(got - plainLoss) < 1e-6, `loss ${got} vs ${plainLoss}`);
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

/**
 * A GRPO-like batch: 3 prompts of different lengths (left-padded to 6 columns) × 3 responses each (right-padded to 4),
 * plus one row whose prompt matches no other. Rows with the same prompt share one trunk pass over it (promptWidth).
 */
function groupedBatch() {
  torch.manualSeed(11);
  const promptWidth = 6;
  const prompts = [
    [5, 9, 14, 22, 31, 7],
    [40, 41, 42],
    [60, 61, 62, 63, 64],
    [70, 71],
  ];
  const rows: { prompt: number[]; response: number[] }[] = [];
  prompts.forEach((prompt, g) => {
    for (let r = 0; r < (g === 3 ? 1 : 3); r++) {
      const n = 1 + ((g + r) % 4);
      rows.push({ prompt, response: Array.from({ length: n }, (_, i) => 3 + ((g * 31 + r * 17 + i * 7) % 110)) });
    }
  });
  const L = promptWidth + 4;
  const ids = torch.zeros([rows.length, L], { dtype: 'int64' });
  const mask = torch.zeros([rows.length, L], { dtype: 'int64' });
  const idData = ids.toArray() as number[][];
  const maskData = mask.toArray() as number[][];
  rows.forEach(({ prompt, response }, b) => {
    const start = promptWidth - prompt.length;
    [...prompt, ...response].forEach((t, i) => {
      (idData[b] as number[])[start + i] = t;
      (maskData[b] as number[])[start + i] = 1;
    });
  });
  return {
    ids: torch.tensor(idData.flat(), { dtype: 'int64', shape: [rows.length, L] }),
    mask: torch.tensor(maskData.flat(), { dtype: 'int64', shape: [rows.length, L] }),
    promptWidth,
  };
}

for (const name of ['qwen2-tied', 'qwen3-untied'] as FixtureModel[]) {
  test(`${name}: shared prompts run once (promptWidth): response log-probs, entropy and gradients unchanged`, () => {
    const model = CausalLM.load(modelDir(name), { requiresGrad: true });
    const params = [...model.parameters().entries()];
    torch.scope(() => {
      const { ids, mask, promptWidth } = groupedBatch();
      const response = (t: torch.Tensor) => t.narrow(1, promptWidth - 1, ids.size(1) - promptWidth);
      const responseMask = mask
        .slice(1, 1)
        .float()
        .mul(
          torch
            .arange(ids.size(1) - 1)
            .ge(promptWidth - 1)
            .float(),
        );
      const loss = ({ logProbs, entropy }: TokenLogProbs) => {
        const advantage = torch.linspace(-1, 1, logProbs.size(0)).unsqueeze(1);
        const count = responseMask.sum();
        const pg = logProbs.mul(advantage).mul(responseMask).sum().div(count).neg();
        return pg.sub((entropy as torch.Tensor).mul(responseMask).sum().div(count).mul(0.01));
      };
      const full = tokenLogProbs(model, ids, { attentionMask: mask, entropy: true, temperature: 0.7 });
      const shared = tokenLogProbs(model, ids, { attentionMask: mask, entropy: true, temperature: 0.7, promptWidth });
      assert.deepEqual(shared.logProbs.shape, full.logProbs.shape);
      const where = response(mask.slice(1, 1)).bool();
      assert.ok(maxAbsDiff(response(shared.logProbs), response(full.logProbs), where) < 1e-5, 'log-probs differ');
      assert.ok(maxAbsDiff(response(shared.entropy as torch.Tensor), response(full.entropy as torch.Tensor), where) < 1e-5);
      assert.equal(
        shared.logProbs
          .narrow(1, 0, promptWidth - 1)
          .abs()
          .max()
          .item(),
        0,
        'prompt positions are 0',
      );

      const gradients = (options: { promptWidth?: number; checkpoint?: boolean; chunkSize?: number }) => {
        for (const [, p] of params) p.grad = null;
        const result = forwardBackward(model, ids, loss, { attentionMask: mask, entropy: true, temperature: 0.7, ...options });
        return { loss: result.loss.item(), grads: new Map(params.map(([n, p]) => [n, (p.grad as torch.Tensor).clone()])) };
      };
      const reference = gradients({});
      for (const options of [{ promptWidth }, { promptWidth, checkpoint: true }, { promptWidth, chunkSize: 2 }]) {
        const got = gradients(options);
        assert.ok(
          Math.abs(got.loss - reference.loss) < 1e-6,
          `${JSON.stringify(options)}: loss ${got.loss} vs ${reference.loss}`,
        );
        for (const [n, ref] of reference.grads) {
          const scale = Math.max(1e-3, ref.abs().max().item());
          assert.ok(maxAbsDiff(got.grads.get(n) as torch.Tensor, ref) / scale < 1e-5, `${n}: ${JSON.stringify(options)}`);
        }
      }
      for (const [, p] of params) p.grad = null;
    });
    model.dispose();
  });
}

test('promptGroups known ahead: the packed values of the read-back grouping, with no transfer; wrong groups are errors', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'));
  torch.scope(() => {
    const { ids, mask, promptWidth } = groupedBatch();
    const options = { attentionMask: mask, entropy: true, temperature: 0.7, promptWidth };
    const readBack = tokenLogProbs(model, ids, options);
    const groups = promptGroups([0, 0, 0, 1, 1, 1, 2, 2, 2, 3]);
    const recording = recordNativeCalls(HOST_TRANSFERS);
    let known: TokenLogProbs;
    try {
      known = tokenLogProbs(model, ids, { ...options, promptGroups: groups });
    } finally {
      recording.stop();
    }
    assert.deepEqual(recording.calls, [], 'no upload or read-back');
    assert.equal(maxAbsDiff(known.logProbs, readBack.logProbs), 0);
    assert.equal(maxAbsDiff(known.entropy as torch.Tensor, readBack.entropy as torch.Tensor), 0);
    // two prompts merged into one group: the second's rows would read the first's prompt (the caller's mistake shows)
    const merged = tokenLogProbs(model, ids, { ...options, promptGroups: promptGroups([0, 0, 0, 0, 0, 0, 1, 1, 1, 2]) });
    assert.ok(maxAbsDiff(merged.logProbs, readBack.logProbs) > 1e-3);
    assert.throws(
      () => tokenLogProbs(model, ids, { ...options, promptGroups: promptGroups([0, 0, 1]) }),
      /promptGroups: 3 rows grouped for a batch of 10/,
    );
    assert.throws(
      () => promptGroups([0, 2, 1]),
      /row 1 is in group 2; groups are numbered 0, 1, \.\.\. in the order they first occur \(next: 1\)/,
    );
    assert.throws(() => promptGroups([0, -1]), /row 1 is in group -1/);
  });
  model.dispose();
});

test('promptWidth: out-of-range widths are errors; a batch with nothing to share runs unpacked', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'));
  torch.scope(() => {
    const { ids, mask } = batch(); // three different prompts: packing would save nothing
    const full = tokenLogProbs(model, ids, { attentionMask: mask });
    const same = tokenLogProbs(model, ids, { attentionMask: mask, promptWidth: 5 });
    assert.ok(maxAbsDiff(same.logProbs, full.logProbs) < 1e-6, 'unpacked: every position computed');
    assert.throws(() => tokenLogProbs(model, ids, { promptWidth: 13 }), /promptWidth must be an integer in \[1, 12\]/);
    assert.throws(() => tokenLogProbs(model, ids, { promptWidth: 0 }), /promptWidth/);
    const layout = {
      prefixMask: torch.ones([2, 3], { dtype: 'int64' }),
      suffixMask: torch.ones([4, 2], { dtype: 'int64' }),
      rowPrefix: torch.tensor([0, 0, 1, 1], { dtype: 'int64' }),
    };
    const packed = torch.randint(3, 100, [1, 14]);
    const positions = torch.zeros([1, 14], { dtype: 'int64' });
    assert.doesNotThrow(() => model.forward(packed, { sharedPrefix: layout, positionIds: positions }));
    assert.throws(
      () => model.forward(packed.narrow(1, 0, 13), { sharedPrefix: layout, positionIds: positions.narrow(1, 0, 13) }),
      /packs 2×3 \+ 4×2 tokens, inputIds has 13/,
    );
    assert.throws(() => model.forward(packed, { sharedPrefix: layout }), /with positionIds/);
  });
  model.dispose();
});
