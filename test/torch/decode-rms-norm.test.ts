// torch.decodeRmsNorm (native/src/kernels.cpp): RMSNorm of the last dimension in one native pass, float32 or bfloat16,
// no autograd. It must equal the formula (in float64) within float32 rounding for widths on and off the 8-float
// vectors, any leading dimensions and strided inputs; in bf16 round as the model's bf16 norm does (the normalized row
// rounded, then times the weight); give the same bits on 1 and 2 threads and for a row alone, keep NaN to its row,
// refuse what it does not take with a named error, and be what the inference layout's norms run on the CPU.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as torch from '../../src/torch/index.js';
import { withBothLayouts } from '../helpers/both-layouts.js';
import { recordNativeCalls } from '../helpers/native-calls.js';

const supported = torch.packedLinearSupported();
const bytes = (t: torch.Tensor): Buffer => Buffer.from(t.contiguous().toTypedArray().buffer);

/** x * (mean(x^2) + eps)^-1/2 * weight over the last dimension, in float64: the reference. */
function reference(x: torch.Tensor, weight: torch.Tensor, eps: number): torch.Tensor {
  const xd = x.double();
  return xd.mul(xd.mul(xd).mean(-1, { keepdim: true }).add(eps).rsqrt()).mul(weight.double());
}

