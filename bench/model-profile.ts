// Where a decode step of ours goes: `node --import tsx bench/model-profile.ts [--batch N] [--training] [--model DIR]`.
// Loads a bench model (default: the small one of bench/model.bench.ts) in the inference layout (--training: the
// training layout), prefills a KV cache, then times greedy decode steps: forward vs sampling vs read-back, the
// native calls per step and the time per native function, and the model's matmuls alone. Times are CPU time of
// this process (robust to other processes' load, unlike wall time; CLOCK=wall for wall time) with THREADS intra-op
// threads (default 1).
import { parseArgs } from 'node:util';
import { sampleTokens } from '../src/engine/sampling.js';
import { CausalLM, type ModelDType } from '../src/model/index.js';
import * as torch from '../src/torch/index.js';
import { native } from '../src/torch/native.js';
import { median, repoRoot } from './harness.js';

const { values: flags } = parseArgs({
  options: {
    model: { type: 'string', default: `${repoRoot}/.cache/bench-models/qwen2-h512-l8-a8-kv4-i1408-v49152` },
    batch: { type: 'string', default: '1' },
    dtype: { type: 'string', default: 'float32' },
    prompt: { type: 'string', default: '32' },
    steps: { type: 'string', default: '32' },
    training: { type: 'boolean', default: false },
  },
});
torch.setNumThreads(Number(process.env.THREADS ?? 1));
// CPU time of this process (all threads): robust to other processes' load, unlike wall time. With THREADS > 1 it
// also counts OpenMP threads spinning between parallel regions; CLOCK=wall times wall-clock instead.
const cpuMs = (): number => {
  if (process.env.CLOCK === 'wall') return performance.now();
  const c = process.cpuUsage();
  return (c.user + c.system) / 1e3;
};
const batch = Number(flags.batch);
const model = CausalLM.load(flags.model, { dtype: flags.dtype as ModelDType, layout: flags.training ? 'training' : 'inference' });
const cache = model.createKVCache({ slots: batch, maxLength: 512 });
const slots = Array.from({ length: batch }, (_, b) => b);
const V = model.config.vocabSize;

// count native calls by name
const counts = new Map<string, number>();
const opTime = new Map<string, number>();
const n = native as unknown as Record<string, (...a: unknown[]) => unknown>;
for (const name of Object.keys(n)) {
  const f = n[name];
  if (typeof f !== 'function') continue;
  n[name] = (...a: unknown[]) => {
    counts.set(name, (counts.get(name) ?? 0) + 1);
    const t0 = cpuMs();
    const r = f(...a);
    opTime.set(name, (opTime.get(name) ?? 0) + cpuMs() - t0);
    return r;
  };
}

const prompt = torch.keep(torch.randint(4, V, [batch, Number(flags.prompt)]));
torch.noGrad(() => torch.scope(() => model.forward(prompt, { cache, slots })));
const times = { forward: [] as number[], sample: [] as number[], read: [] as number[], step: [] as number[] };
let last = torch.keep(torch.randint(4, V, [batch, 1]));
for (let s = 0; s < Number(flags.steps); s++) {
  counts.clear();
  if (s === 4) opTime.clear();
  torch.noGrad(() =>
    torch.scope(() => {
      const t0 = cpuMs();
      const logits = model.forward(last, { cache, slots }).select(1, 0);
      const t1 = cpuMs();
      const { tokens, logprobs } = sampleTokens(
        logits,
        slots.map(() => ({ params: { temperature: 0, topK: 0, topP: 1, minP: 0 }, generator: null })),
      );
      const t2 = cpuMs();
      const values = torch.stack([tokens.double(), logprobs.double()]).toTypedArray();
      const t3 = cpuMs();
      times.forward.push(t1 - t0);
      times.sample.push(t2 - t1);
      times.read.push(t3 - t2);
      times.step.push(t3 - t0);
      last.dispose();
      last = torch.keep(
        torch.tensor(
          BigInt64Array.from(values.slice(0, batch) as Float64Array, (v) => BigInt(v)),
          { shape: [batch, 1] },
        ),
      );
    }),
  );
}
const total = [...counts.values()].reduce((a, b) => a + b, 0);
console.log(`batch ${batch}: native calls per decode step ${total}`);
console.log(
  [...counts.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${v}`)
    .join(', '),
);
const timed = Number(flags.steps) - 4;
console.log(
  'ms per step by op: ' +
    [...opTime.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 14)
      .map(([k, v]) => `${k} ${(v / timed).toFixed(2)}`)
      .join(', '),
);
for (const [k, v] of Object.entries(times)) console.log(`${k}: median ${median(v).toFixed(2)} ms`);

// matmuls alone: the same linears on a [batch, 1, hidden] input
const c = model.config;
const params = model.parameters();
const linears = [...params.entries()].filter(([k, t]) => k.endsWith('proj.weight') && t.ndim === 2).map(([, t]) => t);
const x = torch.keep(torch.randn([batch, 1, c.hiddenSize]).to({ dtype: flags.dtype as ModelDType }));
const xm = torch.keep(torch.randn([batch, 1, c.intermediateSize]).to({ dtype: flags.dtype as ModelDType }));
const xa = torch.keep(torch.randn([batch, 1, c.numAttentionHeads * c.headDim]).to({ dtype: flags.dtype as ModelDType }));
// BLAS (torch.linear on the parameters, as the training layout runs them) and, where this CPU runs it, the packed
// kernel the inference layout uses for 1 to 64 rows (torch.packedLinear on packed copies)
const packable = torch.packedLinearSupported();
const packed = packable ? linears.map((w) => torch.keep(torch.packLinear(w))) : [];
const embed = params.get('model.embed_tokens.weight') as torch.Tensor;
const packedHead = packable ? torch.keep(torch.packLinear(embed)) : null;
const inputOf = (w: torch.Tensor) => {
  const inF = w.size(1);
  return inF === c.hiddenSize ? x : inF === c.intermediateSize ? xm : xa;
};
const timesOf = { blas: [] as number[], blasHead: [] as number[], packed: [] as number[], packedHead: [] as number[] };
for (let r = 0; r < 10; r++) {
  torch.noGrad(() =>
    torch.scope(() => {
      let t = cpuMs();
      const lap = (into: number[]) => {
        const now = cpuMs();
        into.push(now - t);
        t = now;
      };
      for (const w of linears) torch.linear(inputOf(w), w);
      lap(timesOf.blas);
      torch.linear(x, embed);
      lap(timesOf.blasHead);
      if (packedHead === null) return;
      linears.forEach((w, i) => {
        torch.packedLinear(inputOf(w), packed[i] as torch.Tensor, null, w.size(0));
      });
      lap(timesOf.packed);
      torch.packedLinear(x, packedHead, null, embed.size(0));
      lap(timesOf.packedHead);
    }),
  );
}
console.log(
  `decoder matmuls alone (BLAS): ${median(timesOf.blas).toFixed(2)} ms; lm head: ${median(timesOf.blasHead).toFixed(2)} ms`,
);
if (packedHead !== null)
  console.log(
    `decoder matmuls alone (packedLinear): ${median(timesOf.packed).toFixed(2)} ms; lm head: ${median(timesOf.packedHead).toFixed(2)} ms`,
  );
