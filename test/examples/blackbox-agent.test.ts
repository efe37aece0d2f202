// examples/blackbox_agent: agent.mjs runs as a separate process (node + the `openai` client, nothing of this project)
// with the rollout server's base URL and its run's key; its calls come back as one exact experience per conversation
// (the re-ask masked out) rewarded by the workflow. A crashing or hung agent fails its run with the reason, and the
// step's other runs go on. A shortened run (random tiny model, 2 GRPO steps) trains on what the agents' calls recorded.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { initModel } from '../../src/model/index.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { validateExperience } from '../../src/rft/experience.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { runConfig } from '../../src/rft/run/index.js';
import type { Task } from '../../src/rft/task.js';
import { EngineModelHandle, WorkflowRegistry, WorkflowRunner } from '../../src/rft/workflow/index.js';
import type { Tokenizer } from '../../src/tokenizer/index.js';
import { fixtureEngine } from '../engine/helpers.js';

const exampleDir = fileURLToPath(new URL('../../examples/blackbox_agent/', import.meta.url));
const WORKFLOW = './workflow.ts#blackboxAgentWorkflow';

function task(id: string, workflowArgs: Record<string, unknown> = {}): Task {
  return {
    id,
    taskset: 'test',
    index: 0,
    raw: {},
    prompt: '67+42=',
    response: '109',
    workflow: WORKFLOW,
    rolloutArgs: { temperature: 1 },
    workflowArgs,
  };
}

describe('examples/blackbox_agent on the fixture model', () => {
  let handle: EngineModelHandle;
  let close: () => Promise<void>;
  let agents: string;
  let runner: WorkflowRunner;

  before(() => {
    const fixture = fixtureEngine({ maxLength: 96, slots: 4 });
    close = fixture.close;
    handle = new EngineModelHandle(fixture.engine, { modelVersion: 2 });
    runner = new WorkflowRunner({
      models: handle,
      maxRetryTimes: 0,
      maxTimeout: 120,
      workflows: new WorkflowRegistry(),
      baseDir: exampleDir,
    });
    // Misbehaving agents: one crashes after a call, one hangs after a call (both with the run's key, as agent.mjs).
    agents = mkdtempSync(join(tmpdir(), 'blackbox-agents-'));
    const call = `const r = await fetch(process.env.OPENAI_BASE_URL + '/chat/completions', { method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer ' + process.env.OPENAI_API_KEY },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }) });
    if (r.status !== 200) throw new Error('status ' + r.status);\n`;
    writeFileSync(join(agents, 'crash.mjs'), `${call}console.error('agent: out of ideas');\nprocess.exit(3);\n`);
    writeFileSync(join(agents, 'hang.mjs'), `${call}setInterval(() => {}, 1 << 30);\n`);
  });
  after(async () => {
    await handle.close();
    await close();
  });

  test('each run is a separate process; its conversation is one experience with exact ids, the re-ask masked', async () => {
    const result = await runner.runStep([task('add')], { step: 1, repeatTimes: 2 });
    assert.deepEqual(
      result.statuses.map((s) => s.error ?? 'ok'),
      ['ok', 'ok'],
    );
    assert.equal(result.experiences.length, 2);
    const tokenizer = handle.tokenizer as Tokenizer;
    const prompt = tokenizer.encodeChat([{ role: 'user', content: '67+42=' }], { addGenerationPrompt: true });
    for (const experience of result.experiences) {
      assert.deepEqual(validateExperience(experience), []);
      assert.equal(experience.info.taskId, 'add');
      assert.equal(experience.info.modelVersion, 2);
      assert.deepEqual(experience.tokens.slice(0, experience.promptLength), prompt);
      assert.equal(experience.reward, 0, 'a random model does not add');
      assert.equal(experience.metrics?.correct, 0);
      const replies = (experience.messages ?? []).filter((m) => m.role === 'assistant').length;
      const mask = experience.actionMask as number[];
      const response = experience.tokens.slice(experience.promptLength);
      const masked = tokenizer.decode(
        response.filter((_, i) => mask[i] === 0),
        { skipSpecialTokens: false },
      );
      if (replies === 2) assert.match(masked, /user\nDigits only\./, 'the re-ask is context, masked out');
      else assert.equal(masked, '');
    }
    assert.deepEqual(result.experiences.map((e) => e.info.runId).sort(), [0, 1]);
  });

  test('a crashing agent and a hung one fail their runs with the reason; the step’s other run is kept', async () => {
    const result = await runner.runStep(
      [
        task('crash', { agent_program: join(agents, 'crash.mjs') }),
        task('hang', { agent_program: join(agents, 'hang.mjs'), agent_timeout: 1 }),
        task('fine'),
      ],
      { step: 1, repeatTimes: 1 },
    );
    const errors = new Map(result.statuses.map((s) => [s.taskId, s.error ?? 'ok']));
    assert.match(errors.get('crash') ?? '', /the agent exited with code 3; its stderr ends: agent: out of ideas/);
    assert.match(errors.get('hang') ?? '', /did not finish within 1 s \(workflow_args\.agent_timeout\); killed/);
    assert.equal(errors.get('fine'), 'ok');
    assert.deepEqual(
      result.experiences.map((e) => e.info.taskId),
      ['fine'],
    );
  });

  test('bad workflow_args are refused with the key named', async () => {
    const result = await runner.runStep([task('bad', { agent_timeout: 'soon' })], { step: 1, repeatTimes: 1 });
    assert.match(
      result.statuses[0]?.error ?? '',
      /workflow_args\.agent_timeout must be a positive number of seconds, got "soon"/,
    );
  });
});

