// libtorch failures become JS errors with libtorch's message; the process never aborts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as torch from '../../src/torch/index.js';

test('shape mismatch', () => {
  torch.scope(() => {
    assert.throws(() => torch.ones([2, 3]).matmul(torch.ones([2, 3])), /shapes cannot be multiplied \(2x3 and 2x3\)/);
    assert.throws(() => torch.ones([2, 3]).add(torch.ones([4])), /size of tensor a \(3\) must match the size of tensor b \(4\)/);
    assert.throws(() => torch.ones([6]).view([4, 2]), /shape '\[4, 2\]' is invalid for input of size 6/);
  });
});

test('dtype errors', () => {
  torch.scope(() => {
    assert.throws(() => torch.ones([2, 2]).matmul(torch.ones([2, 2], { dtype: 'int64' })), /dtype|same dtype|Long|Float/);
    assert.throws(() => torch.ones([2], { dtype: 'int64' }).requiresGrad_(), /floating point|Only Tensors of floating point/);
    assert.throws(() => torch.zeros([2], { dtype: 'complex64' as torch.DType }), /unknown dtype 'complex64'/);
  });
});

test('devices: unknown devices and CUDA on a CPU-only build', () => {
  torch.scope(() => {
    if (!torch.cuda.isAvailable()) {
      assert.throws(() => torch.zeros([2]).to('cuda:0'), /not available: this libtorch build has no CUDA device/);
      assert.throws(() => torch.zeros([2], { device: 'cuda' }), /not available/);
    }
    assert.throws(() => torch.zeros([2], { device: 'tpu:0' }), /device/i);
  });
});

test('out of memory is an error, not an abort', () => {
  assert.throws(() => torch.empty([2 ** 22, 2 ** 22]), /allocate|memory/i);
  // still alive and working afterwards
  torch.scope(() => assert.equal(torch.ones([3]).sum().item(), 3));
});

test('bad arguments from JavaScript are TypeErrors', () => {
  torch.scope(() => {
    assert.throws(() => torch.tensor([[1, 2], [3]]), /ragged nested array at data\[1\]/);
    assert.throws(() => torch.setNumThreads(0), /positive integer/);
    assert.throws(() => torch.ones([2]).item(), /one element/);
  });
});

test('autograd misuse: backward through a freed graph, backward of a non-scalar without gradient', () => {
  torch.scope(() => {
    const w = torch.ones([2], { requiresGrad: true });
    const y = w.mul(w).sum();
    y.backward();
    assert.throws(() => y.backward(), /backward through the graph a second time/);
    assert.throws(() => w.mul(2).backward(), /grad can be implicitly created only for scalar outputs/);
  });
});
