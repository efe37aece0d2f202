// Multi-turn benchmark: agent episodes whose conversation grows turn by turn, each call resending the whole history,
// on the embedded engine with the prefix cache on and off. Per episode and turn t (t = 1..turns):
//
//   prompt(t) = prompt(t − 1) + reply(t − 1) + observation(t)      observation: U(obsMin, obsMax) random token ids
//   reply(t)  = replyLength(t) greedy tokens (eos ignored)          replyLength: U(replyMin, replyMax)
//
// `episodes` episodes run in parallel (one request each per turn; an episode's next turn is sent when its reply comes).
// The lengths are drawn once (seeded) and shared by the setups, run one after another:
//
//   slots         the slot layout (each sequence reserves maxLength positions; every turn prefills its whole prompt)
//   paged         kvCache 'paged' without the prefix cache (memory by real length; every turn prefills everything)
//   paged+prefix  enablePrefixCaching: a turn prefills only past the blocks the previous turn left in the cache
//   serve         `trinity serve --enable-prefix-caching` in a child process, each turn a POST /v1/completions by the
//                 official openai client (the prompt as token ids, ignore_eos and return_token_ids, vLLM's fields):
//                 what an agent developer runs; its figures come from GET /metrics
//   transformers  bench/multiturn_hf.py: `generate` over turn t of every episode (left-padded), the whole history
//                 resent each turn, the same model folder (.cache/python-ref, or TRINITY_BENCH_PYTHON)
//
// Reported per setup: prefill tokens computed (engine.stats.prefillTokens; transformers: the real prompt tokens of
// every turn, its padded positions beside them) and their ratio to the episodes' final lengths (each token prefilled
// once = 1.0), the wall time of all episodes, and the peak KV memory in positions per layer (slots: slots × maxLength,
// allocated up front; paged: the most blocks held at once × block size, sampled every step — serve: at every reply;
// transformers: batch × (longest prompt + new tokens) of its largest turn), and for the paged setups on the CPU the
// decode copy's peak positions per layer (held beside the blocks: src/model/paged-decode-copy.ts) and how many times
// it was gathered. The model is a random Qwen2 of `--hidden` width (4 layers, float32) on the CPU. Beside the wall
// time, the CPU seconds the setup's process used (user + system, all its threads; serve: the server's process;
// transformers: Python's): on a machine shared with other jobs the wall time follows their load, the CPU time much
// less. Prints a table and one final JSON line.
//
// Two more setups split an engine setup's time into prefill and decode (--setups ...,paged/prefill,paged+prefix/prefill):
// the same turns with one generated token each, the plan's reply appended as given token ids, so a turn prefills what
// the full setup prefills (plus the reply tokens the full setup decoded into the cache) and decodes nothing. And
// paged+prefix+chunked: chunked prefill with a step budget of 256 tokens.
//
//   node --import tsx bench/multiturn.bench.ts [--episodes 16] [--turns 10] [--obs 200-2000] [--reply 50-300]
//     [--hidden 128] [--threads N] [--setups slots,paged,paged+prefix,serve,transformers]
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import { RolloutEngine, type RolloutEngineOptions } from '../src/engine/index.js';
import { CausalLM, initModel } from '../src/model/index.js';
import * as torch from '../src/torch/index.js';
import { cpuFeatures, findPython, now, PythonHalf, positiveFlag, type Reply, repoRoot, secondsSince } from './harness.js';

