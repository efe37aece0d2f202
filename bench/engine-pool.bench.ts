// Engine-pool benchmark: rollout throughput (generated tokens per second) of the quickstart's GRPO explore step —
// its model shape (Qwen2, hidden 128, 4 layers, 4 heads, 2 KV heads, float32), 16 tasks × 16 samples, 6 new tokens
// each at temperature 0.7 — on the rollout engines a run can have, in one process, one after another per round:
//
//   1 engine             one WorkerRolloutEngine with every core (explorer.rollout_model.engine_num 1)
//   2 threads            EmbeddedEnginePool: 2 worker-thread engines, the cores split between them (engine_num 2)
//   2 processes          2 engine processes behind loopback OpenAI endpoints (engine_num 2, engine_process true)
//   2 trinity serve      2 `trinity serve` processes as an external pool (engine_type openai, base_url list),
//                        each started with OMP_NUM_THREADS = cores / 2 so the four setups share the same cores
//
// A step is the 16 tasks' requests sent at once (n = 16 each, seeds per task, ignore_eos so every step generates
// 16 × 16 × 6 tokens); tokens/s = those tokens / the step's wall time. Rounds rotate which setup goes first; the
// table has each setup's median over the measured steps. Prints a table and one final JSON line with the CPU and its
// vector features (see bench/README.md).
//
//   node --import tsx bench/engine-pool.bench.ts [--rounds 5] [--steps 2]
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { EmbeddedEnginePool, type GenerateRequest, type GenerateResult, WorkerRolloutEngine } from '../src/engine/index.js';
import { initModel } from '../src/model/init.js';
import { RemoteEnginePool, startEngineProcesses } from '../src/openai/index.js';
import { Tokenizer } from '../src/tokenizer/index.js';
import * as torch from '../src/torch/index.js';
import { cpuFeatures, median, now, repoRoot, secondsSince } from './harness.js';
import { QUICKSTART_MODEL } from '../src/cli/quickstart.js';

const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '5' }, steps: { type: 'string', default: '2' }, help: { type: 'boolean' } },
});
if (values.help) {
  console.log('node --import tsx bench/engine-pool.bench.ts [--rounds 5] [--steps 2]  (see the header of the file)');
  process.exit(0);
}
const rounds = Number(values.rounds);
const stepsPerRound = Number(values.steps);
const TASKS = 16;
const GROUP = 16;
const NEW_TOKENS = 6;
const cores = os.availableParallelism();

interface Engine {
  generate(request: GenerateRequest): Promise<GenerateResult>;
  close(): Promise<void>;
}

const dir = mkdtempSync(join(os.tmpdir(), 'engine-pool-bench-'));
const modelDir = join(dir, 'model');
initModel(modelDir, { ...QUICKSTART_MODEL, architecture: 'qwen2', seed: 0 });
const tokenizer = Tokenizer.load(modelDir);
// the quickstart's prompts: two-digit additions in the chat template
const prompts = Array.from({ length: TASKS }, (_, i) =>
  tokenizer.encodeChat([{ role: 'user', content: `${10 + 3 * i}+${47 + 5 * i}=` }], { addGenerationPrompt: true }),
);

async function step(engine: Engine, stepIndex: number): Promise<{ seconds: number; tokens: number }> {
  const t0 = now();
  const results = await Promise.all(
    prompts.map((promptIds, task) =>
      engine.generate({
        promptIds,
        n: GROUP,
        maxTokens: NEW_TOKENS,
        temperature: 0.7,
        seed: stepIndex * 1000 + task,
        ignoreEos: true,
      }),
    ),
  );
  const seconds = secondsSince(t0);
  const tokens = results.reduce((sum, r) => sum + r.completions.reduce((s, c) => s + c.tokenIds.length, 0), 0);
  return { seconds, tokens };
}

