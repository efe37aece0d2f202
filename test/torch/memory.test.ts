// Memory is deterministic: 10,000 forward/backward/optimizer iterations of a small MLP keep resident memory flat.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import * as torch from '../../src/torch/index.js';
import { native } from '../../src/torch/native.js';

test('10,000 MLP training iterations keep resident memory flat (within 10%) and leak no tensor handles', () => {
  torch.manualSeed(0);
  // One intra-op thread: on a loaded 2-core machine OpenMP's spinning threads would only slow this test down.
  const threads = torch.getNumThreads();
  torch.setNumThreads(1);
  const params = [
    torch.keep(torch.randn([64, 32]).mul_(0.1).requiresGrad_()),
    torch.keep(torch.zeros([64]).requiresGrad_()),
    torch.keep(torch.randn([1, 64]).mul_(0.1).requiresGrad_()),
    torch.keep(torch.zeros([1]).requiresGrad_()),
  ];
  const [w1, b1, w2, b2] = params as [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor];
  const optimizer = new torch.AdamW(params, { lr: 1e-3 });
  const x = torch.keep(torch.randn([128, 32]));
  const y = torch.keep(x.sum(1, { keepdim: true }).sin());
  const iteration = () =>
    torch.scope(() => {
      const hidden = torch.linear(x, w1, b1).relu();
      const loss = torch.linear(hidden, w2, b2).sub(y).square().mean();
      loss.backward();
      optimizer.step();
      optimizer.zeroGrad();
      return loss.item();
    });
  const first = iteration();
  for (let i = 1; i < 1000; i++) iteration();
  const handlesAfterWarmup = torch.liveTensorCount();
  const rssAfterWarmup = process.memoryUsage.rss();
  let last = 0;
  for (let i = 0; i < 9000; i++) last = iteration();
  const rssAtEnd = process.memoryUsage.rss();
  assert.equal(torch.liveTensorCount(), handlesAfterWarmup, 'tensor handles leaked during training');
  assert.ok(
    rssAtEnd <= rssAfterWarmup * 1.1,
    `resident memory grew from ${(rssAfterWarmup / 2 ** 20).toFixed(1)} MiB to ${(rssAtEnd / 2 ** 20).toFixed(1)} MiB`,
  );
  assert.ok(last < first, `the MLP should learn (loss ${first} -> ${last})`);
  optimizer.dispose();
  for (const t of [...params, x, y]) t.dispose();
  torch.setNumThreads(threads);
});

test('dispose() frees storage at once; the native handle count returns to where it was', () => {
  const before = torch.liveTensorCount();
  const big = torch.zeros([64, 1024, 1024]); // 256 MiB
  assert.equal(torch.liveTensorCount(), before + 1);
  const rssWith = process.memoryUsage.rss();
  big.dispose();
  assert.equal(torch.liveTensorCount(), before);
  assert.ok(process.memoryUsage.rss() < rssWith - 128 * 2 ** 20, 'the 256 MiB buffer should be returned on dispose()');
  big.dispose(); // idempotent
});

test('V8 counts the memory of tensors only the GC would free, once the synchronous code that made them has ended', async () => {
  const MiB = 2 ** 20;
  const external = () => native.reportedMemory(); // what napi_adjust_external_memory was told (not in memoryUsage())
  const tick = () => new Promise<void>((resolve) => setImmediate(resolve));
  await tick();
  const base = external();
  const reported = (expected: number, what: string) =>
    assert.equal(external(), expected, `${what}: ${external()} B reported, expected ${expected} B`);
  // a scope's temporaries are never counted (no GC is needed to free them)
  torch.scope(() => torch.zeros([8, MiB]).add(1).sum().item());
  await tick();
  reported(base, 'after a scope');
  // an unscoped tensor disposed before the code yields is never counted either
  torch.zeros([8, MiB]).dispose();
  await tick();
  reported(base, 'after an unscoped temporary');
  // one that survives it is: the GC may be the one to free it
  const survivor = torch.zeros([4, MiB]); // 16 MiB
  reported(base, 'while the code that made it runs');
  await tick();
  reported(base + 16 * MiB, 'once that code has ended');
  // so is one a scope returns to the top level, and one kept inside a scope
  const returned = torch.scope(() => torch.zeros([2, MiB]).add(1)); // 8 MiB
  const kept = torch.scope(() => torch.keep(torch.zeros([MiB]))); // 4 MiB
  await tick();
  reported(base + 28 * MiB, 'a returned and a kept tensor');
  // a view adds nothing of its own; disposing gives the count back
  const view = survivor.narrow(0, 0, 1);
  await tick();
  reported(base + 28 * MiB, 'a view');
  for (const t of [view, survivor, returned, kept]) t.dispose();
  reported(base, 'after dispose');
});

/** Whether this process runs on glibc (Node's diagnostic report names its version). */
function glibc(): boolean {
  const report = process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined;
  return typeof report?.header?.glibcVersionRuntime === 'string';
}

test('malloc keeps training-sized blocks (glibc), unless the process brings its own malloc settings', {
  skip: glibc() ? false : 'glibc only',
}, () => {
  assert.deepEqual(torch.allocatorTuning(), {
    applied: true,
    mmapThreshold: 128 * 2 ** 20,
    trimThreshold: 2 ** 30,
    reason: null,
  });
  // a block of at least mmapThreshold is still its own mapping: back to the system at once (the test above: 256 MiB)
  const script = "import('./src/torch/index.js').then((t) => console.log(JSON.stringify(t.allocatorTuning())))";
  for (const [name, value] of [
    ['GLIBC_TUNABLES', 'glibc.malloc.trim_threshold=65536'],
    ['MALLOC_MMAP_THRESHOLD_', '65536'],
  ] as const) {
    const child = spawnSync(process.execPath, ['--import', 'tsx', '-e', script], {
      env: { ...process.env, [name]: value },
      encoding: 'utf8',
    });
    assert.equal(child.status, 0, child.stderr);
    const tuning = JSON.parse(child.stdout.trim().split('\n').pop() as string);
    assert.equal(tuning.applied, false, `${name} set`);
    assert.match(tuning.reason, name === 'GLIBC_TUNABLES' ? /^GLIBC_TUNABLES sets glibc\.malloc\.\*/ : /MALLOC_MMAP_THRESHOLD_/);
  }
});
