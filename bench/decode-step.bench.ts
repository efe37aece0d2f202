// Decode steps, eager vs captured: `npm run bench:decode-step` (node --import tsx bench/decode-step.bench.ts [--help]).
//
// For the quickstart's model and a model of Qwen2.5-0.5B's shape, at several batch sizes, two RolloutEngines over the
// same model folder decode the same batch (greedy, or sampled with a seed per row: --temperature): one runs every
// decode step's forward and sampling from JavaScript (captureDecode off: the engine before captured steps), the other
// replays each step shape captured once (src/engine/decode-steps.ts). Per decode step it counts the native calls
// (the addon's own counter) and times the step: each side generates `short` and then `long` new tokens per row, and
// the differences (long - short) divide out the prefill. The captured side runs once first so that its shapes are
// captured; the sides alternate (ABBA) and the table shows
// medians. With --device cuda a third engine replays each captured step as a CUDA graph (one launch a step) and the
// captured side replays op by op (cudaGraphs off). Ends with one JSON line of every figure.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { RolloutEngine } from '../src/engine/index.js';
import { initModel } from '../src/model/index.js';
import * as torch from '../src/torch/index.js';
import {
  ensureBenchModel,
  cpuFeatures,
  fmt,
  gpuName,
  HALF_BILLION_SPEC,
  median,
  now,
  r2,
  r3,
  repoRoot,
  secondsSince,
  table,
} from './harness.js';
import { QUICKSTART_MODEL } from '../src/cli/quickstart.js';

const { values: flags } = parseArgs({
  options: {
    help: { type: 'boolean' },
    models: { type: 'string', default: 'quickstart,0.5b' },
    batches: { type: 'string', default: '1,8,32' },
    'large-batches': { type: 'string', default: '1,8' },
    threads: { type: 'string' },
    prompt: { type: 'string', default: '16' },
    short: { type: 'string', default: '8' },
    long: { type: 'string', default: '40' },
    rounds: { type: 'string', default: '3' },
    device: { type: 'string', default: 'cpu' },
    dtype: { type: 'string' },
    temperature: { type: 'string', default: '0' },
    'models-dir': { type: 'string', default: join(repoRoot, '.cache', 'bench-models') },
  },
});
if (flags.help) {
  console.log(`Decode steps, eager vs captured (native calls and time per step).
  node --import tsx bench/decode-step.bench.ts [options]

  --models LIST          quickstart,0.5b (default both)
  --batches LIST         batch sizes for the quickstart model (default 1,8,32)
  --large-batches LIST   batch sizes for the 0.5b model (default 1,8)
  --threads N            intra-op threads (default: the core count)
  --prompt N             prompt tokens per row (default 16)
  --short N, --long N    new tokens per row of the two generations whose difference is timed (default 8, 40)
  --rounds N             ABBA rounds (default 3)
  --device cpu|cuda      where the engines run (default cpu; cuda adds a side with CUDA graphs)
  --dtype float32|bfloat16  model dtype (default float32)
  --temperature T        sampling temperature (default 0: greedy; above 0 each row draws with its own seed, as a
                         GRPO rollout samples)
  --models-dir DIR       where the 0.5b model is cached (default .cache/bench-models, shared with bench:model)`);
  process.exit(0);
}
const int = (name: string, v: string | undefined): number => {
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`--${name} must be a positive integer, got ${String(v)}`);
  return n;
};
const list = (name: string, v: string | undefined): number[] => (v ?? '').split(',').map((x) => int(name, x));
const threads = flags.threads === undefined ? torch.getNumThreads() : int('threads', flags.threads);
torch.setNumThreads(threads);
const prompt = int('prompt', flags.prompt);
const short = int('short', flags.short);
const long = int('long', flags.long);
if (long <= short) throw new Error('--long must be larger than --short');
const rounds = int('rounds', flags.rounds);
const device = flags.device as string;
if (device !== 'cpu' && device !== 'cuda') throw new Error(`--device must be cpu or cuda, got ${device}`);
const dtype = (flags.dtype ?? 'float32') as 'float32' | 'bfloat16';
if (dtype !== 'float32' && dtype !== 'bfloat16') throw new Error(`--dtype must be float32 or bfloat16, got ${dtype}`);
const temperature = Number(flags.temperature);
if (!Number.isFinite(temperature) || temperature < 0)
  throw new Error(`--temperature must be a number >= 0, got ${String(flags.temperature)}`);
if (device === 'cuda' && torch.cuda.deviceCount() === 0) throw new Error('--device cuda: no CUDA device is visible');

/** The quickstart's model shape (QUICKSTART_MODEL) with a character vocabulary; created in a temporary folder. */
function quickstartModel(): string {
  const dir = mkdtempSync(join(tmpdir(), 'decode-bench-'));
  initModel(dir, { ...QUICKSTART_MODEL, architecture: 'qwen2', maxPositionEmbeddings: 512, seed: 0 });
  return dir;
}

/** Qwen2.5-0.5B's shape with the Qwen tokenizer: the folder bench:model creates (made by it on first use). */
const halfBillionModel = (): string => ensureBenchModel(HALF_BILLION_SPEC, flags['models-dir'] as string);

interface Sample {
  calls: number;
  seconds: number;
}

