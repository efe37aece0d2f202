// torch.packedLinear (native/src/kernels.cpp): the few-rows float32 / bfloat16 kernel on a packed weight equals
// torch.linear, on each path this CPU has (AVX2, AVX-512, AVX512-BF16 dot products).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as torch from '../../src/torch/index.js';

const skip = torch.packedLinearSupported() ? false : 'this CPU has no AVX2/FMA: packedLinear is not used here';

const maxAbsDiff = (a: torch.Tensor, b: torch.Tensor) => torch.scope(() => a.sub(b).abs().max().item());

/** Runs `fn` with packedLinear held to each path it has on this CPU for `dtype` (widest first), then back to 'auto'. */
function forEachIsa(dtype: 'float32' | 'bfloat16', fn: (isa: string) => void): void {
  const seen = new Set<string>();
  try {
    for (const setting of ['auto', 'avx512', 'avx2'] as const) {
      torch.setPackedLinearIsa(setting);
      const isa = torch.packedLinearIsa(dtype);
      if (seen.has(isa)) continue;
      seen.add(isa);
      fn(isa);
    }
  } finally {
    torch.setPackedLinearIsa('auto');
  }
}

test('packedLinear equals linear: widths around the 16-column panels, rows around the 6-row blocks and 64-row chunks', {
  skip,
}, () => {
  const gen = new torch.Generator(3);
  torch.noGrad(() =>
    torch.scope(() => {
      for (const [outFeatures, inFeatures] of [
        [1, 1],
        [16, 8],
        [21, 37],
        [33, 5],
        [60, 20], // one row: 3 full panels and a partial one, no group of 4
        [120, 20], // one row: a group of 4 panels, then 3 full ones and a partial one
        [100, 300],
      ] as const) {
        const weight = torch.randn([outFeatures, inFeatures], { generator: gen }).mul(0.1);
        const bias = torch.randn([outFeatures], { generator: gen });
        const packed = torch.packLinear(weight);
        assert.deepEqual(packed.shape, [Math.ceil(outFeatures / 16), inFeatures, 16]);
        for (const rows of [1, 2, 5, 6, 7, 8, 13, 64, 65, 130]) {
          const x = torch.randn([rows, inFeatures], { generator: gen });
          const where = `${rows} x ${inFeatures} -> ${outFeatures}`;
          assert.ok(maxAbsDiff(torch.packedLinear(x, packed, bias, outFeatures), torch.linear(x, weight, bias)) < 1e-5, where);
          assert.ok(maxAbsDiff(torch.packedLinear(x, packed, null, outFeatures), torch.linear(x, weight)) < 1e-5, where);
        }
      }
    }),
  );
});

test('packedLinear: leading dimensions, a column-major weight, and the same result on 1 and 2 threads', { skip }, () => {
  const gen = new torch.Generator(4);
  const threads = torch.getNumThreads();
  try {
    torch.noGrad(() =>
      torch.scope(() => {
        const weight = torch.randn([50, 24], { generator: gen });
        const columnMajor = weight.t().contiguous().t();
        assert.deepEqual(columnMajor.strides, [1, 50]);
        const x = torch.randn([2, 3, 24], { generator: gen });
        const packed = torch.packLinear(columnMajor);
        assert.equal(torch.packLinear(weight).eq(packed).all().item(), 1);
        const y = torch.packedLinear(x, packed, null, 50);
        assert.deepEqual(y.shape, [2, 3, 50]);
        assert.ok(maxAbsDiff(y, torch.linear(x, weight)) < 1e-5);
        // each output is one float32 FMA chain over the inputs in order, whichever thread computes its panel
        const big = torch.randn([300, 64], { generator: gen });
        const bigPacked = torch.packLinear(big);
        for (const count of [1, 8]) {
          const rows = torch.randn([count, 64], { generator: gen });
          torch.setNumThreads(1);
          const one = torch.packedLinear(rows, bigPacked, null, 300);
          torch.setNumThreads(2);
          const two = torch.packedLinear(rows, bigPacked, null, 300);
          assert.equal(one.eq(two).all().item(), 1, `${count} row(s)`);
        }
      }),
    );
  } finally {
    torch.setNumThreads(threads);
  }
});

