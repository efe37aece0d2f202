// A training micro-step with its forward captured: `npm run bench:train-capture` (node --import tsx
// bench/train-capture.bench.ts [--help]).
//
// Does capturing the training forward pay (issue: "a training micro-step's forward/backward if it pays")? The step
// here is the trainer's: per-token log-probs of a batch (tokenLogProbs: the trunk, the LM head, log-softmax and the
// gather), their mean as the loss, and its backward into the parameters. Two sides over the same model and ids:
//   eager     the forward runs from JavaScript, one native call per op, then the backward (one native call)
//   captured  the forward was captured once with gradients on (torch.capture) and each step replays it from C++ in
//             one native call, building the same autograd graph; then the same backward
// The backward is libtorch's autograd engine either way (C++ already), so what capture can save is the forward's cost
// per op in JavaScript and N-API; the figure says how much of the micro-step that is. Models: the quickstart's (4
// layers, hidden 128) and "deep": Qwen2.5-0.5B's depth (24 layers) with hidden 64, little arithmetic per op, so its
// step is bound by per-op cost as a GPU step waiting on the host is; and (--models 0.5b, the default on cuda)
// Qwen2.5-0.5B's shape, bench:model's model. Sides alternate (ABBA), medians; gradients are cleared before each
// step. Ends with one JSON line of every figure.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { CausalLM, initModel, type ModelDType, tokenLogProbs } from '../src/model/index.js';
import * as torch from '../src/torch/index.js';
import {
  cpuFeatures,
  ensureBenchModel,
  fmt,
  gpuName,
  HALF_BILLION_SPEC,
  median,
  positiveFlag,
  now,
  r2,
  r3,
  repoRoot,
  secondsSince,
  table,
} from './harness.js';

const HELP = `Training micro-step, eager forward vs captured forward (replayed with gradients), then the same backward.
  node --import tsx bench/train-capture.bench.ts [options]

  --models LIST     quickstart,deep,0.5b (default: quickstart,deep on cpu, deep,0.5b on cuda)
  --shapes LIST     rows x tokens per micro-batch, per model (default quickstart=64x38+16x38,deep=4x64,0.5b=4x64)
  --threads LIST    intra-op thread counts, one run each (default 1,2 on cpu, 2 on cuda)
  --steps N         timed steps per side per round (default 5)
  --rounds N        ABBA rounds (default 4)
  --device cpu|cuda where the model runs (default cpu)
  --dtype float32|bfloat16  (default float32 on cpu, bfloat16 on cuda)
  --models-dir DIR  where the 0.5b model is cached (default .cache/bench-models, shared with bench:model)`;

const { values: flags } = parseArgs({
  options: {
    help: { type: 'boolean' },
    models: { type: 'string' },
    shapes: { type: 'string', default: 'quickstart=64x38+16x38,deep=4x64,0.5b=4x64' },
    threads: { type: 'string' },
    steps: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '4' },
    device: { type: 'string', default: 'cpu' },
    dtype: { type: 'string' },
    'models-dir': { type: 'string', default: join(repoRoot, '.cache', 'bench-models') },
  },
});
if (flags.help) {
  console.log(HELP);
  process.exit(0);
}

const steps = positiveFlag('steps', flags.steps as string);
const rounds = positiveFlag('rounds', flags.rounds as string);
const device = flags.device as string;
if (device !== 'cpu' && device !== 'cuda') throw new Error(`--device must be cpu or cuda, got '${device}'`);
const threadCounts = (flags.threads ?? (device === 'cuda' ? '2' : '1,2')).split(',').map((t) => positiveFlag('threads', t));
const modelNames = (flags.models ?? (device === 'cuda' ? 'deep,0.5b' : 'quickstart,deep')).split(',');
if (device === 'cuda' && torch.cuda.deviceCount() === 0) throw new Error('--device cuda: no CUDA device is visible');
const dtype = (flags.dtype ?? (device === 'cuda' ? 'bfloat16' : 'float32')) as ModelDType;
if (dtype !== 'float32' && dtype !== 'bfloat16') throw new Error(`--dtype must be float32 or bfloat16, got '${dtype}'`);

/** initModel's shapes (a character tokenizer), or '0.5b': bench:model's Qwen2.5-0.5B-shaped folder. */
const MODELS = {
  quickstart: { hiddenSize: 128, numLayers: 4, numHeads: 4, numKeyValueHeads: 2 },
  deep: { hiddenSize: 64, numLayers: 24, numHeads: 2, numKeyValueHeads: 1, intermediateSize: 128 },
  '0.5b': 'bench-model',
} as const;
type ModelName = keyof typeof MODELS;

/** --shapes: model=RxT+RxT,... → rows × tokens per model. */
function parseShapes(text: string): Map<string, [number, number][]> {
  const out = new Map<string, [number, number][]>();
  for (const entry of text.split(',')) {
    const [model, list] = entry.split('=');
    if (model === undefined || list === undefined || !(model in MODELS))
      throw new Error(`--shapes: '${entry}' is not model=RxT+RxT (models: ${Object.keys(MODELS).join(', ')})`);
    out.set(
      model,
      list.split('+').map((s) => {
        const m = /^(\d+)x(\d+)$/.exec(s);
        if (m === null) throw new Error(`--shapes: '${s}' is not rows x tokens (e.g. 64x38)`);
        return [positiveFlag('shapes', m[1] as string), positiveFlag('shapes', m[2] as string)];
      }),
    );
  }
  return out;
}
const shapes = parseShapes(flags.shapes as string);

