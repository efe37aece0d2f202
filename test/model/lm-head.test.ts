// The LM head of forwardBackward (src/model/lm-head.ts): the logits that fit keepLogitsBytes come from one product that
// the backward does not run again, the rest chunk by chunk twice; either way the log-probs, entropy, loss and
// gradients equal plain autograd through the full-vocabulary log-softmax (float32 within 1e-5; bfloat16 within the
// tolerance stated below), with per-row temperatures and losses that read log-probs, entropy or both.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CausalLM, forwardBackward, headChunkSize, type TokenLogProbs, tokenLogProbs } from '../../src/model/index.js';
import { native } from '../../src/torch/native.js';
import * as torch from '../../src/torch/index.js';
import { maxAbsDiff, modelDir } from './helpers/fixtures.js';

const ROWS = 3;
const LENGTH = 13;
const TEMPERATURES = [0.7, 1, 1.3];

function batch() {
  torch.manualSeed(5);
  const ids = torch.randint(3, 120, [ROWS, LENGTH]);
  const mask = torch.ones([ROWS, LENGTH], { dtype: 'int64' });
  mask.select(0, 1).narrow(0, 0, 3).zero_(); // left-padded
  mask.select(0, 2).narrow(0, 9, 4).zero_(); // right-padded
  return { ids, mask };
}

type Reads = 'logProbs' | 'entropy' | 'both';

/** A loss over the real targets that reads the log-probs, the entropy or both (weights vary by position). */
function lossOf(mask: torch.Tensor, reads: Reads) {
  return ({ logProbs, entropy }: TokenLogProbs) => {
    const targetMask = mask.slice(1, 1).float();
    const weight = torch.linspace(-1, 1.5, logProbs.size(1)).unsqueeze(0).mul(targetMask);
    const fromLogProbs = reads === 'entropy' ? null : logProbs.mul(weight).sum().neg();
    const fromEntropy = reads === 'logProbs' ? null : (entropy as torch.Tensor).mul(weight).sum().mul(0.3);
    if (fromLogProbs === null) return fromEntropy as torch.Tensor;
    return fromEntropy === null ? fromLogProbs : fromLogProbs.add(fromEntropy);
  };
}

/** Rows of the LM head's products (calls to the addon's linear with the head's weight) while `fn` runs. */
function headRows(model: CausalLM, fn: () => void): number {
  const parameters = model.parameters();
  const head = (parameters.get('lm_head.weight') ?? parameters.get('model.embed_tokens.weight')) as torch.Tensor;
  const table = native as unknown as Record<string, (...args: unknown[]) => unknown>;
  const original = table.linear as (...args: unknown[]) => unknown;
  let rows = 0;
  table.linear = (...args: unknown[]) => {
    const out = original.apply(native, args);
    if (args[1] === head.handle) {
      const shape = native.shape(out as Parameters<typeof native.shape>[0]);
      rows += shape.slice(0, -1).reduce((a, b) => a * b, 1);
    }
    return out;
  };
  try {
    fn();
  } finally {
    table.linear = original;
  }
  return rows;
}

/** The parameters' gradients after `run`, cloned; the gradients are cleared before and after. */
function gradientsOf(model: CausalLM, run: () => void): Map<string, torch.Tensor> {
  const params = [...model.parameters().entries()];
  for (const [, p] of params) p.grad = null;
  run();
  const out = new Map(params.map(([n, p]) => [n, (p.grad as torch.Tensor).float().clone()]));
  for (const [, p] of params) p.grad = null;
  return out;
}

/** max over parameters of max |a − b| / max(1e-3, max |b|). */
function worstRelativeDiff(got: Map<string, torch.Tensor>, expected: Map<string, torch.Tensor>): number {
  let worst = 0;
  for (const [n, ref] of expected) {
    const g = got.get(n) as torch.Tensor;
    worst = Math.max(worst, maxAbsDiff(g, ref) / Math.max(1e-3, ref.abs().max().item()));
  }
  return worst;
}

