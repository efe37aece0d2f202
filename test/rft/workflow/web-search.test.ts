// The web search tools of agentscope_v1_react_search_workflow (src/rft/workflow/agents/web-search.ts) against a local
// HTTP server standing in for Tavily and SearXNG: the request each sends (method, path, query or body, key), the
// result text the agent reads, an HTTP error and a request that never answers returned as the tool's "Error: …"
// result, the episode's stop rethrown, arguments of the wrong type refused as the model's mistake, and the settings
// refused by name when the environment lacks them.
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import {
  searchClientType,
  TAVILY_DEFAULT_URL,
  ToolCallError,
  webSearchEndpoint,
  webSearchTool,
} from '../../../src/rft/workflow/index.js';

interface Seen {
  method: string;
  url: string;
  authorization: string | undefined;
  body: string;
}

describe('web search tools', () => {
  let server: Server;
  let base: string;
  const seen: Seen[] = [];
  /** What the server does with the next request (default: answer 200 with `reply`). */
  let handler: (request: IncomingMessage, response: ServerResponse, body: string) => void;

  before(async () => {
    server = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk) => (body += chunk));
      request.on('end', () => {
        seen.push({ method: request.method ?? '', url: request.url ?? '', authorization: request.headers.authorization, body });
        handler(request, response, body);
      });
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((done) => server.close(done));
  });

  const answerJson = (value: unknown, status = 200) => {
    handler = (_request, response) => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(typeof value === 'string' ? value : JSON.stringify(value));
    };
  };

  test('tavily-search: POST /search with the key as a Bearer token; the answer as tavily-mcp writes it', async () => {
    answerJson({
      query: 'capital of France',
      answer: 'Paris.',
      results: [
        { title: 'Paris', url: 'https://en.wikipedia.org/wiki/Paris', content: 'Paris is the capital of France.', score: 0.9 },
        { title: 'France', url: 'https://example.org/fr', content: 'A country.', raw_content: 'France, a country.' },
      ],
    });
    const tool = webSearchTool(webSearchEndpoint('tavily', { TAVILY_API_KEY: 'tvly-k', TAVILY_API_URL: `${base}/` }, 'w'));
    assert.equal(tool.schema.function.name, 'tavily-search');
    const text = await tool.run({ query: 'capital of France', max_results: 2, topic: 'general' });
    const request = seen.at(-1) as Seen;
    assert.equal(request.method, 'POST');
    assert.equal(request.url, '/search');
    assert.equal(request.authorization, 'Bearer tvly-k');
    assert.deepEqual(JSON.parse(request.body), { query: 'capital of France', topic: 'general', max_results: 2 });
    assert.equal(
      text,
      'Answer: Paris.\nDetailed Results:\n\nTitle: Paris\nURL: https://en.wikipedia.org/wiki/Paris\n' +
        'Content: Paris is the capital of France.\n\nTitle: France\nURL: https://example.org/fr\nContent: A country.\n' +
        'Raw Content: France, a country.',
    );
    // the default service
    assert.equal(webSearchEndpoint('tavily', { TAVILY_API_KEY: 'k' }, 'w').baseUrl, TAVILY_DEFAULT_URL);
  });

  test('searxng_web_search: GET /search?q=..&format=json; results with their scores, or "No results found"', async () => {
    answerJson({
      results: [
        { title: 'WebWalker', content: 'A benchmark.', url: 'https://example.org/ww', score: 2 },
        { title: 'Other', content: 'More.', url: 'https://example.org/o', score: 0.12345 },
      ],
    });
    const tool = webSearchTool(webSearchEndpoint('searxng', { SEARXNG_URL: `${base}/searx` }, 'w'));
    assert.equal(tool.schema.function.name, 'searxng_web_search');
    const text = await tool.run({ query: 'web walker & co', pageno: 2, language: 'en', time_range: 'year' });
    const url = new URL((seen.at(-1) as Seen).url, base);
    assert.equal(url.pathname, '/searx/search');
    assert.deepEqual(Object.fromEntries(url.searchParams), {
      q: 'web walker & co',
      format: 'json',
      pageno: '2',
      time_range: 'year',
      language: 'en',
    });
    assert.equal(
      text,
      'Title: WebWalker\nDescription: A benchmark.\nURL: https://example.org/ww\nRelevance Score: 2.000\n\n' +
        'Title: Other\nDescription: More.\nURL: https://example.org/o\nRelevance Score: 0.123',
    );
    answerJson({ results: [] });
    assert.equal(await tool.run({ query: 'nothing', language: 'all' }), 'No results found');
    assert.deepEqual(Object.fromEntries(new URL((seen.at(-1) as Seen).url, base).searchParams), {
      q: 'nothing',
      format: 'json',
      pageno: '1',
    });
  });

  test('an HTTP error, a body that is not JSON and an unreachable service are the tool result', async () => {
    const searxng = webSearchTool(webSearchEndpoint('searxng', { SEARXNG_URL: base }, 'w'));
    answerJson('{"detail": "rate limited"}', 429);
    assert.equal(await searxng.run({ query: 'q' }), 'Error: SearXNG API error: HTTP 429: {"detail": "rate limited"}');
    const tavily = webSearchTool(webSearchEndpoint('tavily', { TAVILY_API_KEY: 'bad', TAVILY_API_URL: base }, 'w'));
    answerJson('{"detail": {"error": "Unauthorized: missing or invalid API key."}}', 401);
    assert.match(await tavily.run({ query: 'q' }), /^Error: Tavily API error: HTTP 401: .*invalid API key/);
    answerJson('<html>maintenance</html>');
    assert.equal(await searxng.run({ query: 'q' }), 'Error: SearXNG API error: the answer is not JSON: <html>maintenance</html>');
    // a port nothing listens on: the connection is refused
    const closed = createServer();
    await new Promise<void>((done) => closed.listen(0, '127.0.0.1', done));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((done) => closed.close(done));
    const unreachable = webSearchTool(webSearchEndpoint('searxng', { SEARXNG_URL: `http://127.0.0.1:${port}` }, 'w'));
    assert.match(await unreachable.run({ query: 'q' }), /^Error: SearXNG API error: fetch failed \(.*ECONNREFUSED/);
  });

  test('a request that does not answer before its timeout is the tool result; the episode stop is rethrown', async () => {
    // the server holds the request; its arrival fires the request's timeout (the clock plays no part)
    const timeout = new AbortController();
    handler = () => timeout.abort(new DOMException('timed out', 'TimeoutError'));
    const endpoint = webSearchEndpoint('searxng', { SEARXNG_URL: base }, 'w');
    const timed = webSearchTool(endpoint, { requestTimeout: () => timeout.signal });
    assert.equal(await timed.run({ query: 'slow' }), 'Error: SearXNG API error: no answer within the request timeout');
    // the episode's signal aborting (the task's timeout, the run stopping) is not a tool result
    const episode = new AbortController();
    handler = () => episode.abort(new Error('the run stopped'));
    await assert.rejects(webSearchTool(endpoint).run({ query: 'stop' }, episode.signal), /the run stopped/);
  });

  test('arguments of the wrong type are the model’s mistake (a ToolCallError), before any request', async () => {
    const tool = webSearchTool(webSearchEndpoint('tavily', { TAVILY_API_KEY: 'k', TAVILY_API_URL: base }, 'w'));
    const before = seen.length;
    await assert.rejects(
      tool.run({}),
      (e) => e instanceof ToolCallError && /query: a non-empty string is required/.test(e.message),
    );
    await assert.rejects(tool.run({ query: 'q', max_results: '5' }), /max_results: expected number, got "5"/);
    await assert.rejects(
      tool.run({ query: 'q', search_depth: 'deep' }),
      /search_depth: expected one of basic, advanced, got "deep"/,
    );
    await assert.rejects(tool.run({ query: 'q', include_domains: 'a.org' }), /include_domains: expected array/);
    assert.equal(seen.length, before, 'no request was sent');
  });

  test('settings: search_client_type, TAVILY_API_KEY and SEARXNG_URL are refused by name', () => {
    assert.equal(searchClientType({}, 'w'), 'searxng', "upstream's default");
    assert.equal(searchClientType({ search_client_type: 'tavily' }, 'w'), 'tavily');
    assert.throws(
      () => searchClientType({ search_client_type: 'google' }, 'w'),
      /^Error: w: workflow_args\.search_client_type must be one of searxng, tavily, got "google"$/,
    );
    assert.throws(() => webSearchEndpoint('tavily', {}, 'w'), /w: search_client_type tavily needs TAVILY_API_KEY/);
    assert.throws(() => webSearchEndpoint('searxng', { SEARXNG_URL: '' }, 'w'), /search_client_type searxng needs SEARXNG_URL/);
    assert.throws(
      () => webSearchEndpoint('searxng', { SEARXNG_URL: 'searx.local' }, 'w'),
      /SEARXNG_URL must be an http\(s\) URL, got "searx\.local"/,
    );
    assert.throws(
      () => webSearchEndpoint('tavily', { TAVILY_API_KEY: 'k', TAVILY_API_URL: 'ftp://x' }, 'w'),
      /TAVILY_API_URL must be an http\(s\) URL/,
    );
  });
});
