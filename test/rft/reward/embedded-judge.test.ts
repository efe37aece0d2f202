// Judge rewards on a real embedded auxiliary model (src/rft/auxiliary/embedded.ts: a tiny random Qwen2 in a worker
// engine behind its own OpenAI endpoint, as `trinity serve` serves one): the yes/no reward model's probability equals
// one computed independently from a full forward of the same model, and a random model's judge answers — garbage —
// are counted failures with the fallback reward, never a crash.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CausalLM } from '../../../src/model/index.js';
import { EmbeddedAuxiliaryModel } from '../../../src/rft/auxiliary/embedded.js';
import type { AuxiliaryModels } from '../../../src/rft/auxiliary/types.js';
import { fillTemplate, REWARD_FUNCTIONS, scoreResponse, scoreResponses } from '../../../src/rft/reward/index.js';
import type { Task } from '../../../src/rft/task.js';
import { fixtureModelWithTokenizer, referenceLogprobs } from '../../engine/helpers.js';

const task: Task = { id: 'arith:0', taskset: 'arith', index: 0, raw: {}, prompt: '2+3?', response: '5' };

let judge: EmbeddedAuxiliaryModel;
let reference: CausalLM;
let models: AuxiliaryModels;

before(async () => {
  const modelPath = fixtureModelWithTokenizer('qwen2-tied');
  judge = await EmbeddedAuxiliaryModel.start({
    name: 'judge',
    modelPath,
    engineNum: 1,
    slots: 2,
    maxLength: 256,
    dtype: 'float32',
    device: 'cpu',
    numThreads: 1,
  });
  reference = CausalLM.load(modelPath, { dtype: 'float32' });
  models = { list: [judge], get: (name) => (name === 'judge' ? judge : assert.fail(`no auxiliary model ${name}`)) };
});
after(async () => {
  await judge.close();
  reference.dispose();
});

describe('judge rewards on an embedded tiny random model', () => {
  test('rm_yes_no_reward: p(yes) / (p(yes) + p(no)) matches a full forward of the same weights', async () => {
    // A short template: the fixture model's character tokenizer makes one token per character.
    const args = { system_prompt: '', prompt_template: '{question} {response} {yes_token}/{no_token}?', min_mass: 0 };
    const { reward, metrics } = await scoreResponse(REWARD_FUNCTIONS.get('rm_yes_no_reward'), {
      response: '5',
      task,
      args,
      auxiliaryModels: models,
    });
    const tokenizer = judge.tokenizer;
    assert.ok(tokenizer);
    const promptIds = tokenizer.encodeChat(
      [
        {
          role: 'user',
          content: fillTemplate(args.prompt_template, { question: '2+3?', response: '5', yes_token: 'Yes', no_token: 'No' }),
        },
      ],
      { addGenerationPrompt: true },
    );
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    const logprobYes = sum(referenceLogprobs(reference, promptIds, tokenizer.encode('Yes')));
    const logprobNo = sum(referenceLogprobs(reference, promptIds, tokenizer.encode('No')));
    const expected = Math.exp(logprobYes) / (Math.exp(logprobYes) + Math.exp(logprobNo));
    assert.ok(Math.abs(reward - expected) < 1e-4, `reward ${reward}, full forward ${expected}`);
    assert.ok(Math.abs((metrics.yes_no_mass ?? 0) - (Math.exp(logprobYes) + Math.exp(logprobNo))) < 1e-6);
    assert.equal(metrics.judge_failure, 0);
    // A random model puts almost no mass on "Yes"/"No": with the default min_mass that is a counted failure.
    const strict = await scoreResponse(REWARD_FUNCTIONS.get('rm_yes_no_reward'), {
      response: '5',
      task,
      args: { ...args, min_mass: 0.1, fallback_reward: 0.5 },
      auxiliaryModels: models,
    });
    assert.deepEqual({ reward: strict.reward, failure: strict.metrics.judge_failure }, { reward: 0.5, failure: 1 });
  });

  test('rubric_judge_reward and ruler_reward: the random judge answers garbage, counted with the fallback', async () => {
    const args = {
      system_prompt: '',
      prompt_template: '{rubric} {response}',
      rubric: 'ok?',
      max_tokens: 8,
      fallback_reward: 0.25,
    };
    const [pointwise] = await scoreResponses(REWARD_FUNCTIONS.get('rubric_judge_reward'), {
      responses: ['5'],
      task,
      args,
      auxiliaryModels: models,
    });
    assert.equal(pointwise?.reward, 0.25);
    assert.equal(pointwise?.metrics.judge_failure, 1);
    const group = await scoreResponses(REWARD_FUNCTIONS.get('ruler_reward'), {
      responses: ['5', '6'],
      task,
      args: { ...args, prompt_template: '{rubric} {responses}' },
      auxiliaryModels: models,
    });
    assert.deepEqual(
      group.map((s) => [s.reward, s.metrics.judge_failure]),
      [
        [0.25, 1],
        [0.25, 1],
      ],
    );
  });
});
