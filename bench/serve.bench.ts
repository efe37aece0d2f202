// Load test of the OpenAI-compatible server: 64 concurrent clients (the official `openai` npm client), each sending
// chat completions, against `trinity serve`'s serveModel on a small random model. The alternative in the same run is
// the same requests straight into the same engine (no HTTP, no JSON): the ratio is what serving costs.
//
//   node --import tsx bench/serve.bench.ts [--clients 64] [--requests 4] [--max-tokens 16]
//
// Prints a table and one JSON line: requests/s, generated tokens/s, failures (must be 0), HTTP/direct ratio.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import { initModel } from '../src/model/index.js';
import { serveModel } from '../src/serve/index.js';
import { now, secondsSince } from './harness.js';

const { values } = parseArgs({
  options: {
    clients: { type: 'string', default: '64' },
    requests: { type: 'string', default: '4' },
    'max-tokens': { type: 'string', default: '16' },
  },
});
const clients = Number(values.clients);
const perClient = Number(values.requests);
const maxTokens = Number(values['max-tokens']);

const dir = mkdtempSync(join(tmpdir(), 'serve-bench-'));
initModel(dir, {
  hiddenSize: 256,
  numLayers: 4,
  numHeads: 4,
  numKeyValueHeads: 2,
  intermediateSize: 768,
  maxPositionEmbeddings: 256,
  seed: 0,
});
const served = await serveModel({ modelDir: dir, port: 0, modelName: 'bench', slots: 32, apiKey: 'bench-key', maxN: 1 });

interface Outcome {
  ok: number;
  failed: number;
  tokens: number;
  seconds: number;
  errors: string[];
}

async function load(send: (client: number, i: number) => Promise<number>): Promise<Outcome> {
  const outcome: Outcome = { ok: 0, failed: 0, tokens: 0, seconds: 0, errors: [] };
  const t0 = now();
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      for (let i = 0; i < perClient; i++) {
        try {
          const tokens = await send(c, i); // (not `+= await`: that reads the total before the wait)
          outcome.tokens += tokens;
          outcome.ok++;
        } catch (error) {
          outcome.failed++;
          if (outcome.errors.length < 5) outcome.errors.push((error as Error).message);
        }
      }
    }),
  );
  outcome.seconds = secondsSince(t0);
  return outcome;
}

const prompt = (c: number, i: number) => `client ${c} request ${i}: count to ten`;
const httpClients = Array.from(
  { length: clients },
  () => new OpenAI({ baseURL: served.server.baseURL, apiKey: 'bench-key', maxRetries: 0, timeout: 600_000 }),
);
const http = await load(async (c, i) => {
  const reply = await (httpClients[c] as OpenAI).chat.completions.create({
    model: 'bench',
    messages: [{ role: 'user', content: prompt(c, i) }],
    max_tokens: maxTokens,
    temperature: 1,
    seed: c * 1000 + i,
    // @ts-expect-error vLLM's extension: fixed-length answers make the two sides comparable
    ignore_eos: true,
  });
  return reply.usage?.completion_tokens ?? 0;
});
const direct = await load(async (c, i) => {
  const reply = await served.engine.chat([{ role: 'user', content: prompt(c, i) }], {
    maxTokens,
    temperature: 1,
    seed: c * 1000 + i,
    ignoreEos: true,
  });
  return reply.completionIds.length;
});
await served.close();

const row = (name: string, o: Outcome) =>
  `${name.padEnd(22)} ${String(o.ok).padStart(5)} ok ${String(o.failed).padStart(4)} failed ${(o.ok / o.seconds).toFixed(2).padStart(8)} req/s ${(o.tokens / o.seconds).toFixed(1).padStart(9)} tok/s`;
console.log(`${clients} concurrent clients × ${perClient} chat completions of ${maxTokens} tokens (32 engine slots)`);
console.log(row('HTTP (openai client)', http));
console.log(row('direct engine.chat', direct));
if (http.errors.length) console.log(`errors: ${http.errors.join(' | ')}`);
console.log(
  JSON.stringify({
    bench: 'serve',
    clients,
    requests: clients * perClient,
    http: { ok: http.ok, failed: http.failed, requests_per_s: http.ok / http.seconds, tokens_per_s: http.tokens / http.seconds },
    direct: {
      ok: direct.ok,
      failed: direct.failed,
      requests_per_s: direct.ok / direct.seconds,
      tokens_per_s: direct.tokens / direct.seconds,
    },
    http_over_direct_throughput: http.tokens / http.seconds / (direct.tokens / direct.seconds),
  }),
);
process.exit(http.failed === 0 ? 0 : 1);
