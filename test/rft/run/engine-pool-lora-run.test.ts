// A GRPO LoRA run (mode both) against an external pool of two real `trinity serve` processes (engine_type openai with
// a list of base_url). Each weights sync is the trainer's adapter alone (<jobDir>/sync/adapter_<N>, PEFT's format),
// loaded by every server through vLLM's dynamic adapter API under the run's name, and rollouts ask for that name:
// each server's log shows one adapter load per published version and no full-weight reload. After the run, both
// servers answer the adapter's name with the log-probs of the trainer's final merged weights (the run's final model
// folder, loaded here in an embedded engine) within 1e-4, and the base name still with the base model's.
// Nothing waits on time: the servers announce their URLs on stdout.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';
import { RolloutEngine } from '../../../src/engine/index.js';
import { CausalLM } from '../../../src/model/index.js';
import { OpenAIRemoteEngine } from '../../../src/openai/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

interface Server {
  child: ChildProcess;
  baseURL: string;
  /** Its stderr lines so far. */
  lines: string[];
}

const servers: Server[] = [];
after(() => {
  for (const s of servers) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
});

/** Starts `trinity serve` on a free port; resolves once it prints the URL it serves at. */
function startServer(modelDir: string, reloadRoot: string, label: string): Promise<Server> {
  const child = spawn(
    process.execPath,
    [
      trinity,
      'serve',
      '--model',
      modelDir,
      '--port',
      '0',
      '--model-name',
      'tiny',
      '--allow-reload-from',
      reloadRoot,
      '--slots',
      '8',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TRINITY_API_KEY: undefined } },
  );
  const lines: string[] = [];
  createInterface({ input: child.stderr as NodeJS.ReadableStream }).on('line', (line) => lines.push(line));
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      const match = /^serving 'tiny' at (http\S+\/v1)/.exec(line);
      if (!match) return;
      const server: Server = { child, baseURL: match[1] as string, lines };
      servers.push(server);
      resolve(server);
    });
    child.once('exit', (code, signal) =>
      reject(new Error(`server ${label} exited (code ${code}, signal ${signal}) before serving:\n${lines.join('\n')}`)),
    );
  });
}

/** The adapter versions a server's log says it loaded as `name`, in order. */
function loadedAdapters(server: Server, name: string): number[] {
  return server.lines.flatMap((line) => {
    const match = new RegExp(`^loaded LoRA adapter '${name}' from \\S*adapter_(\\d+)$`).exec(line);
    return match ? [Number(match[1])] : [];
  });
}

const request = { promptIds: [1, 2, 3, 4, 5], maxTokens: 4, temperature: 1, seed: 7, ignoreEos: true };

/** Sampled ids and their log-probs for `request` from an engine. */
async function sample(engine: Pick<RolloutEngine, 'generate'>): Promise<{ ids: number[]; logprobs: number[] }> {
  const completion = (await engine.generate(request)).completions[0];
  assert.ok(completion);
  return { ids: [...completion.tokenIds], logprobs: [...completion.logprobs] };
}

async function embedded(modelDir: string): Promise<{ ids: number[]; logprobs: number[] }> {
  const model = CausalLM.load(modelDir);
  const engine = new RolloutEngine(model, { slots: 1 });
  try {
    return await sample(engine);
  } finally {
    await engine.close();
    model.dispose();
  }
}

test('a LoRA run on a pool of two trinity serve processes syncs the adapter, not merged weights', {
  timeout: 300_000,
}, async () => {
  const steps = 3;
  const { root, configFile, jobDir } = makeJob({ totalSteps: steps, saveInterval: 100 });
  const modelDir = join(root, 'model');
  const [a, b] = (await Promise.all([startServer(modelDir, root, 'A'), startServer(modelDir, root, 'B')])) as [Server, Server];
  const yaml = readFileSync(configFile, 'utf8')
    .replace(
      '  rollout_model:\n    slots: 8\n',
      `  rollout_model:\n    engine_type: openai\n    model_name: tiny\n    base_url: [${a.baseURL}, ${b.baseURL}]\n`,
    )
    .replace('  dtype: float32\n', '  dtype: float32\n  lora: {rank: 4, alpha: 16}\n')
    .replace('    lr: 0.001', '    lr: 0.05');
  writeFileSync(configFile, yaml);
  const config = loadConfig(configFile, { resolveAlgorithm });
  assert.equal(config.model.lora?.rank, 4);
  const result = await runConfig(config, { log: () => {} });
  assert.ok(result.finalModelDir, 'the run finished');

  // every published version (the trainer publishes after each step) reached both servers as the adapter 'e2e'
  for (const server of [a, b]) {
    assert.deepEqual(loadedAdapters(server, 'e2e'), [1, 2, 3], `adapter loads:\n${server.lines.join('\n')}`);
    assert.ok(!server.lines.some((line) => line.startsWith('reloaded weights')), 'no full-weight reload');
  }
  const metrics = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
  assert.deepEqual(
    metrics.map((m) => m['explorer/model_version']),
    [0, 1, 2],
  );
  // only adapters were written for the servers: no merged-weights version folder, the newest two adapters kept
  assert.ok(!existsSync(join(jobDir, 'sync', 'latest.json')), 'no full-weight sync pointer');
  assert.ok(existsSync(join(jobDir, 'sync', 'adapter_3', 'adapter_model.safetensors')));
  assert.ok(existsSync(join(jobDir, 'sync', 'adapter_3', 'adapter_config.json')));
  assert.ok(!existsSync(join(jobDir, 'sync', 'adapter_1')), 'older adapters are removed');

  // the servers hold the trainer's final adapter under the run's name: its log-probs are the merged final model's
  const trained = await embedded(result.finalModelDir);
  const base = await embedded(modelDir);
  const moved =
    trained.logprobs.some((lp, i) => Math.abs(lp - (base.logprobs[i] as number)) > 1e-3) ||
    trained.ids.join() !== base.ids.join();
  assert.ok(moved, 'training moved the adapter (else the comparison could not tell adapter from base)');
  for (const server of [a, b]) {
    const adapted = await sample(new OpenAIRemoteEngine({ baseURL: server.baseURL, model: 'e2e', tokenizer: null }));
    assert.deepEqual(adapted.ids, trained.ids);
    for (const [i, lp] of adapted.logprobs.entries())
      assert.ok(Math.abs(lp - (trained.logprobs[i] as number)) < 1e-4, `position ${i}: ${lp} vs ${trained.logprobs[i]}`);
    const plain = await sample(new OpenAIRemoteEngine({ baseURL: server.baseURL, model: 'tiny', tokenizer: null }));
    assert.deepEqual(plain.ids, base.ids, 'the base name still serves the base model');
  }
});