const { values } = parseArgs({
  options: {
    episodes: { type: 'string', default: '16' },
    turns: { type: 'string', default: '10' },
    obs: { type: 'string', default: '200-2000' },
    reply: { type: 'string', default: '50-300' },
    hidden: { type: 'string', default: '128' },
    threads: { type: 'string' },
    setups: { type: 'string', default: 'slots,paged,paged+prefix,serve,transformers' },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  console.log(
    'node --import tsx bench/multiturn.bench.ts [--episodes 16] [--turns 10] [--obs 200-2000] [--reply 50-300] [--hidden 128]\n' +
      '  [--threads N] [--setups slots,paged,paged+prefix,serve,transformers]',
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
const SETUPS = [
  'slots',
  'paged',
  'paged+prefix',
  'serve',
  'transformers',
  'paged/prefill',
  'paged+prefix/prefill',
  'paged+prefix+chunked',
] as const;
type Setup = (typeof SETUPS)[number];
const chosen = values.setups.split(',').map((name) => {
  if (!(SETUPS as readonly string[]).includes(name)) throw new Error(`--setups: unknown setup '${name}' (${SETUPS.join(', ')})`);
  return name as Setup;
});

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
    /** The reply's token ids in the prefill-only setups (appended as given). */
    givenReply: [] as number[],
  })),
);
for (const turn of plan.flat()) turn.givenReply = Array.from({ length: turn.reply }, () => 3 + Math.floor(random() * 60));
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
  /** CPU seconds of the process that computed (user + system, all threads). */
  cpuSeconds: number;
  peakKvPositions: number;
  hits: number;
  /** Paged engine setups on the CPU: the decode copy's peak positions per layer (beside the blocks) and its gathers. */
  peakCopyPositions?: number;
  copyRebuilds?: number;
  /** transformers: the padded positions its prefills computed, and its decode positions (dropped ones included). */
  prefillPositions?: number;
  generatedPositions?: number;
}

/**
 * Every episode's turns, in parallel: `send` runs one turn (the prompt so far, the reply's length) → the reply's ids;
 * prefillOnly: one token is generated and the plan's given reply appended.
 */
async function runEpisodes(
  send: (promptIds: number[], replyLength: number) => Promise<number[]>,
  prefillOnly = false,
): Promise<void> {
  await Promise.all(
    plan.map(async (episode) => {
      let history: number[] = [];
      for (const turn of episode) {
        history = [...history, ...turn.observation];
        const generated = await send(history, prefillOnly ? 1 : turn.reply);
        history = [...history, ...(prefillOnly ? turn.givenReply : generated)];
      }
    }),
  );
}

/** This process's CPU seconds so far (user + system, all threads). */
const cpuNow = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
};

async function runEngine(options: RolloutEngineOptions, prefillOnly: boolean): Promise<Figures> {
  const engine = new RolloutEngine(model, { slots: episodes, maxLength, eosTokenIds: [], ...options });
  let peakBlocks = 0;
  let peakCopy = 0;
  const sample = () => {
    peakBlocks = Math.max(peakBlocks, engine.stats.kvCache?.heldBlocks ?? 0);
    peakCopy = Math.max(peakCopy, engine.stats.kvCache?.decodeCopyPositions ?? 0);
  };
  const [t0, cpu0] = [now(), cpuNow()];
  await runEpisodes(async (promptIds, maxTokens) => {
    const result = await engine.generate({ promptIds, maxTokens, temperature: 0, onToken: sample });
    return result.completions[0]?.tokenIds ?? [];
  }, prefillOnly);
  const [seconds, cpuSeconds] = [secondsSince(t0), cpuNow() - cpu0];
  const stats = engine.stats;
  await engine.close();
  const blockSize = stats.kvCache?.blockSize ?? 0;
  return {
    prefillTokens: stats.prefillTokens,
    prefillPerFinalToken: stats.prefillTokens / totalFinal,
    seconds,
    cpuSeconds,
    peakKvPositions: stats.kvCache === null ? episodes * maxLength : peakBlocks * blockSize,
    hits: stats.kvCache?.hits ?? 0,
    ...(stats.kvCache && { peakCopyPositions: peakCopy, copyRebuilds: stats.kvCache.decodeCopyRebuilds }),
  };
}

