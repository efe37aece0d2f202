// Human feedback in a real browser: a pick between two answers becomes a DPO line that the DPO dataset reader loads;
// a rating of a serve-mode answer becomes that answer's reward in the run's experience buffer (through the serve
// stage's own POST /feedback); the task pipeline's annotation server is found through the file it writes in the runs
// folder and its pairs are rated from the page, finishing the operator with chosen/rejected set.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { loadDpoDataset, SqliteBuffer } from '../../src/rft/buffer/index.js';
import { loadConfig, resolveStages } from '../../src/rft/run/config/index.js';
import { humanPreferenceAnnotationMapper } from '../../src/rft/data/task-pipeline/operators/annotation.js';
import type { TaskOperatorContext, TaskPipelineEvent } from '../../src/rft/data/task-pipeline/types.js';
import { stageSettings } from '../../src/rft/run/index.js';
import { type ServeStage, startServeStage } from '../../src/serve/index.js';
import { type StudioServer, startStudio } from '../../src/studio/index.js';
import { Tokenizer } from '../../src/tokenizer/index.js';
import { launchChromium } from './browser.js';
import { makeRunsFolder, tinyConfig } from './launch-fixtures.js';

let root: string;
let shots: string;
let studio: StudioServer;
let browser: Browser;
let page: Page;
let serve: ServeStage | null = null;

before(async () => {
  root = makeRunsFolder('studio-feedback-');
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
  await serve?.stop();
  await browser?.close();
  await studio?.close();
  if (process.env.STUDIO_SCREENSHOTS === undefined) console.log(`screenshots: ${shots}`);
  if (process.env.KEEP_STUDIO_TMP === undefined) rmSync(root, { recursive: true, force: true });
});

const readLines = (file: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, unknown>);

test('picking the better of two answers appends a DPO pair the DPO dataset reader loads', async () => {
  await page.goto(`${studio.url}/feedback`);
  await page.fill('#dpo-file', 'feedback/prefs.jsonl');
  await page.fill('#pair-prompt', '2+2=');
  await page.fill('#pair-a', '5');
  await page.fill('#pair-b', '4');
  await page.click('#pair-b-better');
  await page.locator('#dpo-note[data-pairs="1"]').waitFor();
  const file = join(root, 'feedback', 'prefs.jsonl');
  assert.deepEqual(readLines(file), [{ prompt: '2+2=', chosen: '4', rejected: '5' }]);
  // what a DPO stage trains on: the reader of experience_buffer storage_type file
  const tokenizer = Tokenizer.load(join(root, 'assets', 'model'));
  const [pair] = await loadDpoDataset(file, tokenizer);
  assert.ok(pair !== undefined);
  // the answers' token ids with the end-of-sequence token, as the reader makes them
  const eos = tokenizer.eosTokenIds.slice(0, 1);
  assert.deepEqual(pair.chosen, [...tokenizer.encode('4'), ...eos]);
  assert.deepEqual(pair.rejected, [...tokenizer.encode('5'), ...eos]);
  await page.screenshot({ path: join(shots, 'feedback-pair.png'), fullPage: true });
});

