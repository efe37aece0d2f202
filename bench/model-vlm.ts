// The vision-language row of bench/model.bench.ts (`--models vlm`): image prompts, ours next to Hugging Face
// transformers on the same random Qwen2.5-VL folder (initVisionLanguageModel, cached under .cache/bench-models).
//
//   prompts   one chat prompt per row: a user message [an image, a question] through the model's chat template with
//             the generation prompt; every row its own generated image (squares on a background, PNG, side x side
//             pixels), so no two rows share a prefix past the image's first token
//   ours      RolloutEngine.load on the folder (one KV-cache slot per row, no prefix cache) and engine.chat with the
//             image as a PNG data URL: the call decodes the PNG, runs the image processor, expands the placeholder,
//             runs the vision tower at prefill and generates
//   theirs    bench/model_bench.py's generate_vlm: the PNGs decoded with PIL, Qwen2VLImageProcessorPil, the chat
//             template, the placeholder expanded as Qwen2_5_VLProcessor does, Qwen2_5_VLForConditionalGeneration
//             .generate (greedy, min_new_tokens = max_new_tokens)
//   measured  per batch size, sides alternating (ABBA), medians: image prompts/s = batch / a call that generates one
//             token (decode + image processor + vision tower + prefill + one sample), and generation tokens/s =
//             batch x new / a call that generates `new` tokens (ignoreEos; the whole call, prefill included); each
//             side's CPU seconds per call beside the wall time (ours: process.cpuUsage, theirs: time.process_time),
//             since wall time on a loaded machine counts other processes' turns too
//   checked   both sides' prompt ids are equal (the same template, placeholder count and tokenizer), and the greedy
//             tokens are compared (share of each row's tokens before the first disagreement)
import { existsSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { RolloutEngine } from '../src/engine/index.js';
import {
  encodePng,
  type ImageBytes,
  initVisionLanguageModel,
  loadImageProcessorConfig,
  type ModelDType,
  smartResize,
} from '../src/model/index.js';
import { agreement, fmt, type Json, median, now, type PythonHalf, type Reply, r2, r3, secondsSince, table } from './harness.js';

/** The random Qwen2.5-VL's shape (`--vlm`) and its images' side (`--vlm-image`). */
export interface VisionLanguageSpec {
  hidden: number;
  layers: number;
  heads: number;
  visionHidden: number;
  visionDepth: number;
  visionHeads: number;
}

export interface VisionLanguageOptions {
  spec: VisionLanguageSpec;
  modelsDir: string;
  dtype: ModelDType;
  /** Our device ('cpu', 'cuda:0'); the Python side got its own in hello. */
  device: string;
  batches: readonly number[];
  imageSide: number;
  newTokens: number;
  rounds: number;
}

/** One side's medians for one kind of call. */
interface SideTimes {
  wallS: number;
  cpuS: number;
}

interface CallResult {
  ours: SideTimes;
  transformers: SideTimes;
  samples: number;
}

interface BatchResult {
  batch: number;
  prefill: CallResult;
  generation: CallResult;
  /** Share of generated tokens before each row's first disagreement, ours vs transformers. */
  agreement: number;
}

export interface VisionLanguageReport {
  spec: VisionLanguageSpec;
  dir: string;
  parameters: number;
  imageSide: number;
  promptTokens: number;
  newTokens: number;
  batches: BatchResult[];
}

const QUESTION = 'How many squares are in the picture? Answer with a number.';

/** The folder of a spec, created (float32, seed 0) on first use. */
function ensureModel(spec: VisionLanguageSpec, modelsDir: string): string {
  const s = spec;
  const dir = join(
    modelsDir,
    `qwen2_5_vl-h${s.hidden}-l${s.layers}-a${s.heads}-v${s.visionHidden}x${s.visionDepth}x${s.visionHeads}`,
  );
  if (existsSync(join(dir, 'model.safetensors'))) return dir;
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  initVisionLanguageModel(tmp, {
    hiddenSize: s.hidden,
    numLayers: s.layers,
    numHeads: s.heads,
    visionHiddenSize: s.visionHidden,
    visionDepth: s.visionDepth,
    visionHeads: s.visionHeads,
    seed: 0,
  });
  renameSync(tmp, dir);
  console.log(`created ${dir}`);
  return dir;
}

/** Row `seed`'s image: 1-9 squares of random colours on a random background, side x side RGB (deterministic). */
function squaresImage(side: number, seed: number): ImageBytes {
  let state = (seed * 2654435761 + 7) >>> 0;
  const next = (n: number): number => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return (state >>> 8) % n;
  };
  const data = new Uint8Array(side * side * 3);
  const background = [next(256), next(256), next(256)];
  for (let i = 0; i < side * side; i++) data.set(background, i * 3);
  const squares = 1 + next(9);
  const size = Math.max(2, Math.floor(side / 8));
  for (let k = 0; k < squares; k++) {
    const colour = [next(256), next(256), next(256)];
    const top = next(side - size);
    const left = next(side - size);
    for (let y = top; y < top + size; y++) for (let x = left; x < left + size; x++) data.set(colour, (y * side + x) * 3);
  }
  return { data, height: side, width: side, channels: 3 };
}

