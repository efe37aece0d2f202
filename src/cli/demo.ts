// `trinity demo`: trains a tiny causal transformer (one block: RMSNorm, attention, SwiGLU MLP) on a character
// corpus with this library's tensors, autograd and AdamW, printing the loss as it falls. It exercises the whole
// tensor core on a fresh machine in well under a minute; the quickstart RFT run supersedes it as the main job.
import * as torch from '../torch/index.js';

const CORPUS =
  'reinforcement fine-tuning makes a language model better at a task by rewarding what works. ' +
  'the explorer samples, the trainer learns, the buffer holds experiences, the synchronizer moves weights. ';

export interface DemoOptions {
  steps: number;
  seed: number;
  log: (line: string) => void;
}

export function runDemo({ steps, seed, log }: DemoOptions): { first: number; last: number } {
  torch.manualSeed(seed);
  const vocab = [...new Set(CORPUS)].sort();
  const ids = [...CORPUS].map((c) => vocab.indexOf(c));
  const [V, D, H, T, B] = [vocab.length, 64, 4, 32, 16];
  const param = (shape: number[], std: number) => torch.keep(torch.randn(shape).mul_(std).requiresGrad_());
  const ones = (n: number) => torch.keep(torch.ones([n]).requiresGrad_());
  const p = {
    embed: param([V, D], 0.1),
    norm1: ones(D),
    wq: param([D, D], D ** -0.5),
    wk: param([D, D], D ** -0.5),
    wv: param([D, D], D ** -0.5),
    wo: param([D, D], D ** -0.5),
    norm2: ones(D),
    gate: param([4 * D, D], D ** -0.5),
    up: param([4 * D, D], D ** -0.5),
    down: param([D, 4 * D], (4 * D) ** -0.5),
    normF: ones(D),
  };
  const optimizer = new torch.AdamW(torch.weightDecayGroups(Object.entries(p), 0.01), { lr: 3e-3 });
  const schedule = new torch.LrScheduler(optimizer, 3e-3, {
    type: 'cosine',
    warmupSteps: 10,
    totalSteps: steps,
    minLrRatio: 0.1,
  });
  const generator = new torch.Generator(seed);

  const heads = (x: torch.Tensor) => x.view([B, T, H, D / H]).transpose(1, 2);
  let first = Number.NaN;
  let last = Number.NaN;
  for (let step = 0; step < steps; step++) {
    last = torch.scope(() => {
      const starts = torch.randint(0, ids.length - T - 1, [B], { generator }).toTypedArray() as BigInt64Array;
      const rows = [...starts].map((s) => ids.slice(Number(s), Number(s) + T + 1));
      const batch = torch.tensor(rows, { dtype: 'int64' });
      const input = batch.slice(1, 0, T);
      const target = batch.slice(1, 1, T + 1);
      let x = torch.embedding(p.embed, input);
      const a = torch.rmsNorm(x, [D], p.norm1, 1e-6);
      const attn = torch.scaledDotProductAttention(
        heads(torch.linear(a, p.wq)),
        heads(torch.linear(a, p.wk)),
        heads(torch.linear(a, p.wv)),
        {
          causal: true,
        },
      );
      x = x.add(torch.linear(attn.transpose(1, 2).reshape([B, T, D]), p.wo));
      const m = torch.rmsNorm(x, [D], p.norm2, 1e-6);
      x = x.add(torch.linear(torch.linear(m, p.gate).silu().mul(torch.linear(m, p.up)), p.down));
      const logits = torch.linear(torch.rmsNorm(x, [D], p.normF, 1e-6), p.embed);
      const loss = torch.crossEntropy(logits.reshape([B * T, V]), target.reshape([B * T]));
      loss.backward();
      return loss.item();
    });
    torch.clipGradNorm(Object.values(p), 1.0);
    optimizer.step();
    optimizer.zeroGrad();
    schedule.step();
    if (step === 0) first = last;
    if (step % 20 === 0 || step === steps - 1)
      log(`step ${String(step + 1).padStart(4)}/${steps}  loss ${last.toFixed(4)}  lr ${optimizer.lr.toExponential(2)}`);
  }
  optimizer.dispose();
  for (const t of Object.values(p)) t.dispose();
  return { first, last };
}