/** `trinity serve --enable-prefix-caching` in a child process; the episodes through the openai client. */
async function runServe(): Promise<Figures> {
  const args = ['serve', '--model', dir, '--port', '0', '--slots', String(episodes), '--max-length', String(maxLength)];
  const child = spawn(process.execPath, [join(repoRoot, 'bin', 'trinity.js'), ...args, '--enable-prefix-caching'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  try {
    // its first line: "serving 'NAME' at http://127.0.0.1:PORT/v1; Ctrl-C stops"
    const first = await createInterface({ input: child.stdout })[Symbol.asyncIterator]().next();
    const baseURL = /at (\S+?);/.exec(String(first.value))?.[1];
    if (first.done || baseURL === undefined) throw new Error(`trinity serve did not start: ${String(first.value)}`);
    const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });
    const metrics = async () => (await (await fetch(`${baseURL.replace(/\/v1$/, '')}/metrics`)).json()) as Record<string, number>;
    let peakBlocks = 0;
    const [t0, cpu0] = [now(), childCpuSeconds(child.pid)];
    await runEpisodes(async (prompt, maxTokens) => {
      // vLLM's fields beside OpenAI's: eos ignored (the reply's length is the plan's), the reply's exact token ids
      const body: OpenAI.CompletionCreateParamsNonStreaming & { ignore_eos: boolean; return_token_ids: boolean } = {
        model: 'bench',
        prompt,
        max_tokens: maxTokens,
        temperature: 0,
        ignore_eos: true,
        return_token_ids: true,
      };
      const completion = await client.completions.create(body);
      peakBlocks = Math.max(peakBlocks, (await metrics())['kv_cache/blocks_held'] ?? 0);
      const ids = (completion.choices[0] as { token_ids?: number[] } | undefined)?.token_ids;
      if (ids?.length !== maxTokens) throw new Error(`serve: a reply of ${ids?.length} token ids, asked ${maxTokens}`);
      return ids;
    });
    const [seconds, cpuSeconds] = [secondsSince(t0), childCpuSeconds(child.pid) - cpu0];
    const after = await metrics();
    const prefillTokens = after['engine/prefill_tokens_total'] ?? 0;
    return {
      prefillTokens,
      prefillPerFinalToken: prefillTokens / totalFinal,
      seconds,
      cpuSeconds,
      peakKvPositions: peakBlocks * 16, // the paged cache's default block size
      hits: after['prefix_cache/hits_total'] ?? 0,
    };
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

/** A child's CPU seconds so far (Linux: utime + stime of /proc/PID/stat, all its threads). */
function childCpuSeconds(pid: number | undefined): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  const ticks = Number(fields[11]) + Number(fields[12]); // fields 14 and 15 of the line, after "pid (comm) "
  return ticks / 100; // USER_HZ
}

interface HfReply extends Reply {
  cpu_s: number;
  prefill_tokens: number;
  prefill_positions: number;
  generated_positions: number;
  peak_kv_positions: number;
  final_lengths: number[];
}

/** bench/multiturn_hf.py on the same folder and plan. */
async function runTransformers(): Promise<Figures & { versions: Reply }> {
  const python = new PythonHalf(findPython(), join(repoRoot, 'bench', 'multiturn_hf.py'));
  try {
    const versions = await python.request({ kind: 'hello', threads: torch.getNumThreads() });
    const reply = await python.request<HfReply>({ kind: 'run', dir, episodes: plan });
    if (reply.final_lengths.some((length, e) => length !== finalLengths[e]))
      throw new Error(`transformers: final lengths ${reply.final_lengths} differ from the plan's ${finalLengths}`);
    return {
      prefillTokens: reply.prefill_tokens,
      prefillPerFinalToken: reply.prefill_tokens / totalFinal,
      seconds: reply.s?.[0] ?? Number.NaN,
      cpuSeconds: reply.cpu_s,
      peakKvPositions: reply.peak_kv_positions,
      hits: 0,
      prefillPositions: reply.prefill_positions,
      generatedPositions: reply.generated_positions,
      versions,
    };
  } finally {
    await python.close();
  }
}

const engineSetups: Record<string, RolloutEngineOptions> = {
  slots: {},
  paged: { kvCache: 'paged' },
  'paged+prefix': { enablePrefixCaching: true },
  // chunked prefill with a step budget of 256 tokens: the same prefill tokens, in chunks between decode steps
  'paged+prefix+chunked': { enablePrefixCaching: true, chunkedPrefill: true, maxPrefillTokens: 256 },
};
const PREFILL_ONLY = '/prefill';
// warm-up: the first forwards of a process pay for thread pools and allocations, which no setup should carry
const warmup = new RolloutEngine(model, { slots: 1, maxLength: 64, eosTokenIds: [] });
await warmup.generate({ promptIds: [3, 4, 5, 6], maxTokens: 8, temperature: 0 }).finally(() => warmup.close());
const results: Partial<Record<Setup, Figures>> = {};
let versions: Reply | null = null;
for (const name of chosen) {
  if (name === 'serve') results.serve = await runServe();
  else if (name === 'transformers') {
    const { versions: v, ...figures } = await runTransformers();
    results.transformers = figures;
    versions = v;
  } else {
    const prefillOnly = name.endsWith(PREFILL_ONLY);
    results[name] = await runEngine(engineSetups[name.replace(PREFILL_ONLY, '')] as RolloutEngineOptions, prefillOnly);
  }
}
model.dispose();
rmSync(dir, { recursive: true, force: true });

console.log(
  `${episodes} episodes × ${turns} turns, observations ${obsMin}-${obsMax}, replies ${replyMin}-${replyMax} tokens; ` +
    `final lengths ${Math.min(...finalLengths)}-${maxLength} (sum ${totalFinal}); Qwen2 hidden ${hidden}, 4 layers, float32, ` +
    `${torch.getNumThreads()} threads`,
);
console.log(
  'setup                  prefill tokens  per final token  wall s   CPU s  peak KV positions  prefix hits (blocks)  ' +
    'decode copy: peak positions, gathers',
);
for (const [name, f] of Object.entries(results))
  console.log(
    `${name.padEnd(22)} ${String(f.prefillTokens).padStart(14)}  ${f.prefillPerFinalToken.toFixed(2).padStart(15)}  ` +
      `${f.seconds.toFixed(1).padStart(6)}  ${f.cpuSeconds.toFixed(1).padStart(6)}  ${String(f.peakKvPositions).padStart(17)}  ` +
      `${String(f.hits).padStart(20)}  ${f.copyRebuilds === undefined ? '-' : `${f.peakCopyPositions}, ${f.copyRebuilds}`}`,
  );
if (results.transformers)
  console.log(
    `transformers computed ${results.transformers.prefillPositions} padded prefill positions and ` +
      `${results.transformers.generatedPositions} decode positions (${plan.flat().reduce((sum, t) => sum + t.reply, 0)} kept)`,
  );
/** a / b of two setups' figure, when both ran. */
const ratio = (a: Setup, b: Setup, figure: 'prefillTokens' | 'seconds' | 'cpuSeconds' | 'peakKvPositions') => {
  const x = results[a]?.[figure];
  const y = results[b]?.[figure];
  return x === undefined || y === undefined ? null : x / y;
};
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
    python: versions,
    final_tokens: totalFinal,
    setups: results,
    prefill_ratio_off_vs_on: ratio('slots', 'paged+prefix', 'prefillTokens'),
    prefill_ratio_transformers_vs_on: ratio('transformers', 'paged+prefix', 'prefillTokens'),
    speedup_on_vs_slots: ratio('slots', 'paged+prefix', 'seconds'),
    speedup_on_vs_paged: ratio('paged', 'paged+prefix', 'seconds'),
    cpu_speedup_on_vs_slots: ratio('slots', 'paged+prefix', 'cpuSeconds'),
    cpu_speedup_on_vs_paged: ratio('paged', 'paged+prefix', 'cpuSeconds'),
    cpu_speedup_on_vs_transformers: ratio('transformers', 'paged+prefix', 'cpuSeconds'),
    // the prefill-only setups' share of the full setups' CPU time (the rest: decode steps)
    prefill_cpu_share_on: ratio('paged+prefix/prefill', 'paged+prefix', 'cpuSeconds'),
    prefill_cpu_share_off: ratio('paged/prefill', 'paged', 'cpuSeconds'),
    speedup_on_vs_transformers: ratio('transformers', 'paged+prefix', 'seconds'),
    speedup_serve_vs_transformers: ratio('transformers', 'serve', 'seconds'),
    kv_memory_ratio_slots_vs_on: ratio('slots', 'paged+prefix', 'peakKvPositions'),
    kv_memory_ratio_transformers_vs_on: ratio('transformers', 'paged+prefix', 'peakKvPositions'),
  }),
);
