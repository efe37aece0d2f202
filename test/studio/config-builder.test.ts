// The config builder in a real browser (Chromium through playwright-core): the form is the config schema's, a
// misspelled key shows exactly what `trinity config check` prints for that file (and sits beside its section), a
// preset fills the YAML, and "Start run" starts `trinity run` on the saved config: the run appears on the Runs page
// and finishes. Paths from requests to the new routes cannot leave the runs folder. Screenshots go under the test's
// temp folder (STUDIO_SCREENSHOTS=DIR: there instead).
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { configCommand } from '../../src/cli/config-command.js';
import { ConfigSchema, schemaLeafPaths } from '../../src/rft/run/config/index.js';
import { type StudioServer, startStudio } from '../../src/studio/index.js';
import { launchChromium } from './browser.js';
import { makeRunsFolder, metricSteps, tinyConfig } from './launch-fixtures.js';

let root: string;
let shots: string;
let studio: StudioServer;
let browser: Browser;
let page: Page;

before(async () => {
  root = makeRunsFolder('studio-config-');
  shots = process.env.STUDIO_SCREENSHOTS ?? join(root, 'screenshots');
  mkdirSync(shots, { recursive: true });
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

/** Waits until the builder has checked the YAML now in the editor, and says whether it passed. */
async function checked(expected: 'ok' | 'error'): Promise<void> {
  await page.locator(`#check-status[data-current="true"][data-state="${expected}"]`).waitFor();
}

/** `trinity config check FILE`: its exit code and what it printed. */
async function configCheck(file: string): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await configCommand(['check', file], {
    stdout: { write: (t: string) => (stdout += t) },
    stderr: { write: (t: string) => (stderr += t) },
  });
  return { code, stdout, stderr };
}

test('the form has a field for every key of the config schema', async () => {
  await page.goto(`${studio.url}/config`);
  await checked('error'); // an empty config: model.model_path is required
  const paths = await page.evaluate(
    "[...document.querySelectorAll('#config-form :is(input, select, textarea)[data-path]')].map((e) => e.dataset.path)",
  );
  // the schema's leaves; a list or free-form mapping is one YAML field (its '*' items are edited inside it)
  const leaves = [...new Set(schemaLeafPaths(ConfigSchema).map((p) => p.split('.*')[0] as string))];
  assert.deepEqual([...(paths as string[])].sort(), leaves.sort());
});

test('a misspelled key shows the same problem as trinity config check, beside its section', async () => {
  const file = 'configs/typo.yaml';
  const yaml = tinyConfig(root, 'typo', 2).replace('  batch_size: 2', '  batch_sise: 2');
  await page.goto(`${studio.url}/config?file=${encodeURIComponent(file)}`);
  await page.fill('#yaml', yaml);
  await checked('error');
  const shown = (await page.locator('#check-message').textContent()) ?? '';
  mkdirSync(join(root, 'configs'), { recursive: true });
  writeFileSync(join(root, file), yaml);
  const cli = await configCheck(join(root, file));
  assert.equal(cli.code, 1);
  assert.equal(shown, cli.stderr.trimEnd());
  assert.match(shown, /buffer\.batch_sise: unknown key 'batch_sise'; did you mean 'batch_size'\? \(.*typo\.yaml:\d+:\d+\)/);
  // beside the buffer section's fields (the key has no field of its own)
  const beside = await page.locator('[data-for="buffer"] .problem[data-path="buffer.batch_sise"]').textContent();
  assert.equal(beside, shown.split('\n')[1]?.replace(/^ {2}- /, ''));
  await page.screenshot({ path: join(shots, 'config-builder-error.png'), fullPage: true });

  // a field edit goes into the YAML, and a bad value is checked as the command checks it
  await page.fill('#yaml', tinyConfig(root, 'typo', 2));
  await checked('ok');
  await page.fill('[id="f-buffer.batch_size"]', '0');
  await page.locator('[id="f-buffer.batch_size"]').dispatchEvent('change');
  await checked('error');
  assert.match((await page.locator('#yaml').inputValue()) ?? '', /batch_size: 0/);
  assert.match(
    (await page.locator('.problem[data-path="buffer.batch_size"]').textContent()) ?? '',
    /^buffer\.batch_size: must be >= 1, got 0/,
  );
});

test('a preset fills the YAML with its algorithm', async () => {
  await page.goto(`${studio.url}/config`);
  await page.selectOption('#preset', 'dpo');
  const yaml = await page.locator('#yaml').inputValue();
  assert.match(yaml, /algorithm_type: dpo/);
  assert.match(yaml, /mode: train/);
  assert.equal(await page.locator('[id="f-algorithm.algorithm_type"]').inputValue(), 'dpo');
});

test('Start run starts trinity run on the saved config: the run appears on the Runs page and finishes', {
  timeout: 300_000,
}, async () => {
  await page.goto(`${studio.url}/config?file=configs/tiny.yaml`);
  await page.fill('#yaml', tinyConfig(root, 'tiny', 2));
  await checked('ok');
  await page.screenshot({ path: join(shots, 'config-builder.png'), fullPage: true });
  await page.click('#start-run');
  await page.waitForURL(/\/launches/);
  const launch = page.locator('.launch[data-launch="1"]');
  await launch.waitFor();
  // the run writes metrics as it goes; the launch ends with exit code 0
  await page.locator('.launch[data-launch="1"][data-state="finished"]').waitFor({ timeout: 240_000 });
  assert.equal(await launch.getAttribute('data-exit'), '0');
  await page.screenshot({ path: join(shots, 'launches.png'), fullPage: true });
  assert.deepEqual(metricSteps(join(root, 'studio', 'tiny')), [1, 2]);
  await page.goto(`${studio.url}/runs`);
  await page.locator('tr.group[data-run="studio/tiny"] [data-status="finished"]').waitFor();
});

/** A raw request, so that '..' in the path reaches the server as written (fetch would normalise it). */
function raw(method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  const { port } = new URL(studio.url);
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

test('paths in requests to the config, launch and feedback routes cannot leave the runs folder', async () => {
  const outside = join(tmpdir(), `studio-outside-${process.pid}`);
  mkdirSync(outside, { recursive: true });
  writeFileSync(join(outside, 'run.yaml'), tinyConfig(root, 'outside', 1));
  symlinkSync(outside, join(root, 'link-out'));
  const yaml = tinyConfig(root, 'x', 1);
  const refused: [string, string, unknown?][] = [
    ['POST', '/api/config/check', { file: '../x.yaml', yaml }],
    ['POST', '/api/config/check', { file: '/tmp/x.yaml', yaml }],
    ['POST', '/api/config/save', { file: 'configs/../../x.yaml', yaml }],
    ['POST', '/api/config/save', { file: 'link-out/x.yaml', yaml }],
    ['POST', '/api/config/save', { file: 'configs/x.sh', yaml }],
    ['GET', '/api/config/file?file=../../etc/passwd.yaml'],
    ['GET', '/api/config/file?file=link-out/run.yaml'],
    ['POST', '/api/launches', { config: '../run.yaml' }],
    ['POST', '/api/launches', { config: 'link-out/run.yaml' }],
    ['POST', '/api/feedback/preference', { file: '../prefs.jsonl', prompt: 'p', chosen: 'a', rejected: 'b' }],
    ['POST', '/api/feedback/preference', { file: 'link-out/prefs.jsonl', prompt: 'p', chosen: 'a', rejected: 'b' }],
    ['GET', '/vendor/yaml/..%2F..%2Fpackage.json'],
  ];
  for (const [method, path, body] of refused) {
    const { status, text } = await raw(method, path, body);
    assert.equal(status, 403, `${method} ${path}: ${status} ${text}`);
  }
  // a config inside the runs folder whose job folder is elsewhere is not started (the Studio could not show it)
  writeFileSync(join(root, 'configs', 'elsewhere.yaml'), tinyConfig(outside, 'elsewhere', 1));
  const elsewhere = await raw('POST', '/api/launches', { config: 'configs/elsewhere.yaml' });
  assert.equal(elsewhere.status, 403, elsewhere.text);
  assert.match(elsewhere.text, /is not inside the runs folder/);
  rmSync(outside, { recursive: true, force: true });
});
