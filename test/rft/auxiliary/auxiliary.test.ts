// Auxiliary models: the config (explorer.auxiliary_models) refused precisely where it cannot work; an embedded model
// and a remote one (another server, scored by echo) giving the same per-token log-probs as an independent forward;
// calls counted per attempt; a workflow on a worker thread (module path) reaching them like an in-process one.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { WorkerRolloutEngine } from '../../../src/engine/index.js';
import { CausalLM } from '../../../src/model/index.js';
import { OpenAIService, type OpenAIServer, startOpenAIServer } from '../../../src/openai/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import {
  type AuxiliaryModelSet,
  AuxiliaryUsage,
  type AuxiliaryModelSettings,
  startAuxiliaryModels,
} from '../../../src/rft/auxiliary/index.js';
import { ConfigError, loadConfig } from '../../../src/rft/run/config/index.js';
import { stageSettings } from '../../../src/rft/run/index.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, WorkflowRunner } from '../../../src/rft/workflow/index.js';
import * as torch from '../../../src/torch/index.js';
import { fixtureModelWithTokenizer } from '../../engine/helpers.js';
import { modelFolder, tasksetFile } from '../config/helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rft-auxiliary-'));

describe('explorer.auxiliary_models config', () => {
  const base = `model: {model_path: ${modelFolder(join(dir, 'policy'))}}
buffer: {batch_size: 1, explorer_input: {taskset: {path: ${tasksetFile(join(dir, 'tasks.jsonl'))}}}}
`;
  const problems = (text: string): string[] => {
    const file = join(dir, `c${Math.random().toString(36).slice(2)}.yaml`);
    writeFileSync(file, text);
    try {
      loadConfig(file, { env: {}, resolveAlgorithm });
    } catch (error) {
      assert.ok(error instanceof ConfigError, String(error));
      return error.problems.map((p) => `${p.path}: ${p.message}`);
    }
    return [];
  };

  it('refuses what cannot work, naming the key', () => {
    const lines = problems(`${base}explorer:
  auxiliary_models:
    - {engine_type: embedded, base_url: "http://x/v1"}
    - {engine_type: openai, engine_num: 2, slots: 4, device: cpu}
    - {name: judge, model_path: ${join(dir, 'policy')}}
    - {name: judge, engine_type: openai, base_url: "http://x/v1"}
`);
    for (const expected of [
      /^explorer\.auxiliary_models\.0\.model_path: is required with engine_type embedded/,
      /^explorer\.auxiliary_models\.0\.base_url: is only used with engine_type 'openai'/,
      /^explorer\.auxiliary_models\.1\.base_url: is required with engine_type openai/,
      /^explorer\.auxiliary_models\.1\.engine_num: an external endpoint is one server/,
      /^explorer\.auxiliary_models\.1\.slots: is only used with engine_type 'embedded'/,
      /^explorer\.auxiliary_models\.1\.device: places an embedded engine/,
      /^explorer\.auxiliary_models\.3\.name: 'judge' is also the name of explorer\.auxiliary_models\.2/,
    ])
      assert.ok(
        lines.some((l) => expected.test(l)),
        `${expected} not among:\n${lines.join('\n')}`,
      );
    assert.deepEqual(
      problems(`${base}mode: train\nexplorer: {auxiliary_models: [{model_path: ${join(dir, 'policy')}}]}\n`).filter((l) =>
        l.startsWith('explorer.auxiliary_models'),
      ),
      ["explorer.auxiliary_models: are called by the explorer's workflows; mode train runs none: remove them"],
    );
  });

  it('becomes stage settings: default names, slots and dtype; openai keys', () => {
    const file = join(dir, 'ok.yaml');
    writeFileSync(
      file,
      `${base}model: {model_path: ${join(dir, 'policy')}, dtype: float32, max_model_len: 64}
explorer:
  auxiliary_models:
    - {model_path: ${join(dir, 'policy')}, device: cpu, engine_num: 2}
    - {name: judge, engine_type: openai, base_url: "http://127.0.0.1:9/v1", api_key: k, model_name: big}
`.replace(/^model: \{model_path: [^\n]*\}\n/, ''),
    );
    const config = loadConfig(file, { env: {}, resolveAlgorithm });
    const settings = stageSettings({ ...config, stage_name: '' }, config.model.model_path);
    const [embedded, remote] = settings.auxiliaryModels;
    assert.deepEqual(
      { ...embedded, numThreads: 0 },
      {
        type: 'embedded',
        name: 'auxiliary_0',
        modelPath: join(dir, 'policy'),
        engineNum: 2,
        slots: 8,
        maxLength: undefined,
        dtype: 'float32',
        device: 'cpu',
        numThreads: 0,
        chatTemplateVariables: {},
      },
    );
    assert.deepEqual(remote, {
      type: 'openai',
      name: 'judge',
      baseUrl: 'http://127.0.0.1:9/v1',
      apiKey: 'k',
      modelName: 'big',
      modelPath: null,
    });
  });
});

