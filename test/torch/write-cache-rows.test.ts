// torch.writeCacheRows (native/src/kernels.cpp): the KV cache's write of a step's rows, in place on the CPU. It must
// leave the buffer exactly as ATen's index_put_ with the same indices does (float32, bf16 and bool; unordered slots,
// several tokens a row, strided sources), refuse indices out of range and mismatched tensors with a named error,
// replay in a captured step with the new indices, and be what the KV cache writes with on the CPU.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as torch from '../../src/torch/index.js';
import { withBothLayouts } from '../helpers/both-layouts.js';
import { recordNativeCalls } from '../helpers/native-calls.js';

const bytes = (t: torch.Tensor): Buffer => Buffer.from(t.contiguous().toTypedArray().buffer);
const long = (values: number[], shape: number[]) => torch.tensor(BigInt64Array.from(values, BigInt), { shape });

/** buffer.indexPut_ as the KV cache ran it: [slot, :, position] = source transposed to [B, T, H, D]. */
function viaIndexPut(buffer: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, source: torch.Tensor) {
  buffer.indexPut_([slots.unsqueeze(1), null, positions], source.transpose(1, 2));
}

describe('writeCacheRows', () => {
  it('leaves the buffer as index_put_ does: float32, bf16 and bool, unordered slots, several tokens, strided sources', () => {
    torch.noGrad(() =>
      torch.scope(() => {
        const gen = new torch.Generator(1);
        const slots = long([3, 0, 2], [3]);
        const positions = long([5, 6, 7, 0, 1, 2, 9, 3, 4], [3, 3]);
        for (const dtype of ['float32', 'bfloat16'] as const) {
          const start = torch.randn([4, 2, 10, 8], { generator: gen }).to(dtype);
          // the source as the attention gives it: a transposed view of [B, T, H, D]
          const source = torch.randn([3, 3, 2, 8], { generator: gen }).to(dtype).transpose(1, 2);
          const ours = start.clone();
          torch.writeCacheRows(ours, slots, positions, source);
          const theirs = start.clone();
          viaIndexPut(theirs, slots, positions, source);
          assert.deepEqual(bytes(ours), bytes(theirs), dtype);
          assert.ok(!bytes(ours).equals(bytes(start)), `${dtype}: the buffer was written`);
          // a source with a gapped last dimension is copied first
          const gapped = torch
            .randn([3, 2, 3, 16], { generator: gen })
            .to(dtype)
            .narrow(3, 0, 16)
            .view([3, 2, 3, 8, 2])
            .select(4, 0);
          torch.writeCacheRows(ours, slots, positions, gapped);
          viaIndexPut(theirs, slots, positions, gapped);
          assert.deepEqual(bytes(ours), bytes(theirs), `${dtype} gapped`);
        }
        // key-valid flags: bool [S, L] seen as [S, 1, L, 1]
        const flags = torch.zeros([4, 10], { dtype: 'bool' });
        const real = torch.tensor([1, 1, 0, 1, 0, 1, 1, 1, 1], { dtype: 'bool', shape: [3, 3] });
        torch.writeCacheRows(flags.view([4, 1, 10, 1]), slots, positions, real.view([3, 1, 3, 1]));
        const expected = torch.zeros([4, 10], { dtype: 'bool' });
        expected.indexPut_([slots.unsqueeze(1), positions], real);
        assert.deepEqual(bytes(flags), bytes(expected));
      }),
    );
  });

  it('refuses indices out of range and mismatched tensors, naming them', () => {
    torch.noGrad(() =>
      torch.scope(() => {
        const buffer = torch.zeros([2, 1, 4, 3]);
        const source = torch.ones([2, 1, 1, 3]);
        const slots = long([0, 1], [2]);
        const call = (b: torch.Tensor, s: torch.Tensor, p: torch.Tensor, src: torch.Tensor) => () =>
          torch.writeCacheRows(b, s, p, src);
        assert.throws(
          call(buffer, long([0, 2], [2]), long([0, 1], [2, 1]), source),
          /slots\[1\] = 2 is out of range \(2 slots\)/,
        );
        assert.throws(call(buffer, slots, long([0, 4], [2, 1]), source), /positions\[1, 0\] = 4 is out of range \(length 4\)/);
        assert.throws(call(buffer, slots, long([0, -1], [2, 1]), source), /positions\[1, 0\] = -1 is out of range/);
        assert.throws(
          call(buffer, slots, long([0, 1], [2, 1]), source.to('bfloat16')),
          /the source is BFloat16 but the buffer Float/,
        );
        assert.throws(call(buffer, slots, long([0, 1], [2, 1]), torch.ones([2, 1, 2, 3])), /the source must be \[2, 1, 1, 3\]/);
        assert.throws(call(buffer, slots.int(), long([0, 1], [2, 1]), source), /slots must be int64 \[B\], got Int/);
        assert.throws(call(buffer, slots, long([0, 1, 2], [3, 1]), source), /positions must be int64 \[2, T\]/);
        assert.throws(
          call(buffer.view([2, 4, 3]), slots, long([0, 1], [2, 1]), source),
          /the buffer must be \[slots, heads, length, width\]/,
        );
        assert.throws(
          call(torch.zeros([2, 1, 3, 4]).transpose(2, 3), slots, long([0, 1], [2, 1]), source),
          /last dimension must be contiguous/,
        );
        assert.equal(buffer.abs().sum().item(), 0, 'nothing written by a refused call');
      }),
    );
  });

  it('replays in a captured step at the positions of the new inputs', () => {
    torch.noGrad(() => {
      const cache = torch.zeros([3, 2, 6, 4]);
      const step = (slots: torch.Tensor, positions: torch.Tensor, x: torch.Tensor) => {
        torch.writeCacheRows(cache, slots, positions, x.mul(2));
        return [cache.sum()];
      };
      const [s1, p1, x1] = [long([0, 2], [2]), long([1, 4], [2, 1]), torch.ones([2, 2, 1, 4])];
      const captured = torch.capture([s1, p1, x1], () => step(s1, p1, x1));
      assert.ok(captured.step !== null, captured.reason ?? '');
      const [s2, p2, x2] = [long([1, 0], [2]), long([5, 0], [2, 1]), torch.full([2, 2, 1, 4], 3)];
      cache.zero_();
      captured.step.replay([s2, p2, x2]);
      const replayed = bytes(cache);
      cache.zero_();
      step(s2, p2, x2);
      assert.deepEqual(replayed, bytes(cache));
      assert.equal(cache.narrow(0, 1, 1).narrow(2, 5, 1).sum().item(), 48);
    });
  });

  it('is what the KV cache writes with on the CPU: keys and values per layer and the key flags per step', () => {
    withBothLayouts(8, ({ inference, ids }) => {
      const cache = inference.createKVCache({ slots: 2, maxLength: 16 });
      const probe = recordNativeCalls(['writeCacheRows', 'indexPut_']);
      let cached: torch.Tensor;
      try {
        cached = inference.forward(ids, { cache, slots: [0, 1] });
      } finally {
        probe.stop();
      }
      // 2 layers x (keys, values) + the flags, and no indexPut_
      assert.deepEqual(probe.calls, Array(5).fill('writeCacheRows'));
      assert.ok(cached.sub(inference.forward(ids)).abs().max().item() < 1e-5);
      cache.dispose();
    });
  });
});