test('packedLinear: no input features gives the bias (or zeros); no rows or outputs give empty results', { skip }, () => {
  torch.noGrad(() =>
    torch.scope(() => {
      const packed = torch.packLinear(torch.ones([5, 0]));
      const bias = torch.arange(5).float();
      const y = torch.packedLinear(torch.ones([3, 0]), packed, bias, 5);
      assert.deepEqual(y.shape, [3, 5]);
      assert.deepEqual([...(y.toTypedArray() as Float32Array)], [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4]);
      assert.equal(
        torch
          .packedLinear(torch.ones([2, 0]), packed, null, 5)
          .abs()
          .sum()
          .item(),
        0,
      );
      assert.deepEqual(torch.packedLinear(torch.ones([0, 4]), torch.packLinear(torch.ones([5, 4])), null, 5).shape, [0, 5]);
      assert.deepEqual(torch.packedLinear(torch.ones([2, 4]), torch.packLinear(torch.ones([0, 4])), null, 0).shape, [2, 0]);
      // a non-contiguous input (a transposed view) equals its contiguous copy
      const weight = torch.randn([30, 12], { generator: new torch.Generator(9) });
      const x = torch.randn([12, 7], { generator: new torch.Generator(10) }).t();
      assert.ok(maxAbsDiff(torch.packedLinear(x, torch.packLinear(weight), null, 30), torch.linear(x, weight)) < 1e-5);
    }),
  );
});

test('packedLinear refuses what it does not compute, naming the argument', { skip }, () => {
  torch.scope(() => {
    const weight = torch.ones([20, 8]);
    const packed = torch.packLinear(weight);
    assert.throws(() => torch.packedLinear(torch.ones([2, 7]), packed, null, 20), /last dimension must be 8/);
    assert.throws(() => torch.packedLinear(torch.ones([2, 8]), packed, null, 40), /40 out features do not match 2 panels/);
    assert.throws(() => torch.packedLinear(torch.ones([2, 8]), weight, null, 20), /must come from packLinear/);
    assert.throws(() => torch.packedLinear(torch.ones([2, 8]), packed, torch.ones([19]), 20), /bias must be \[20\]/);
    assert.throws(
      () => torch.packedLinear(torch.ones([2, 8], { dtype: 'bfloat16' }), packed, null, 20),
      /the input is BFloat16 but the packed weight Float/,
    );
    assert.throws(() => torch.packedLinear(torch.ones([2, 8], { dtype: 'float64' }), packed, null, 20), /float32 or bfloat16/);
    assert.throws(() => torch.packedLinear(torch.ones([2, 8]).requiresGrad_(), packed, null, 20), /inference only/);
    assert.throws(() => torch.packLinear(torch.ones([2, 3, 4])), /must be \[out, in\]/);
    assert.throws(() => torch.packLinear(torch.ones([4, 4], { dtype: 'float64' })), /the weight must be float32 or bfloat16/);
  });
});

test('bfloat16: float32 accumulation, the output rounded once (as a bf16 GEMM), at any row count, on each path', {
  skip,
}, () => {
  const gen = new torch.Generator(6);
  torch.noGrad(() =>
    torch.scope(() => {
      for (const [outFeatures, inFeatures] of [
        [21, 37], // an odd in-features count: the dot-product path's last k-step is paired with zero
        [100, 300],
      ] as const) {
        const weight = torch.randn([outFeatures, inFeatures], { generator: gen }).mul(0.1).bfloat16();
        const bias = torch.randn([outFeatures], { generator: gen }).bfloat16();
        const packed = torch.packLinear(weight.t().contiguous().t()); // column-major, as the inference layout keeps it
        assert.equal(packed.dtype, 'bfloat16');
        for (const rows of [1, 8, 64, 130]) {
          const x = torch.randn([rows, inFeatures], { generator: gen }).bfloat16();
          // the exact product of the bf16 values in float32, rounded to bf16: equal but where the float32 sums of the
          // two accumulation orders straddle a rounding boundary (then one bf16 step apart: 2^-8 relative, or for a
          // sum near 0 the float32 accumulation error, ~1e-6 here)
          const exact = torch.linear(x.float(), weight.float(), bias.float());
          const rounded = exact.bfloat16().float();
          const step = rounded
            .abs()
            .mul(2 ** -7)
            .add(1e-5);
          forEachIsa('bfloat16', (isa) => {
            const got = torch.packedLinear(x, packed, bias, outFeatures);
            assert.equal(got.dtype, 'bfloat16');
            const where = `${isa}: ${rows} x ${inFeatures} -> ${outFeatures}`;
            assert.equal(got.float().sub(rounded).abs().le(step).all().item(), 1, where);
            const same = got.float().eq(rounded).float().mean().item();
            assert.ok(same > 0.97, `${where}: ${same} of the outputs equal the rounded exact product`);
          });
        }
      }
    }),
  );
});

