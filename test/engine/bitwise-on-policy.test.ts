// The batch-invariant mode (trainer.bitwise_on_policy; src/model/batch-invariant.ts): every token the rollout engine
// samples carries the log-prob that the trainer's forward computes for it, bit for bit — under continuous batching
// (more requests than slots: companions change every step), shared prompts (n > 1), prompts whose blocks come from
// the prefix cache (paged KV cache), captured and eager decode steps,
// in float32 and bfloat16 — whatever the trainer's batch: all sequences in one padded batch (left-padded prompts,
// right-padded responses, as the trainer lays them out), other groupings and orders, and the forward that
// records gradients, and with the rows packed end to end without pads (use_remove_padding, or the trainer's batch
// that the mode packs when that saves a fifth of its positions). With the mode off the same
// comparison finds unequal bits (the gap the mode removes). With LoRA the
// engine samples with the merged weights (as a run's weight sync sends them) and the trainer computes with its
// adapters unmerged: the same bits, and unmerge() gives back the base weights exactly.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { before, describe, test } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import { CausalLM, forwardBackward, LoraModel, type ModelDType, tokenLogProbs } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { modelDir } from './helpers.js';

interface Sampled {
  prompt: number[];
  tokens: number[];
  logprobs: number[];
  temperature: number;
}

/** 24 requests (prompts of 1-17 ids, 20-59 new tokens, temperatures 1 / 0.7 / 1.3, every fourth with n = 2) on 3 slots. */
async function sample(
  dir: string,
  dtype: ModelDType,
  on: boolean,
  captureDecode: boolean,
  prefixCaching = false,
  onClose?: (engine: RolloutEngine) => void,
): Promise<Sampled[]> {
  const engine = RolloutEngine.load(dir, {
    dtype,
    slots: 3,
    maxLength: 96,
    captureDecode,
    batchInvariant: on,
    ...(prefixCaching ? { enablePrefixCaching: true } : {}),
  });
  // with the prefix cache: every prompt opens with the same 33 ids (two full 16-position blocks, reused)
  const shared = prefixCaching ? Array.from({ length: 33 }, (_, j) => 3 + ((j * 7) % 120)) : [];
  try {
    const requests = Array.from({ length: 24 }, (_, i) => ({
      promptIds: [...shared, ...Array.from({ length: 1 + ((i * 5) % 17) }, (_, j) => 3 + ((i * 37 + j * 11) % 120))],
      maxTokens: prefixCaching ? 10 + ((i * 13) % 30) : 20 + ((i * 13) % 40),
      ignoreEos: true,
      temperature: [1, 0.7, 1.3][i % 3] as number,
      seed: i,
      n: i % 4 === 0 ? 2 : 1,
    }));
    const results = await Promise.all(requests.map((r) => engine.generate(r)));
    return results.flatMap((r, i) =>
      r.completions.map((c) => ({
        prompt: requests[i]?.promptIds ?? [],
        tokens: c.tokenIds,
        logprobs: c.logprobs,
        temperature: requests[i]?.temperature ?? 1,
      })),
    );
  } finally {
    onClose?.(engine);
    await engine.close();
  }
}

/** The trainer's layout of a batch: prompts left-padded to the longest, responses right-padded. */
function trainerBatch(rows: readonly Sampled[]): { ids: torch.Tensor; mask: torch.Tensor; promptWidth: number } {
  const promptWidth = Math.max(...rows.map((s) => s.prompt.length));
  const responseWidth = Math.max(...rows.map((s) => s.tokens.length));
  const ids = rows.map((s) => {
    const left = promptWidth - s.prompt.length;
    const right = responseWidth - s.tokens.length;
    return [...Array(left).fill(0), ...s.prompt, ...s.tokens, ...Array(right).fill(0)].map(BigInt);
  });
  const mask = rows.map((s) => {
    const left = promptWidth - s.prompt.length;
    const right = responseWidth - s.tokens.length;
    return [...Array(left).fill(0n), ...Array(s.prompt.length + s.tokens.length).fill(1n), ...Array(right).fill(0n)];
  });
  return { ids: torch.tensor(ids), mask: torch.tensor(mask), promptWidth };
}

