// The addon's boundary never turns a bad value from JavaScript into a memory access: exported-tensor tokens are ids in
// a registry (each imported exactly once, never a pointer), handles and integers are checked before any cast, and
// every rejected value is an Error that names it. Tensors in transit between threads are freed even when their
// message is dropped (a call that timed out, a worker that exited with a call in flight).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { DTYPE_CODES } from '../../src/torch/dtype.js';
import { type GeneratorHandle, type Handle, native } from '../../src/torch/native.js';
import * as torch from '../../src/torch/index.js';
import { fromHandle } from '../../src/torch/tensor.js';

const helper = new URL('./helpers/tensor-worker.ts', import.meta.url);
const float32 = DTYPE_CODES.float32;

describe('exported tensors: a registry of ids, each taken out exactly once', () => {
  test('import shares storage; a second import, a release and a forged id are Errors naming the id', () => {
    const before = torch.liveExportCount();
    const t = torch.tensor([1, 2, 3]);
    const token = torch.exportTensor(t);
    assert.equal(torch.liveExportCount(), before + 1);
    const imported = torch.importTensor(token);
    assert.equal(torch.liveExportCount(), before);
    imported.mul_(2); // same storage: the original sees the write
    assert.deepEqual(t.toArray(), [2, 4, 6]);
    const id = token.__trinityTensor;
    assert.throws(
      () => torch.importTensor(token),
      new RegExp(`exported tensor ${id}n is not registered: it was already imported`),
    );
    assert.equal(torch.releaseTensorToken(token), false, 'releasing an imported token is a no-op');

    const unused = torch.exportTensor(t);
    assert.equal(torch.releaseTensorToken(unused), true);
    assert.equal(torch.releaseTensorToken(unused), false);
    assert.throws(() => torch.importTensor(unused), /is not registered/);

    // ids that were never issued, or cannot be one, are errors and never reach memory
    assert.throws(
      () => torch.importTensor({ __trinityTensor: id + 1_000_000n }),
      new RegExp(`exported tensor ${id + 1_000_000n}n is not registered`),
    );
    assert.throws(() => torch.importTensor({ __trinityTensor: 0n }), /exported tensor 0n does not exist/);
    assert.throws(() => torch.importTensor({ __trinityTensor: -8n }), /exported tensor -8n does not exist/);
    assert.throws(
      () => torch.importTensor({ __trinityTensor: 2n ** 64n + 5n }),
      /exported tensor 18446744073709551621n does not exist/,
    );
    assert.throws(() => native.importTensor(5 as unknown as bigint), /expected an exported tensor id \(a bigint\), got 5/);
    assert.equal(torch.liveExportCount(), before);
    for (const x of [t, imported]) x.dispose();
  });

  test('a tensor that cannot be exported releases the tokens already made for the same message', () => {
    const before = torch.liveExportCount();
    const a = torch.ones([2]);
    const gone = torch.ones([2]);
    gone.dispose();
    assert.throws(() => torch.encodeTensors([a, { b: gone }]), torch.TensorDisposedError);
    assert.equal(torch.liveExportCount(), before);
    a.dispose();
  });

  test('a token that cannot be imported disposes what was imported and releases the rest of the message', () => {
    const tensorsBefore = torch.liveTensorCount();
    const a = torch.ones([2]);
    const message = torch.encodeTensors([a, { forged: { __trinityTensor: 987654321n } }, a]);
    a.dispose();
    assert.equal(torch.liveExportCount(), 2);
    assert.throws(() => torch.decodeTensors(message), /exported tensor 987654321n is not registered/);
    assert.equal(torch.liveExportCount(), 0);
    assert.equal(torch.liveTensorCount(), tensorsBefore);
  });
});

