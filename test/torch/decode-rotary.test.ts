// torch.decodeRotary (native/src/kernels.cpp): the rotary embedding in one pass, float32 or bfloat16, no autograd. It
// must give the bits of the model's applyRotary (x * cos + roll(x, d / 2) * sin: ATen's mul, roll, mul, add) on the layouts
// the attention gives it (q and k transposed views of a fused projection), for prefill and decode steps, head sizes
// on and off the 8-float vectors and cos / sin shared by the batch; with the strides ATen's result has; the same bits
// on 1 and 2 threads; refuse what it does not take with a named error; and be what the inference layout runs.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { applyRotary } from '../../src/model/rope.js';
import * as torch from '../../src/torch/index.js';
import { withBothLayouts } from '../helpers/both-layouts.js';
import { recordNativeCalls } from '../helpers/native-calls.js';

const supported = torch.packedLinearSupported();
const bytes = (t: torch.Tensor): Buffer => Buffer.from(t.contiguous().toTypedArray().buffer);

/**
 * q as the attention gets it: [B, H, T, d], a transposed view of the q part of a fused q|k|v projection's output, and
 * the cos / sin tables, all in `dtype`.
 */
function inputs(
  batch: number,
  heads: number,
  tokens: number,
  d: number,
  sharedTables: boolean,
  seed: number,
  dtype: 'float32' | 'bfloat16' = 'float32',
) {
  const gen = new torch.Generator(seed);
  const fused = torch
    .randn([batch, tokens, (heads + 2) * d], { generator: gen })
    .mul(4)
    .to(dtype);
  const x = fused
    .narrow(2, 0, heads * d)
    .view([batch, tokens, heads, d])
    .transpose(1, 2);
  const angles = torch.randn([sharedTables ? 1 : batch, 1, tokens, d / 2], { generator: gen }).mul(10);
  const half = (t: torch.Tensor) => torch.cat([t, t], -1);
  return { x, cos: half(angles.cos()).to(dtype), sin: torch.cat([angles.sin().neg(), angles.sin()], -1).to(dtype) };
}

describe('decodeRotary', { skip: supported ? false : 'this CPU lacks AVX2/FMA' }, () => {
  it("gives applyRotary's bits and strides: decode and prefill, head sizes on and off the vectors, shared tables", () => {
    torch.noGrad(() =>
      torch.scope(() => {
        for (const dtype of ['float32', 'bfloat16'] as const)
          for (const [batch, heads, tokens, d, shared] of [
            [3, 4, 1, 32, false], // a decode step
            [2, 14, 1, 64, true],
            [2, 3, 7, 12, false], // half = 6: the scalar tail only
            [1, 2, 5, 40, true], // half = 20: vectors and a tail
            [4, 2, 3, 128, false],
          ] as const) {
            const { x, cos, sin } = inputs(batch, heads, tokens, d, shared, batch * 10 + d, dtype);
            const ours = torch.decodeRotary(x, cos, sin);
            const theirs = applyRotary(x, cos, sin);
            const where = `${dtype} [${batch}, ${heads}, ${tokens}, ${d}] shared ${shared}`;
            assert.equal(ours.dtype, dtype);
            assert.deepEqual(ours.shape, theirs.shape, where);
            // (a dimension of size 1 has no meaningful stride: ATen's may differ there)
            const strides = (t: torch.Tensor) => t.strides.map((st, i) => ((t.shape[i] as number) > 1 ? st : null));
            assert.deepEqual(strides(ours), strides(theirs), where);
            assert.deepEqual(bytes(ours), bytes(theirs), where);
            // a contiguous input too
            assert.deepEqual(bytes(torch.decodeRotary(x.contiguous(), cos, sin)), bytes(theirs), `${where} contiguous`);
          }
      }),
    );
  });

  it('gives the same bits on one and two threads', () => {
    const threads = torch.getNumThreads();
    try {
      torch.noGrad(() =>
        torch.scope(() => {
          for (const dtype of ['float32', 'bfloat16'] as const) {
            const { x, cos, sin } = inputs(8, 8, 40, 64, false, 3, dtype); // 2,560 rows: split across threads
            torch.setNumThreads(1);
            const one = bytes(torch.decodeRotary(x, cos, sin));
            torch.setNumThreads(2);
            assert.deepEqual(bytes(torch.decodeRotary(x, cos, sin)), one, dtype);
          }
        }),
      );
    } finally {
      torch.setNumThreads(threads);
    }
  });

  it('refuses what it does not take, naming it', () => {
    torch.scope(() => {
      const { x, cos, sin } = inputs(2, 2, 3, 8, false, 4);
      const call = (a: torch.Tensor, c: torch.Tensor, s: torch.Tensor) => () => torch.noGrad(() => torch.decodeRotary(a, c, s));
      assert.throws(call(x.double(), cos, sin), /4-d CPU tensors, all float32 or all bfloat16, got .* Double/);
      assert.throws(call(x.to('bfloat16'), cos, sin), /all float32 or all bfloat16, got .* Float on cpu \(x: BFloat16\)/);
      assert.throws(call(x.flatten(0, 1), cos, sin), /4-d CPU tensors/);
      assert.throws(call(x, cos.narrow(2, 0, 2), sin), /cos and sin must be \[2 or 1, 1, 3, 8\]/);
      assert.throws(call(x, cos.expand([2, 2, 3, 8]), sin), /cos and sin must be/);
      assert.throws(call(torch.randn([2, 2, 3, 7]), torch.randn([2, 1, 3, 7]), torch.randn([2, 1, 3, 7])), /must be even/);
      assert.throws(call(torch.randn([2, 2, 8, 3]).transpose(2, 3), cos, sin), /last dimension .* contiguous/);
      assert.throws(() => torch.decodeRotary(x.clone().requiresGrad_(), cos, sin), /inference only/);
    });
  });

  it('is what the inference layout runs on the CPU in float32 and bf16; the training layout keeps the ATen ops', () => {
    for (const dtype of ['float32', 'bfloat16'] as const)
      withBothLayouts(
        6,
        ({ training, inference, ids }) => {
          const probe = recordNativeCalls(['decodeRotary', 'roll']);
          try {
            inference.forward(ids);
            training.forward(ids);
          } finally {
            probe.stop();
          }
          // q and k in each layer: the kernel in the inference layout, roll in the training layout
          assert.deepEqual(probe.calls, [...Array(4).fill('decodeRotary'), ...Array(4).fill('roll')], dtype);
        },
        dtype,
      );
  });
});