test('forwardBackward runs the head product once over the kept positions, twice over the rest', () => {
  const model = CausalLM.load(modelDir('qwen3-untied'), { requiresGrad: true });
  torch.scope(() => {
    const { ids, mask } = batch();
    const positions = ROWS * (LENGTH - 1);
    const perPosition = ROWS * model.config.vocabSize * 4; // float32 logits of one column of the batch
    const run = (keepLogitsBytes?: number) =>
      headRows(model, () =>
        torch.scope(() => {
          forwardBackward(model, ids, lossOf(mask, 'both'), {
            attentionMask: mask,
            entropy: true,
            chunkSize: 4,
            ...(keepLogitsBytes === undefined ? {} : { keepLogitsBytes }),
          });
        }),
      );
    assert.equal(run(), positions, 'default budget: every position once');
    assert.equal(run(0), 2 * positions, 'no budget: every chunk again in the backward');
    // 9 columns' worth of bytes keeps 2 whole chunks of 4 columns: 8 columns once, the other 4 twice
    assert.equal(run(9 * perPosition), 8 * ROWS + 2 * 4 * ROWS);
    for (const [, p] of model.parameters()) p.grad = null;
  });
  model.dispose();
});

test('forwardBackward: kept, partly kept and recomputed head passes equal plain autograd (float32, per-row temperatures)', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'), { requiresGrad: true });
  torch.scope(() => {
    const { ids, mask } = batch();
    const perPosition = ROWS * model.config.vocabSize * 4;
    for (const reads of ['logProbs', 'entropy', 'both'] as const) {
      const loss = lossOf(mask, reads);
      let plainLoss = 0;
      let plain: TokenLogProbs | null = null;
      const reference = gradientsOf(model, () => {
        torch.scope(() => {
          const out = tokenLogProbs(model, ids, { attentionMask: mask, entropy: true, temperature: TEMPERATURES });
          const l = loss(out);
          l.backward();
          plainLoss = l.item();
          plain = { logProbs: torch.keep(out.logProbs.detach()), entropy: torch.keep((out.entropy as torch.Tensor).detach()) };
        });
      });
      const expected = plain as unknown as TokenLogProbs;
      for (const keepLogitsBytes of [undefined, 0, 5 * perPosition]) {
        const what = `${reads}, keepLogitsBytes ${keepLogitsBytes ?? 'default'}`;
        let result: { loss: number; logProbs: torch.Tensor; entropy: torch.Tensor | null } | null = null;
        const got = gradientsOf(model, () => {
          const r = forwardBackward(model, ids, loss, {
            attentionMask: mask,
            entropy: true,
            chunkSize: 4,
            temperature: TEMPERATURES,
            ...(keepLogitsBytes === undefined ? {} : { keepLogitsBytes }),
          });
          result = { loss: r.loss.item(), logProbs: r.logProbs, entropy: r.entropy };
        });
        const r = result as unknown as { loss: number; logProbs: torch.Tensor; entropy: torch.Tensor };
        assert.ok(
          Math.abs(r.loss - plainLoss) < 1e-5 * Math.max(1, Math.abs(plainLoss)),
          `${what}: loss ${r.loss} vs ${plainLoss}`,
        );
        assert.ok(maxAbsDiff(r.logProbs, expected.logProbs) < 1e-5, `${what}: log-probs differ`);
        assert.ok(maxAbsDiff(r.entropy, expected.entropy as torch.Tensor) < 1e-5, `${what}: entropy differs`);
        const worst = worstRelativeDiff(got, reference);
        assert.ok(worst < 1e-5, `${what}: gradients differ by ${worst} of their scale`);
      }
      expected.logProbs.dispose();
      expected.entropy?.dispose();
    }
  });
  model.dispose();
});

