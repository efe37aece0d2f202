// Mode serve and `trinity serve` against a web page the user visits and against careless flags: a cross-site or
// non-JSON /feedback writes nothing into the training buffer, /v1/models shows the model's name (never its local
// path), an empty API key is refused naming where it came from, and an address other machines can reach without a
// key is refused (CLI) or warned about (mode serve).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { loadConfig, resolveStages } from '../../src/rft/run/config/index.js';
import { type StageSettings, stageSettings } from '../../src/rft/run/index.js';
import { type ServeStage, startServeStage } from '../../src/serve/index.js';
import { runProcess } from '../helpers/run-process.js';
import { makeJob } from '../rft/run/helpers.js';

const trinity = fileURLToPath(new URL('../../bin/trinity.js', import.meta.url));
delete process.env.TRINITY_API_KEY; // these stages run without a key unless told

function serveSettings(overrides: string[] = []): StageSettings {
  const job = makeJob({ totalSteps: 1, saveInterval: 1 });
  const config = loadConfig(job.configFile, {
    resolveAlgorithm,
    overrides: [
      'mode=serve',
      'buffer.trainer_input.experience_buffer.storage_type=sql',
      'explorer.proxy_port=0',
      'model.max_response_tokens=4',
      ...overrides,
    ],
  });
  const [serveConfig] = resolveStages(config);
  assert.ok(serveConfig);
  return stageSettings(serveConfig, join(job.root, 'model'), job.root);
}

describe('mode serve without a key, on loopback', () => {
  let stage: ServeStage;
  let settings: StageSettings;
  before(async () => {
    settings = serveSettings();
    stage = await startServeStage(settings, { log: () => {} });
  });
  after(async () => {
    await stage?.stop();
  });
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${stage.server.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
  const written = async () =>
    ((await (await fetch(`${stage.server.url}/v1/trinity/status`)).json()) as { experiences_written: number })
      .experiences_written;

  it('a cross-site or non-JSON /feedback writes nothing; the same feedback from a client does', async () => {
    const reply = (await (
      await post('/v1/chat/completions', { model: 'e2e', messages: [{ role: 'user', content: '1+1=' }], max_tokens: 2 })
    ).json()) as { id: string };
    const feedback = { response_id: reply.id, reward: -5 };
    for (const origin of ['https://evil.example', 'null']) {
      const res = await post('/feedback', feedback, { origin });
      assert.equal(res.status, 403);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'forbidden_origin');
    }
    for (const contentType of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const res = await fetch(`${stage.server.url}/feedback`, {
        method: 'POST',
        headers: { 'content-type': contentType },
        body: JSON.stringify(feedback),
      });
      assert.equal(res.status, 415, contentType);
    }
    assert.equal(await written(), 0);
    assert.equal((await post('/feedback', feedback)).status, 200);
    assert.equal(await written(), 1);
  });

  it("/v1/models shows the model's name, never its path; the path (or any name) is accepted as 'model'", async () => {
    const text = await (await fetch(`${stage.server.url}/v1/models`)).text();
    assert.deepEqual(
      (JSON.parse(text) as { data: Array<{ id: string }> }).data.map((m) => m.id),
      ['e2e'],
    );
    assert.ok(!text.includes(settings.modelPath), text);
    const byPath = await post('/v1/chat/completions', {
      model: settings.modelPath,
      messages: [{ role: 'user', content: '2+2=' }],
      max_tokens: 1,
    });
    assert.equal(byPath.status, 200);
    // one model served: an agent's hard-coded name reaches it too (./serve-semantics.test.ts)
    const other = await post('/v1/chat/completions', {
      model: 'gpt-4',
      messages: [{ role: 'user', content: 'x' }],
      max_tokens: 1,
    });
    assert.equal(other.status, 200);
  });
});

describe('mode serve: keys and addresses', () => {
  it('an empty explorer.api_key is refused, naming it', async () => {
    const settings = serveSettings();
    await assert.rejects(
      startServeStage({ ...settings, serve: { ...settings.serve, apiKey: '' } }, { log: () => {} }),
      /explorer\.api_key \(or \$TRINITY_API_KEY\) is an empty string/,
    );
  });
  it('an address other machines reach, without a key: a warning says who can use it', async () => {
    const settings = serveSettings(['explorer.listen_address=0.0.0.0']);
    const lines: string[] = [];
    const stage = await startServeStage(settings, { log: (line) => lines.push(line) });
    await stage.stop();
    assert.ok(
      lines.some((l) => /WARNING: serving on 0\.0\.0\.0 without an API key/.test(l)),
      lines.join('\n'),
    );
  });
});

/** `trinity serve` with these flags (it must refuse before loading anything): exit code and output. */
function serveCli(args: string[], env: Record<string, string> = {}) {
  const childEnv = { ...process.env, ...env };
  if (!('TRINITY_API_KEY' in env)) delete childEnv.TRINITY_API_KEY;
  return runProcess(process.execPath, [trinity, 'serve', '--model', '/no/such/model', ...args], { env: childEnv });
}

describe('trinity serve flags', () => {
  // each run is a fresh process that loads the CLI: they run side by side
  it('--api-key "" and an empty $TRINITY_API_KEY are refused, naming them', async () => {
    const [flag, env] = await Promise.all([serveCli(['--api-key', '']), serveCli([], { TRINITY_API_KEY: '' })]);
    assert.notEqual(flag.code, 0);
    assert.match(flag.output, /--api-key is empty/);
    assert.notEqual(env.code, 0);
    assert.match(env.output, /\$TRINITY_API_KEY is set but empty/);
  });
  it('a non-loopback --host without a key is refused unless --allow-unauthenticated', async () => {
    const hosts = ['0.0.0.0', '192.168.1.5'];
    const [allowed, ...refused] = await Promise.all([
      serveCli(['--host', '0.0.0.0', '--allow-unauthenticated']),
      ...hosts.map((host) => serveCli(['--host', host])),
    ]);
    refused.forEach((run, i) => {
      assert.notEqual(run.code, 0);
      const host = (hosts[i] as string).replace(/\./g, '\\.');
      assert.match(run.output, new RegExp(`--host ${host} is reachable from other machines.*--allow-unauthenticated`));
    });
    // allowed: it gets past the check and fails on the (missing) model instead
    assert.notEqual(allowed?.code, 0);
    assert.match(allowed?.output ?? '', /no\/such\/model/);
    assert.doesNotMatch(allowed?.output ?? '', /reachable from other machines/);
  });
  it('--help documents both', async () => {
    const { output: help } = await runProcess(process.execPath, [trinity, 'serve', '--help']);
    assert.match(help, /--allow-unauthenticated/);
    assert.match(help, /--api-key KEY .*not empty/);
  });
});
