// bfloat16 products on a CPU without a fast libtorch bf16 product (no oneDNN bf16: x86 without AVX-512, or oneDNN
// switched off as here): linear, matmul, mm and bmm run in float32 on widened copies and round once, gradients too;
// where libtorch's product is fast they are libtorch's. Speed: bench/README.md (bench:model --onednn off).
import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import * as torch from '../../src/torch/index.js';

afterEach(() => torch.setMkldnnEnabled(true));

torch.manualSeed(0);

/** The ops that widen an operand or round a result (aten::to / _to_copy, ToCopyBackward0) in one profiled call. */
function casts(fn: () => void): number {
  const { profile } = torch.profile(() => torch.scope(fn));
  return profile.ops.filter((o) => o.where === 'cpu' && /_to_copy|ToCopyBackward/.test(o.name)).reduce((n, o) => n + o.calls, 0);
}

/** Same shape and the same bits. */
const same = (a: torch.Tensor | null, b: torch.Tensor): boolean =>
  a !== null &&
  a.dtype === b.dtype &&
  a.shape.join() === b.shape.join() &&
  Buffer.from(a.contiguous().bytes()).equals(Buffer.from(b.contiguous().bytes()));

const bf16 = (shape: number[], requiresGrad = false) => {
  const t = torch.randn(shape).to('bfloat16');
  return requiresGrad ? t.requiresGrad_() : t;
};

test('without oneDNN, a bf16 linear is the float32 linear of the widened inputs rounded once, gradients too', () => {
  torch.setMkldnnEnabled(false);
  assert.equal(torch.mkldnnEnabled(), false);
  assert.equal(torch.cpuHasBf16Matmul(), false, 'libtorch sends no bf16 product to oneDNN with it off');
  torch.scope(() => {
    // long float32 sums (K 1031, not a multiple of any vector width); the input gradient (no transposed operand) is
    // the product libtorch's reference loop is slowest at
    const x = bf16([24, 1031], true);
    const w = bf16([40, 1031], true);
    const b = bf16([40], true);
    const up = bf16([24, 40]);
    const y = torch.linear(x, w, b);
    assert.equal(y.dtype, 'bfloat16');
    y.backward(up);

    const x32 = x.detach().float().requiresGrad_();
    const w32 = w.detach().float().requiresGrad_();
    const b32 = b.detach().float().requiresGrad_();
    const y32 = torch.linear(x32, w32, b32);
    y32.backward(up.float());
    assert.ok(same(y, y32.to('bfloat16')), 'output: the float32 product rounded once');
    for (const [name, got, want] of [
      ['x', x.grad, x32.grad],
      ['weight', w.grad, w32.grad],
      ['bias', b.grad, b32.grad],
    ] as const) {
      assert.equal(got?.dtype, 'bfloat16', `${name}.grad stays bf16`);
      assert.ok(same(got, (want as torch.Tensor).to('bfloat16')), `${name}.grad: the float32 gradient rounded once`);
    }
  });
});

test('without oneDNN, bf16 matmul, mm and bmm are the float32 products of the widened inputs rounded once', () => {
  torch.setMkldnnEnabled(false);
  torch.scope(() => {
    const a = bf16([3, 17, 515]);
    const b = bf16([3, 515, 9]);
    const round = (t: torch.Tensor) => t.to('bfloat16');
    assert.ok(same(a.bmm(b), round(a.float().bmm(b.float()))), 'bmm');
    assert.ok(same(a.matmul(b), round(a.float().matmul(b.float()))), 'matmul');
    const m = a.select(0, 1);
    const n = b.select(0, 2);
    assert.ok(same(m.mm(n), round(m.float().mm(n.float()))), 'mm');
    // float32 products are not touched
    const [m32, n32] = [m.float(), n.float()];
    assert.equal(
      casts(() => torch.linear(m32, n32.t())),
      0,
    );
  });
});

test('each bf16 product widens its operands only where libtorch has no fast bf16 product', () => {
  const [x, w] = [bf16([8, 64]), bf16([16, 64])];
  const product = () => {
    const xg = x.detach().requiresGrad_();
    torch.linear(xg, w).sum().backward();
    x.mm(w.t());
    x.unsqueeze(0).bmm(w.t().unsqueeze(0));
  };
  torch.setMkldnnEnabled(false);
  // linear: x, w widened, y rounded, and the backward's casts; mm and bmm: two operands widened, one result rounded
  assert.ok(casts(product) >= 9, 'widened without oneDNN');
  torch.setMkldnnEnabled(true);
  assert.equal(torch.mkldnnEnabled(), true);
  // on a CPU where libtorch's bf16 product is oneDNN's (AVX512 BW/VL/DQ) nothing is widened; on one without (AVX2
  // only) the products are widened with oneDNN on too
  if (torch.cpuHasBf16Matmul()) assert.equal(casts(product), 0, 'libtorch bf16 products where they are fast');
  else assert.ok(casts(product) >= 9, 'widened on a CPU without a fast libtorch bf16 product');
  x.dispose();
  w.dispose();
});

test("a bias of another dtype is libtorch's error with oneDNN on and off", () => {
  torch.scope(() => {
    const [x, w, b] = [bf16([4, 8]), bf16([3, 8]), torch.randn([3])];
    for (const on of [true, false]) {
      torch.setMkldnnEnabled(on);
      assert.throws(() => torch.linear(x, w, b), /same dtype/, `oneDNN ${on ? 'on' : 'off'}`);
    }
  });
});

test('setMkldnnEnabled takes a boolean', () => {
  assert.throws(() => torch.setMkldnnEnabled('off' as unknown as boolean), /setMkldnnEnabled: expected a boolean, got off/);
});
