// torch.decodeAttention (native/src/kernels.cpp): one query per row over a cache, grouped heads, a bool mask. It must
// equal libtorch's attention (float64 products as the reference) within float32 rounding on the layouts decode steps
// give it (q a transposed view, k and v views into a larger cache), in bf16 give the float32 kernel's bits on widened
// copies rounded once, give the same bits on 1 and 2 threads, refuse what it does not take with a named error, and be
// what the models' attention runs for decode steps on the CPU.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../src/model/attention.js';
import * as torch from '../../src/torch/index.js';
import { recordNativeCalls } from '../helpers/native-calls.js';

const supported = torch.packedLinearSupported();
const bytes = (t: torch.Tensor): Buffer => Buffer.from(t.contiguous().toTypedArray().buffer);

/** softmax(scale q k^T, masked) v in float64 with k and v widened to one head per query head: the reference. */
function reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | null): torch.Tensor {
  const [batch, heads, , headDim] = q.shape as [number, number, number, number];
  const [, kvHeads, keys] = k.shape as [number, number, number, number];
  const widen = (t: torch.Tensor) =>
    t
      .double()
      .unsqueeze(2)
      .expand([batch, kvHeads, heads / kvHeads, keys, headDim])
      .reshape([batch, heads, keys, headDim]);
  let scores = q
    .double()
    .matmul(widen(k).transpose(-1, -2))
    .mul(1 / Math.sqrt(headDim));
  if (mask !== null) scores = scores.maskedFill(mask.logicalNot(), Number.NEGATIVE_INFINITY);
  return scores.softmax(-1).matmul(widen(v));
}

/** The largest difference of `out` from the float64 reference. */
const errorOf = (out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | null) =>
  out
    .double()
    .sub(reference(q, k, v, mask))
    .abs()
    .max()
    .item();

/** A decode step's layout: q [B, H, 1, d] transposed from [B, 1, H, d]; k, v the first L positions of a cache. */
function decodeInputs(batch: number, heads: number, kvHeads: number, keys: number, headDim: number, seed: number) {
  const gen = new torch.Generator(seed);
  const q = torch.randn([batch, 1, heads, headDim], { generator: gen }).transpose(1, 2);
  const cacheK = torch.randn([batch + 1, kvHeads, keys + 7, headDim], { generator: gen });
  const cacheV = torch.randn([batch + 1, kvHeads, keys + 7, headDim], { generator: gen });
  const k = cacheK.narrow(0, 1, batch).narrow(2, 0, keys);
  const v = cacheV.narrow(0, 1, batch).narrow(2, 0, keys);
  // row b sees keys b .. keys-1 (a left-padded cache), and row 0 all of them
  const mask = torch
    .arange(keys)
    .view([1, 1, 1, keys])
    .ge(torch.arange(batch).view([batch, 1, 1, 1]))
    .contiguous();
  return { q, k, v, mask };
}