describe('a worker that drops a message frees its tensors', () => {
  let worker: torch.TensorWorker;
  let tensorsBefore: number;
  before(async () => {
    worker = await torch.TensorWorker.start(helper, { numThreads: 1 });
    tensorsBefore = torch.liveTensorCount();
  });
  after(async () => {
    await worker.terminate();
  });

  const blockWorker = async (w: torch.TensorWorker) => {
    const flag = new Int32Array(new SharedArrayBuffer(4));
    const blocked = new Promise((resolve) => w.onEvent('blocked', resolve));
    const done = w.call('block', [flag]);
    await blocked;
    const release = () => {
      Atomics.store(flag, 0, 1);
      Atomics.notify(flag, 0);
    };
    return { done, release };
  };

  test('arguments of a call that timed out before the worker read them are released', async () => {
    const { done, release } = await blockWorker(worker);
    const a = torch.ones([2, 2]);
    const late = worker.call('matmul', [a, a], { timeoutMs: 20 });
    assert.equal(torch.liveExportCount(), 2, 'the arguments wait, exported, in the blocked worker queue');
    await assert.rejects(late, /'matmul' did not answer within 20 ms/);
    assert.equal(torch.liveExportCount(), 0);
    release();
    await done;
    // the worker then reads the dropped request: its import fails and is answered to nobody
    assert.equal(await worker.call('ping'), 'pong');
    a.dispose();
    assert.equal(torch.liveExportCount(), 0);
    assert.equal(torch.liveTensorCount(), tensorsBefore);
  });

  test('the result of a call that timed out is released when it arrives', async () => {
    const tensors = torch.liveTensorCount();
    const flag = new Int32Array(new SharedArrayBuffer(4));
    const holding = new Promise((resolve) => worker.onEvent('holding', resolve));
    const x = torch.ones([3]);
    const call = worker.call('holdThenReturn', [flag, x], { timeoutMs: 20 });
    x.dispose();
    await holding;
    await assert.rejects(call, /'holdThenReturn' did not answer within 20 ms/);
    Atomics.store(flag, 0, 1);
    Atomics.notify(flag, 0);
    // the handler is synchronous, so the worker posts its late answer (a tensor token) before it reads the ping,
    // and answers arrive in the order they were posted
    assert.equal(await worker.call('ping'), 'pong');
    assert.equal(torch.liveExportCount(), 0);
    // the worker still holds its own handle on what it returned (a handler owns its results); the main thread
    // imported nothing
    assert.equal(torch.liveTensorCount(), tensors + 1);
  });

  test('arguments of a call the worker cannot serve are released; an uncloneable result is an error, not a hang', async () => {
    const tensors = torch.liveTensorCount();
    const a = torch.ones([2]);
    await assert.rejects(worker.call('nope', [a]), /no handler named 'nope'/);
    assert.equal(torch.liveExportCount(), 0);
    await assert.rejects(worker.call('uncloneable'), /tensor worker 'uncloneable' failed: .*could not be cloned/);
    assert.equal(torch.liveExportCount(), 0);
    a.dispose();
    assert.equal(await worker.call('ping'), 'pong');
    assert.equal(torch.liveTensorCount(), tensors + 1, "only the worker's own handle on the tensor it returned");
  });

  test('terminate with calls in flight leaves no export behind', async () => {
    const w = await torch.TensorWorker.start(helper, { numThreads: 1 });
    const { done } = await blockWorker(w);
    const a = torch.ones([2, 2]);
    const queued = w.call('matmul', [a, a]);
    const rejected = Promise.all([
      assert.rejects(done, /tensor worker exited with code 1/),
      assert.rejects(queued, /tensor worker exited with code 1/),
    ]);
    assert.equal(torch.liveExportCount(), 2);
    await w.terminate();
    await rejected;
    assert.equal(torch.liveExportCount(), 0);
    a.dispose();
    await assert.rejects(w.call('ping'), /tensor worker exited/);
  });

  test('a worker that exits after exporting a result it never sent leaves no export behind', async () => {
    const w = await torch.TensorWorker.start(helper, { numThreads: 1 });
    await assert.rejects(w.call('exportThenExit'), /tensor worker exited with code 0/);
    assert.equal(torch.liveExportCount(), 0);
  });
});