describe('auxiliary models at work', () => {
  let modelDir: string;
  let teacherServer: OpenAIServer;
  let teacherEngine: WorkerRolloutEngine;
  let auxiliary: AuxiliaryModelSet;

  before(async () => {
    torch.setNumThreads(1);
    modelDir = fixtureModelWithTokenizer('qwen2-tied');
    // "another trinity serve": the same model on a server of its own, reached as engine_type openai
    teacherEngine = await WorkerRolloutEngine.start(modelDir, { slots: 2, maxLength: 64, numThreads: 1 });
    teacherServer = await startOpenAIServer({
      service: new OpenAIService({ modelName: 'remote-teacher', backend: teacherEngine }),
      apiKey: 'secret',
    });
    const settings: AuxiliaryModelSettings[] = [
      {
        type: 'embedded',
        name: 'teacher',
        modelPath: modelDir,
        engineNum: 1,
        slots: 2,
        maxLength: 64,
        dtype: 'float32',
        device: 'cpu',
        numThreads: 1,
      },
      {
        type: 'openai',
        name: 'remote',
        baseUrl: teacherServer.baseURL,
        apiKey: 'secret',
        modelName: 'remote-teacher',
        modelPath: modelDir,
      },
    ];
    auxiliary = await startAuxiliaryModels(settings);
  });

  after(async () => {
    await auxiliary?.close();
    await teacherServer?.close();
    await teacherEngine?.close();
  });

  /** log_softmax(logits[t-1] / τ)[ids[t]] for the completion positions, by an independent full forward. */
  function reference(prompt: number[], completion: number[], temperature = 1): number[] {
    const model = CausalLM.load(modelDir);
    try {
      return torch.noGrad(() =>
        torch.scope(() => {
          const ids = [...prompt, ...completion];
          const rows = model
            .forward(torch.tensor([ids.map(BigInt)]))
            .select(0, 0)
            .narrow(0, prompt.length - 1, completion.length)
            .float()
            .div(temperature)
            .logSoftmax(-1)
            .toArray() as number[][];
          return rows.map((row, i) => row[completion[i] as number] as number);
        }),
      );
    } finally {
      model.dispose();
    }
  }

  it('embedded and remote logprobs() equal the reference; a wrong name names the known ones', async () => {
    const prompt = [5, 17, 42];
    const completion = [9, 77, 3, 64];
    const expected = reference(prompt, completion);
    for (const name of ['teacher', 'remote']) {
      const got = await auxiliary.get(name).logprobs(prompt, completion);
      assert.equal(got.length, completion.length);
      for (const [i, v] of got.entries())
        assert.ok(Math.abs(v - (expected[i] as number)) < 1e-4, `${name} token ${i}: ${v} vs ${expected[i]}`);
    }
    const hot = await auxiliary.get('teacher').logprobs(prompt, completion, { temperature: 0.5 });
    for (const [i, v] of reference(prompt, completion, 0.5).entries()) assert.ok(Math.abs((hot[i] as number) - v) < 1e-4);
    await assert.rejects(auxiliary.get('remote').logprobs(prompt, completion, { temperature: 0.5 }), /temperature 1/);
    assert.throws(() => auxiliary.get('techer'), /no auxiliary model 'techer'; the run has: teacher, remote/);
    await assert.rejects(async () => auxiliary.get('teacher').logprobs([], [1]), /at least one prompt id/);
    assert.ok(auxiliary.get('remote').tokenizer !== null, 'model_path gives the remote model a tokenizer');
  });

  it('an attempt view counts openai() and logprobs() calls and their tokens', async () => {
    const usage = new AuxiliaryUsage();
    const view = auxiliary.forAttempt({ usage });
    const client = await view.get('teacher').openai();
    const reply = await client.chat.completions.create({
      model: 'anything',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 3,
      temperature: 0,
    });
    await view.get('remote').logprobs([1, 2], [3, 4, 5]);
    const metrics = usage.metrics();
    assert.equal(metrics['auxiliary/teacher/calls'], 1);
    assert.equal(metrics['auxiliary/teacher/tokens'], reply.usage?.total_tokens);
    assert.equal(metrics['auxiliary/remote/calls'], 1);
    assert.equal(metrics['auxiliary/remote/tokens'], 5);
    assert.equal(metrics['auxiliary/remote/failed'], 0);
    assert.ok((metrics['auxiliary/teacher/seconds'] as number) > 0);
  });

  it('a module-path workflow on a worker thread reaches them (client, logprobs, tokenizer); the step counts its calls', async () => {
    const workflowFile = join(dir, 'judge-workflow.ts');
    writeFileSync(
      workflowFile,
      `export const workflow = async ({ task, model, auxiliaryModels }) => {
  const teacher = auxiliaryModels.get('teacher');
  const ids = teacher.tokenizer.encode('hi');
  const client = await auxiliaryModels.list[1].openai();
  const judged = await client.completions.create({ model: 'remote-teacher', prompt: ids, max_tokens: 2, temperature: 0 });
  const result = await model.generate({ promptIds: ids, maxTokens: 2, temperature: 0 });
  const c = result.completions[0];
  const scored = await teacher.logprobs(ids, c.tokenIds);
  const e = model.toExperience(c, { reward: judged.choices.length });
  e.teacherLogprobs = scored;
  return [e];
};
`,
    );
    const engine = await WorkerRolloutEngine.start(modelDir, { slots: 2, maxLength: 64, numThreads: 1 });
    const handle = new EngineModelHandle(engine);
    const runner = new WorkflowRunner({ models: handle, auxiliaryModels: auxiliary, maxRetryTimes: 0, baseDir: dir });
    try {
      const task: Task = { id: 't0', taskset: 'x', index: 0, raw: {}, workflow: './judge-workflow.ts#workflow' };
      const { experiences, metrics, statuses } = await runner.runStep([task], { step: 1, repeatTimes: 1 });
      assert.ok(statuses[0]?.ok, statuses[0]?.error);
      assert.equal(runner.workerThreadsStarted, 1, 'the workflow ran on a worker thread');
      const e = experiences[0];
      assert.ok(e?.teacherLogprobs);
      const completion = e.tokens.slice(e.promptLength);
      const expected = reference(e.tokens.slice(0, e.promptLength), completion);
      for (const [i, v] of e.teacherLogprobs.entries()) assert.ok(Math.abs(v - (expected[i] as number)) < 1e-4);
      assert.equal(metrics['auxiliary/teacher/calls'], 1);
      assert.equal(metrics['auxiliary/teacher/tokens'], e.tokens.length);
      assert.equal(metrics['auxiliary/remote/calls'], 1);
      assert.ok((metrics['auxiliary/remote/tokens'] as number) >= 3);
    } finally {
      runner.close();
      await handle.close();
      await engine.close();
    }
  });
});