describe('decodeAttention', { skip: supported ? false : 'this CPU lacks AVX2/FMA' }, () => {
  it('equals float64 attention on decode layouts: grouped heads, masks, head sizes off a multiple of 8', () => {
    torch.noGrad(() =>
      torch.scope(() => {
        for (const [batch, heads, kvHeads, keys, headDim] of [
          [3, 4, 2, 5, 8],
          [5, 14, 2, 64, 64],
          [2, 6, 6, 33, 12], // no grouping; d = 12: the vector loop's tail
          [1, 2, 1, 1, 32], // one key
        ] as const) {
          const { q, k, v, mask } = decodeInputs(batch, heads, kvHeads, keys, headDim, batch * 100 + keys);
          const scale = 1 / Math.sqrt(headDim);
          for (const m of [mask, null]) {
            const out = torch.decodeAttention(q, k, v, m, scale);
            assert.deepEqual(out.shape, [batch, heads, 1, headDim]);
            const err = errorOf(out, q, k, v, m);
            assert.ok(err < 2e-6, `[${batch}, ${heads}/${kvHeads}, ${keys}, ${headDim}] mask ${m !== null}: ${err}`);
          }
          // a mask for one row broadcast over the batch
          const shared = mask.narrow(0, batch - 1, 1);
          const err = torch
            .decodeAttention(q, k, v, shared, scale)
            .double()
            .sub(reference(q, k, v, shared))
            .abs()
            .max();
          assert.ok(err.item() < 2e-6);
        }
      }),
    );
  });

  it('bfloat16: the bits of the float32 kernel on widened copies, rounded once (what attention() computed before)', () => {
    torch.noGrad(() =>
      torch.scope(() => {
        const bf16 = (t: torch.Tensor) => t.to('bfloat16');
        for (const [batch, heads, kvHeads, keys, headDim] of [
          [3, 4, 2, 5, 8],
          [5, 14, 2, 64, 64],
          [2, 6, 6, 33, 12],
          [1, 2, 1, 1, 32],
        ] as const) {
          const f = decodeInputs(batch, heads, kvHeads, keys, headDim, batch * 100 + keys);
          // k and v as views into a bf16 cache, as the engine's bf16 KV cache gives them
          const cacheK = bf16(f.k.contiguous()).unsqueeze(0).expand([2, batch, kvHeads, keys, headDim]).contiguous();
          const [q, k, v] = [bf16(f.q), cacheK.select(0, 1), bf16(f.v)];
          for (const m of [f.mask, null]) {
            const scale = 1 / Math.sqrt(headDim); // the reference's
            const out = torch.decodeAttention(q, k, v, m, scale);
            assert.equal(out.dtype, 'bfloat16');
            const widened = torch.decodeAttention(q.float(), k.float(), v.float(), m, scale).to('bfloat16');
            assert.deepEqual(bytes(out), bytes(widened), `[${batch}, ${heads}/${kvHeads}, ${keys}, ${headDim}]`);
            // and within bf16 rounding of float64 attention
            const err = errorOf(out, q, k, v, m);
            assert.ok(err < 2 ** -7, `bf16 [${batch}, ${heads}/${kvHeads}, ${keys}, ${headDim}]: ${err}`);
          }
        }
        // all keys masked: NaN, as in float32
        const { q, k, v } = decodeInputs(1, 2, 1, 4, 8, 3);
        const none = torch.zeros([1, 1, 1, 4], { dtype: 'bool' });
        assert.ok(torch.decodeAttention(bf16(q), bf16(k), bf16(v), none, 0.3).isnan().all().item());
        // attention() hands a bf16 decode step to the kernel as it is, with the bits of its float32 path
        const probe = recordNativeCalls(['decodeAttention']);
        let viaAttention: torch.Tensor;
        try {
          viaAttention = attention(bf16(q), bf16(k), bf16(v), null);
        } finally {
          probe.stop();
        }
        assert.deepEqual(probe.calls, []); // causal over 4 keys: not a one-query mask, the plain path
        const mask = torch.ones([1, 1, 1, 4], { dtype: 'bool' });
        const probe2 = recordNativeCalls(['decodeAttention']);
        try {
          viaAttention = attention(bf16(q), bf16(k), bf16(v), mask);
        } finally {
          probe2.stop();
        }
        assert.deepEqual(probe2.calls, ['decodeAttention']);
        const plain = attention(q, k, v, mask); // float32 on the unrounded inputs: close, not equal
        assert.ok(viaAttention.float().sub(plain).abs().max().item() < 0.05);
      }),
    );
  });

  it('gives the same bits on one and two threads, and for a row alone as among others', () => {
    const threads = torch.getNumThreads();
    try {
      torch.noGrad(() =>
        torch.scope(() => {
          const { q, k, v, mask } = decodeInputs(64, 8, 2, 40, 32, 7);
          torch.setNumThreads(1);
          const one = bytes(torch.decodeAttention(q, k, v, mask, 0.125));
          const oneBf16 = bytes(torch.decodeAttention(q.to('bfloat16'), k.to('bfloat16'), v.to('bfloat16'), mask, 0.125));
          torch.setNumThreads(2);
          const two = torch.decodeAttention(q, k, v, mask, 0.125);
          assert.deepEqual(bytes(two), one);
          const twoBf16 = torch.decodeAttention(q.to('bfloat16'), k.to('bfloat16'), v.to('bfloat16'), mask, 0.125);
          assert.deepEqual(bytes(twoBf16), oneBf16);
          const alone = torch.decodeAttention(
            q.narrow(0, 5, 1),
            k.narrow(0, 5, 1),
            v.narrow(0, 5, 1),
            mask.narrow(0, 5, 1),
            0.125,
          );
          assert.deepEqual(bytes(alone), bytes(two.narrow(0, 5, 1)));
        }),
      );
    } finally {
      torch.setNumThreads(threads);
    }
  });

  it('is NaN for a row that may attend to no key, as a softmax over none', () => {
    torch.noGrad(() =>
      torch.scope(() => {
        const { q, k, v } = decodeInputs(2, 2, 1, 4, 8, 3);
        const mask = torch.tensor([1, 1, 0, 1, 0, 0, 0, 0], { dtype: 'bool', shape: [2, 1, 1, 4] });
        const out = torch.decodeAttention(q, k, v, mask, 0.3);
        assert.ok(out.narrow(0, 0, 1).isfinite().all().item());
        assert.ok(out.narrow(0, 1, 1).isnan().all().item());
      }),
    );
  });

  it('keeps a NaN: a row whose query or keys hold one gives NaN, as libtorch does, and the other rows do not', () => {
    torch.noGrad(() =>
      torch.scope(() => {
        const { q, k, v, mask } = decodeInputs(3, 4, 2, 16, 8, 9);
        const bad = k.clone();
        bad.narrow(0, 1, 1).narrow(2, 3, 1).fill_(Number.NaN); // row 1, key 3
        const out = torch.decodeAttention(q, bad, v, mask, 0.3);
        assert.ok(out.narrow(0, 1, 1).isnan().all().item());
        assert.ok(out.narrow(0, 0, 1).isfinite().all().item() && out.narrow(0, 2, 1).isfinite().all().item());
        assert.ok(torch.scaledDotProductAttention(q, bad, v, { mask }).narrow(0, 1, 1).isnan().all().item());
      }),
    );
  });

  it('refuses what it does not take, naming it', () => {
    torch.scope(() => {
      const { q, k, v, mask } = decodeInputs(2, 4, 2, 6, 8, 5);
      const call = (args: Partial<Record<'q' | 'k' | 'v' | 'mask', torch.Tensor | null>>) => () =>
        torch.noGrad(() =>
          torch.decodeAttention(args.q ?? q, args.k ?? k, args.v ?? v, args.mask === undefined ? mask : args.mask, 0.3),
        );
      assert.throws(call({ q: torch.randn([2, 4, 2, 8]) }), /one query per row, got 2/);
      assert.throws(call({ k: torch.randn([2, 3, 6, 8]), v: torch.randn([2, 3, 6, 8]) }), /not a multiple of 3 kv heads/);
      assert.throws(call({ v: torch.randn([2, 2, 5, 8]) }), /k and v must be/);
      assert.throws(call({ q: q.double() }), /4-d CPU tensors, all float32 or all bfloat16, got .* Double/);
      assert.throws(call({ v: v.to('bfloat16') }), /all float32 or all bfloat16, got .* BFloat16 on cpu \(q: Float\)/);
      assert.throws(call({ k: torch.randn([2, 2, 8, 6]).transpose(2, 3) }), /last dimension .* contiguous/);
      assert.throws(call({ mask: torch.ones([2, 1, 1, 5], { dtype: 'bool' }) }), /the mask must be bool \[2 or 1, 1, 1, 6\]/);
      assert.throws(call({ mask: torch.ones([2, 1, 1, 6]) }), /the mask must be bool/);
      const w = torch.randn([2, 2, 6, 8], { requiresGrad: true });
      assert.throws(() => torch.decodeAttention(q, w, v, mask, 0.3), /inference only/);
    });
  });

  it('is what attention() runs for one-query steps without gradients on the CPU; with gradients it is not', () => {
    torch.scope(() => {
      const { q, k, v, mask } = decodeInputs(3, 4, 2, 9, 16, 11);
      const probe = recordNativeCalls(['decodeAttention', 'scaledDotProductAttention']);
      try {
        const viaAttention = torch.noGrad(() => attention(q, k, v, mask));
        assert.deepEqual(bytes(viaAttention), bytes(torch.noGrad(() => torch.decodeAttention(q, k, v, mask, 0.25))));
        const leaf = q.contiguous().requiresGrad_();
        attention(leaf, k, v, mask).sum().backward();
        assert.ok(leaf.grad !== null);
        // no mask is causal: the one query sees key 0 only, which is not the kernel's "every key"
        const causal = torch.noGrad(() => attention(q, k, v, null));
        assert.deepEqual(bytes(causal), bytes(v.narrow(2, 0, 1).repeatInterleave(2, 1)));
      } finally {
        probe.stop();
      }
      assert.deepEqual(probe.calls, [
        'decodeAttention',
        'decodeAttention',
        'scaledDotProductAttention',
        'scaledDotProductAttention',
      ]);
    });
  });
});
