// The web search tools of agentscope_v1_react_search_workflow (./agentscope-search.ts). Upstream starts an MCP server
// with npx for its search (tavily-mcp or mcp-searxng) and hands the agent that server's tools; here the agent gets
// one tool of the same name and arguments that calls the service's HTTP API itself:
//
//   search_client_type  tool                 request                                            settings
//   tavily              tavily-search        POST {TAVILY_API_URL}/search, JSON body,           TAVILY_API_KEY (upstream's);
//                                            Authorization: Bearer {TAVILY_API_KEY}             TAVILY_API_URL (ours,
//                                                                                               default api.tavily.com)
//   searxng             searxng_web_search   GET {SEARXNG_URL}/search?q=..&format=json          SEARXNG_URL (upstream's)
//                                            &pageno=..[&time_range][&language][&safesearch]
//
// Result text, as the MCP servers write it:
//   tavily   [Answer: {answer}\n]Detailed Results:\n\nTitle: {title}\nURL: {url}\nContent: {content}
//            [\nRaw Content: {raw_content}] … (results joined by a blank line)
//   searxng  Title: {title}\nDescription: {content}\nURL: {url}\nRelevance Score: {score, 3 decimals} … (joined by a
//            blank line), or "No results found"
//
// The servers' other tools (tavily-extract/crawl/map, web_url_read) are not offered. A missing setting is refused
// before the run starts (webSearchEndpoint, called by the workflow's checkArgs). At run time a failed request (an
// HTTP error, an unreachable service, no answer within SEARCH_TIMEOUT_SECONDS) is the tool's result, "Error: …", as
// an MCP server returns it to the agent; arguments of the wrong type are the model's mistake (a ToolCallError). The
// episode's own stop (its AbortSignal) is rethrown, never turned into a result.
import { type ReActTool, ToolCallError } from './react-agent.js';

export const SEARCH_CLIENT_TYPES = ['searxng', 'tavily'] as const;
export type SearchClientType = (typeof SEARCH_CLIENT_TYPES)[number];
export const SEARCH_TIMEOUT_SECONDS = 60;
export const TAVILY_DEFAULT_URL = 'https://api.tavily.com';

/** Where a search client sends its requests (and, for Tavily, with which key). */
export type WebSearchEndpoint = { type: 'tavily'; baseUrl: string; apiKey: string } | { type: 'searxng'; baseUrl: string };

/** workflow_args.search_client_type (default searxng, as upstream), or an error naming the key. */
export function searchClientType(args: Readonly<Record<string, unknown>>, who: string): SearchClientType {
  const value = args.search_client_type ?? 'searxng';
  if (!SEARCH_CLIENT_TYPES.includes(value as SearchClientType))
    throw new Error(
      `${who}: workflow_args.search_client_type must be one of ${SEARCH_CLIENT_TYPES.join(', ')}, got ${JSON.stringify(value)}`,
    );
  return value as SearchClientType;
}

