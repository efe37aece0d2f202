// `--python-mkl` (bench/harness.ts pythonMklEnv): the shim handed to the benchmarks' Python processes answers MKL's
// vendor check as told. Checked on a Node process instead of Python: preloaded, the shim comes before the addon in
// the symbol search order, so MKL asks it (the addon's blasInfo says it was not asked) and follows its answer.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { pythonMklEnv } from '../../bench/harness.js';
import * as torch from '../../src/torch/index.js';
import { cpuHasMklAvx512, cpuIsIntel } from '../helpers/cpu.js';

const nonIntelAvx512 = !cpuIsIntel && cpuHasMklAvx512;

test('--python-mkl default adds nothing; ours needs an answer to pass on', () => {
  assert.deepEqual(pythonMklEnv('default', true), {});
  assert.throws(() => pythonMklEnv('ours', null), /--python-mkl ours: MKL never asked/);
});

test('the --python-mkl ours shim is what MKL asks, and MKL follows its answer', {
  skip:
    torch.blasInfo().library !== 'mkl'
      ? 'libtorch without MKL'
      : nonIntelAvx512
        ? false
        : 'needs a non-Intel x86 CPU with AVX-512 (where the two answers differ)',
}, () => {
  const script = "import('./src/torch/index.js').then((t) => console.log(JSON.stringify(t.blasInfo())))";
  const dispatch = (answer: boolean): number => {
    const env = pythonMklEnv('ours', answer);
    assert.match(env.LD_PRELOAD ?? '', new RegExp(`mkl-vendor-${answer ? 'yes' : 'no'}\\.so`));
    const run = spawnSync(process.execPath, ['--import', 'tsx', '-e', script], {
      env: { ...process.env, MKL_ENABLE_INSTRUCTIONS: '', ...env },
      encoding: 'utf8',
    });
    assert.equal(run.status, 0, run.stderr);
    const info = JSON.parse(run.stdout.trim().split('\n').pop() as string) as torch.BlasInfo;
    assert.equal(info.asked, false, 'MKL asked the addon, not the preloaded shim');
    assert.equal(typeof info.dispatch, 'number');
    return info.dispatch as number;
  };
  assert.notEqual(dispatch(true), dispatch(false));
});