interface VlmReply extends Reply {
  cpu: number[];
  tokens: number[][];
  promptIds: number[][];
}

interface OursCall {
  wallS: number;
  cpuS: number;
  tokens: number[][];
  promptIds: number[][];
}

async function oursChat(engine: RolloutEngine, dataUrls: readonly string[], newTokens: number): Promise<OursCall> {
  const cpu0 = process.cpuUsage();
  const t0 = now();
  const results = await Promise.all(
    dataUrls.map((url) =>
      engine.chat(
        [
          {
            role: 'user',
            content: [
              { type: 'image_url', image_url: { url } },
              { type: 'text', text: QUESTION },
            ],
          },
        ],
        { maxTokens: newTokens, ignoreEos: true, temperature: 0 },
      ),
    ),
  );
  const wallS = secondsSince(t0);
  const cpu = process.cpuUsage(cpu0);
  const tokens = results.map((r) => r.completionIds);
  if (tokens.some((t) => t.length !== newTokens))
    throw new Error(`ours generated ${tokens.map((t) => t.length).join(',')} tokens per row, expected ${newTokens}`);
  return { wallS, cpuS: (cpu.user + cpu.system) / 1e6, tokens, promptIds: results.map((r) => r.promptIds) };
}

/** Each side warmed up (two calls: a decode shape is captured the second time it runs), then `rounds` ABBA pairs. */
async function measure(
  py: PythonHalf,
  engine: RolloutEngine,
  dataUrls: readonly string[],
  pngs: readonly string[],
  newTokens: number,
  rounds: number,
): Promise<{ result: CallResult; ours: OursCall; theirs: VlmReply }> {
  const request = { kind: 'generate_vlm', images: [...pngs], question: QUESTION, maxNewTokens: newTokens };
  const ours = await oursChat(engine, dataUrls, newTokens);
  await oursChat(engine, dataUrls, newTokens);
  const theirs = await py.request<VlmReply>({ ...request, samples: 0, warmup: 2 });
  const o: OursCall[] = [];
  const t: { s: number; cpu: number }[] = [];
  const theirsOnce = async () => {
    const reply = await py.request<VlmReply>({ ...request, samples: 1 });
    t.push({ s: reply.s?.[0] ?? Number.NaN, cpu: reply.cpu[0] ?? Number.NaN });
    return reply;
  };
  let last = theirs;
  for (let r = 0; r < rounds; r++) {
    if (r % 2 === 1) last = await theirsOnce();
    o.push(await oursChat(engine, dataUrls, newTokens));
    if (r % 2 === 0) last = await theirsOnce();
  }
  const result: CallResult = {
    ours: { wallS: median(o.map((c) => c.wallS)), cpuS: median(o.map((c) => c.cpuS)) },
    transformers: { wallS: median(t.map((c) => c.s)), cpuS: median(t.map((c) => c.cpu)) },
    samples: rounds,
  };
  return { result, ours, theirs: last };
}