/**
 * How the trainer lays the rows out: `padded` whole rows; `auto` the trainer's batch (promptWidth: the mode packs the
 * rows when that saves a fifth of the positions, src/model/training.ts); `packed` packed end to end without pads,
 * prompts shared within a group (packedRows, use_remove_padding, src/model/packed-rows.ts).
 */
type Layout = 'padded' | 'auto' | 'packed';

/** The trainer's log-probs of each row's sampled tokens; `withGrad`: the forward that records gradients. */
function trainerLogprobs(model: CausalLM, rows: readonly Sampled[], withGrad: boolean, layout: Layout): number[][] {
  return torch.scope(() => {
    const { ids, mask, promptWidth } = trainerBatch(rows);
    const packedRows = { promptLengths: rows.map((s) => s.prompt.length), responseLengths: rows.map((s) => s.tokens.length) };
    const options = {
      attentionMask: mask,
      temperature: rows.map((s) => s.temperature),
      ...(layout === 'padded' ? {} : { promptWidth }),
      ...(layout === 'packed' ? { packedRows } : {}),
    };
    const logProbs = withGrad
      ? forwardBackward(model, ids, (t) => t.logProbs.mean(), options).logProbs
      : torch.noGrad(() => tokenLogProbs(model, ids, options).logProbs);
    const table = logProbs.toArray() as number[][];
    return rows.map((s, b) => (table[b] as number[]).slice(promptWidth - 1, promptWidth - 1 + s.tokens.length));
  });
}

/** Groupings of the trainer's batches: all at once; reversed in sevens (other companions, rows and padding). */
const groupings = (rows: readonly Sampled[]): Sampled[][] => [
  [...rows],
  ...Array.from({ length: Math.ceil(rows.length / 7) }, (_, g) => [...rows].reverse().slice(g * 7, g * 7 + 7)),
];

/** Tokens compared and those whose trainer log-prob differs from the sampler's in any bit. */
function compare(
  model: CausalLM,
  rows: readonly Sampled[],
  withGrad: boolean,
  layout: Layout = 'auto',
): { tokens: number; unequal: string[] } {
  const unequal: string[] = [];
  let tokens = 0;
  for (const group of withGrad ? [[...rows]] : groupings(rows)) {
    const trained = trainerLogprobs(model, group, withGrad, layout);
    group.forEach((s, b) => {
      s.logprobs.forEach((sampled, j) => {
        tokens++;
        const computed = trained[b]?.[j];
        if (!Object.is(computed, sampled))
          unequal.push(`row of ${group.length}, token ${j}: sampler ${sampled}, trainer ${computed}`);
      });
    });
  }
  return { tokens, unequal };
}

before(() => torch.setNumThreads(1));

