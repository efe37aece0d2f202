// Bitwise on-policy (trainer.bitwise_on_policy, src/model/batch-invariant.ts): what the mode costs and what it removes.
//
//   node --import tsx bench/on-policy.bench.ts [--threads N] [--rounds N] [--requests N] [--tokens N] [--hidden N]
//     [--arch qwen2|qwen3_moe]
//
// On the quickstart's model shape (qwen2, hidden 128, 4 layers; --hidden for a wider one; --arch qwen3_moe: the
// quickstart's mixture of experts, every MLP 8 experts of half the width, top 2), per dtype (float32,
// bfloat16), with the mode off and on, alternating off/on each round (medians over the rounds):
//   generation   tokens/s of the rollout engine (inference layout, 8 slots) over --requests mixed requests (prompts
//                of 4-40 tokens, --tokens new tokens each, temperatures 1 / 0.7 / 1.2): continuous batching, so every
//                request shares its steps with changing companions
//   train step   the trainer's forwards over the same sequences as one padded batch (left-padded prompts,
//                right-padded responses): old log-probs without gradient + forwardBackward of −mean log-prob + AdamW
//   gap          the sampler's log-probs against the trainer's recomputed ones (the no-gradient forward) over every
//                sampled token: max and mean |Δ|, rollout_corr/kl = mean(log π_rollout − log π_train), and the share of
//                tokens whose bits are equal
// Times are CPU seconds of this process (process.cpuUsage), not wall time: on a shared machine the wall clock measures
// the neighbours; with --threads 1 (the default) CPU time is the work done. Prints a table and one JSON line.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { RolloutEngine } from '../src/engine/index.js';
import { CausalLM, forwardBackward, initModel, type ModelDType, tokenLogProbs } from '../src/model/index.js';
import * as torch from '../src/torch/index.js';
import { median, positiveFlag } from './harness.js';

const { values: flags } = parseArgs({
  options: {
    threads: { type: 'string', default: '1' },
    rounds: { type: 'string', default: '3' },
    requests: { type: 'string', default: '16' },
    tokens: { type: 'string', default: '48' },
    hidden: { type: 'string', default: '128' },
    arch: { type: 'string', default: 'qwen2' },
  },
});
const threads = positiveFlag('threads', flags.threads as string);
const rounds = positiveFlag('rounds', flags.rounds as string);
const requestCount = positiveFlag('requests', flags.requests as string);
const newTokens = positiveFlag('tokens', flags.tokens as string);
const hidden = positiveFlag('hidden', flags.hidden as string);
const architecture = flags.arch as string;
if (architecture !== 'qwen2' && architecture !== 'qwen3_moe')
  throw new Error(`--arch must be qwen2 or qwen3_moe, got '${architecture}'`);
torch.setNumThreads(threads);
if (!torch.packedLinearSupported()) throw new Error('bench:on-policy: the batch-invariant mode needs a CPU with AVX2/FMA');

const modelDir = mkdtempSync(join(tmpdir(), 'on-policy-bench-'));
initModel(modelDir, {
  architecture,
  ...(architecture === 'qwen3_moe' ? { numExperts: 8, numExpertsPerTok: 2 } : {}), // experts of half the MLP's width
  hiddenSize: hidden,
  numLayers: 4,
  numHeads: 4,
  numKeyValueHeads: 2,
  maxPositionEmbeddings: 512,
  seed: 0,
});

interface Sequence {
  prompt: number[];
  tokens: number[];
  logprobs: number[];
  temperature: number;
}

/** CPU seconds this process has used (user + system). */
const cpuSeconds = (): number => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
};

const requests = Array.from({ length: requestCount }, (_, i) => ({
  promptIds: Array.from({ length: 4 + ((i * 13) % 37) }, (_, j) => 1 + ((i * 31 + j * 17) % 90)),
  maxTokens: newTokens,
  ignoreEos: true,
  temperature: [1, 0.7, 1.2][i % 3] as number,
  seed: i,
}));

/** Generates the requests on a fresh engine; tokens/s over the whole run. */
async function generate(dtype: ModelDType, on: boolean): Promise<{ tokensPerSecond: number; sequences: Sequence[] }> {
  const engine = RolloutEngine.load(modelDir, { dtype, slots: 8, maxLength: 128, batchInvariant: on });
  try {
    await engine.generate({ promptIds: [1, 2, 3], maxTokens: 4, ignoreEos: true }); // warm-up: packing, captures
    const t0 = cpuSeconds();
    const results = await Promise.all(requests.map((r) => engine.generate(r)));
    const seconds = cpuSeconds() - t0;
    const sequences = results.map((r, i) => {
      const c = r.completions[0];
      if (c === undefined) throw new Error('no completion');
      return {
        prompt: requests[i]?.promptIds ?? [],
        tokens: c.tokenIds,
        logprobs: c.logprobs,
        temperature: requests[i]?.temperature ?? 1,
      };
    });
    return { tokensPerSecond: sequences.reduce((n, s) => n + s.tokens.length, 0) / seconds, sequences };
  } finally {
    await engine.close();
  }
}

