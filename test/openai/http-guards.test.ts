// What keeps web pages the user visits from driving a keyless server on this machine: POST bodies must be JSON (a
// page can send text/plain or form bodies cross-origin without a preflight), a page of another site (its Origin) is
// refused, and a loopback server checks the Host header (a DNS-rebinding page reaches 127.0.0.1 under its own name).
// Each over several inputs, on the OpenAI routes and on a caller's route (mode serve's /feedback is one).
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import { isLoopbackHost, OpenAIService, type OpenAIServer, startOpenAIServer } from '../../src/openai/index.js';
import { fixtureModelWithTokenizer } from '../engine/helpers.js';

let engine: RolloutEngine;
let service: OpenAIService;
let server: OpenAIServer;
let port: number;
const feedbackBodies: unknown[] = [];

before(async () => {
  engine = RolloutEngine.load(fixtureModelWithTokenizer('qwen2-tied'), { slots: 2, maxLength: 64 });
  service = new OpenAIService({ modelName: 'tiny', backend: engine, maxTokens: 2 });
  server = await startOpenAIServer({
    service,
    routes: [{ method: 'POST', path: '/feedback', handle: (body) => feedbackBodies.push(body) && { status: 'ok' } }],
  });
  port = Number(new URL(server.url).port);
});
after(async () => {
  await server?.close();
  await engine?.close();
});

/** A raw HTTP request (fetch cannot set Host), to 127.0.0.1:port unless told. */
function send(options: {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: string;
  port?: number;
}): Promise<{ status: number; body: { error?: { message: string; code: string | null; type: string } } }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: options.port ?? port,
        method: options.method ?? 'POST',
        path: options.path,
        headers: options.headers,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk) => {
          text += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

const chat = JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
const feedback = JSON.stringify({ response_id: 'x', reward: -5 });
const json = { 'content-type': 'application/json' };

describe('POST bodies must be JSON', () => {
  for (const contentType of [
    null,
    'text/plain',
    'text/plain;charset=UTF-8',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'text/json',
  ]) {
    for (const [path, body] of [
      ['/v1/chat/completions', chat],
      ['/v1/completions', JSON.stringify({ model: 'tiny', prompt: 'ab', max_tokens: 1 })],
      ['/feedback', feedback],
    ] as const) {
      it(`${contentType ?? 'no content type'} to ${path}: 415, nothing done`, async () => {
        const before = feedbackBodies.length;
        const answer = await send({ path, body, headers: contentType === null ? {} : { 'content-type': contentType } });
        assert.equal(answer.status, 415);
        assert.equal(answer.body.error?.code, 'unsupported_media_type');
        assert.match(answer.body.error?.message ?? '', /Content-Type: application\/json/);
        assert.equal(feedbackBodies.length, before);
      });
    }
  }
  for (const contentType of [
    'application/json',
    'application/json; charset=utf-8',
    'Application/JSON',
    'application/vnd.example+json',
  ]) {
    it(`${contentType} is accepted`, async () => {
      assert.equal(
        (await send({ path: '/v1/chat/completions', body: chat, headers: { 'content-type': contentType } })).status,
        200,
      );
    });
  }
});

describe('pages of other sites are refused (Origin)', () => {
  for (const origin of [
    'https://evil.example',
    'http://evil.example:8000',
    'null',
    'http://127.0.0.1.evil.example',
    'not a url',
  ]) {
    it(`Origin ${origin}: 403 on the API and on /feedback, nothing done`, async () => {
      const before = feedbackBodies.length;
      for (const [method, path, body] of [
        ['POST', '/v1/chat/completions', chat],
        ['POST', '/feedback', feedback],
        ['GET', '/v1/models', undefined],
      ] as const) {
        const answer = await send({ method, path, ...(body ? { body } : {}), headers: { ...json, origin } });
        assert.equal(answer.status, 403, `${method} ${path}`);
        assert.equal(answer.body.error?.code, 'forbidden_origin');
      }
      assert.equal(feedbackBodies.length, before);
    });
  }
  for (const origin of ['http://localhost:3000', 'http://127.0.0.1:5173', 'http://[::1]:8080']) {
    it(`Origin ${origin} (a page on this machine) is served`, async () => {
      assert.equal((await send({ path: '/v1/chat/completions', body: chat, headers: { ...json, origin } })).status, 200);
      assert.equal((await send({ path: '/feedback', body: feedback, headers: { ...json, origin } })).status, 200);
    });
  }
});

describe('a loopback server checks Host (DNS rebinding)', () => {
  const wrongHosts = (p: number) => [
    `evil.example:${p}`,
    'evil.example',
    `rebind.127.0.0.1.nip.io:${p}`,
    `127.0.0.1:${p + 1}`,
    'localhost', // port 80 is not this server's
    `192.168.1.5:${p}`,
  ];
  it('a Host that is not a loopback name with this port: 403 on every route', async () => {
    for (const host of wrongHosts(port)) {
      const before = feedbackBodies.length;
      for (const [method, path, body] of [
        ['POST', '/v1/chat/completions', chat],
        ['POST', '/feedback', feedback],
        ['GET', '/v1/models', undefined],
        ['GET', '/health', undefined],
      ] as const) {
        const answer = await send({ method, path, ...(body ? { body } : {}), headers: { ...json, host } });
        assert.equal(answer.status, 403, `Host '${host}': ${method} ${path}`);
        assert.equal(answer.body.error?.code, 'forbidden_host');
        assert.match(answer.body.error?.message ?? '', new RegExp(`port ${port}`));
      }
      assert.equal(feedbackBodies.length, before);
    }
  });
  it('localhost, 127.x and [::1] with this port are served', async () => {
    for (const host of [`localhost:${port}`, `LOCALHOST:${port}`, `127.0.0.1:${port}`, `127.8.9.10:${port}`, `[::1]:${port}`]) {
      assert.equal((await send({ path: '/v1/chat/completions', body: chat, headers: { ...json, host } })).status, 200, host);
    }
  });
  it('a server on all interfaces (with a key) takes any Host: it is meant to be reached by name', async () => {
    const open = await startOpenAIServer({ service, host: '0.0.0.0', apiKey: 'k' });
    try {
      const answer = await send({
        method: 'GET',
        path: '/v1/models',
        port: Number(new URL(open.url).port),
        headers: { host: 'gpu-box.lan:8000', authorization: 'Bearer k' },
      });
      assert.equal(answer.status, 200);
    } finally {
      await open.close();
    }
  });
});

describe('keys and loopback names', () => {
  it('an empty API key is refused: it would let every request in', async () => {
    await assert.rejects(startOpenAIServer({ service, apiKey: '' }), /apiKey is an empty string/);
  });
  it('isLoopbackHost', () => {
    for (const host of ['localhost', '127.0.0.1', '127.255.0.9', '::1', '[::1]', '::ffff:127.0.0.1'])
      assert.ok(isLoopbackHost(host), host);
    for (const host of [
      '0.0.0.0',
      '::',
      '192.168.0.1',
      '10.0.0.1',
      'localhost.evil.example',
      '127.0.0.1.nip.io',
      'example.com',
      '',
    ])
      assert.ok(!isLoopbackHost(host), host);
  });
});
