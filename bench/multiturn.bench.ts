// Multi-turn benchmark: agent episodes whose conversation grows turn by turn, each call resending the whole history,
// on the embedded engine with the prefix cache on and off. Per episode and turn t (t = 1..turns):
//
//   prompt(t) = prompt(t − 1) + reply(t − 1) + observation(t)      observation: U(obsMin, obsMax) random token ids
//   reply(t)  = replyLength(t) greedy tokens (eos ignored)          replyLength: U(replyMin, replyMax)
//
// `episodes` episodes run in parallel (one request each per turn; an episode's next turn is sent when its reply comes).
// The lengths are drawn once (seeded) and shared by the three setups, run one after another in one process:
//
//   slots         the slot layout (each sequence reserves maxLength positions; every turn prefills its whole prompt)
//   paged         kvCache 'paged' without the prefix cache (memory by real length; every turn prefills everything)
//   paged+prefix  enablePrefixCaching: a turn prefills only past the blocks the previous turn left in the cache
//
// Reported per setup: prefill tokens computed (engine.stats.prefillTokens) and their ratio to the episodes' final
// lengths (each token prefilled once = 1.0), the wall time of all episodes, and the peak KV memory in positions (slots:
// slots × maxLength, allocated up front; paged: the most blocks held at once × block size, sampled every step).
// The model is a random Qwen2 of `--hidden` width (4 layers, float32) on the CPU. Prints a table and one final JSON line.
//
//   node --import tsx bench/multiturn.bench.ts [--episodes 16] [--turns 10] [--obs 200-2000] [--reply 50-300]
//     [--hidden 128] [--threads N]
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
    episodes: { type: 'string', default: '16' },
    turns: { type: 'string', default: '10' },
    obs: { type: 'string', default: '200-2000' },
    reply: { type: 'string', default: '50-300' },
    hidden: { type: 'string', default: '128' },
    threads: { type: 'string' },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  console.log(
    'node --import tsx bench/multiturn.bench.ts [--episodes 16] [--turns 10] [--obs 200-2000] [--reply 50-300] [--hidden 128]',
  );
  process.exit(0);
}
const range = (name: string, text: string): [number, number] => {
  const [lo, hi] = text.split('-').map((v) => positiveFlag(name, v));
  if (lo === undefined || hi === undefined || hi < lo) throw new Error(`--${name} must be LO-HI, got '${text}'`);
  return [lo, hi];
};
const episodes = positiveFlag('episodes', values.episodes);
const turns = positiveFlag('turns', values.turns);
const [obsMin, obsMax] = range('obs', values.obs);
const [replyMin, replyMax] = range('reply', values.reply);
const hidden = positiveFlag('hidden', values.hidden);
if (values.threads) torch.setNumThreads(positiveFlag('threads', values.threads));

// the lengths and observations, drawn once (seeded)
let state = 12345;
// mulberry32: 32-bit integer arithmetic (an LCG over doubles would lose its low bits), uniform in (0, 1)
const random = () => {
  state = (state + 0x6d2b79f5) | 0;
  let t = Math.imul(state ^ (state >>> 15), 1 | state);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return (((t ^ (t >>> 14)) >>> 0) + 0.5) / 2 ** 32;
};
const uniform = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
const plan = Array.from({ length: episodes }, () =>
  Array.from({ length: turns }, () => ({
    observation: Array.from({ length: uniform(obsMin, obsMax) }, () => 3 + Math.floor(random() * 60)),
    reply: uniform(replyMin, replyMax),
  })),
);
const finalLengths = plan.map((episode) => episode.reduce((sum, turn) => sum + turn.observation.length + turn.reply, 0));
const maxLength = Math.max(...finalLengths);
const totalFinal = finalLengths.reduce((a, b) => a + b, 0);

const dir = mkdtempSync(join(os.tmpdir(), 'multiturn-bench-'));
initModel(dir, { hiddenSize: hidden, numLayers: 4, numHeads: 4, maxPositionEmbeddings: maxLength + 16, seed: 1 });
const model = CausalLM.load(dir, { layout: 'inference' });

interface Figures {
  prefillTokens: number;
  prefillPerFinalToken: number;
  seconds: number;
  peakKvPositions: number;
  hits: number;
}

async function runSetup(options: RolloutEngineOptions): Promise<Figures> {
  const engine = new RolloutEngine(model, { slots: episodes, maxLength, eosTokenIds: [], ...options });
  let peakBlocks = 0;
  const sample = () => {
    peakBlocks = Math.max(peakBlocks, engine.stats.kvCache?.heldBlocks ?? 0);
  };
  const t0 = now();
  await Promise.all(
    plan.map(async (episode) => {
      let history: number[] = [];
      for (const turn of episode) {
        history = [...history, ...turn.observation];
        const result = await engine.generate({ promptIds: history, maxTokens: turn.reply, temperature: 0, onToken: sample });
        history = [...history, ...(result.completions[0]?.tokenIds ?? [])];
      }
    }),
  );
  const seconds = secondsSince(t0);
  const stats = engine.stats;
  await engine.close();
  const blockSize = stats.kvCache?.blockSize ?? 0;
  return {
    prefillTokens: stats.prefillTokens,
    prefillPerFinalToken: stats.prefillTokens / totalFinal,
    seconds,
    peakKvPositions: stats.kvCache === null ? episodes * maxLength : peakBlocks * blockSize,
    hits: stats.kvCache?.hits ?? 0,
  };
}

const setups: [string, RolloutEngineOptions][] = [
  ['slots', {}],
  ['paged', { kvCache: 'paged' }],
  ['paged+prefix', { enablePrefixCaching: true }],
];
const results: Record<string, Figures> = {};
for (const [name, options] of setups) results[name] = await runSetup(options);
model.dispose();
rmSync(dir, { recursive: true, force: true });

console.log(
  `${episodes} episodes × ${turns} turns, observations ${obsMin}-${obsMax}, replies ${replyMin}-${replyMax} tokens; ` +
    `final lengths ${Math.min(...finalLengths)}-${maxLength} (sum ${totalFinal}); Qwen2 hidden ${hidden}, 4 layers, float32, ` +
    `${torch.getNumThreads()} threads`,
);
console.log('setup          prefill tokens  per final token  wall s   peak KV positions  prefix hits (blocks)');
for (const [name, f] of Object.entries(results))
  console.log(
    `${name.padEnd(14)} ${String(f.prefillTokens).padStart(14)}  ${f.prefillPerFinalToken.toFixed(2).padStart(15)}  ` +
      `${f.seconds.toFixed(1).padStart(6)}  ${String(f.peakKvPositions).padStart(17)}  ${String(f.hits).padStart(20)}`,
  );
const off = results.slots as Figures;
const on = results['paged+prefix'] as Figures;
console.log(
  JSON.stringify({
    bench: 'multiturn',
    episodes,
    turns,
    obs: [obsMin, obsMax],
    reply: [replyMin, replyMax],
    hidden,
    threads: torch.getNumThreads(),
    cpu: cpuFeatures(),
    final_tokens: totalFinal,
    setups: results,
    prefill_ratio_off_vs_on: off.prefillTokens / on.prefillTokens,
    speedup_on_vs_slots: off.seconds / on.seconds,
    speedup_on_vs_paged: (results.paged as Figures).seconds / on.seconds,
    kv_memory_ratio_slots_vs_on: off.peakKvPositions / on.peakKvPositions,
  }),
);