function httpUrl(value: string, variable: string, who: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error(`${who}: ${variable} must be an http(s) URL, got ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new Error(`${who}: ${variable} must be an http(s) URL, got ${JSON.stringify(value)}`);
  return value.replace(/\/+$/, '');
}

/** The service's address and key from the environment, or an error naming the variable that is missing. */
export function webSearchEndpoint(type: SearchClientType, env: NodeJS.ProcessEnv, who: string): WebSearchEndpoint {
  if (type === 'tavily') {
    const apiKey = env.TAVILY_API_KEY ?? '';
    if (apiKey === '')
      throw new Error(`${who}: search_client_type tavily needs TAVILY_API_KEY (your Tavily API key) in the environment`);
    const baseUrl = httpUrl(env.TAVILY_API_URL || TAVILY_DEFAULT_URL, 'TAVILY_API_URL', who);
    return { type, baseUrl, apiKey };
  }
  const url = env.SEARXNG_URL ?? '';
  if (url === '')
    throw new Error(`${who}: search_client_type searxng needs SEARXNG_URL (your SearXNG instance's URL) in the environment`);
  return { type, baseUrl: httpUrl(url, 'SEARXNG_URL', who) };
}

export interface SearchToolOptions {
  /** Aborts a request that has not answered (default: after SEARCH_TIMEOUT_SECONDS). A test passes its own. */
  requestTimeout?: () => AbortSignal;
}

/** The response body as JSON, or the error text the tool returns (the episode's stop is rethrown). */
async function requestJson(
  url: string,
  init: RequestInit,
  service: string,
  options: SearchToolOptions,
  signal?: AbortSignal,
): Promise<{ json: unknown } | { error: string }> {
  const timeout = options.requestTimeout?.() ?? AbortSignal.timeout(SEARCH_TIMEOUT_SECONDS * 1000);
  try {
    const response = await fetch(url, { ...init, signal: signal ? AbortSignal.any([signal, timeout]) : timeout });
    const text = await response.text();
    if (!response.ok) return { error: `Error: ${service} API error: HTTP ${response.status}: ${text.slice(0, 500)}` };
    try {
      return { json: JSON.parse(text) };
    } catch {
      return { error: `Error: ${service} API error: the answer is not JSON: ${text.slice(0, 500)}` };
    }
  } catch (error) {
    if (signal?.aborted) throw error;
    if (timeout.aborted) return { error: `Error: ${service} API error: no answer within the request timeout` };
    const cause = (error as { cause?: { message?: string } }).cause?.message;
    return { error: `Error: ${service} API error: ${(error as Error).message}${cause ? ` (${cause})` : ''}` };
  }
}

type Schema = Record<string, unknown>;
const stringEnum = (description: string, values: readonly string[]) => ({ type: 'string', enum: values, description });

/** Copies the arguments named in `schema` that are present, refusing a value of the wrong type. */
function typedArguments(args: Record<string, unknown>, schema: Record<string, Schema>): Record<string, unknown> {
  if (typeof args.query !== 'string' || args.query.trim() === '')
    throw new ToolCallError('query: a non-empty string is required');
  const out: Record<string, unknown> = {};
  for (const [key, spec] of Object.entries(schema)) {
    const value = args[key];
    if (value === undefined) continue;
    const type = spec.type as string;
    const ok =
      type === 'array'
        ? Array.isArray(value) && value.every((v) => typeof v === 'string')
        : type === 'number'
          ? typeof value === 'number' && Number.isFinite(value)
          : typeof value === type;
    const allowed = spec.enum as readonly string[] | undefined;
    if (!ok || (allowed !== undefined && !allowed.includes(value as string)))
      throw new ToolCallError(
        `${key}: expected ${allowed ? `one of ${allowed.join(', ')}` : type}, got ${JSON.stringify(value)}`,
      );
    out[key] = value;
  }
  return out;
}

function searchTool(name: string, description: string, properties: Record<string, Schema>, run: ReActTool['run']): ReActTool {
  return {
    schema: {
      type: 'function',
      function: { name, description, parameters: { type: 'object', properties, required: ['query'] } },
    },
    run,
  };
}

const TAVILY_PROPERTIES: Record<string, Schema> = {
  query: { type: 'string', description: 'Search query' },
  search_depth: stringEnum("The depth of the search: 'basic' or 'advanced'", ['basic', 'advanced']),
  topic: stringEnum("The category of the search: 'general' or 'news'", ['general', 'news']),
  time_range: stringEnum('The time range back from today to filter results', ['day', 'week', 'month', 'year']),
  max_results: { type: 'number', description: 'The maximum number of search results to return' },
  include_raw_content: { type: 'boolean', description: 'Include the cleaned HTML content of each result' },
  include_domains: { type: 'array', items: { type: 'string' }, description: 'Domains to restrict the search to' },
  exclude_domains: { type: 'array', items: { type: 'string' }, description: 'Domains to leave out of the search' },
};

interface TavilyResult {
  title?: string;
  url?: string;
  content?: string;
  raw_content?: string | null;
}

/** Tavily's answer as tavily-mcp writes it for the agent (see the header). */
export function formatTavilyResults(body: { answer?: string | null; results?: TavilyResult[] }): string {
  const lines: string[] = [];
  if (body.answer) lines.push(`Answer: ${body.answer}`);
  lines.push('Detailed Results:');
  for (const result of body.results ?? []) {
    lines.push(`\nTitle: ${result.title ?? ''}`, `URL: ${result.url ?? ''}`, `Content: ${result.content ?? ''}`);
    if (result.raw_content) lines.push(`Raw Content: ${result.raw_content}`);
  }
  return lines.join('\n');
}

const SEARXNG_PROPERTIES: Record<string, Schema> = {
  query: { type: 'string', description: 'The search query' },
  pageno: { type: 'number', description: 'Search page number (starts at 1)' },
  time_range: stringEnum('Time range of search', ['day', 'month', 'year']),
  language: { type: 'string', description: "Language code for search results (e.g. 'en', 'fr'); default 'all'" },
  safesearch: stringEnum('Safe search filter level (0: none, 1: moderate, 2: strict)', ['0', '1', '2']),
};

/** SearXNG's JSON results as mcp-searxng writes them for the agent (see the header). */
export function formatSearxngResults(body: {
  results?: { title?: string; content?: string; url?: string; score?: number }[];
}): string {
  const results = body.results ?? [];
  if (results.length === 0) return 'No results found';
  return results
    .map(
      (r) =>
        `Title: ${r.title ?? ''}\nDescription: ${r.content ?? ''}\nURL: ${r.url ?? ''}\nRelevance Score: ${(r.score ?? 0).toFixed(3)}`,
    )
    .join('\n\n');
}

/** The search tool of `endpoint` (see the header). */
export function webSearchTool(endpoint: WebSearchEndpoint, options: SearchToolOptions = {}): ReActTool {
  if (endpoint.type === 'tavily') {
    return searchTool(
      'tavily-search',
      'A web search tool that uses Tavily to search the web.',
      TAVILY_PROPERTIES,
      async (args, signal) => {
        const body = typedArguments(args, TAVILY_PROPERTIES);
        const init: RequestInit = {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${endpoint.apiKey}` },
          body: JSON.stringify(body),
        };
        const answer = await requestJson(`${endpoint.baseUrl}/search`, init, 'Tavily', options, signal);
        return 'error' in answer ? answer.error : formatTavilyResults(answer.json as Parameters<typeof formatTavilyResults>[0]);
      },
    );
  }
  return searchTool(
    'searxng_web_search',
    'Performs a web search using the SearXNG API, ideal for general queries, news, articles, and online content.',
    SEARXNG_PROPERTIES,
    async (args, signal) => {
      const { query, pageno, time_range, language, safesearch } = typedArguments(args, SEARXNG_PROPERTIES);
      const url = new URL(`${endpoint.baseUrl}/search`);
      url.searchParams.set('q', query as string);
      url.searchParams.set('format', 'json');
      url.searchParams.set('pageno', String(pageno ?? 1));
      if (time_range !== undefined) url.searchParams.set('time_range', time_range as string);
      if (language !== undefined && language !== 'all') url.searchParams.set('language', language as string);
      if (safesearch !== undefined) url.searchParams.set('safesearch', safesearch as string);
      const answer = await requestJson(url.href, { method: 'GET' }, 'SearXNG', options, signal);
      return 'error' in answer ? answer.error : formatSearxngResults(answer.json as Parameters<typeof formatSearxngResults>[0]);
    },
  );
}
