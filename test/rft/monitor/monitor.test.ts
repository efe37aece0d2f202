// Metrics sinks: JSONL, TensorBoard files that TensorBoard itself reads, MLflow and W&B over HTTP (a local fake
// server records the requests), a failing sink that warns once, and the progress line.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  createMonitors,
  crc32c,
  JsonlMonitor,
  MlflowMonitor,
  ProgressReporter,
  TensorBoardWriter,
  WandbMonitor,
} from '../../../src/rft/monitor/index.js';

const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
const python = join(repoRoot, '.cache/python-ref/bin/python');

test('crc32c matches the standard check value', () => {
  assert.equal(crc32c(Buffer.from('123456789')), 0xe3069283);
  assert.equal(crc32c(new Uint8Array(32)), 0x8a9136aa);
});

test('TensorBoard reads our event files: every scalar at its step', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tb-'));
  const writer = new TensorBoardWriter(dir);
  for (let step = 1; step <= 5; step++)
    writer.write(step, { 'train/loss': 1 / step, 'rollout/reward_mean': step * 0.1, skipped: Number.NaN });
  writer.write(2 ** 40, { big_step: 1.5 });
  writer.close();
  assert.ok(existsSync(python), 'the Python reference environment is missing: run `bash scripts/python-env.sh`');
  const scalars = JSON.parse(
    execFileSync(python, [join(repoRoot, 'scripts/fixtures/read_tensorboard.py'), dir], { encoding: 'utf8' }),
  ) as Record<string, [number, number][]>;
  assert.deepEqual(Object.keys(scalars).sort(), ['big_step', 'rollout/reward_mean', 'train/loss']);
  assert.deepEqual(
    scalars['train/loss']?.map(([s]) => s),
    [1, 2, 3, 4, 5],
  );
  for (const [s, v] of scalars['train/loss'] ?? []) assert.ok(Math.abs(v - 1 / s) < 1e-6);
  assert.deepEqual(scalars.big_step, [[2 ** 40, 1.5]]);
});

test('JSONL gets one object per step with finite values; createMonitors adds TensorBoard when asked', async () => {
  const jobDir = mkdtempSync(join(tmpdir(), 'job-'));
  const monitors = createMonitors({ jobDir, types: ['tensorboard'], project: 'p', name: 'n' });
  monitors.log(1, { loss: 0.5, bad: Number.POSITIVE_INFINITY });
  monitors.log(2, { loss: 0.25 });
  await monitors.close();
  const lines = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
  assert.deepEqual(
    lines.map((l) => [l.step, l.loss, 'bad' in l]),
    [
      [1, 0.5, false],
      [2, 0.25, false],
    ],
  );
  assert.ok(existsSync(join(jobDir, 'tensorboard')));
  assert.throws(() => createMonitors({ jobDir, types: ['mlflow'], project: 'p', name: 'n', env: {} }), /MLFLOW_TRACKING_URI/);
  assert.throws(() => createMonitors({ jobDir, types: ['wandb'], project: 'p', name: 'n', env: {} }), /WANDB_API_KEY/);
});

// ---- a fake tracking server on loopback ----
interface Recorded {
  method: string;
  url: string;
  auth: string | undefined;
  body: Record<string, unknown>;
}
const recorded: Recorded[] = [];
let server: Server;
let base = '';
let failAll = false;

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let data = '';
    req.on('data', (c) => {
      data += c;
    });
    req.on('end', () => resolve(data));
  });
}

