// greedy held-out accuracy of model folders: node --import tsx .scratch/evalckpt.ts DIR...
import { readFileSync } from 'node:fs';
import { RolloutEngine } from '../src/engine/index.js';
import * as torch from '../src/torch/index.js';
torch.setNumThreads(Number(process.env.THREADS ?? 1));
const rows = readFileSync('examples/quickstart/data/eval.jsonl', 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { prompt: string; response: string });
for (const dir of process.argv.slice(2)) {
  const engine = RolloutEngine.load(dir, { slots: 256 });
  const answers = await Promise.all(rows.map((r) => engine.chat([{ role: 'user', content: r.prompt }], { temperature: 0, maxTokens: 6 })));
  const correct = answers.filter((a, i) => (a.message.content.match(/-?\d+/g)?.at(-1) ?? '') === rows[i]!.response || Number(a.message.content.match(/-?\d+/g)?.at(-1)) === Number(rows[i]!.response)).length;
  console.log(dir, (correct / rows.length * 100).toFixed(1));
  await engine.close();
}
