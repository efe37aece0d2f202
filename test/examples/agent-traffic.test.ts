// examples/agent_traffic, shortened: the README's commands on a tiny model — `trinity run` of serve.yaml and of
// train.yaml as two processes sharing the job folder, and the example's `openai`-SDK agent (runAgent) for two rounds
// of 2 questions × 4 replies — then Ctrl-C (SIGINT) to the serving process: the train process drains the buffer, ends
// on its own (exit 0, no total_steps), and leaves a final model whose weights differ from the start.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { digitShare, runAgent } from '../../examples/agent_traffic/agent.js';
import { initModel } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { runProcess } from '../helpers/run-process.js';

const repo = fileURLToPath(new URL('../../', import.meta.url));
const trinity = join(repo, 'bin/trinity.js');
const example = join(repo, 'examples/agent_traffic');

test('the agent reward: the share of digits in the reply', () => {
  assert.equal(digitShare(' 42 '), 1);
  assert.equal(digitShare('4+2'), 2 / 3);
  assert.equal(digitShare(''), 0);
});

test('examples/agent_traffic: serve + train processes, the agent for two rounds, Ctrl-C to serve', {
  timeout: 300_000,
}, async () => {
  const root = mkdtempSync(join(tmpdir(), 'agent-traffic-'));
  const modelDir = join(root, 'model');
  initModel(modelDir, { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 3 });
  const shortened = [`model.model_path=${modelDir}`, `checkpoint_root_dir=${join(root, 'runs')}`];
  const env: NodeJS.ProcessEnv = { ...process.env, OMP_NUM_THREADS: '1' };
  delete env.TRINITY_API_KEY;
  const run = (config: string, extra: string[], onOutput?: (output: string, child: ChildProcess) => void) =>
    runProcess(
      process.execPath,
      [trinity, 'run', '--config', join(example, config), ...[...shortened, ...extra].flatMap((s) => ['--set', s])],
      {
        env,
        ...(onOutput ? { onOutput } : {}),
        guard: { seconds: 280, what: config },
      },
    );

  // the serving process: its URL is in its log (port 0: any free port); Ctrl-C it when the agent is done
  let serving: ChildProcess | null = null;
  let servedAt: (url: string) => void = () => {};
  const url = new Promise<string>((resolve) => {
    servedAt = resolve;
  });
  const serve = run('serve.yaml', ['explorer.proxy_port=0'], (output, child) => {
    serving = child;
    const found = /at (http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(output);
    if (found) servedAt(found[1] as string);
  });
  const train = run('train.yaml', ['buffer.train_batch_size=8', 'trainer.micro_batch_size=8']);
  let rounds: Awaited<ReturnType<typeof runAgent>>;
  try {
    rounds = await runAgent({ baseURL: await url, apiKey: null, rounds: 2, questions: 2, group: 4, seed: 0 });
  } finally {
    (serving as ChildProcess | null)?.kill('SIGINT');
  }
  const [served, trained] = await Promise.all([serve, train]);
  assert.equal(trained.code, 0, trained.output);
  assert.match(served.output, /a conversation's context .*: 256 tokens/);
  assert.deepEqual(
    rounds.map((r) => r.modelVersion),
    [0, 1],
    'round 2 is answered by the weights trained on round 1',
  );
  assert.match(trained.output, /training online \(no buffer\.total_steps\)/);
  // round 2's traffic was trained on after the serving side stopped: the buffer was drained
  assert.match(trained.output, /buffer finished: trained to step 2 /);
  const finalModel = join(root, 'runs/agent_traffic/digits/final_model/model.safetensors');
  assert.ok(existsSync(finalModel), trained.output);
  torch.scope(() => {
    const start = torch.loadSafetensors(join(modelDir, 'model.safetensors'));
    const end = torch.loadSafetensors(finalModel);
    const changed = [...start].filter(([name, t]) => {
      const after = end.get(name);
      assert.ok(after, `the final model has ${name}`);
      return t.sub(after).abs().max().item() > 0;
    });
    assert.ok(changed.length > 0, 'training changed the weights');
  });
});
