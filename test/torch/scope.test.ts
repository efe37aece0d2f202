// scope(), keep(), dispose() and the errors for disposed tensors.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as torch from '../../src/torch/index.js';

test('scope() disposes temporaries and keeps what is returned (tensor, array, object, Map)', () => {
  const before = torch.liveTensorCount();
  let temp: torch.Tensor | undefined;
  const result = torch.scope(() => {
    temp = torch.ones([3]).mul(2);
    const a = temp.add(1);
    const b = temp.sub(1);
    return { pair: [a, b], map: new Map([['c', a.mul(b)]]) };
  });
  assert.ok(temp?.isDisposed, 'temporaries are disposed');
  assert.deepEqual(result.pair[0]?.toArray(), [3, 3, 3]);
  assert.deepEqual(result.pair[1]?.toArray(), [1, 1, 1]);
  assert.deepEqual(result.map.get('c')?.toArray(), [3, 3, 3]);
  assert.equal(torch.liveTensorCount(), before + 3);
  for (const t of [...result.pair, ...result.map.values()]) t?.dispose();
  assert.equal(torch.liveTensorCount(), before);
});

test('nested scopes hand returned tensors to the enclosing scope; keep() survives every scope', () => {
  const before = torch.liveTensorCount();
  let inner: torch.Tensor | undefined;
  let kept: torch.Tensor | undefined;
  torch.scope(() => {
    inner = torch.scope(() => torch.ones([2]).add(1));
    kept = torch.keep(torch.zeros([2]));
    assert.equal(inner.isDisposed, false, 'returned from the inner scope: alive in the outer one');
  });
  assert.equal(inner?.isDisposed, true, 'freed when the outer scope ends');
  assert.equal(kept?.isDisposed, false);
  kept?.dispose();
  assert.equal(torch.liveTensorCount(), before);
});

test('a throwing scope frees its tensors and rethrows; an async function is refused', () => {
  const before = torch.liveTensorCount();
  assert.throws(
    () =>
      torch.scope(() => {
        torch.ones([4]);
        throw new Error('boom');
      }),
    /boom/,
  );
  assert.equal(torch.liveTensorCount(), before);
  assert.throws(() => torch.scope(async () => torch.ones([1])), /synchronous/);
  assert.equal(torch.liveTensorCount(), before);
});

test('using a disposed tensor throws a clear error; views keep shared storage alive', () => {
  const base = torch.arange(6, { dtype: 'float32' });
  const view = base.view([2, 3]);
  base.dispose();
  assert.throws(() => base.add(1), torch.TensorDisposedError);
  assert.throws(() => base.shape, /disposed/);
  assert.deepEqual(view.toArray(), [
    [0, 1, 2],
    [3, 4, 5],
  ]);
  view.dispose();
});

test('a tensor read through .grad is a separate handle: disposing it leaves the gradient in place', () => {
  const w = torch.ones([2], { requiresGrad: true });
  torch.scope(() => w.mul(3).sum().backward());
  const g1 = w.grad;
  g1?.dispose();
  assert.deepEqual(w.grad?.toArray(), [3, 3]);
  w.dispose();
});
