// KV-capacity benchmark: how many sequences decode at once in a fixed KV-cache memory, the slot layout against the
// paged cache, on a long-tail length mix like reasoning traces. The budget is `budget` positions (keys and values of
// every layer at one position = one position of memory):
//
//   slots   budget / maxLength slots: each sequence reserves maxLength positions whatever its length
//   paged   budget / 16 blocks of 16 positions (+ the scratch block), up to `sequences` block tables: a sequence
//           holds the blocks of its real length; when they run out, the newest are preempted and recomputed
//
// Lengths (prompt + response) are lognormal, median `median`, sigma chosen so that p99 = `p99`, capped at maxLength;
// prompts U(50, 500) tokens (at most the length − 1), the response the rest (eos ignored, greedy). All `sequences`
// requests are sent at once. Reported per layout: concurrent sequences while requests still wait (running, sampled
// every engine step while the waiting queue is not empty, so the cache is what limits it: mean and max), preemptions, wall time and generated tokens/s. The model is a random Qwen2 (hidden 32, 1 layer, float32):
// the figure is the cache's admission, not the model. Prints a table and one final JSON line.
//
//   node --import tsx bench/kv-capacity.bench.ts [--sequences 256] [--max-length 4096] [--budget 65536]
//     [--median 300] [--p99 4000]
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { RolloutEngine, type RolloutEngineOptions } from '../src/engine/index.js';
import { CausalLM, initModel } from '../src/model/index.js';
import * as torch from '../src/torch/index.js';
import { cpuFeatures, now, positiveFlag, secondsSince } from './harness.js';

const { values } = parseArgs({
  options: {
    sequences: { type: 'string', default: '256' },
    'max-length': { type: 'string', default: '4096' },
    budget: { type: 'string', default: '65536' },
    median: { type: 'string', default: '300' },
    p99: { type: 'string', default: '4000' },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  console.log(
    'node --import tsx bench/kv-capacity.bench.ts [--sequences 256] [--max-length 4096] [--budget 65536] [--median 300] [--p99 4000]',
  );
  process.exit(0);
}
const sequences = positiveFlag('sequences', values.sequences);
const maxLength = positiveFlag('max-length', values['max-length']);
const budget = positiveFlag('budget', values.budget);
const medianLength = positiveFlag('median', values.median);
const p99 = positiveFlag('p99', values.p99);
const BLOCK = 16;
if (budget < maxLength) throw new Error(`--budget (${budget}) must hold one sequence of --max-length (${maxLength})`);

// lognormal lengths: ln L ~ N(ln median, σ²), p99 = median · e^(2.326 σ)
const sigma = Math.log(p99 / medianLength) / 2.326;
let state = 2024;
// mulberry32: 32-bit integer arithmetic (an LCG over doubles would lose its low bits), uniform in (0, 1)
const random = () => {
  state = (state + 0x6d2b79f5) | 0;
  let t = Math.imul(state ^ (state >>> 15), 1 | state);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return (((t ^ (t >>> 14)) >>> 0) + 0.5) / 2 ** 32;
};
const normal = () => Math.sqrt(-2 * Math.log(random())) * Math.cos(2 * Math.PI * random());
const requests = Array.from({ length: sequences }, () => {
  const length = Math.max(2, Math.min(maxLength, Math.round(medianLength * Math.exp(sigma * normal()))));
  const prompt = Math.min(length - 1, 50 + Math.floor(random() * 451));
  return { promptIds: Array.from({ length: prompt }, () => 3 + Math.floor(random() * 20)), maxTokens: length - prompt };
});
const lengths = requests.map((r) => r.promptIds.length + r.maxTokens).sort((a, b) => a - b);
const quantile = (q: number) => lengths[Math.min(lengths.length - 1, Math.floor(q * lengths.length))] as number;

const dir = mkdtempSync(join(os.tmpdir(), 'kv-capacity-bench-'));
initModel(dir, { hiddenSize: 32, numLayers: 1, numHeads: 2, maxPositionEmbeddings: maxLength, seed: 1 });
const model = CausalLM.load(dir, { layout: 'inference' });

interface Figures {
  slots: number;
  meanConcurrent: number;
  maxConcurrent: number;
  preemptions: number;
  seconds: number;
  tokensPerSecond: number;
}

async function runLayout(options: RolloutEngineOptions & { slots: number }): Promise<Figures> {
  const engine = new RolloutEngine(model, { maxLength, eosTokenIds: [], maxPrefillTokens: 16384, ...options });
  let lastStep = -1;
  const running: number[] = [];
  const sample = () => {
    const stats = engine.stats;
    if (stats.steps === lastStep) return; // once per engine step
    lastStep = stats.steps;
    if (stats.waiting > 0) running.push(stats.running); // only while requests wait: the cache is what limits
  };
  const t0 = now();
  await Promise.all(requests.map((r) => engine.generate({ ...r, temperature: 0, onToken: sample })));
  const seconds = secondsSince(t0);
  const { preemptions } = engine.stats;
  await engine.close();
  const generated = requests.reduce((sum, r) => sum + r.maxTokens, 0);
  return {
    slots: options.slots,
    meanConcurrent: running.reduce((a, b) => a + b, 0) / running.length,
    maxConcurrent: Math.max(...running),
    preemptions,
    seconds,
    tokensPerSecond: generated / seconds,
  };
}

const results = {
  slots: await runLayout({ slots: Math.floor(budget / maxLength) }),
  paged: await runLayout({ slots: sequences, kvCache: 'paged', kvBlocks: Math.floor(budget / BLOCK) + 1 }),
};
model.dispose();
rmSync(dir, { recursive: true, force: true });

console.log(
  `${sequences} sequences, lengths lognormal median ${medianLength} p99 ${p99} capped at ${maxLength} ` +
    `(drawn: median ${quantile(0.5)}, p90 ${quantile(0.9)}, p99 ${quantile(0.99)}, max ${quantile(1)}); ` +
    `KV budget ${budget} positions; ${torch.getNumThreads()} threads`,
);
console.log('layout  slots  concurrent while waiting: mean  max  preemptions  wall s  tokens/s');
for (const [name, f] of Object.entries(results))
  console.log(
    `${name.padEnd(6)}  ${String(f.slots).padStart(5)}  ${f.meanConcurrent.toFixed(1).padStart(30)}  ` +
      `${String(f.maxConcurrent).padStart(3)}  ${String(f.preemptions).padStart(11)}  ${f.seconds.toFixed(1).padStart(6)}  ` +
      `${f.tokensPerSecond.toFixed(0).padStart(8)}`,
  );
console.log(
  JSON.stringify({
    bench: 'kv-capacity',
    sequences,
    max_length: maxLength,
    budget_positions: budget,
    lengths: { median: quantile(0.5), p90: quantile(0.9), p99: quantile(0.99), max: quantile(1) },
    threads: torch.getNumThreads(),
    cpu: cpuFeatures(),
    layouts: results,
    concurrent_ratio_mean: results.paged.meanConcurrent / results.slots.meanConcurrent,
    concurrent_ratio_max: results.paged.maxConcurrent / results.slots.maxConcurrent,
  }),
);