before(async () => {
  server = createServer(async (req, res) => {
    const text = await readBody(req);
    recorded.push({
      method: req.method ?? '',
      url: req.url ?? '',
      auth: req.headers.authorization,
      body: text ? JSON.parse(text) : {},
    });
    res.setHeader('content-type', 'application/json');
    if (failAll) {
      res.statusCode = 503;
      res.end('{"error":"down"}');
      return;
    }
    const url = req.url ?? '';
    if (url.startsWith('/api/2.0/mlflow/experiments/get-by-name')) {
      res.statusCode = 404;
      res.end('{"error_code":"RESOURCE_DOES_NOT_EXIST"}');
    } else if (url === '/api/2.0/mlflow/experiments/create') res.end('{"experiment_id":"7"}');
    else if (url === '/api/2.0/mlflow/runs/create') res.end('{"run":{"info":{"run_id":"r1"}}}');
    else if (url === '/graphql') res.end('{"data":{"upsertBucket":{"bucket":{"id":"b1","name":"run-a"}}}}');
    else res.end('{}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => {
  server.close();
});

test('a failed metrics append names the step and the file (EISDIR: a folder where metrics.jsonl goes)', () => {
  const file = join(mkdtempSync(join(tmpdir(), 'jsonl-')), 'metrics.jsonl');
  mkdirSync(join(file, 'in-the-way'), { recursive: true });
  assert.throws(
    () => new JsonlMonitor(file).log(3, { loss: 1 }),
    (error: Error & { code?: string }) => {
      assert.equal(error.code, 'EISDIR');
      assert.ok(error.message.startsWith(`cannot write step 3's metrics to ${file}: EISDIR`), error.message);
      return true;
    },
  );
});

test('MLflow: creates the experiment and run, logs each step as a batch, finishes the run', async () => {
  recorded.length = 0;
  const mlflow = new MlflowMonitor({
    trackingUri: base,
    experimentName: 'exp',
    runName: 'run-a',
    token: 'tok',
    params: { lr: 0.001 },
  });
  mlflow.log(1, { loss: 0.5 });
  mlflow.log(2, { loss: 0.25, reward: 1 });
  await mlflow.close();
  assert.equal(mlflow.runId, 'r1');
  const paths = recorded.map((r) => r.url.split('?')[0]);
  assert.deepEqual(paths, [
    '/api/2.0/mlflow/experiments/get-by-name',
    '/api/2.0/mlflow/experiments/create',
    '/api/2.0/mlflow/runs/create',
    '/api/2.0/mlflow/runs/log-batch',
    '/api/2.0/mlflow/runs/log-batch',
    '/api/2.0/mlflow/runs/log-batch',
    '/api/2.0/mlflow/runs/update',
  ]);
  assert.ok(recorded.every((r) => r.auth === 'Bearer tok'));
  assert.deepEqual(recorded[3]?.body.params, [{ key: 'lr', value: '0.001' }]);
  const metrics = recorded[5]?.body.metrics as { key: string; value: number; step: number }[];
  assert.deepEqual(
    metrics.map((m) => [m.key, m.value, m.step]),
    [
      ['loss', 0.25, 2],
      ['reward', 1, 2],
    ],
  );
  assert.equal(recorded[6]?.body.status, 'FINISHED');
});

test('W&B: upserts the run, streams history rows with increasing offsets, then completes', async () => {
  recorded.length = 0;
  const wandb = new WandbMonitor({
    baseUrl: base,
    apiKey: 'key',
    entity: 'me',
    project: 'proj',
    runName: 'run-a',
    config: { lr: 1 },
  });
  wandb.log(1, { loss: 0.5 });
  wandb.log(2, { loss: 0.25 });
  await wandb.close();
  assert.equal(recorded[0]?.url, '/graphql');
  assert.equal(recorded[0]?.auth, `Basic ${Buffer.from('api:key').toString('base64')}`);
  const streams = recorded.slice(1);
  assert.ok(streams.every((r) => r.url === '/files/me/proj/run-a/file_stream'));
  const files = streams
    .slice(0, 2)
    .map((r) => (r.body.files as Record<string, { offset: number; content: string[] }>)['wandb-history.jsonl']);
  assert.deepEqual(
    files.map((f) => f?.offset),
    [0, 1],
  );
  assert.deepEqual(
    files.map((f) => JSON.parse(f?.content[0] ?? '{}')._step),
    [1, 2],
  );
  assert.deepEqual(streams[2]?.body, { complete: true, exitcode: 0 });
});

test('monitor_args reach the backends: W&B base_url/api_key and MLflow uri/username/password, over the environment', async () => {
  recorded.length = 0;
  const jobDir = mkdtempSync(join(tmpdir(), 'monitor-args-'));
  const env = {
    WANDB_API_KEY: 'env-key',
    WANDB_BASE_URL: 'http://127.0.0.1:9',
    MLFLOW_TRACKING_URI: 'http://127.0.0.1:9',
    MLFLOW_TRACKING_USERNAME: 'env-user',
    MLFLOW_TRACKING_PASSWORD: 'env-pass',
  };
  const monitors = createMonitors({
    jobDir,
    types: ['wandb', 'mlflow'],
    project: 'p',
    name: 'n',
    env,
    args: { baseUrl: base, apiKey: 'arg-key', uri: base, username: 'arg-user', password: 'arg-pass' },
  });
  monitors.log(1, { loss: 0.5 });
  await monitors.close();
  const wandbAuth = recorded.find((r) => r.url === '/graphql')?.auth;
  assert.equal(wandbAuth, `Basic ${Buffer.from('api:arg-key').toString('base64')}`);
  const mlflowAuth = recorded.find((r) => r.url === '/api/2.0/mlflow/runs/create')?.auth;
  assert.equal(mlflowAuth, `Basic ${Buffer.from('arg-user:arg-pass').toString('base64')}`);
  // with neither monitor_args.uri nor MLFLOW_TRACKING_URI there is no server to send to
  assert.throws(
    () => createMonitors({ jobDir, types: ['mlflow'], project: 'p', name: 'n', env: {}, args: { username: 'u' } }),
    /monitor_type mlflow needs monitor_args\.uri or MLFLOW_TRACKING_URI/,
  );
});

test('a failing remote sink warns once and never throws into the run', async () => {
  failAll = true;
  const warnings: string[] = [];
  const mlflow = new MlflowMonitor({ trackingUri: base, experimentName: 'e', runName: 'r', warn: (m) => warnings.push(m) });
  for (let i = 0; i < 5; i++) mlflow.log(i, { x: i });
  await mlflow.close();
  failAll = false;
  assert.equal(warnings.length, 1);
  assert.match(warnings[0] ?? '', /mlflow: .*503.*the run goes on/);
  const unreachable = new MlflowMonitor({
    trackingUri: 'http://127.0.0.1:1',
    experimentName: 'e',
    runName: 'r',
    warn: (m) => warnings.push(m),
  });
  unreachable.log(1, { x: 1 });
  await unreachable.close(5000);
  assert.equal(warnings.length, 2);
});

test('progress: a redrawn status line on a terminal, plain lines elsewhere, with ETA from this session', () => {
  let clock = 0;
  const chunks: string[] = [];
  const sink = Object.assign(
    new Writable({
      write(chunk, _encoding, callback) {
        chunks.push(String(chunk));
        callback();
      },
    }),
    { isTTY: true, columns: 200 },
  );
  const live = new ProgressReporter({ label: 'grpo', total: 10, stream: sink, now: () => clock });
  live.resumeAt(2);
  clock = 3000; // setup: loading, engines (not a step's time)
  live.update(3, { reward: 0.4 });
  assert.match(chunks.at(-1) ?? '', /3\/10 {2}30% \| reward 0\.400 \| ETA \?$/, 'no pace from one update');
  clock = 5000;
  live.update(4, { reward: 0.5 });
  const redraw = '\r\u001b[2K'; // carriage return + erase line
  assert.ok(chunks.at(-1)?.startsWith(redraw));
  assert.match(
    chunks.at(-1)?.slice(redraw.length) ?? '',
    /^\[grpo\] █+░+ {2}4\/10 {2}40% \| reward 0\.500 \| 2\.00 s\/step \| ETA 12s$/,
  );
  // the next stage: its own pace from its own start, none of the last stage's fields (an SFT stage has no reward)
  live.setLabel('sft', 100);
  clock = 10_000;
  live.resumeAt(0);
  clock = 20_000;
  live.update(1, { loss: 1.6 });
  clock = 20_500;
  live.update(2, { loss: 1.5 });
  assert.match(
    chunks.at(-1)?.slice(redraw.length) ?? '',
    /^\[sft\] ░+ {3}2\/100 {3}2% \| loss 1\.500 \| 0\.50 s\/step \| ETA 49s$/,
  );
  live.setLabel('grpo', 10);
  live.resumeAt(4);
  live.log('evaluated: accuracy 0.3');
  assert.ok(chunks.includes('evaluated: accuracy 0.3\n'));
  live.done();
  assert.equal(chunks.at(-1), '\n');

  chunks.length = 0;
  clock = 0;
  const plain = new ProgressReporter({
    label: 'sft',
    total: 3,
    stream: Object.assign(sink, { isTTY: false }),
    now: () => clock,
    plainIntervalMs: 1000,
  });
  plain.update(1, { loss: 2 });
  clock = 500;
  plain.update(2, { loss: 1 }); // within the interval: not printed
  clock = 900;
  plain.update(3, { loss: 0.5 }); // the last step always prints
  plain.done();
  assert.equal(chunks.length, 2);
  assert.ok(chunks.every((c) => !c.includes('\r')));
  assert.match(chunks[1] ?? '', /3\/3 100% \| loss 0\.500/);
});

test('progress: a stage with no end step (online training) shows its step and pace, no bar or ETA', () => {
  let clock = 0;
  const progress = new ProgressReporter({ label: 'run', total: Number.POSITIVE_INFINITY, live: false, now: () => clock });
  progress.update(1, { loss: 2 });
  clock = 3000;
  progress.update(3, { loss: 0.5 });
  assert.equal(progress.render(), '[run] step 3 (no end step) | loss 0.500 | 1.50 s/step');
});
