// The Studio in a real browser (Chromium through playwright-core): curves drawn with the right number of points, a
// live run's new step shown without a reload, rollout filters changing the table, and a screenshot of each page
// written under the test's temp folder (STUDIO_SCREENSHOTS=DIR writes them there instead).
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { type StudioServer, startStudio } from '../../src/studio/index.js';
import { launchChromium } from './browser.js';
import { appendMetrics, writeRun } from './fixtures.js';

// What the browser-side callbacks below touch (this project compiles without the DOM's types; the callbacks run in
// the page, where these are the real document and the app's window.studio).
declare const document: {
  querySelector(selector: string): { textContent: string | null; getAttribute(name: string): string | null } | null;
};
declare const window: { studio: { charts: { key: string; plot: { data: (number | null)[][] } }[] } };

let root: string;
let shots: string;
let studio: StudioServer;
let browser: Browser;
let page: Page;
let liveStage: string;

before(async () => {
  root = mkdtempSync(join(tmpdir(), 'studio-browser-'));
  shots = process.env.STUDIO_SCREENSHOTS ?? join(root, 'screenshots');
  mkdirSync(shots, { recursive: true });
  await writeRun(root, 'demo', 'sft-grpo', [
    { name: 'sft', steps: 12, done: true, evalSteps: [0, 12] },
    // GRPO's advantages as a run keeps them: in trainer_advantages.jsonl, not in the buffer
    {
      name: 'grpo',
      steps: 25,
      done: true,
      evalSteps: [25],
      tasksPerStep: 3,
      repeats: 3,
      tokenizer: true,
      trainerAdvantages: true,
    },
  ]);
  liveStage = join(await writeRun(root, 'demo', 'live', [{ name: 'grpo', steps: 5 }]), 'grpo');
  studio = await startStudio({ runsDir: root, port: 0 });
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on('pageerror', (error) => {
    throw error;
  });
});

after(async () => {
  await browser?.close();
  await studio?.close();
  if (process.env.STUDIO_SCREENSHOTS === undefined) console.log(`screenshots: ${shots}`);
  if (process.env.KEEP_STUDIO_TMP === undefined) rmSync(root, { recursive: true, force: true });
});

const run = encodeURIComponent('demo/sft-grpo');

/** Waits in the browser until the rollouts page says `n` rollouts match. */
const waitMatched = (n: number) =>
  page.waitForFunction((want) => document.querySelector('#rollout-summary')?.getAttribute('data-matched') === want, String(n));

test('a finished run’s curves render with one point per step, across both stages', async () => {
  await page.goto(`${studio.url}/curves?run=${run}&key=actor/loss,rollout/reward/mean`);
  await page.waitForFunction(() => window.studio.charts.length === 2);
  // the points each uPlot chart holds: its x values, and the run's non-null y values
  const counts = await page.evaluate(() =>
    window.studio.charts.map(({ key, plot }) => [key, plot.data[0]?.length, plot.data[1]?.filter((v) => v !== null).length]),
  );
  // 12 sft steps + 25 grpo steps, each a point of its own (under the 2,000-point limit)
  assert.deepEqual(counts, [
    ['actor/loss', 37, 37],
    ['rollout/reward/mean', 37, 37],
  ]);
  assert.equal(await page.locator('.chart canvas').count(), 2);
  await page.screenshot({ path: join(shots, 'curves.png'), fullPage: true });
});

test('a live run’s new step appears on the Runs page without a reload', async () => {
  await page.goto(`${studio.url}/runs`);
  const step = page.locator('tr[data-run="demo/live"][data-stage="grpo"] .step');
  await step.waitFor();
  assert.equal(await step.textContent(), '5');
  await page.locator('#live.on').waitFor(); // the event stream is open
  const navigations: string[] = [];
  page.on('framenavigated', (frame) => navigations.push(frame.url()));
  appendMetrics(liveStage, 6);
  // waits in the browser for the cell's text to change (no reload, no sleep)
  await page.waitForFunction(
    () => document.querySelector('tr[data-run="demo/live"][data-stage="grpo"] .step')?.textContent === '6',
  );
  assert.deepEqual(navigations, [], 'the page reloaded');
  assert.equal(await page.locator('tr[data-run="demo/live"] [data-status]').first().textContent(), 'running');
  await page.screenshot({ path: join(shots, 'runs.png'), fullPage: true });
});

test('rollout filters change what is shown; a rollout opens with its tokens and turns', async () => {
  await page.goto(`${studio.url}/rollouts?run=${run}`);
  const summary = page.locator('#rollout-summary[data-matched]');
  await summary.waitFor();
  assert.equal(await summary.getAttribute('data-matched'), String(25 * 9));
  await page.fill('#f-minReward', '1');
  await page.dispatchEvent('#f-minReward', 'change');
  await waitMatched(25 * 4);
  const rewards = await page.locator('#rollouts td.reward').allTextContents();
  assert.ok(rewards.length > 0 && rewards.every((r) => r === '1'), `rewards shown: ${rewards.join(' ')}`);
  // each shows the advantage the trainer recorded for it (reward − 0.5 in the fixture), not '–'
  const advantages = await page.locator('#rollouts td.advantage').allTextContents();
  assert.ok(advantages.length === rewards.length && advantages.every((a) => a === '0.5000'), `advantages: ${advantages}`);
  await page.selectOption('#f-truncated', 'true');
  await waitMatched(25);
  const lengths = await page.locator('#rollouts td.length').allTextContents();
  assert.ok(lengths.every((l) => l === '5'));
  // the multi-turn task: its turns, and the tool's tokens outlined as not generated
  await page.selectOption('#f-truncated', 'any');
  await page.fill('#f-minReward', '');
  await page.fill('#f-task', 'task-2');
  await page.dispatchEvent('#f-task', 'change');
  await waitMatched(25 * 3);
  await page.locator('#rollouts tr.rollout').first().click();
  await page.locator('#rollout-detail').waitFor();
  assert.equal(await page.locator('#turns .turn').count(), 4);
  assert.equal((await page.locator('.tokens span[data-mask="0"]').allTextContents()).join(''), 'tool:42');
  await page.locator('#eval').waitFor();
  await page.screenshot({ path: join(shots, 'rollouts.png'), fullPage: true });
});

test('the buffer page lists the experiences in id order', async () => {
  await page.goto(`${studio.url}/buffer?run=${run}`);
  await page.locator('#buffer tbody tr').first().waitFor();
  assert.match((await page.locator('#buffer-summary').textContent()) ?? '', /^225 experiences · showing 1–50/);
  const ids = (await page.locator('#buffer tbody tr td:first-child').allTextContents()).map(Number);
  assert.deepEqual(
    ids,
    Array.from({ length: 50 }, (_, i) => i + 1),
  );
  await page.screenshot({ path: join(shots, 'buffer.png'), fullPage: true });
});
