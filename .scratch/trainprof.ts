import { readFileSync } from 'node:fs';
import { CausalLM } from '../src/model/index.js';
import { resolveAlgorithm } from '../src/rft/algorithm/presets.js';
import type { Experience } from '../src/rft/experience.js';
import { TrainStep } from '../src/rft/trainer/train-step.js';
import { Tokenizer } from '../src/tokenizer/index.js';
import * as torch from '../src/torch/index.js';
import { native } from '../src/torch/native.js';

const dir = 'runs/quickstart/addition/sft/final_model';
torch.setNumThreads(Number(process.env.THREADS ?? 1));
const tok = Tokenizer.load(dir);
const model = CausalLM.load(dir, { requiresGrad: true });
const algorithm = resolveAlgorithm({ algorithm_type: 'grpo', kl_loss_fn: 'none', optimizer: { lr: 2e-4 } });
const optimizer = new torch.AdamW(torch.weightDecayGroups(model.parameters(), 0.01), { lr: 2e-4 });
const step = new TrainStep({ model, optimizer, algorithm, temperature: 0.7, padTokenId: 0, microBatchSize: 256 });
const rows = readFileSync('examples/quickstart/data/train.jsonl', 'utf8').trim().split('\n').map((l) => JSON.parse(l));
let seed = 1;
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed / 2147483648);
function batch(k: number): Experience[] {
  const out: Experience[] = [];
  for (let t = 0; t < 16; t++) {
    const row = rows[(k * 16 + t) % rows.length];
    const prompt = tok.encodeChat([{ role: 'user', content: row.prompt }], { addGenerationPrompt: true });
    for (let r = 0; r < 16; r++) {
      const ans = tok.encode(row.response);
      const resp = rnd() < 0.5 ? [...ans, 2] : [...ans.slice(0, 2), ...tok.encode(String(Math.floor(rnd() * 10))), 2];
      out.push({ eid: `${k}-${t}-${r}`, tokens: [...prompt, ...resp], promptLength: prompt.length, logprobs: resp.map(() => -0.5 - rnd()), reward: rnd() < 0.5 ? 1 : 0, info: { taskId: `${k}-${t}`, runId: r } });
    }
  }
  return out;
}
console.log('prompt length', batch(0)[0]!.promptLength, 'tokens', batch(0)[0]!.tokens.length);
const cpu = () => { const c = process.cpuUsage(); return (c.user + c.system) / 1e3; };
const opTime = new Map<string, number>(); const counts = new Map<string, number>();
const n = native as unknown as Record<string, (...a: unknown[]) => unknown>;
if (process.env.OPS) for (const name of Object.keys(n)) { const f = n[name]; if (typeof f !== 'function') continue; n[name] = (...a: unknown[]) => { counts.set(name, (counts.get(name) ?? 0) + 1); const t0 = cpu(); const r = f(...a); opTime.set(name, (opTime.get(name) ?? 0) + cpu() - t0); return r; }; }
const times: number[] = []; const walls: number[] = [];
for (let i = 0; i < 30; i++) {
  const b = batch(i);
  if (i === 2) { opTime.clear(); counts.clear(); }
  const t0 = cpu(); const w0 = performance.now();
  step.run(b);
  times.push(cpu() - t0); walls.push(performance.now() - w0);
}
const sorted = (a: number[]) => [...a].slice(3).sort((x, y) => x - y); const s1 = sorted(times), s2 = sorted(walls); console.log("cpu min", s1[0]!.toFixed(0), "med", s1[s1.length >> 1]!.toFixed(0), "wall min", s2[0]!.toFixed(0), "med", s2[s2.length >> 1]!.toFixed(0));
const top = [...opTime.entries()].sort((a, b) => b[1] - a[1]).slice(0, 25);
for (const [k, v] of top) console.log(k.padEnd(30), (v / 10).toFixed(2), 'ms/step', ((counts.get(k) ?? 0) / 10).toFixed(0), 'calls');
