// Run files read in bounded chunks (src/rft/report/jsonl-chunks.ts) by `trinity report`: the rows and warnings are
// those of reading the whole text at once, for any chunk size; a line over the line limit is skipped with a warning
// naming its line; a file over the size limit (a sparse 4 GiB file: it costs no disk) is a named error, not a read
// of 4 GiB (which once aborted the process).
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { parseMetrics, parseMetricsLines, readJsonlFile, readRun, RunFileTooLargeError } from '../../../src/rft/report/index.js';

const dir = mkdtempSync(join(tmpdir(), 'report-chunks-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const TEXT = [
  '{"step":1,"loss":1.5}',
  'not json',
  '{"step":2,"loss":1.25,"name":"x"}',
  '',
  '{"step":3,"loss":"é ü — multi-byte text cut by chunks"}',
  '{"step":4,"loss":1}',
].join('\n');

test('every chunk size gives the rows and warnings of the whole text (line numbers included)', async () => {
  const file = join(dir, 'metrics.jsonl');
  writeFileSync(file, TEXT); // no final newline: the last line is still read
  const wholeWarnings: string[] = [];
  const whole = parseMetrics(TEXT, file, wholeWarnings);
  for (const chunkBytes of [1, 2, 3, 7, 16, 1000]) {
    const warnings: string[] = [];
    const rows = await readJsonlFile(file, parseMetricsLines, warnings, { chunkBytes });
    assert.deepEqual(rows, whole, `chunk ${chunkBytes}`);
    assert.deepEqual(warnings, wholeWarnings, `chunk ${chunkBytes}`);
  }
});

test('a line over the line limit is skipped with a warning naming it; the lines after it are read', async () => {
  const file = join(dir, 'long.jsonl');
  writeFileSync(file, `{"step":1,"a":1}\n{"step":2,"pad":"${'x'.repeat(500)}"}\n{"step":3,"a":3}\n`);
  for (const chunkBytes of [4, 64, 4096]) {
    const warnings: string[] = [];
    const rows = await readJsonlFile(file, parseMetricsLines, warnings, { chunkBytes, maxLineBytes: 100 });
    assert.deepEqual(
      rows.map((r) => r.step),
      [1, 3],
      `chunk ${chunkBytes}`,
    );
    assert.deepEqual(warnings, [`${file}:2: a line over 100 bytes: skipped`], `chunk ${chunkBytes}`);
  }
});

test('a sparse 4 GiB metrics.jsonl: trinity report names the file and its size instead of reading it', async () => {
  const job = join(dir, 'huge-job');
  mkdirSync(join(job, 'stage'), { recursive: true });
  const file = join(job, 'stage', 'metrics.jsonl');
  writeFileSync(file, '');
  truncateSync(file, 4 * 1024 ** 3);
  const before = process.memoryUsage().rss;
  await assert.rejects(readRun(job), (error: unknown) => {
    assert.ok(error instanceof RunFileTooLargeError);
    assert.equal(error.file, file);
    assert.equal(error.bytes, 4 * 1024 ** 3);
    assert.match(error.message, /metrics\.jsonl is 4\.0 GiB, over the 512\.0 MiB a run file may have to be read/);
    return true;
  });
  // nothing of the 4 GiB was held (a read of it would add gigabytes)
  assert.ok(process.memoryUsage().rss - before < 256 * 1024 ** 2);
});
