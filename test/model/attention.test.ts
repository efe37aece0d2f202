// src/model/attention.ts: the plain-product path equals libtorch's fused kernel, and bfloat16 on the CPU runs in
// float32 (one rounding of the output).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { attention, SHORT_ATTENTION } from '../../src/model/attention.js';
import * as torch from '../../src/torch/index.js';

const maxAbsDiff = (a: torch.Tensor, b: torch.Tensor) => a.float().sub(b.float()).abs().max().item();
const bytes = (t: torch.Tensor) => Buffer.from(t.toTypedArray().buffer);

/** q [B, 4, S, 8] over k, v [B, 2, L, 8] (two query heads per kv head), seeded. */
function inputs(batch: number, queries: number, keys: number, seed: number) {
  const gen = new torch.Generator(seed);
  return {
    q: torch.randn([batch, 4, queries, 8], { generator: gen }),
    k: torch.randn([batch, 2, keys, 8], { generator: gen }),
    v: torch.randn([batch, 2, keys, 8], { generator: gen }),
  };
}

test('float32: the plain products (short attention) equal the fused kernel, causal and masked, grouped heads', () => {
  torch.noGrad(() =>
    torch.scope(() => {
      const { q, k, v } = inputs(3, 6, 6, 1);
      assert.ok(6 * 6 <= SHORT_ATTENTION);
      const fused = torch.scaledDotProductAttention(q, k, v, { causal: true });
      assert.ok(maxAbsDiff(attention(q, k, v, null), fused) < 1e-6);
      // a padding mask: row 0 sees keys 2.., the others all keys
      const allowed = torch.ones([3, 1, 6, 6], { dtype: 'bool' });
      allowed.narrow(0, 0, 1).narrow(3, 0, 2).fill_(0);
      const masked = torch.scaledDotProductAttention(q, k, v, { mask: allowed });
      assert.ok(maxAbsDiff(attention(q, k, v, allowed), masked) < 1e-6);
    }),
  );
});

test('bfloat16 on the CPU: the float32 attention of the widened inputs, rounded to bf16 once (one query and many)', () => {
  torch.noGrad(() =>
    torch.scope(() => {
      for (const [queries, keys] of [
        [1, 40], // a decode step over a cache (masked)
        [6, 6], // short: plain products
        [80, 80], // long: the fused kernel
      ] as const) {
        const { q, k, v } = inputs(2, queries, keys, queries);
        const [q16, k16, v16] = [q, k, v].map((t) => t.bfloat16()) as [torch.Tensor, torch.Tensor, torch.Tensor];
        const mask = queries === 1 ? torch.ones([2, 1, 1, keys], { dtype: 'bool' }) : null;
        const got = attention(q16, k16, v16, mask);
        assert.equal(got.dtype, 'bfloat16');
        const expected = attention(q16.float(), k16.float(), v16.float(), mask).bfloat16();
        assert.ok(bytes(got).equals(bytes(expected)), `${queries} x ${keys}`);
      }
    }),
  );
});

test('bfloat16 on the CPU: gradients reach q, k and v in bf16, the float32 ones rounded once', () => {
  torch.scope(() => {
    const { q, k, v } = inputs(2, 6, 6, 9);
    const leaves16 = [q, k, v].map((t) => t.bfloat16().requiresGrad_()) as [torch.Tensor, torch.Tensor, torch.Tensor];
    const leaves32 = leaves16.map((t) => t.detach().float().requiresGrad_()) as [torch.Tensor, torch.Tensor, torch.Tensor];
    // bf16 values, so that the upstream gradient is the same on both sides (the output's cast rounds it to bf16)
    const weights = torch
      .randn([2, 4, 6, 8], { generator: new torch.Generator(10) })
      .bfloat16()
      .float();
    attention(...leaves16, null)
      .float()
      .mul(weights)
      .sum()
      .backward();
    attention(...leaves32, null)
      .mul(weights)
      .sum()
      .backward();
    for (let i = 0; i < 3; i++) {
      const g16 = leaves16[i]?.grad as torch.Tensor;
      const g32 = leaves32[i]?.grad as torch.Tensor;
      assert.equal(g16.dtype, 'bfloat16');
      // bf16 has 8 significant bits: within half an ulp of the float32 gradient
      const bound = g32
        .abs()
        .mul(2 ** -8)
        .add(1e-6);
      assert.equal(g16.float().sub(g32).abs().le(bound).all().item(), 1, `gradient ${i}`);
    }
  });
});
