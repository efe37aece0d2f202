// learn2ask_workflow (Trinity-RFT's learn_to_ask example): the reward of each decision and judge verdict, computed by
// hand from Learn2AskWorkflow's formulas beside each case, the judge's prompt and dialogue, and a run that asks the one
// configured auxiliary model and refuses a run without exactly one.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { NO_AUXILIARY_MODELS } from '../../../src/rft/auxiliary/index.js';
import type { AuxiliaryModel, AuxiliaryModels } from '../../../src/rft/auxiliary/types.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, WORKFLOWS } from '../../../src/rft/workflow/index.js';
import { dialogueText, judgePrompt, learn2askReward, parseTags, rolloutPrompt } from '../../../src/rft/workflow/learn2ask.js';
import type { ChatMessage } from '../../../src/tokenizer/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { ScriptedBackend } from './scripted-backend.js';

const TURNS: ChatMessage[] = [
  { role: 'user', content: 'I have a headache.' },
  { role: 'assistant', content: 'Since when: today, this week or longer?' },
  { role: 'user', content: 'Since yesterday.' },
];

const task = (row: Record<string, unknown>, workflowArgs: Record<string, unknown> = {}): Task => ({
  id: 'c1',
  taskset: 't',
  index: 0,
  raw: { messages: TURNS, ...row },
  messages: TURNS.map((m) => ({ ...m })),
  workflowArgs,
});

/** A judge that answers `reply` (or fails `failures` times first) and keeps what it was asked. */
function fakeJudge(reply: string, failures = 0) {
  const asked: { role: string; content: string }[][] = [];
  let left = failures;
  const judge: AuxiliaryModel = {
    name: 'judge',
    modelName: 'judge',
    tokenizer: null,
    openai: async () =>
      ({
        chat: {
          completions: {
            create: async (body: { messages: { role: string; content: string }[] }) => {
              asked.push(body.messages);
              if (left-- > 0) throw new Error('judge down');
              return { choices: [{ message: { content: reply } }] };
            },
          },
        },
      }) as never,
    baseUrl: async () => '',
    logprobs: async () => [],
  };
  return { judge, asked };
}

const reward = async (response: string, row: Record<string, unknown>, args = {}, judgeReply = '') => {
  const { judge, asked } = fakeJudge(judgeReply);
  const scored = await learn2askReward(response, task(row, args), TURNS, { judge, wait: async () => {} });
  return { ...scored, asked };
};

const VERDICT = '<think>one question, on the fever</think>\n<format_score>1.0</format_score>\n<content_score>0.5</content_score>';

