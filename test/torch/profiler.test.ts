// torch.profile: libtorch's profiler on the calling thread, its per-op table, ranges and Chrome trace.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import * as torch from '../../src/torch/index.js';
import { native } from '../../src/torch/native.js';

test('profile counts the ATen ops of a forward and backward, with a named range and a Chrome trace', () => {
  const dir = mkdtempSync(join(tmpdir(), 'trt-profile-'));
  try {
    const trace = join(dir, 'step.json');
    const a = torch.keep(torch.randn([64, 64], { requiresGrad: true }));
    const { value, profile } = torch.profile(
      () =>
        torch.scope(() =>
          torch.profileRange('my step', () => {
            const loss = a.matmul(a).relu().sum();
            loss.backward();
            return loss.item();
          }),
        ),
      { trace },
    );
    a.dispose();
    assert.equal(typeof value, 'number');
    const op = (name: string) => profile.ops.find((o) => o.name === name && o.where === 'cpu');
    // a @ a forward, then one product per operand in the backward
    assert.equal(op('aten::mm')?.calls, 3);
    assert.equal(op('aten::relu')?.calls, 1);
    assert.equal(op('aten::threshold_backward')?.calls, 1);
    const range = op('my step');
    assert.ok(range !== undefined, 'the range is a row of the profile');
    assert.equal(range.calls, 1);
    for (const o of profile.ops) {
      assert.ok(o.selfUs >= 0 && o.selfUs <= o.totalUs + 1e-6, `${o.name}: self ${o.selfUs} within total ${o.totalUs}`);
    }
    // the range holds every op of the step: its total is at least the self time of all of them together
    const opsSelf = profile.ops.filter((o) => o.where === 'cpu' && o.name !== 'my step').reduce((s, o) => s + o.selfUs, 0);
    assert.ok(range.totalUs >= opsSelf - 1, `range ${range.totalUs} µs holds its ops' ${opsSelf} µs`);
    assert.equal(profile.trace, trace);
    const events = (JSON.parse(readFileSync(trace, 'utf8')) as { traceEvents: { name: string }[] }).traceEvents;
    assert.ok(events.some((e) => e.name === 'my step'));
    assert.ok(events.some((e) => e.name === 'aten::mm'));
    const table = torch.formatProfile(profile, 5);
    assert.match(table, /aten::mm/);
    assert.equal(table.split('\n').length, 2 + 5, 'a summary line, a header and the 5 rows asked for');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('our own native work shows too: a captured step replay holds its ops, the packed kernel is a row', () =>
  torch.scope(() => {
    const w = torch.randn([16, 16]);
    const x = torch.randn([2, 16]);
    const { step } = torch.noGrad(() => torch.capture([x], () => [x.matmul(w).relu()]));
    assert.ok(step !== null);
    const packed = torch.packedLinearSupported() ? torch.packLinear(w) : null;
    const { profile } = torch.profile(() => {
      step.replay([torch.randn([2, 16])]);
      if (packed !== null) torch.packedLinear(x, packed, null, 16);
    });
    step.dispose();
    const op = (name: string) => profile.ops.find((o) => o.name === name);
    assert.equal(op('trinity::replay')?.calls, 1);
    const replay = op('trinity::replay') as torch.ProfiledOp;
    const mm = op('aten::mm') ?? op('aten::matmul');
    assert.ok(mm !== undefined && replay.totalUs >= mm.totalUs, 'the replayed product runs inside the replay');
    if (packed !== null) assert.equal(op('trinity::packed_linear')?.calls, 1);
  }));

test('summarizeEvents: self time is the duration less the events nested inside on the same thread', () => {
  // thread 1: parent [0, 10] > child [2, 5] > grandchild [3, 4]; sibling [6, 9] inside parent; thread 2: other [1, 8]
  // (overlaps parent in time, not nested: another thread); a device kernel [2, 9] named like the child
  const rows: [string, number, number, number, number][] = [
    ['child', 2, 3, 1, 0],
    ['parent', 0, 10, 1, 0],
    ['grandchild', 3, 1, 1, 0],
    ['child', 6, 3, 1, 0],
    ['other', 1, 7, 2, 0],
    ['child', 2, 7, 1, 1],
  ];
  const names = ['parent', 'child', 'grandchild', 'other'];
  const ops = torch.summarizeEvents({
    names,
    name: Int32Array.from(rows, (r) => names.indexOf(r[0])),
    startUs: Float64Array.from(rows, (r) => r[1]),
    durationUs: Float64Array.from(rows, (r) => r[2]),
    thread: Float64Array.from(rows, (r) => r[3]),
    onDevice: Uint8Array.from(rows, (r) => r[4]),
  });
  const get = (name: string, where: 'cpu' | 'device' = 'cpu') => ops.find((o) => o.name === name && o.where === where);
  assert.deepEqual(get('parent'), { name: 'parent', where: 'cpu', calls: 1, totalUs: 10, selfUs: 10 - 3 - 3 });
  assert.deepEqual(get('child'), { name: 'child', where: 'cpu', calls: 2, totalUs: 6, selfUs: 3 - 1 + 3 });
  assert.deepEqual(get('grandchild'), { name: 'grandchild', where: 'cpu', calls: 1, totalUs: 1, selfUs: 1 });
  assert.deepEqual(get('other'), { name: 'other', where: 'cpu', calls: 1, totalUs: 7, selfUs: 7 });
  assert.deepEqual(get('child', 'device'), { name: 'child', where: 'device', calls: 1, totalUs: 7, selfUs: 7 });
  assert.deepEqual(
    ops.map((o) => o.name),
    ['child', 'other', 'child', 'parent', 'grandchild'],
    'by self time, largest first (ties by name)',
  );
  // self times add up per side: CPU 4 + 5 + 1 + 7, device 7
  assert.deepEqual(torch.selfTime({ ops, wallUs: 10, trace: null }), { cpu: 17, device: 7 });
});

test('profiler errors: one profile per thread, an unwritable trace path, an open range, a throwing fn', () => {
  const running = new torch.Profiler();
  const second = join(tmpdir(), `trt-second-profile-${process.pid}.json`);
  assert.throws(() => new torch.Profiler({ trace: second }), /the profiler is already running on this thread/);
  assert.equal(existsSync(second), false, 'a profile that did not start leaves no trace file');
  running.stop();
  assert.throws(() => running.stop(), /already stopped/);
  assert.throws(
    () => torch.profile(() => 1, { trace: join(tmpdir(), 'no-such-dir-trt', 'x', 't.json') }),
    /profile trace .*no-such-dir-trt.*: cannot write it/,
  );
  // the failed start left no profile running
  torch.profile(() => 1);
  // a range left open when the profile stops is named, and the profiler stops all the same
  const open = new torch.Profiler();
  native.profilerRangePush('left open');
  assert.throws(() => open.stop(), /1 range\(s\) still open, the innermost "left open"/);
  assert.throws(() => native.profilerRangePop(), /no range is open/);
  assert.throws(() => native.profilerStop(null), /the profiler is not running/);
  // fn throws: the profile stops, the error goes on
  assert.throws(
    () =>
      torch.profile(() => {
        throw new Error('boom');
      }),
    /boom/,
  );
  torch.profile(() => 1);
  // no profile running: a range just runs its function
  assert.equal(
    torch.profileRange('idle', () => 7),
    7,
  );
});