/** The vlm row: every batch size's prefill and generation calls on both sides (see the header). */
export async function benchVisionLanguage(py: PythonHalf, options: VisionLanguageOptions): Promise<VisionLanguageReport> {
  const { spec, dtype, device, imageSide, newTokens, rounds } = options;
  const dir = ensureModel(spec, options.modelsDir);
  const loaded = await py.request<Reply & { parameters: number }>({ kind: 'load_vlm', dir, dtype });
  const largest = Math.max(...options.batches);
  const processor = loadImageProcessorConfig(dir);
  const { patchSize, mergeSize } = processor;
  const [height, width] = smartResize(imageSide, imageSide, patchSize * mergeSize, processor.minPixels, processor.maxPixels);
  const imageTokens = (height * width) / (patchSize * mergeSize) ** 2;
  const pngs: string[] = [];
  for (let row = 0; row < largest; row++)
    pngs.push(Buffer.from(await encodePng(squaresImage(imageSide, row))).toString('base64'));
  const batches: BatchResult[] = [];
  let promptTokens = 0;
  let parameters = 0;
  try {
    for (const batch of options.batches) {
      const rows = pngs.slice(0, batch);
      const dataUrls = rows.map((png) => `data:image/png;base64,${png}`);
      const engine = RolloutEngine.load(dir, {
        dtype,
        device,
        slots: batch,
        maxLength: imageTokens + newTokens + 128, // 128: the template's and the question's tokens, with room
        enablePrefixCaching: false,
      });
      try {
        parameters = 0;
        for (const t of (engine.vision?.model.parameters() ?? new Map()).values()) parameters += t.numel;
        if (parameters !== loaded.parameters)
          throw new Error(`transformers counts ${loaded.parameters} parameters, ours ${parameters}`);
        const prefill = await measure(py, engine, dataUrls, rows, 1, rounds);
        const generation = await measure(py, engine, dataUrls, rows, newTokens, rounds);
        if (JSON.stringify(generation.ours.promptIds) !== JSON.stringify(generation.theirs.promptIds))
          throw new Error(
            `vlm batch ${batch}: the prompt ids differ: ours ${JSON.stringify(generation.ours.promptIds[0]).slice(0, 200)}..., ` +
              `transformers ${JSON.stringify(generation.theirs.promptIds[0]).slice(0, 200)}...`,
          );
        promptTokens = generation.ours.promptIds[0]?.length ?? 0;
        const agree = agreement(generation.ours.tokens, generation.theirs.tokens, newTokens);
        batches.push({ batch, prefill: prefill.result, generation: generation.result, agreement: agree });
        const g = generation.result;
        console.log(
          `  vlm batch ${batch}: image prompts/s ours ${fmt(batch / prefill.result.ours.wallS, 1)}, transformers ${fmt(batch / prefill.result.transformers.wallS, 1)}; ` +
            `generation tok/s ours ${fmt((batch * newTokens) / g.ours.wallS, 1)}, transformers ${fmt((batch * newTokens) / g.transformers.wallS, 1)}`,
        );
      } finally {
        await engine.close();
      }
    }
  } finally {
    await py.request({ kind: 'unload' });
  }
  return { spec, dir, parameters, imageSide, promptTokens, newTokens, batches };
}

const perSecond = (count: number, s: number): string => fmt(count / s, 1);

/** The vlm tables: image prompts/s and generation tokens/s, each side's wall and CPU seconds per call. */
export function printVisionLanguage(report: VisionLanguageReport): void {
  const label = `vlm (${fmt(report.parameters / 1e6, 1)}M)`;
  const rows: string[][] = [];
  for (const b of report.batches) {
    for (const [what, call, count] of [
      ['image prompts/s', b.prefill, b.batch],
      ['generation tok/s', b.generation, b.batch * report.newTokens],
    ] as const) {
      rows.push([
        `${label} batch ${b.batch} ${what}`,
        perSecond(count, call.ours.wallS),
        perSecond(count, call.transformers.wallS),
        fmt(call.transformers.wallS / call.ours.wallS),
        `${fmt(call.ours.cpuS, 3)} / ${fmt(call.transformers.cpuS, 3)}`,
        fmt(call.transformers.cpuS / call.ours.cpuS),
        call === b.generation ? `${fmt(b.agreement * 100, 1)}%` : '-',
        String(call.samples),
      ]);
    }
  }
  table(
    `vision-language (greedy; a ${report.imageSide}x${report.imageSide} PNG + a question per row, ${report.promptTokens} prompt tokens, ` +
      `${report.newTokens} new tokens; image prompts/s = batch / a one-token call; median)`,
    ['model  batch  figure', 'ours', 'HF', 'ratio', 'CPU s/call ours / HF', 'CPU ratio', 'greedy agree', 'samples'],
    rows,
  );
}

const sideJson = (t: SideTimes): Json => ({ wall_s: r3(t.wallS), cpu_s: r3(t.cpuS) });

/** The vlm row of the bench's JSON line. */
export function visionLanguageJson(report: VisionLanguageReport): Json {
  const batches: Record<string, Json> = {};
  for (const b of report.batches) {
    const p = b.prefill;
    const g = b.generation;
    const tokens = b.batch * report.newTokens;
    batches[String(b.batch)] = {
      ours_image_prompts_per_s: r2(b.batch / p.ours.wallS),
      transformers_image_prompts_per_s: r2(b.batch / p.transformers.wallS),
      image_prompts_ratio: r3(p.transformers.wallS / p.ours.wallS),
      prefill: { ours: sideJson(p.ours), transformers: sideJson(p.transformers) },
      ours_tokens_per_s: r2(tokens / g.ours.wallS),
      transformers_tokens_per_s: r2(tokens / g.transformers.wallS),
      ratio: r3(g.transformers.wallS / g.ours.wallS),
      generation: { ours: sideJson(g.ours), transformers: sideJson(g.transformers) },
      greedy_agreement: r3(b.agreement),
      samples: g.samples,
    };
  }
  return {
    spec: { ...report.spec },
    parameters: report.parameters,
    image_side: report.imageSide,
    prompt_tokens: report.promptTokens,
    new_tokens: report.newTokens,
    generation: batches,
  };
}