describe('learn2ask_workflow', () => {
  test('the reward of each decision, by hand', async () => {
    const info = { decision_truth: 'continue', info_truth: 'fever, nausea' };
    // continue, judged f = 1, c = 0.5: Ra+Rs a·(1 + 2c) + f = 1·2 + 1 = 3; sum: 1 + 0.5 + 1 = 2.5; Ra: 2c + f = 2; Rs: 3a + f = 4
    assert.equal((await reward('Any fever: yes or no?', info, {}, VERDICT)).reward, 3);
    assert.equal((await reward('Any fever: yes or no?', info, { fusion_mode: 'sum' }, VERDICT)).reward, 2.5);
    assert.equal((await reward('Any fever: yes or no?', info, { train_mode: 'Ra' }, VERDICT)).reward, 2);
    assert.equal((await reward('Any fever: yes or no?', info, { train_mode: 'Rs' }, VERDICT)).reward, 4);
    // stopped where it should continue: a = c = f = 0, and the judge is not asked
    const wrongStop = await reward('<stop />', info, {}, VERDICT);
    assert.deepEqual([wrongStop.reward, wrongStop.asked.length], [0, 0]);
    // truth stop: exactly "<stop />" → a = 1, c = 1, f = 1: 1·3 + 1 = 4; with more text f = 0: 3
    const stop = { decision_truth: 'stop', info_truth: '' };
    assert.deepEqual(await reward('<stop />', stop), {
      reward: 4,
      metrics: { action_score: 1, content_score: 1, format_score: 1 },
      asked: [],
    });
    assert.equal((await reward('Take this. <stop />', stop)).reward, 3);
    // no decision_truth in the row: continue; a verdict without tags scores f = c = 0: 1·1 + 0 = 1
    assert.equal((await reward('Any fever?', {}, {}, 'I cannot tell')).reward, 1);
  });

  test("the judge reads the rules with the row's facts and the dialogue with the response as the doctor's turn", async () => {
    const { asked } = await reward('Any fever: yes or no?', { info_truth: 'fever' }, {}, VERDICT);
    assert.deepEqual(asked[0], [
      { role: 'system', content: judgePrompt('fever') },
      {
        role: 'user',
        content:
          'patient: I have a headache.\ndoctor: Since when: today, this week or longer?\npatient: Since yesterday.\n' +
          'doctor: Any fever: yes or no?\n',
      },
    ]);
    assert.match(judgePrompt('fever'), /# Reference information\nfever\n/);
    assert.equal(dialogueText([{ role: 'system', content: 'x' }]), '', 'only patient and doctor turns');
    assert.deepEqual(parseTags('<a>1</a><b>\n2</b><a>3</a>'), { a: '3' }, 'one line each, the last wins');
    assert.doesNotMatch(rolloutPrompt('Ra'), /<stop \/>/);
    assert.match(rolloutPrompt('Ra+Rs'), /reply with exactly: <stop \/>/);
  });

  test('a judge that keeps failing scores 0 after five retries; a score that is no number fails the attempt', async () => {
    const { judge, asked } = fakeJudge(VERDICT, 6);
    const waits: number[] = [];
    const failed = await learn2askReward('Any fever?', task({}), TURNS, { judge, wait: async (ms) => void waits.push(ms) });
    assert.equal(failed.reward, 1); // a = 1, c = f = 0
    assert.deepEqual([asked.length, waits], [6, [1000, 2000, 3000, 4000, 5000]]);
    const recovers = fakeJudge(VERDICT, 5);
    assert.equal(
      (await learn2askReward('Any fever?', task({}), TURNS, { judge: recovers.judge, wait: async () => {} })).reward,
      3,
    );
    await assert.rejects(
      reward('Any fever?', {}, {}, '<format_score>one</format_score>'),
      /<format_score> is not a number: "one"/,
    );
  });

  test('a run samples after the rollout prompt, asks the one auxiliary model, and needs exactly one', async () => {
    const scripted = new ScriptedBackend(fixtureTokenizer(), () => 'Any fever?');
    const { judge, asked } = fakeJudge(VERDICT);
    const one: AuxiliaryModels = { list: [judge], get: () => judge };
    const workflow = await WORKFLOWS.resolve('learn2ask_workflow');
    const run = (auxiliaryModels: AuxiliaryModels) =>
      workflow.run({
        task: task({ info_truth: 'fever' }),
        model: new EngineModelHandle(scripted),
        repeatTimes: 1, // the scripted backend answers one completion per call
        runIdBase: 0,
        seed: 1,
        signal: new AbortController().signal,
        isEval: false,
        auxiliaryModels,
      });
    const experiences = await run(one);
    assert.deepEqual(
      experiences.map((e) => e.reward),
      [3],
    );
    assert.equal(asked.length, 1);
    assert.ok(
      (scripted.prompts[0] as string).startsWith(
        `<|im_start|>system\n${rolloutPrompt('Ra+Rs')}<|im_end|>\n<|im_start|>user\nI have a headache.`,
      ),
    );
    await assert.rejects(
      run(NO_AUXILIARY_MODELS),
      /learn2ask_workflow needs exactly one model in explorer\.auxiliary_models \(the judge\), and this run has 0/,
    );
  });
});
