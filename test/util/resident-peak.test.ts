// measureResidentPeak: the resident memory a piece of work adds at its peak (Linux /proc; null elsewhere).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { measureResidentPeak } from '../../src/util/index.js';

const MB = 1024 * 1024;

test('measureResidentPeak: 64 MB touched and freed inside the work count; work that allocates nothing adds little', {
  skip: existsSync('/proc/self/clear_refs') ? false : 'needs Linux /proc/self/clear_refs',
}, async () => {
  const touched = await measureResidentPeak(async () => {
    const buffer = Buffer.allocUnsafe(64 * MB);
    buffer.fill(1); // resident only once written
    return buffer.length;
  });
  assert.equal(touched.value, 64 * MB);
  assert.ok(touched.peakBytes !== null && touched.peakBytes >= 60 * MB, `peak ${touched.peakBytes}`);
  assert.ok(touched.seconds >= 0);
  const idle = await measureResidentPeak(async () => 1);
  assert.ok(idle.peakBytes !== null && idle.peakBytes < 16 * MB, `peak ${idle.peakBytes}`);
});