describe('handles, integers and other arguments are checked before they are used', () => {
  test('a handle that is not an integer below 2^52 is a TypeError naming it; a freed one says so', () => {
    const t = torch.ones([2]);
    for (const bad of [Number.POSITIVE_INFINITY, Number.NaN, -1, 1.5, 2 ** 52, 2 ** 64, t.handle + 0.5]) {
      assert.throws(
        () => native.shape(bad as Handle),
        (e: Error) =>
          e instanceof TypeError && e.message === `invalid tensor handle ${bad}: a handle is an integer the addon returned`,
      );
      assert.throws(() => native.dispose(bad as Handle), /invalid tensor handle/);
    }
    assert.throws(() => native.shape('1' as unknown as Handle), /expected a tensor handle, got the string "1"/);
    const handle = t.handle;
    t.dispose();
    assert.throws(
      () => native.shape(handle),
      new RegExp(`tensor handle ${handle} was disposed \\(or belongs to another thread\\)`),
    );
    native.dispose(handle); // a second dispose of a well-formed handle is a no-op
  });

  test('integers: fractions, non-finite numbers and bigints past 64 bits are errors naming the value', () => {
    const t = torch.arange(0, 6);
    assert.throws(() => native.narrow(t.handle, 0, 0.5, 2), /expected an integer, got 0\.5/);
    assert.throws(() => native.narrow(t.handle, 0, Number.POSITIVE_INFINITY, 2), /expected an integer, got Infinity/);
    assert.throws(() => native.narrow(t.handle, 0, Number.NaN, 2), /expected an integer, got NaN/);
    assert.throws(() => native.narrow(t.handle, 0, 2 ** 63, 2), /expected an integer, got 9223372036854776000/);
    assert.throws(() => torch.manualSeed(2n ** 64n), /integer 18446744073709551616n does not fit in 64 bits/);
    assert.throws(() => torch.manualSeed(-(2n ** 63n) - 1n), /integer -9223372036854775809n does not fit in 64 bits/);
    torch.manualSeed(2n ** 63n - 1n); // the largest int64 is fine
    assert.deepEqual(t.narrow(0, 2, 2).toArray(), [2, 3]);
    t.dispose();
  });

  test('fromBytes reads a DataView (and a view of a SharedArrayBuffer) at its offset', () => {
    const data = new Float32Array([1, 2, 3, 4]);
    const view = new DataView(data.buffer, 4, 8);
    const fromView = fromHandle(native.fromBytes(view, float32, [2], null));
    assert.deepEqual(fromView.toArray(), [2, 3]);
    const shared = new Float32Array(new SharedArrayBuffer(16));
    shared.set([5, 6, 7, 8]);
    const fromShared = fromHandle(native.fromBytes(shared.subarray(1), float32, [3], null));
    assert.deepEqual(fromShared.toArray(), [6, 7, 8]);
    assert.throws(
      () => native.fromBytes(new DataView(data.buffer), float32, [3], null),
      /data has 16 bytes but shape \[3\] of Float needs 12/,
    );
    assert.throws(
      () => native.fromBytes([1, 2] as unknown as ArrayBufferView, float32, [2], null),
      /expected a typed array, Buffer or DataView, got an array/,
    );
    for (const x of [fromView, fromShared]) x.dispose();
  });

  test('grad(): when backward throws, every input keeps the .grad it had', () => {
    torch.scope(() => {
      const x = torch.tensor([1, 2], { requiresGrad: true });
      x.mul(x).sum().backward(); // x.grad = 2x = [2, 4]
      const y = torch.tensor([3], { requiresGrad: true });
      const noGrad = torch.ones([1]); // no graph: its backward throws after the first output's ran
      assert.throws(() => torch.grad([x.mul(3).sum(), noGrad], [x, y]), /does not require grad/);
      assert.deepEqual(x.grad?.toArray(), [2, 4]);
      assert.equal(y.grad, null);
      // and on success the inputs' .grad are untouched too, even for an input listed twice
      const [g1, g2] = torch.grad(x.mul(x).sum(), [x, x]);
      assert.deepEqual(g1?.toArray(), [2, 4]);
      assert.deepEqual(g2?.toArray(), [2, 4]);
      assert.deepEqual(x.grad?.toArray(), [2, 4]);
      assert.throws(() => torch.grad([x.sum()], [x], { gradOutputs: [] }), /gradOf: 1 outputs but 0 output gradients/);
    });
  });

  test('a generator argument must be one createGenerator made', () => {
    const fake = { handle: {} as GeneratorHandle } as torch.Generator;
    assert.throws(() => torch.randn([2], { generator: fake }), /expected a generator \(from createGenerator\), got an object/);
    const real = new torch.Generator(1);
    torch.randn([2], { generator: real }).dispose();
  });
});