test('a shortened run: 2 GRPO steps train on the black-box agents’ recorded calls', async () => {
  const root = mkdtempSync(join(tmpdir(), 'blackbox-run-'));
  initModel(join(root, 'model'), { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 1 });
  const rows = [
    { prompt: '1+2=', response: '3' },
    { prompt: '3+4=', response: '7' },
    { prompt: '2+2=', response: '4' },
    { prompt: '5+1=', response: '6' },
  ].map((row) => JSON.stringify(row));
  writeFileSync(join(root, 'tasks.jsonl'), `${rows.join('\n')}\n`);
  mkdirSync(join(root, 'out'));
  const configFile = join(root, 'run.yaml');
  writeFileSync(
    configFile,
    `mode: both
project: test
name: blackbox
checkpoint_root_dir: out
model:
  model_path: model
  max_prompt_tokens: 64
  max_response_tokens: 8
  dtype: float32
algorithm:
  algorithm_type: grpo
  repeat_times: 2
buffer:
  batch_size: 2
  total_steps: 2
  explorer_input:
    taskset:
      path: tasks.jsonl
      rollout_args:
        temperature: 1.0
      workflow_args:
        agent_timeout: 120
    default_workflow_type: ${join(exampleDir, 'workflow.ts')}#blackboxAgentWorkflow
explorer:
  runner_per_model: 4
  eval_on_startup: false
  rollout_model:
    slots: 4
trainer:
  save_interval: 2
  micro_batch_size: 8
  gradient_checkpointing: false
monitor:
  monitor_type: [jsonl]
`,
  );
  await runConfig(loadConfig(configFile, { resolveAlgorithm }), { distributed: null, log: () => {} });
  const jobDir = join(root, 'out', 'test', 'blackbox');
  const trained = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
  assert.equal(trained.length, 2, 'two steps');
  for (const [i, step] of trained.entries()) {
    // 2 tasks × repeat_times 2: four agent processes per step, each run one recorded experience, all trained on
    assert.equal(step['rollout/runs/ok'], 4);
    assert.equal(step['rollout/runs/failed'], 0);
    assert.equal(step['rollout/experiences'], 4);
    assert.equal(step['actor/rows'], 4);
    assert.equal(typeof step['rollout/correct/mean'], 'number', "the workflow's metrics reach the step");
    // the recorded ids and log-probs are the ones the trainer recomputes (exact recording), by the version that served
    assert.ok(Number(step['actor/rollout_corr/abs_logprob_diff']) < 1e-3);
    assert.equal(step['sample/model_version/max'], i);
  }
});