test('bfloat16 with AVX512-BF16 dot products: a row gets the same bits alone or among others, on 1 and 2 threads', {
  skip: torch.packedLinearIsa('bfloat16') === 'avx512bf16' ? false : 'this CPU has no AVX512-BF16 (or it is not in use)',
}, () => {
  const gen = new torch.Generator(7);
  const threads = torch.getNumThreads();
  const bytes = (t: torch.Tensor) => Buffer.from(t.toTypedArray().buffer);
  try {
    torch.noGrad(() =>
      torch.scope(() => {
        for (const inFeatures of [63, 64]) {
          const weight = torch.randn([150, inFeatures], { generator: gen }).bfloat16();
          const packed = torch.packLinear(weight);
          const x = torch.randn([13, inFeatures], { generator: gen }).bfloat16();
          torch.setNumThreads(1);
          const all = torch.packedLinear(x, packed, null, 150); // blocks of 6 + 7 rows
          // one row alone takes the 4-panels-at-once kernel; 5 rows one block
          for (const [start, count] of [
            [0, 1],
            [12, 1],
            [4, 5],
          ] as const) {
            const part = torch.packedLinear(x.narrow(0, start, count), packed, null, 150);
            assert.ok(bytes(part).equals(bytes(all.narrow(0, start, count).contiguous())), `rows ${start}+${count}`);
          }
          torch.setNumThreads(2);
          assert.ok(bytes(torch.packedLinear(x, packed, null, 150)).equals(bytes(all)), `${inFeatures}: 2 threads`);
        }
      }),
    );
  } finally {
    torch.setNumThreads(threads);
  }
});

test('packedLinear gives the same bits with AVX-512 and AVX2 registers (12- and 6-row blocks, 1 and 4 panels at once)', {
  skip: torch.packedLinearIsa() === 'avx512' ? false : 'this CPU has no AVX-512: packedLinear runs on AVX2 only',
}, () => {
  const gen = new torch.Generator(5);
  const bytes = (t: torch.Tensor) => Buffer.from(t.toTypedArray().buffer);
  torch.noGrad(() =>
    torch.scope(() => {
      for (const dtype of ['float32', 'bfloat16'] as const) {
        for (const [outFeatures, inFeatures] of [
          [21, 37],
          [120, 20],
          [100, 300],
        ] as const) {
          const weight = torch.randn([outFeatures, inFeatures], { generator: gen }).mul(0.1).to({ dtype });
          const bias = torch.randn([outFeatures], { generator: gen }).to({ dtype });
          const packed = torch.packLinear(weight);
          for (const rows of [1, 5, 12, 13, 25, 64, 70]) {
            const x = torch.randn([rows, inFeatures], { generator: gen }).to({ dtype });
            try {
              // 'avx512': AVX-512 FMAs for bf16 too (not the dot products, which sum in pairs)
              torch.setPackedLinearIsa('avx512');
              assert.equal(torch.packedLinearIsa(dtype), 'avx512');
              const wide = torch.packedLinear(x, packed, bias, outFeatures);
              torch.setPackedLinearIsa('avx2');
              assert.equal(torch.packedLinearIsa(dtype), 'avx2');
              const narrow = torch.packedLinear(x, packed, bias, outFeatures);
              assert.ok(bytes(wide).equals(bytes(narrow)), `${dtype} ${rows} x ${inFeatures} -> ${outFeatures}`);
            } finally {
              torch.setPackedLinearIsa('auto');
            }
          }
        }
      }
    }),
  );
  assert.equal(torch.packedLinearIsa(), 'avx512');
  assert.throws(
    () => torch.setPackedLinearIsa('sse' as 'avx2'),
    /setPackedLinearIsa: expected 'auto', 'avx512' or 'avx2', got "sse"/,
  );
  assert.throws(
    () => torch.packedLinearIsa('float16' as 'float32'),
    /packedLinearIsa: expected 'float32' or 'bfloat16', got "float16"/,
  );
});
