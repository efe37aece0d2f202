// JsonlTail: appended lines read once, even when refreshes overlap; a line without its newline waits; a replaced
// (truncated) file is read afresh.
import assert from 'node:assert/strict';
import { appendFileSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseMetrics } from '../../src/rft/report/read.js';
import { JsonlTail } from '../../src/studio/tail.js';

test('overlapping refreshes add each row once; partial lines wait; a replaced file resets', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'studio-tail-'));
  try {
    const file = join(dir, 'metrics.jsonl');
    writeFileSync(file, Array.from({ length: 1000 }, (_, i) => JSON.stringify({ step: i + 1, loss: 1 })).join('\n') + '\n');
    const tail = new JsonlTail(dir, file, parseMetrics);
    // several readers at once (the runs list, a series, the event hub) used to read the same bytes twice
    await Promise.all([tail.refresh(), tail.refresh(), tail.refresh()]);
    assert.equal(tail.rows.length, 1000);
    appendFileSync(file, '{"step":1001,"lo');
    assert.equal((await tail.refresh()).change, 'unchanged');
    appendFileSync(file, 'ss":2}\n');
    const { change, added } = await tail.refresh();
    assert.equal(change, 'appended');
    assert.deepEqual(added, [{ step: 1001, metrics: { loss: 2 } }]);
    // a resumed run rewrites the file through a rename (stage.ts truncateSteps)
    writeFileSync(`${file}.tmp`, '{"step":1,"loss":3}\n');
    renameSync(`${file}.tmp`, file);
    assert.equal((await tail.refresh()).change, 'reset');
    assert.deepEqual(tail.rows, [{ step: 1, metrics: { loss: 3 } }]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