test('a rating of a serve-mode answer becomes its reward in the experience buffer', { timeout: 240_000 }, async () => {
  mkdirSync(join(root, 'configs'), { recursive: true });
  const configFile = join(root, 'configs', 'serve.yaml');
  writeFileSync(configFile, tinyConfig(root, 'serve', 1));
  const config = loadConfig(configFile, {
    resolveAlgorithm,
    overrides: [
      'mode=serve',
      'buffer.trainer_input.experience_buffer.storage_type=sql',
      'synchronizer.sync_method=checkpoint',
      'explorer.proxy_port=0',
      'explorer.api_key=serve-key',
      'model.max_prompt_tokens=96',
      'model.max_response_tokens=8',
    ],
  });
  const [serveConfig] = resolveStages(config);
  assert.ok(serveConfig);
  const settings = stageSettings(serveConfig, join(root, 'assets', 'model'), root);
  serve = await startServeStage(settings, { log: () => {} });

  await page.goto(`${studio.url}/feedback`);
  await page.fill('#serve-url', serve.server.url);
  await page.fill('#serve-key', 'serve-key');
  await page.fill('#serve-prompt', '2+3=');
  await page.selectOption('#serve-n', '2');
  await page.click('#serve-generate');
  await page.locator('#serve-answers .answer[data-choice="1"]').waitFor({ timeout: 120_000 });
  const responseId = await page.locator('#serve-answers').getAttribute('data-response');
  await page.click('#serve-answers .answer[data-choice="0"] button.good');
  await page.locator('#serve-answers .answer[data-choice="0"][data-rewarded="1"]').waitFor();
  await page.fill('#serve-answers .answer[data-choice="1"] input.reward', '0.25');
  await page.click('#serve-answers .answer[data-choice="1"] button.send');
  await page.locator('#serve-answers .answer[data-choice="1"][data-rewarded="0.25"]').waitFor();
  await page.screenshot({ path: join(shots, 'feedback-serve.png'), fullPage: true });

  const buffer = new SqliteBuffer({ path: settings.buffer.path as string, table: settings.buffer.name });
  const stored = buffer.peek({ limit: 10 }).map((s) => s.experience);
  await buffer.close();
  assert.deepEqual(
    stored.map((e) => [e.reward, e.info.taskId, e.info.runId]),
    [
      [1, responseId, 0],
      [0.25, responseId, 1],
    ],
  );
  // a second rating of the same answer is the endpoint's refusal, shown on the page
  await page.click('#serve-answers .answer[data-choice="0"] button.bad');
  await page.locator('#serve-answers .answer[data-choice="0"] .sent', { hasText: 'already has its reward' }).waitFor();
});

test('the annotation server of a running task pipeline is found in the runs folder and its pairs are rated', {
  timeout: 120_000,
}, async () => {
  const workDir = join(root, 'studio', 'annotated', 'task_pipeline');
  let announced: (url: string) => void = () => {};
  const serverUp = new Promise<string>((resolve) => {
    announced = resolve;
  });
  const context: TaskOperatorContext = {
    name: 'human_preference_annotation_mapper',
    position: 1,
    taskset: { name: 'tasks', path: '/dev/null', format: { promptKey: 'prompt', responseKey: 'response' } },
    textKey: 'prompt',
    workDir,
    seed: 42,
    numProcess: 1,
    baseDir: root,
    model: () => Promise.reject(new Error('no model here')),
    auxiliaryModels: null,
    log: () => {},
    progress: () => {},
    count: () => {},
    emit: (event: TaskPipelineEvent) => {
      if (event.type === 'annotation_server') announced(event.url);
    },
  } as TaskOperatorContext;
  const rows = [
    { prompt: '1+1=', answer1: '2', answer2: '3' },
    { prompt: '2+2=', answer1: '5', answer2: '4' },
  ];
  const done = humanPreferenceAnnotationMapper.run(
    rows,
    { ...humanPreferenceAnnotationMapper.defaults, promptKey: 'prompt', timeout: 100 },
    context,
  );
  const url = await serverUp;
  assert.ok(existsSync(join(workDir, 'annotation_server.json')));

  await page.goto(`${studio.url}/feedback`);
  await page.locator('#annotation-servers button.use-server', { hasText: url }).click();
  await page.locator('#annotation-pending .pair[data-id="1"]').waitFor();
  await page.screenshot({ path: join(shots, 'feedback-annotation.png'), fullPage: true });
  await page.click('#annotation-pending .pair[data-id="0"] button.annotate-1');
  await page.locator('#annotation-pending[data-rated="1"]').waitFor();
  await page.click('#annotation-pending .pair[data-id="1"] button.annotate-2');
  const out = await done;
  assert.deepEqual(
    out.map((r) => [r.chosen, r.rejected]),
    [
      ['2', '3'],
      ['4', '5'],
    ],
  );
  assert.deepEqual(readLines(join(workDir, 'preference_dpo.jsonl')), [
    { prompt: '1+1=', chosen: '2', rejected: '3' },
    { prompt: '2+2=', chosen: '4', rejected: '5' },
  ]);
  // the announcement goes with the server
  assert.equal(existsSync(join(workDir, 'annotation_server.json')), false);
});