/** One generation of `batch` rows x `tokens` new tokens: native calls made and seconds taken. */
async function generate(engine: RolloutEngine, batch: number, tokens: number): Promise<Sample & { steps: number }> {
  const vocab = Math.min(engine.vocabSize, 100);
  const prompts = Array.from({ length: batch }, (_, b) =>
    Array.from({ length: prompt }, (_, t) => 4 + ((b * 31 + t * 7) % (vocab - 4))),
  );
  const steps0 = engine.stats.steps;
  const c0 = torch.nativeCallCount();
  const t0 = now();
  await Promise.all(
    prompts.map((promptIds, b) =>
      engine.generate({ promptIds, maxTokens: tokens, temperature, ignoreEos: true, ...(temperature > 0 ? { seed: b } : {}) }),
    ),
  );
  return { seconds: secondsSince(t0), calls: torch.nativeCallCount() - c0, steps: engine.stats.steps - steps0 };
}

/** Per decode step: (long - short) / (decode steps between them). */
async function perStep(engine: RolloutEngine, batch: number): Promise<Sample> {
  const a = await generate(engine, batch, short);
  const b = await generate(engine, batch, long);
  const steps = b.steps - a.steps;
  return { calls: (b.calls - a.calls) / steps, seconds: (b.seconds - a.seconds) / steps };
}

const cpu = cpuFeatures();
console.log(
  `decode-step bench: ${cpu.model} (${cpu.features.join(', ') || 'no avx2'}), ${threads} intra-op thread(s), ${device}, ${dtype}, prompt ${prompt}, ${short} vs ${long} new tokens, temperature ${temperature}`,
);
/** The engines compared: eager steps, captured steps replayed op by op, and (on CUDA) replayed as CUDA graphs. */
type Side = 'eager' | 'captured' | 'graphs';
const sides: readonly Side[] = device === 'cuda' ? ['eager', 'captured', 'graphs'] : ['eager', 'captured'];
const results: Record<string, unknown>[] = [];
const rows: string[][] = [];
for (const name of (flags.models as string).split(',')) {
  if (name !== 'quickstart' && name !== '0.5b') throw new Error(`--models: unknown model '${name}' (quickstart, 0.5b)`);
  const dir = name === 'quickstart' ? quickstartModel() : halfBillionModel();
  const batches = name === 'quickstart' ? list('batches', flags.batches) : list('large-batches', flags['large-batches']);
  for (const batch of batches) {
    const options = { slots: batch, maxLength: prompt + long + 1, device, dtype };
    const engines = new Map<Side, RolloutEngine>();
    try {
      for (const side of sides)
        engines.set(
          side,
          RolloutEngine.load(dir, {
            ...options,
            captureDecode: side !== 'eager',
            ...(device === 'cuda' && side !== 'eager' ? { cudaGraphs: side === 'graphs' } : {}),
          }),
        );
      const engine = (side: Side) => engines.get(side) as RolloutEngine;
      // the same warm-up for every side; it captures (and records as graphs) every shape the measured runs use
      for (const side of sides) await perStep(engine(side), batch);
      const samples = new Map<Side, Sample[]>(sides.map((side) => [side, []]));
      for (let r = 0; r < rounds; r++) {
        const order = r % 2 === 0 ? [...sides] : [...sides].reverse();
        for (const side of order) samples.get(side)?.push(await perStep(engine(side), batch));
      }
      const m = (side: Side, key: keyof Sample) => median((samples.get(side) ?? []).map((s) => s[key]));
      const stats = engine('captured').decodeStepStats;
      const graphStats = sides.includes('graphs') ? engine('graphs').decodeStepStats : null;
      const figure = {
        model: name,
        batch,
        callsPerStepEager: r2(m('eager', 'calls')),
        callsPerStepCaptured: r2(m('captured', 'calls')),
        msPerStepEager: r3(m('eager', 'seconds') * 1000),
        msPerStepCaptured: r3(m('captured', 'seconds') * 1000),
        speedup: r2(m('eager', 'seconds') / m('captured', 'seconds')),
        eagerStepsOfCapturedSide: stats?.eager ?? null,
        ...(graphStats === null
          ? {}
          : {
              msPerStepGraphs: r3(m('graphs', 'seconds') * 1000),
              graphsSpeedup: r2(m('eager', 'seconds') / m('graphs', 'seconds')),
              graphsHeld: graphStats.graphs,
              graphFailures: graphStats.graphFailures,
              lastGraphReason: graphStats.lastGraphReason,
            }),
      };
      results.push(figure);
      rows.push([
        name,
        String(batch),
        fmt(figure.callsPerStepEager, 1),
        fmt(figure.callsPerStepCaptured, 1),
        fmt(figure.msPerStepEager, 3),
        fmt(figure.msPerStepCaptured, 3),
        `${fmt(figure.speedup)}x`,
        ...(graphStats === null
          ? []
          : [fmt(figure.msPerStepGraphs ?? Number.NaN, 3), `${fmt(figure.graphsSpeedup ?? Number.NaN)}x`]),
      ]);
    } finally {
      for (const e of engines.values()) await e.close();
    }
  }
}
table(
  'per decode step (forward + sampling), medians',
  [
    'model',
    'batch',
    'calls eager',
    'calls captured',
    'ms eager',
    'ms captured',
    'speedup',
    ...(device === 'cuda' ? ['ms graphs', 'graphs speedup'] : []),
  ],
  rows,
);
console.log(
  JSON.stringify({
    bench: 'decode-step',
    cpu: cpu.model,
    features: cpu.features,
    threads,
    device,
    gpu: device === 'cuda' ? gpuName() : null,
    dtype,
    temperature,
    results,
  }),
);