describe('bitwise on-policy: the sampler log-probs equal the trainer forward', () => {
  // dense models, and mixtures of experts (qwen3_moe; qwen2_moe with its shared expert): the router's choice and the
  // experts' sums must not follow the batch either (src/model/moe.ts)
  for (const [fixture, dtype, captureDecode] of [
    ['qwen3-untied', 'float32', true],
    ['qwen2-tied', 'bfloat16', false],
    ['qwen3-moe', 'float32', false],
    ['qwen2-moe', 'bfloat16', false],
  ] as const) {
    test(`${fixture} ${dtype} (${captureDecode ? 'captured' : 'eager'} decode steps)`, async (t) => {
      if (!torch.packedLinearSupported()) return t.skip('needs a CPU with AVX2/FMA');
      const dir = join(dirname(modelDir('qwen2-tied')), fixture);
      const rows = await sample(dir, dtype, true, captureDecode);
      const sampledTokens = rows.reduce((n, s) => n + s.tokens.length, 0);
      assert.ok(sampledTokens >= 1000, `${sampledTokens} tokens sampled`);
      const model = CausalLM.load(dir, { dtype, requiresGrad: true });
      try {
        model.setBatchInvariant(true);
        for (const withGrad of [false, true])
          for (const layout of ['padded', 'auto', 'packed'] as const) {
            const { tokens, unequal } = compare(model, rows, withGrad, layout);
            assert.ok(tokens >= sampledTokens);
            assert.deepEqual(
              unequal.slice(0, 5),
              [],
              `${unequal.length} of ${tokens} tokens differ (${layout} rows${withGrad ? ', gradient forward' : ''})`,
            );
          }
        // the same comparison with the mode off on both sides: the kernels differ and so do bits
        model.setBatchInvariant(false);
        const off = await sample(dir, dtype, false, captureDecode);
        assert.ok(compare(model, off.slice(0, 10), false).unequal.length > 0, 'with the mode off some log-probs should differ');
      } finally {
        model.dispose();
      }
    });
  }

  test('with the prefix cache (paged KV cache): prompts whose blocks were computed for another request', async (t) => {
    if (!torch.packedLinearSupported()) return t.skip('needs a CPU with AVX2/FMA');
    const dir = modelDir('qwen3-untied');
    let hits = 0;
    const rows = await sample(dir, 'float32', true, false, true, (engine) => {
      hits = engine.stats.kvCache?.hits ?? 0;
    });
    assert.ok(hits > 0, 'prompts found their shared blocks in the prefix cache');
    const model = CausalLM.load(dir, { dtype: 'float32', requiresGrad: true });
    try {
      model.setBatchInvariant(true);
      const { tokens, unequal } = compare(model, rows, false);
      assert.ok(tokens >= 500, `${tokens} tokens compared`);
      assert.deepEqual(unequal.slice(0, 5), [], `${unequal.length} of ${tokens} tokens differ`);
    } finally {
      model.dispose();
    }
  });

  for (const dtype of ['float32', 'bfloat16'] as const)
    test(`LoRA ${dtype}: the engine on the merged weights, the trainer with the adapters (forward and gradient)`, async (t) => {
      if (!torch.packedLinearSupported()) return t.skip('needs a CPU with AVX2/FMA');
      const model = CausalLM.load(modelDir('qwen3-untied'), { dtype, requiresGrad: true });
      const merged = mkdtempSync(join(tmpdir(), 'bitwise-lora-'));
      try {
        model.setBatchInvariant(true);
        // B random too (a trained adapter, not a new one's B = 0), scale 2
        const lora = LoraModel.attach(model, {
          r: 4,
          loraAlpha: 8,
          targetModules: 'all-linear',
          initLoraWeights: false,
          seed: 3,
        });
        const values = (w: torch.Tensor) => Array.from(w.float().toTypedArray() as Float32Array);
        const base = new Map([...model.parameters()].map(([name, w]) => [name, values(w)]));
        lora.merge();
        model.save(merged);
        lora.unmerge();
        for (const [name, w] of model.parameters()) assert.deepStrictEqual(values(w), base.get(name), `${name} after unmerge`);
        const rows = await sample(merged, dtype, true, true);
        lora.train(); // dropout 0: training mode keeps the folded product
        for (const withGrad of [false, true]) {
          const { tokens, unequal } = compare(model, rows, withGrad);
          assert.ok(tokens >= 1000);
          assert.deepEqual(
            unequal.slice(0, 5),
            [],
            `${unequal.length} of ${tokens} tokens differ${withGrad ? ' (gradient forward)' : ''}`,
          );
        }
        // the adapters' gradients flow (the value is the folded product's, the gradient the adapter's)
        const ids = torch.tensor([[3n, 5n, 7n, 9n]]);
        forwardBackward(model, ids, (r) => r.logProbs.mean(), {});
        const grads = [...lora.loraParameters().values()].map((p) => p.grad?.abs().sum().item() ?? 0);
        assert.ok(
          grads.every((g) => g > 0),
          'every adapter tensor has a gradient',
        );
        lora.unload();
      } finally {
        rmSync(merged, { recursive: true, force: true });
        model.dispose();
      }
    });

  test('the engine sets its model batch-invariant and attends over keys in eights', async (t) => {
    if (!torch.packedLinearSupported()) return t.skip('needs a CPU with AVX2/FMA');
    const model = CausalLM.load(modelDir('qwen2-tied'), { layout: 'inference' });
    const engine = new RolloutEngine(model, { slots: 2, maxLength: 32, captureDecode: false, batchInvariant: true });
    try {
      assert.equal(model.batchInvariant, true);
      assert.equal(engine.decodeKeyBucket % 8, 0, 'keys in eights: no padding each step');
    } finally {
      await engine.close();
      model.dispose();
    }
  });
});
