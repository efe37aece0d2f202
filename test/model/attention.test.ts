// src/model/attention.ts: the plain-product path equals libtorch's fused kernel, bfloat16 on the CPU runs in
// float32 (one rounding of the output), and grouped heads never reach libtorch's math kernel while another path
// exists (checked on the CPU with its flash kernel switched off, and on CUDA where a GPU is visible).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { attention, SHORT_ATTENTION } from '../../src/model/attention.js';
import { causalPadMask } from '../../src/model/attention-mask.js';
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

/** The op names a profile of fn saw. */
function opsOf(fn: () => unknown): Set<string> {
  const { profile } = torch.profile(() => torch.noGrad(() => torch.scope(fn)));
  return new Set(profile.ops.map((op) => op.name));
}

test("libtorch's kernel choice is asked for (torch.sdpBackend) and follows its switches", () => {
  torch.scope(() => {
    const { q, k, v } = inputs(1, 80, 80, 11);
    assert.equal(torch.sdpBackend(q, k, v, { causal: true }), 'flash');
    assert.equal(torch.sdpBackendEnabled('flash'), true);
    torch.setSdpBackendEnabled('flash', false);
    try {
      assert.equal(torch.sdpBackendEnabled('flash'), false);
      assert.equal(torch.sdpBackend(q, k, v, { causal: true }), 'math');
    } finally {
      torch.setSdpBackendEnabled('flash', true);
    }
    assert.equal(torch.sdpBackend(q, k, v, { causal: true }), 'flash');
    assert.throws(() => torch.setSdpBackendEnabled('fast' as torch.SdpBackend, true), /expected one of flash, efficient/);
    assert.throws(() => torch.sdpBackendEnabled('fast' as torch.SdpBackend), /expected one of flash, efficient/);
    assert.throws(() => torch.setSdpBackendEnabled('math', 1 as unknown as boolean), /expected a boolean/);
  });
});

test('grouped heads where the only fused choice is math: a decode step runs plain products, longer ones widen k and v', () => {
  // the CPU with its flash kernel off stands in for CUDA's masked or float32 grouped-query calls
  const reference = (q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | null) =>
    torch.scaledDotProductAttention(
      q,
      k.repeatInterleave(2, 1),
      v.repeatInterleave(2, 1),
      mask === null ? { causal: true } : { mask },
    );
  torch.noGrad(() =>
    torch.scope(() => {
      const decode = inputs(3, 1, 40, 12);
      const decodeMask = torch.ones([3, 1, 1, 40], { dtype: 'bool' });
      decodeMask.narrow(0, 1, 1).narrow(3, 0, 7).fill_(0); // row 1 left-padded
      const prefill = inputs(2, 80, 80, 13);
      const real = torch.ones([2, 80], { dtype: 'bool' });
      real.narrow(0, 0, 1).narrow(1, 0, 5).fill_(0); // row 0 left-padded
      const prefillMask = causalPadMask(real);
      // flash on (the CPU's default): libtorch's grouped-query kernel, k and v as they are
      let ops = opsOf(() => attention(prefill.q, prefill.k, prefill.v, prefillMask));
      assert.ok(ops.has('aten::_scaled_dot_product_flash_attention_for_cpu'), [...ops].join(' '));
      torch.setSdpBackendEnabled('flash', false);
      try {
        const cases = [
          [decode, decodeMask],
          [decode, null],
          [prefill, prefillMask],
          [prefill, null],
        ] as const;
        for (const [{ q, k, v }, mask] of cases) {
          const label = `${q.size(2)} queries, ${mask === null ? 'causal' : 'masked'}`;
          assert.equal(torch.sdpBackend(q, k, v, mask === null ? { causal: true } : { mask }), 'math', label);
          const got = attention(q, k, v, mask);
          assert.ok(maxAbsDiff(got, reference(q, k, v, mask)) < 1e-6, label);
          ops = opsOf(() => attention(q, k, v, mask));
          // no per-head copies made by the math kernel's grouped-query path
          assert.ok(!ops.has('aten::repeat_interleave'), `${label}: ${[...ops].join(' ')}`);
          if (q.size(2) === 1) assert.ok(!ops.has('aten::scaled_dot_product_attention'), label);
          else assert.ok(ops.has('aten::scaled_dot_product_attention'), label);
        }
        // half precision: the one-query products run in float32 (as the math kernel's), the output rounded once;
        // in float16 products the scores' rounding moves these outputs by ~0.01
        const [q16, k16, v16] = [decode.q.mul(3), decode.k.mul(3), decode.v].map((t) => t.half()) as [
          torch.Tensor,
          torch.Tensor,
          torch.Tensor,
        ];
        const got = attention(q16, k16, v16, decodeMask);
        assert.equal(got.dtype, 'float16');
        const expected = attention(q16.float(), k16.float(), v16.float(), decodeMask).half();
        assert.ok(bytes(got).equals(bytes(expected)));
      } finally {
        torch.setSdpBackendEnabled('flash', true);
      }
    }),
  );
});

describe('on CUDA, grouped-query attention never runs the math kernel', {
  skip: torch.cuda.deviceCount() === 0 ? 'no CUDA device visible' : false,
}, () => {
  test('bf16 and float32, masked and causal, one query and many: a fused kernel or plain products, values as on the CPU', () => {
    torch.noGrad(() =>
      torch.scope(() => {
        for (const dtype of ['bfloat16', 'float32'] as const) {
          for (const [queries, keys] of [
            [1, 96],
            [128, 128],
          ] as const) {
            for (const masked of [true, false]) {
              const label = `${dtype}, ${queries} x ${keys}, ${masked ? 'masked' : 'causal'}`;
              const { q, k, v } = inputs(2, queries, keys, queries + keys);
              const mask = masked ? torch.ones([2, 1, queries, keys], { dtype: 'bool' }).tril(keys - queries) : null;
              const onGpu = (t: torch.Tensor) => t.to({ device: 'cuda:0', dtype });
              const got = attention(onGpu(q), onGpu(k), onGpu(v), mask?.to({ device: 'cuda:0' }) ?? null);
              // float32 on the CPU from the same (rounded) inputs
              const [q32, k32, v32] = [q, k, v].map((t) => t.to({ dtype }).float()) as [torch.Tensor, torch.Tensor, torch.Tensor];
              const expected = attention(q32, k32, v32, mask);
              assert.ok(maxAbsDiff(got.to({ device: 'cpu' }), expected) < (dtype === 'float32' ? 1e-4 : 3e-2), label);
              const ops = opsOf(() => attention(onGpu(q), onGpu(k), onGpu(v), mask?.to({ device: 'cuda:0' }) ?? null));
              assert.ok(!ops.has('aten::_scaled_dot_product_attention_math'), `${label}: ${[...ops].join(' ')}`);
            }
          }
        }
      }),
    );
  });
});