test('forwardBackward in bfloat16: the head once equals the head twice within bf16 rounding', () => {
  // the same loss on a bf16 model, logits kept (closed-form d loss / d logits, rounded to bf16 once) against plain
  // autograd through the bf16 logits: the gradients' float32 values differ in the last bits, so their bf16 roundings
  // differ by at most a bf16 step or two of the largest gradient (2^-8 each; on this fixture they were equal bits)
  const model = CausalLM.load(modelDir('qwen3-untied'), { dtype: 'bfloat16', requiresGrad: true });
  torch.scope(() => {
    const { ids, mask } = batch();
    const loss = lossOf(mask, 'both');
    const reference = gradientsOf(model, () => {
      torch.scope(() => loss(tokenLogProbs(model, ids, { attentionMask: mask, entropy: true })).backward());
    });
    const got = gradientsOf(model, () => {
      forwardBackward(model, ids, loss, { attentionMask: mask, entropy: true, chunkSize: 4 });
    });
    const worst = worstRelativeDiff(got, reference);
    assert.ok(worst < 2 ** -6, `gradients differ by ${worst} of their scale`);
  });
  model.dispose();
});

test('tokenLogProbs without a graph: one product over the kept positions, the values of a chunk at a time', () => {
  const model = CausalLM.load(modelDir('qwen3-untied'));
  torch.scope(() => {
    const { ids, mask } = batch();
    const options = { attentionMask: mask, entropy: true, necs: true, chunkSize: 4, temperature: TEMPERATURES };
    const chunked = torch.noGrad(() => tokenLogProbs(model, ids, { ...options, keepLogitsBytes: 0 }));
    let kept = chunked;
    const rows = headRows(model, () => {
      kept = torch.noGrad(() => tokenLogProbs(model, ids, options));
    });
    assert.equal(rows, ROWS * (LENGTH - 1));
    for (const field of ['logProbs', 'entropy', 'necs'] as const)
      assert.ok(maxAbsDiff(kept[field] as torch.Tensor, chunked[field] as torch.Tensor) < 1e-6, `${field} differs`);
  });
  model.dispose();
});

test('headChunkSize: on the CPU a float32 chunk within 32 MiB by default, at most 256 positions; a given size is checked', () => {
  assert.equal(headChunkSize(undefined, 1, 151936, 'cpu'), 55); // 32 MiB / (4 B × 151,936)
  assert.equal(headChunkSize(undefined, 4, 151936, 'cpu'), 13);
  assert.equal(headChunkSize(undefined, 64, 151936, 'cpu'), 1);
  assert.equal(headChunkSize(undefined, 16, 100, 'cpu'), 256);
  assert.equal(headChunkSize(undefined, 1, 151936, 'cuda:0'), 256);
  assert.equal(headChunkSize(7, 1, 151936, 'cpu'), 7);
  assert.throws(() => headChunkSize(0, 1, 10, 'cpu'), /chunkSize must be a positive integer, got 0/);
  const model = CausalLM.load(modelDir('qwen2-tied'), { requiresGrad: true });
  torch.scope(() => {
    const { ids, mask } = batch();
    assert.throws(
      () => forwardBackward(model, ids, lossOf(mask, 'logProbs'), { attentionMask: mask, chunkSize: 4, keepLogitsBytes: -1 }),
      /keepLogitsBytes must be a number >= 0, got -1/,
    );
  });
  for (const [, p] of model.parameters()) p.grad = null;
  model.dispose();
});

test('forwardBackward with kept logits leaks no tensors', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'), { requiresGrad: true });
  const step = (keepLogitsBytes?: number) => {
    torch.scope(() => {
      const { ids, mask } = batch();
      forwardBackward(model, ids, lossOf(mask, 'both'), {
        attentionMask: mask,
        entropy: true,
        chunkSize: 4,
        checkpoint: true,
        ...(keepLogitsBytes === undefined ? {} : { keepLogitsBytes }),
      });
    });
    for (const p of model.parameters().values()) p.grad = null;
  };
  step(); // the first forward caches the rotary frequencies
  const before = torch.liveTensorCount();
  step();
  step(0);
  assert.equal(torch.liveTensorCount(), before);
  model.dispose();
});