/** The trainer's batch layout: prompts left-padded to the longest, responses right-padded. */
function padded(sequences: readonly Sequence[]): { ids: torch.Tensor; mask: torch.Tensor; promptWidth: number } {
  const promptWidth = Math.max(...sequences.map((s) => s.prompt.length));
  const responseWidth = Math.max(...sequences.map((s) => s.tokens.length));
  const ids: bigint[][] = [];
  const mask: bigint[][] = [];
  for (const s of sequences) {
    const left = promptWidth - s.prompt.length;
    const right = responseWidth - s.tokens.length;
    ids.push([...Array(left).fill(0n), ...[...s.prompt, ...s.tokens].map(BigInt), ...Array(right).fill(0n)]);
    mask.push([...Array(left).fill(0n), ...Array(s.prompt.length + s.tokens.length).fill(1n), ...Array(right).fill(0n)]);
  }
  return { ids: torch.tensor(ids), mask: torch.tensor(mask), promptWidth };
}

interface Gap {
  max: number;
  mean: number;
  kl: number;
  equalShare: number;
}

/** One train step's forwards and update; returns its seconds and the gap of its recomputed old log-probs. */
function trainStep(model: CausalLM, optimizer: torch.AdamW, sequences: readonly Sequence[]): { seconds: number; gap: Gap } {
  return torch.scope(() => {
    const { ids, mask, promptWidth } = padded(sequences);
    const temperature = sequences.map((s) => s.temperature);
    const t0 = cpuSeconds();
    const old = torch.noGrad(() => tokenLogProbs(model, ids, { attentionMask: mask, temperature, promptWidth }).logProbs);
    const oldRows = old.toArray() as number[][];
    forwardBackward(
      model,
      ids,
      ({ logProbs }) =>
        logProbs
          .mul(mask.narrow(1, 1, ids.size(1) - 1))
          .mean()
          .neg(),
      {
        attentionMask: mask,
        temperature,
        promptWidth,
      },
    );
    optimizer.step();
    optimizer.zeroGrad();
    const seconds = cpuSeconds() - t0;
    let max = 0;
    let sum = 0;
    let signed = 0;
    let equal = 0;
    let count = 0;
    sequences.forEach((s, b) => {
      s.logprobs.forEach((rollout, j) => {
        const train = oldRows[b]?.[promptWidth - 1 + j] as number;
        const delta = train - rollout;
        max = Math.max(max, Math.abs(delta));
        sum += Math.abs(delta);
        signed -= delta;
        equal += Math.fround(train) === Math.fround(rollout) ? 1 : 0;
        count++;
      });
    });
    return { seconds, gap: { max, mean: sum / count, kl: signed / count, equalShare: equal / count } };
  });
}

interface Row {
  dtype: ModelDType;
  on: boolean;
  tokensPerSecond: number;
  stepSeconds: number;
  gap: Gap;
}

async function measure(dtype: ModelDType, on: boolean): Promise<Row> {
  const { tokensPerSecond, sequences } = await generate(dtype, on);
  const model = CausalLM.load(modelDir, { dtype, requiresGrad: true });
  model.setBatchInvariant(on);
  try {
    const optimizer = new torch.AdamW([...model.parameters().values()], { lr: 0 }); // lr 0: the gap stays the first step's
    trainStep(model, optimizer, sequences); // warm-up
    const steps = [0, 1, 2].map(() => trainStep(model, optimizer, sequences));
    return {
      dtype,
      on,
      tokensPerSecond,
      stepSeconds: median(steps.map((s) => s.seconds)),
      gap: (steps[0] as { gap: Gap }).gap,
    };
  } finally {
    model.dispose();
  }
}

const results: Row[] = [];
for (const dtype of ['float32', 'bfloat16'] as const) {
  const byMode: Record<'off' | 'on', Row[]> = { off: [], on: [] };
  for (let r = 0; r < rounds; r++) {
    for (const on of r % 2 === 0 ? [false, true] : [true, false]) byMode[on ? 'on' : 'off'].push(await measure(dtype, on));
  }
  for (const mode of ['off', 'on'] as const) {
    const rows = byMode[mode];
    results.push({
      dtype,
      on: mode === 'on',
      tokensPerSecond: median(rows.map((x) => x.tokensPerSecond)),
      stepSeconds: median(rows.map((x) => x.stepSeconds)),
      gap: (rows[0] as Row).gap,
    });
  }
}
rmSync(modelDir, { recursive: true, force: true });

const figure = (n: number) => (n === 0 ? '0' : n.toExponential(2));
console.log(
  `bitwise on-policy, ${architecture} hidden ${hidden} x 4 layers, ${requestCount} requests x ${newTokens} tokens, ${threads} threads`,
);
console.log('dtype     mode  gen tok/cpu-s  train step cpu-ms  max|Δ|     mean|Δ|    kl         equal bits');
for (const r of results)
  console.log(
    `${r.dtype.padEnd(9)} ${(r.on ? 'on' : 'off').padEnd(5)} ${r.tokensPerSecond.toFixed(0).padStart(13)}  ${(r.stepSeconds * 1000).toFixed(1).padStart(17)}  ` +
      `${figure(r.gap.max).padEnd(10)} ${figure(r.gap.mean).padEnd(10)} ${figure(r.gap.kl).padEnd(10)} ${(r.gap.equalShare * 100).toFixed(1)}%`,
  );
const cost = (dtype: ModelDType) => {
  const off = results.find((r) => r.dtype === dtype && !r.on) as Row;
  const on = results.find((r) => r.dtype === dtype && r.on) as Row;
  return {
    generationSlowdown: off.tokensPerSecond / on.tokensPerSecond - 1,
    trainStepSlowdown: on.stepSeconds / off.stepSeconds - 1,
  };
};
console.log(
  JSON.stringify({
    bench: 'on-policy',
    architecture,
    hidden,
    threads,
    requests: requestCount,
    tokens: newTokens,
    rows: results,
    cost: { float32: cost('float32'), bfloat16: cost('bfloat16') },
  }),
);
