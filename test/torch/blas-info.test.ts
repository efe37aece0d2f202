// MKL's vendor check answered from the CPU's features (native/src/blas.cpp): MKL, linked into libtorch_cpu, calls the
// addon's mkl_serv_intel_cpu_true, so on any x86 CPU with AVX-512 it runs its AVX-512 code (not only on Intel's);
// TRINITY_MKL_AVX512=off keeps MKL's own answer, MKL_ENABLE_INSTRUCTIONS still caps it, a bad value is refused.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import * as torch from '../../src/torch/index.js';
import { cpuHasMklAvx512, cpuIsIntel } from '../helpers/cpu.js';

const mkl = torch.blasInfo().library === 'mkl';

/** blasInfo() and blasHoldsToAvx2() in a fresh process with `env` added to this one's (the settings are read once). */
function child(env: Record<string, string>): { info: torch.BlasInfo; holds: boolean } {
  const script =
    "import('./src/torch/index.js').then((t) => console.log(JSON.stringify({ info: t.blasInfo(), holds: t.blasHoldsToAvx2() })))";
  const run = spawnSync(process.execPath, ['--import', 'tsx', '-e', script], {
    env: { ...process.env, TRINITY_MKL_AVX512: '', MKL_ENABLE_INSTRUCTIONS: '', ATEN_CPU_CAPABILITY: '', ...env },
    encoding: 'utf8',
  });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout.trim().split('\n').pop() as string);
}

test('MKL asks the addon whether it may run its AVX-512 code, and the answer follows the CPU features', {
  skip: mkl ? false : 'libtorch without MKL',
}, () => {
  const { info, holds } = child({});
  assert.equal(info.library, 'mkl');
  assert.equal(info.vendorCheck, 'auto');
  assert.equal(info.asked, true, 'MKL called another mkl_serv_intel_cpu_true than the addon’s');
  assert.equal(info.answer, cpuIsIntel || cpuHasMklAvx512);
  assert.equal(info.avx512, cpuHasMklAvx512);
  assert.equal(typeof info.dispatch, 'number');
  // with MKL at the CPU's full width, prefill keeps BLAS (packedRowLimit): nothing holds to AVX2
  assert.equal(holds, false);
});

test('TRINITY_MKL_AVX512=off keeps MKL’s own answer: on a non-Intel CPU with AVX-512, MKL changes its code path', {
  skip: !mkl ? 'libtorch without MKL' : cpuIsIntel || !cpuHasMklAvx512 ? 'needs a non-Intel x86 CPU with AVX-512' : false,
}, () => {
  const auto = child({});
  const off = child({ TRINITY_MKL_AVX512: 'off' });
  assert.equal(off.info.vendorCheck, 'off');
  assert.equal(off.info.asked, true);
  assert.equal(off.info.answer, false);
  assert.equal(off.info.avx512, false);
  // MKL's own dispatch code moves with the answer: it is MKL, not only the report, that takes another path
  assert.notEqual(off.info.dispatch, auto.info.dispatch);
  // and then float32 BLAS holds to AVX2 on an AVX-512 CPU: the inference layout's prefill goes to the packed kernel
  assert.equal(off.holds, true);
});

test('MKL_ENABLE_INSTRUCTIONS=AVX2 still caps MKL below AVX-512, and blasInfo follows what MKL does with it', {
  skip: !mkl ? 'libtorch without MKL' : !cpuHasMklAvx512 ? 'needs an x86 CPU with AVX-512' : false,
}, () => {
  const capped = child({ MKL_ENABLE_INSTRUCTIONS: 'AVX2' });
  assert.equal(capped.info.answer, true);
  assert.equal(capped.info.avx512, false);
  assert.notEqual(capped.info.dispatch, child({}).info.dispatch);
  assert.equal(capped.holds, true); // libtorch's own kernels (and ours) still run AVX-512: prefill on the kernel
  // MKL reads the names as written: 'avx2' is no cap, and the report says what MKL does (its AVX-512 dispatch)
  const ignored = child({ MKL_ENABLE_INSTRUCTIONS: 'avx2' });
  assert.equal(ignored.info.avx512, true);
  assert.equal(ignored.info.dispatch, child({}).info.dispatch);
  assert.equal(ignored.holds, false);
});

test('a bad TRINITY_MKL_AVX512 is refused when the addon loads, naming the variable and the value', () => {
  const run = spawnSync(process.execPath, ['--import', 'tsx', '-e', "import('./src/torch/index.js')"], {
    env: { ...process.env, TRINITY_MKL_AVX512: 'yes' },
    encoding: 'utf8',
  });
  assert.notEqual(run.status, 0);
  assert.match(run.stderr, /TRINITY_MKL_AVX512 must be 'auto' or 'off', got 'yes'/);
});

test('float32 products on the BLAS path MKL took stay within float32 rounding of exact sums', () => {
  // shapes past MKL's small-matrix paths, odd sizes for its edge blocks; values with exact float64 sums
  torch.manualSeed(0);
  for (const [m, k, n] of [
    [67, 203, 97],
    [256, 512, 130],
  ] as const) {
    const a = torch.randn([m, k]);
    const b = torch.randn([k, n]);
    const got = a.matmul(b).toTypedArray() as Float32Array;
    const x = a.toTypedArray() as Float32Array;
    const y = b.toTypedArray() as Float32Array;
    let worst = 0;
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let exact = 0;
        let scale = 0;
        for (let l = 0; l < k; l++) {
          const p = (x[i * k + l] as number) * (y[l * n + j] as number);
          exact += p;
          scale += Math.abs(p);
        }
        worst = Math.max(worst, Math.abs((got[i * n + j] as number) - exact) / scale);
      }
    }
    // float32 sums of k products: |error| <= ~k * 2^-24 * sum |products| in the worst case, far less in practice
    assert.ok(worst < 1e-6, `${m}x${k}x${n}: worst error ${worst} of sum |products|`);
    for (const t of [a, b]) t.dispose();
  }
});