describe('decodeRmsNorm', { skip: supported ? false : 'this CPU lacks AVX2/FMA' }, () => {
  it('equals the formula in float64: widths on and off the vectors, leading dimensions, strided inputs', () => {
    torch.noGrad(() =>
      torch.scope(() => {
        const gen = new torch.Generator(1);
        for (const shape of [[1], [7], [8], [9], [3, 17], [2, 3, 128], [4, 1, 896], [1, 5, 1000]]) {
          const n = shape[shape.length - 1] as number;
          const x = torch.randn(shape, { generator: gen }).mul(3);
          const weight = torch.randn([n], { generator: gen });
          for (const eps of [1e-6, 0.5]) {
            const out = torch.decodeRmsNorm(x, weight, eps);
            assert.deepEqual(out.shape, shape);
            assert.equal(out.dtype, 'float32');
            // relative to the output's size: float32 rounding of a sum of n squares and two products
            const expected = reference(x, weight, eps);
            const err = out.double().sub(expected).abs().max().item();
            const scale = expected.abs().max().item();
            assert.ok(err <= 2e-6 * Math.max(1, scale), `[${shape}] eps ${eps}: ${err} (max |y| ${scale})`);
            // and ATen's rms_norm within the same rounding
            assert.ok(
              out
                .sub(torch.rmsNorm(x, [n], weight, eps))
                .abs()
                .max()
                .item() <=
                2e-6 * Math.max(1, scale),
            );
          }
        }
        // a transposed input (Qwen3's per-head norm sees views of a fused projection) and a strided weight
        const wide = torch.randn([6, 4, 40], { generator: gen });
        const view = wide.transpose(0, 1);
        const strided = torch.randn([40, 2], { generator: gen }).select(1, 1);
        for (const w of [torch.randn([40], { generator: gen }), strided]) {
          const err = torch
            .decodeRmsNorm(view, w, 1e-6)
            .double()
            .sub(reference(view, w, 1e-6))
            .abs()
            .max()
            .item();
          assert.ok(err < 1e-5, `strided: ${err}`);
        }
      }),
    );
  });

  it("bfloat16: its own float32 normalization rounded, times the weight, rounded; ATen's bf16 norm within one rounding", () => {
    torch.noGrad(() =>
      torch.scope(() => {
        const gen = new torch.Generator(5);
        let differing = 0;
        let total = 0;
        for (const shape of [[1], [7], [8], [9], [3, 17], [2, 3, 128], [4, 1, 896], [1, 5, 1000]]) {
          const n = shape[shape.length - 1] as number;
          const x = torch.randn(shape, { generator: gen }).mul(3).to('bfloat16');
          const weight = torch.randn([n], { generator: gen }).to('bfloat16');
          for (const eps of [1e-6, 0.5]) {
            const out = torch.decodeRmsNorm(x, weight, eps);
            assert.equal(out.dtype, 'bfloat16');
            // the float32 kernel on the widened row (exact), with a weight of ones: the same sum and scale; then the
            // two roundings of transformers' bf16 RMSNorm (a bf16 product is exact in float32, rounded once)
            const own = torch
              .decodeRmsNorm(x.float(), torch.ones([n]), eps)
              .to('bfloat16')
              .mul(weight);
            assert.deepEqual(bytes(out), bytes(own), `[${shape}] eps ${eps}`);
            // ATen's bf16 norm as the training layout runs it: the float32 sums differ in order, which can flip the
            // first rounding by one bf16 step (2^-8 relative), then scaled by the weight
            const aten = weight.mul(torch.rmsNorm(x, [n], null, eps));
            const gap = out.float().sub(aten.float()).abs();
            const bound = aten
              .float()
              .abs()
              .mul(2 ** -7)
              .add(1e-30);
            assert.ok(gap.le(bound).all().item(), `[${shape}] eps ${eps}: ATen's bf16 norm differs by more than a rounding`);
            differing += gap.gt(0).sum().item();
            total += gap.shape.reduce((a, b) => a * b, 1);
          }
        }
        assert.ok(differing <= total / 100, `${differing} of ${total} values differ from ATen's bf16 norm`);
      }),
    );
  });

  it('gives the same bits on one and two threads, and for a row alone as among others', () => {
    const threads = torch.getNumThreads();
    try {
      torch.noGrad(() =>
        torch.scope(() => {
          const gen = new torch.Generator(2);
          // 300 rows of 896: enough for the rows to be split across threads (~16K values a task)
          const x = torch.randn([300, 896], { generator: gen });
          const weight = torch.randn([896], { generator: gen });
          for (const dtype of ['float32', 'bfloat16'] as const) {
            const [xd, wd] = [x.to(dtype), weight.to(dtype)];
            torch.setNumThreads(1);
            const one = bytes(torch.decodeRmsNorm(xd, wd, 1e-6));
            torch.setNumThreads(2);
            const two = torch.decodeRmsNorm(xd, wd, 1e-6);
            assert.deepEqual(bytes(two), one, dtype);
            assert.deepEqual(bytes(torch.decodeRmsNorm(xd.narrow(0, 123, 1), wd, 1e-6)), bytes(two.narrow(0, 123, 1)));
          }
        }),
      );
    } finally {
      torch.setNumThreads(threads);
    }
  });

  it('keeps a NaN to its row, gives zeros for a zero row with eps > 0, and empty for no rows', () => {
    torch.noGrad(() =>
      torch.scope(() => {
        const x = torch.randn([3, 20], { generator: new torch.Generator(3) });
        x.narrow(0, 1, 1).narrow(1, 4, 1).fill_(Number.NaN);
        x.narrow(0, 2, 1).zero_();
        const out = torch.decodeRmsNorm(x, torch.ones([20]), 1e-6);
        assert.ok(out.narrow(0, 0, 1).isfinite().all().item());
        assert.ok(out.narrow(0, 1, 1).isnan().all().item());
        assert.equal(out.narrow(0, 2, 1).abs().max().item(), 0);
        assert.deepEqual(torch.decodeRmsNorm(torch.zeros([0, 20]), torch.ones([20]), 1e-6).shape, [0, 20]);
      }),
    );
  });

  it('refuses what it does not take, naming it', () => {
    torch.scope(() => {
      const x = torch.randn([2, 8]);
      const w = torch.ones([8]);
      const call =
        (a: torch.Tensor, b: torch.Tensor, eps = 1e-6) =>
        () =>
          torch.noGrad(() => torch.decodeRmsNorm(a, b, eps));
      assert.throws(call(x.double(), w), /both float32 or both bfloat16, got Double and Float/);
      assert.throws(call(x, w.to('bfloat16')), /both float32 or both bfloat16, got Float and BFloat16/);
      assert.throws(call(x, torch.ones([7])), /the weight must be \[8\]/);
      assert.throws(call(x, torch.ones([2, 8])), /the weight must be \[8\]/);
      assert.throws(call(x, w, -1), /eps must be >= 0/);
      assert.throws(() => torch.decodeRmsNorm(torch.randn([2, 8], { requiresGrad: true }), w, 1e-6), /inference only/);
    });
  });

  it("is what the inference layout's norms run on the CPU in float32 and bf16; the training layout keeps ATen's", () => {
    for (const dtype of ['float32', 'bfloat16'] as const)
      withBothLayouts(
        4,
        ({ training, inference, ids }) => {
          const probe = recordNativeCalls(['decodeRmsNorm', 'rmsNorm']);
          let fast: torch.Tensor;
          let plain: torch.Tensor;
          try {
            fast = inference.forward(ids);
            plain = training.forward(ids);
          } finally {
            probe.stop();
          }
          // 2 per layer and the final norm, in each model
          assert.deepEqual(probe.calls, [...Array(5).fill('decodeRmsNorm'), ...Array(5).fill('rmsNorm')], dtype);
          // float32: rounding apart; bf16: a flipped rounding here and there, carried through two layers
          const gap = fast.float().sub(plain.float()).abs().max().item();
          assert.ok(gap < (dtype === 'float32' ? 1e-5 : 1e-2), `${dtype}: logits ${gap} apart`);
        },
        dtype,
      );
  });
});
