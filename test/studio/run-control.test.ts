// Run control from the Studio in a real browser: a run the Studio started is stopped from the Launches page (SIGINT,
// as Ctrl-C: it finishes the step in flight and exits 130, every written step whole), shows as interrupted, and
// Resume runs the same config again: it continues from its checkpoint and ends with every step exactly once. A run the
// Studio did not start is listed with why it cannot be controlled, and the API refuses to touch it.
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { type StudioServer, startStudio } from '../../src/studio/index.js';
import { launchChromium } from './browser.js';
import { writeRun } from './fixtures.js';
import { makeRunsFolder, metricSteps, tinyConfig } from './launch-fixtures.js';

let root: string;
let shots: string;
let studio: StudioServer;
let browser: Browser;
let page: Page;

before(async () => {
  root = makeRunsFolder('studio-control-');
  shots = process.env.STUDIO_SCREENSHOTS ?? join(root, 'screenshots');
  mkdirSync(shots, { recursive: true });
  // a run written by someone else (a terminal): listed, not controllable
  await writeRun(root, 'other', 'terminal', [{ name: 'grpo', steps: 3 }]);
  studio = await startStudio({ runsDir: root, port: 0 });
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
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

async function post(path: string, body: unknown = {}): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${studio.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const TOTAL_STEPS = 12;

// The run cannot finish before Stop lands, whatever the machine's speed: from step 2 on, the workflow waits for a
// `release` file (woken by fs.watch, not a poll), which the test writes only once the Studio shows the launch stopping.
// A repeatable workflow runs once per task, so with batch_size 2 the first two calls are step 1's. Stop ends the run
// after its last trained step (the gated exploration is cut off); save_interval 1 checkpoints every step to resume from.
const GATE = `import { appendFileSync, existsSync, readFileSync, watch } from 'node:fs';
const calls = new URL('./calls', import.meta.url);
const release = new URL('./release', import.meta.url);
const here = new URL('./', import.meta.url);
function released(signal) {
  return new Promise((resolve, reject) => {
    const watcher = watch(here, () => { if (existsSync(release)) { watcher.close(); resolve(); } });
    signal.addEventListener('abort', () => { watcher.close(); reject(signal.reason); }, { once: true });
    if (existsSync(release)) { watcher.close(); resolve(); }
  });
}
export const gated = {
  run: async ({ task, model, repeatTimes, seed, signal }) => {
    const earlier = existsSync(calls) ? readFileSync(calls, 'utf8').length : 0;
    appendFileSync(calls, '.');
    if (earlier >= 2) await released(signal);
    const { completions } = await model.generate({ prompt: task.prompt, n: repeatTimes, maxTokens: 4, temperature: 1, seed });
    return completions.map((c) => model.toExperience(c, { reward: c.text.trim() === task.response ? 1 : 0 }));
  },
};
`;

test('Stop from the UI stops the run after its current step; Resume finishes it with every step once', {
  timeout: 540_000,
}, async () => {
  mkdirSync(join(root, 'configs'));
  writeFileSync(join(root, 'configs', 'gate.mts'), GATE);
  writeFileSync(
    join(root, 'configs', 'long.yaml'),
    tinyConfig(root, 'long', TOTAL_STEPS, 1).replace(
      'default_workflow_type: simple_workflow',
      'default_workflow_type: gate.mts#gated',
    ),
  );
  await page.goto(`${studio.url}/launches`);
  await page.locator('#live.on').waitFor(); // live metrics events are flowing
  const started = await post('/api/launches', { config: 'configs/long.yaml' });
  assert.equal(started.status, 200, JSON.stringify(started.body));
  const launch = page.locator('.launch[data-launch="1"]');
  // the first step the run writes reaches the page (live metrics), then the user presses Stop
  const step = launch.locator('.launch-step[data-step]');
  await step.waitFor({ timeout: 240_000 }).catch(async (error: Error) => {
    throw new Error(`${error.message}\nthe launch shows: ${await launch.textContent()}`);
  });
  const shownAtStop = Number(await step.getAttribute('data-step'));
  await launch.locator('button.stop').click();
  await page.locator('.launch[data-launch="1"][data-state="stopping"]').waitFor({ timeout: 60_000 });
  writeFileSync(join(root, 'configs', 'release'), '');
  await page.locator('.launch[data-launch="1"][data-state="interrupted"]').waitFor({ timeout: 240_000 });
  assert.equal(await launch.getAttribute('data-exit'), '130');
  await page.screenshot({ path: join(shots, 'launch-stopped.png'), fullPage: true });

  const jobDir = join(root, 'studio', 'long');
  const log = readFileSync(join(root, '.studio', 'logs', 'launch-1.log'), 'utf8');
  assert.match(log, /stopping after the current step/);
  const stopped = metricSteps(jobDir);
  // whole steps only, from 1 up to at least the one shown when Stop was pressed, and not the run's end
  assert.deepEqual(
    stopped,
    Array.from({ length: stopped.length }, (_, i) => i + 1),
  );
  assert.ok(stopped.length >= shownAtStop && stopped.length < TOTAL_STEPS, `steps ${stopped} (shown ${shownAtStop})`);
  assert.deepEqual(JSON.parse(readFileSync(join(jobDir, 'run_status.json'), 'utf8')), { state: 'interrupted' });
  const runs = (await (await fetch(`${studio.url}/api/runs`)).json()) as { id: string; status: string }[];
  assert.equal(runs.find((r) => r.id === 'studio/long')?.status, 'interrupted');

  await launch.locator('button.resume').click();
  await page.locator('.launch[data-launch="1"][data-state="finished"]').waitFor({ timeout: 300_000 });
  assert.equal(await launch.getAttribute('data-exit'), '0');
  const resumedLog = readFileSync(join(root, '.studio', 'logs', 'launch-1.log'), 'utf8');
  assert.match(resumedLog, /resuming from checkpoint step \d+/);
  assert.deepEqual(
    metricSteps(jobDir),
    Array.from({ length: TOTAL_STEPS }, (_, i) => i + 1),
  );
  assert.deepEqual(JSON.parse(readFileSync(join(jobDir, 'run_status.json'), 'utf8')), { state: 'finished' });
  await page.screenshot({ path: join(shots, 'launch-resumed.png'), fullPage: true });
});

test('a run the Studio did not start is shown with why it cannot be controlled; the API refuses it', async () => {
  await page.goto(`${studio.url}/launches`);
  const row = page.locator('#uncontrolled tr[data-run="other/terminal"]');
  await row.waitFor();
  assert.match((await row.textContent()) ?? '', /not started by this Studio/);
  assert.match(
    (await page.locator('#uncontrolled').locator('xpath=preceding-sibling::p[1]').textContent()) ?? '',
    /never signals a process it did not start/,
  );
  const stop = await post('/api/launches/99/stop');
  assert.equal(stop.status, 404);
  assert.match(String((stop.body.error as { message: string }).message), /only runs started from this Studio/);
});

test('a failed read of the runs list is shown on the Launches page, not thrown', async () => {
  await page.route('**/api/runs', (route) =>
    route.fulfill({
      status: 500,
      contentType: 'application/json',
      body: JSON.stringify({ error: { message: 'the runs folder could not be read (test)' } }),
    }),
  );
  try {
    await page.goto(`${studio.url}/launches`);
    const shown = page.locator('#uncontrolled-error');
    await shown.waitFor();
    assert.equal(await shown.textContent(), 'the runs folder could not be read (test)');
  } finally {
    await page.unroute('**/api/runs');
  }
});