interface Figure {
  model: ModelName;
  rows: number;
  tokens: number;
  threads: number;
  capturedOps: number;
  callsEager: number;
  callsCaptured: number;
  msEager: number;
  msCaptured: number;
  speedup: number;
}

function measure(model: CausalLM, name: ModelName, rows: number, tokens: number, threads: number): Figure {
  torch.setNumThreads(threads);
  const params = [...model.parameters().values()];
  const ids = torch.keep(torch.randint(3, model.config.vocabSize, [rows, tokens], device === 'cpu' ? {} : { device }));
  const loss = (x: torch.Tensor): torch.Tensor[] => [tokenLogProbs(model, x).logProbs.mean().neg()];
  const captured = torch.scope(() => torch.capture([ids], () => loss(ids)));
  if (captured.step === null) throw new Error(`${name}: the training forward could not be captured: ${captured.reason}`);
  const step = captured.step;
  for (const t of captured.outputs) t.dispose(); // the capture's own forward and its graph
  const sides = {
    eager: () => loss(ids),
    captured: () => step.replay([ids]),
  };
  type Side = keyof typeof sides;
  const once = (side: Side): { seconds: number; calls: number } => {
    for (const p of params) p.grad = null;
    const c0 = torch.nativeCallCount();
    const t0 = now();
    torch.scope(() => {
      const [l] = sides[side]() as [torch.Tensor];
      l.backward();
      // the step ends when its work has: on a GPU, wait for the queue (one read of the loss, both sides alike)
      l.item();
    });
    return { seconds: secondsSince(t0), calls: torch.nativeCallCount() - c0 };
  };
  for (const side of ['eager', 'captured'] as const) for (let i = 0; i < 2; i++) once(side); // warm-up
  const samples: Record<Side, { seconds: number; calls: number }[]> = { eager: [], captured: [] };
  for (let r = 0; r < rounds; r++) {
    const order: Side[] = r % 2 === 0 ? ['eager', 'captured'] : ['captured', 'eager'];
    for (const side of order) for (let i = 0; i < steps; i++) samples[side].push(once(side));
  }
  step.dispose();
  ids.dispose();
  const ms = (side: Side) => median(samples[side].map((s) => s.seconds)) * 1000;
  const calls = (side: Side) => median(samples[side].map((s) => s.calls));
  return {
    model: name,
    rows,
    tokens,
    threads,
    capturedOps: captured.ops,
    callsEager: calls('eager'),
    callsCaptured: calls('captured'),
    msEager: r3(ms('eager')),
    msCaptured: r3(ms('captured')),
    speedup: r2(ms('eager') / ms('captured')),
  };
}

const cpu = cpuFeatures();
const gpu = device === 'cuda' ? gpuName() : null;
console.log(
  `train-capture bench: ${cpu.model} (${cpu.features.join(', ') || 'no avx2'})${gpu === null ? '' : `, ${gpu}`}; ${device}, ${dtype}; libtorch ${torch.buildInfo().torchVersion}`,
);
const figures: Figure[] = [];
const work = mkdtempSync(join(tmpdir(), 'train-capture-'));
try {
  for (const name of modelNames) {
    if (!(name in MODELS)) throw new Error(`--models: unknown model '${name}' (${Object.keys(MODELS).join(', ')})`);
    const shape = MODELS[name as ModelName];
    let dir: string;
    if (shape === 'bench-model') dir = ensureBenchModel(HALF_BILLION_SPEC, flags['models-dir'] as string);
    else {
      dir = join(work, name);
      initModel(dir, { architecture: 'qwen2', maxPositionEmbeddings: 512, seed: 0, ...shape });
    }
    const model = CausalLM.load(dir, { dtype, ...(device === 'cpu' ? {} : { device }) });
    let parameters = 0;
    for (const p of model.parameters().values()) {
      p.requiresGrad_();
      parameters += p.numel;
    }
    console.log(`${name}: ${(parameters / 1e6).toFixed(2)}M parameters, ${model.config.numHiddenLayers} layers`);
    for (const [rows, tokens] of shapes.get(name) ?? []) {
      for (const threads of threadCounts) {
        const f = measure(model, name as ModelName, rows, tokens, threads);
        figures.push(f);
        console.log(
          `  ${rows}x${tokens}, ${threads} thread(s): eager ${fmt(f.msEager, 2)} ms (${f.callsEager} calls), captured ${fmt(f.msCaptured, 2)} ms (${f.callsCaptured} calls): ${fmt(f.speedup)}x`,
        );
      }
    }
    model.dispose();
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
table(
  `training micro-step (forward, loss, backward; median ms; ${rounds} ABBA rounds x ${steps} steps)`,
  ['model', 'rows x tokens', 'threads', 'ops captured', 'calls eager -> captured', 'eager ms', 'captured ms', 'speedup'],
  figures.map((f) => [
    f.model,
    `${f.rows}x${f.tokens}`,
    String(f.threads),
    String(f.capturedOps),
    `${f.callsEager} -> ${f.callsCaptured}`,
    fmt(f.msEager, 2),
    fmt(f.msCaptured, 2),
    `${fmt(f.speedup)}x`,
  ]),
);
console.log(
  JSON.stringify({
    bench: 'train-capture',
    cpu: cpu.model,
    cpuFeatures: cpu.features,
    gpu,
    device,
    dtype,
    libtorch: torch.buildInfo().torchVersion,
    figures,
  }),
);
