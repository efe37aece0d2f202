// `trinity report` on runs whose numbers are at the edges: a constant metric, a "constant" one that differs only in
// its last bits (float noise: a tick step below what the values can resolve once looped forever and V8 aborted the
// process with `invalid size`, exit 133), a subnormal constant, one step, NaN lines, an empty metrics file. Each
// runs the real command in a child process with a small heap and a timeout, so a regression is a failed test, not
// a hung or crashed test runner.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const TRINITY = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));
const KEYS = [
  'actor/loss',
  'actor/kl',
  'actor/entropy',
  'actor/grad_norm',
  'actor/lr',
  'rollout/reward/mean',
  'rollout/reward/std',
  'rollout/response_length/mean',
  'eval/math/accuracy/mean@4',
];

/** A job folder with one stage whose metrics.jsonl holds `lines`. */
function job(lines: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'trinity-report-edge-'));
  mkdirSync(join(dir, 'grpo'));
  writeFileSync(join(dir, 'grpo', 'metrics.jsonl'), lines.map((l) => `${l}\n`).join(''));
  return dir;
}

/** A metrics line with every charted key at `value(key)`. */
const line = (step: number, value: (key: string) => number) =>
  JSON.stringify({ step, time: 1000 + step, ...Object.fromEntries(KEYS.map((k) => [k, value(k)])) });

function report(dir: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--max-old-space-size=256', TRINITY, 'report', dir],
      { timeout: 60_000, env: { ...process.env, NODE_OPTIONS: '' } },
      (error, stdout, stderr) => resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

async function assertReport(dir: string): Promise<void> {
  const result = await report(dir);
  assert.equal(result.code, 0, `trinity report exited ${result.code}: ${result.stderr.slice(-2000)}`);
  const html = readFileSync(join(dir, 'report.html'), 'utf8');
  assert.match(html, /<svg /);
  for (const svg of html.match(/<svg[\s\S]*?<\/svg>/g) ?? [])
    assert.doesNotMatch(svg, /NaN|Infinity/, 'no NaN or Infinity reaches the charts');
}

test('a constant metric: every charted key the same at every step', async () => {
  await assertReport(job([1, 2, 3].map((s) => line(s, () => 0.5))));
});

test('a constant up to rounding: values that differ only in their last bit', async () => {
  // 0.1 and the next double above it (spread 1.4e-17): the y axis' tick step once fell below the values' resolution
  await assertReport(job([1, 2, 3].map((s) => line(s, () => (s === 2 ? 0.1 + 2 ** -56 : 0.1)))));
  await assertReport(job([1, 2].map((s) => line(s, (k) => (k === 'actor/lr' ? 1e-6 * (1 + s * 2 ** -52) : 1)))));
});

test('a subnormal constant (5e-324: 10% of it is 0)', async () => {
  await assertReport(job([1, 2].map((s) => line(s, () => 5e-324))));
});

test('one step', async () => {
  await assertReport(job([line(1, () => 2)]));
});

test('NaN lines (Python writes NaN, which is not JSON) and null values are skipped with warnings', async () => {
  await assertReport(job(['{"step":1,"actor/loss":NaN}', '{"step":2,"actor/loss":null}', line(3, () => 1)]));
});

test('an empty metrics file: the report says the stage wrote nothing', async () => {
  const dir = job([]);
  await assertReport(dir);
});