function startServe(label: string): Promise<{ child: ChildProcess; baseURL: string }> {
  const child = spawn(
    process.execPath,
    [join(repoRoot, 'bin', 'trinity.js'), 'serve', '--model', modelDir, '--port', '0', '--model-name', 'tiny', '--slots', '256'],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, TRINITY_API_KEY: undefined, OMP_NUM_THREADS: String(Math.max(1, Math.floor(cores / 2))) },
    },
  );
  let stderr = '';
  child.stderr?.on('data', (chunk) => {
    stderr += chunk;
  });
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      const match = /^serving 'tiny' at (http\S+\/v1)/.exec(line);
      if (match) resolve({ child, baseURL: match[1] as string });
    });
    child.once('exit', (code) => reject(new Error(`trinity serve ${label} exited (${code}) before serving:\n${stderr}`)));
  });
}

const serves = await Promise.all([startServe('A'), startServe('B')]);
const setups: { name: string; engine: Engine }[] = [
  {
    name: `1 engine (threads ${cores})`,
    engine: await WorkerRolloutEngine.start(modelDir, { slots: TASKS * GROUP, numThreads: cores, dtype: 'float32' }),
  },
  {
    name: `2 engines, threads (${Math.max(1, Math.floor(cores / 2))} each)`,
    engine: await EmbeddedEnginePool.start(modelDir, {
      engineNum: 2,
      numThreads: cores,
      slots: (TASKS * GROUP) / 2,
      dtype: 'float32',
    }),
  },
  {
    name: `2 engines, processes (${Math.max(1, Math.floor(cores / 2))} each)`,
    engine: await startEngineProcesses({
      modelDir,
      engineNum: 2,
      numThreads: cores,
      reloadRoot: dir,
      tokenizer,
      engine: { slots: (TASKS * GROUP) / 2, dtype: 'float32' },
    }),
  },
  {
    name: '2 trinity serve (external pool)',
    engine: await RemoteEnginePool.connect({ baseURLs: serves.map((s) => s.baseURL), model: 'tiny', tokenizer }),
  },
];

const rates = new Map<string, number[]>(setups.map((s) => [s.name, []]));
for (const s of setups) await step(s.engine, 0); // warm-up: first forwards, allocations, connections
let stepIndex = 1;
for (let round = 0; round < rounds; round++) {
  const order = setups.map((_, i) => setups[(i + round) % setups.length] as (typeof setups)[number]);
  for (const s of order) {
    for (let k = 0; k < stepsPerRound; k++) {
      const { seconds, tokens } = await step(s.engine, stepIndex++);
      rates.get(s.name)?.push(tokens / seconds);
    }
  }
}
for (const s of setups) await s.engine.close();
for (const s of serves) s.child.kill('SIGTERM');

const baseline = median(rates.get(setups[0]?.name as string) ?? []);
const cpu = os.cpus()[0]?.model ?? 'unknown';
const capability = torch.buildInfo().config.match(/CPU capability usage: (\S+)/)?.[1] ?? 'unknown';
console.log(
  `\nrollout throughput, quickstart GRPO explore step (${TASKS} tasks × ${GROUP} samples × ${NEW_TOKENS} tokens), ` +
    `${rounds} rounds × ${stepsPerRound} steps per setup`,
);
console.log(
  `CPU: ${cpu}, ${cores} cores, features ${cpuFeatures().features.join(' ')}; libtorch ${capability}; load avg ${os.loadavg()[0]?.toFixed(2)}`,
);
console.log('| setup | median tokens/s | min | max | × 1 engine |');
console.log('|-------|-----------------|-----|-----|------------|');
const figures: Record<string, number> = {};
for (const s of setups) {
  const r = rates.get(s.name) ?? [];
  const m = median(r);
  figures[s.name] = Math.round(m);
  console.log(
    `| ${s.name} | ${m.toFixed(0)} | ${Math.min(...r).toFixed(0)} | ${Math.max(...r).toFixed(0)} | ${(m / baseline).toFixed(2)} |`,
  );
}
console.log(
  JSON.stringify({
    bench: 'engine-pool',
    tokens_per_second: figures,
    tasks: TASKS,
    group: GROUP,
    new_tokens: NEW_TOKENS,
    rounds,
    steps_per_round: stepsPerRound,
    cpu,
    cores,
    features: cpuFeatures().features,
    libtorch_capability: capability,
    load_avg: os.loadavg()[0],
  }),
);
