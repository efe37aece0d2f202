// A workflow's OpenAI client (the `openai` npm package, unchanged) on the rollout model: every call is recorded with
// exact ids; a multi-turn conversation through the client becomes one experience whose action mask marks the
// generated tokens, and its log-probs are the model's; per-turn experiences for step-wise training; the endpoint
// closes with the attempt.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { CausalLM } from '../../../src/model/index.js';
import { validateExperience } from '../../../src/rft/experience.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, WorkflowRegistry, WorkflowRunner } from '../../../src/rft/workflow/index.js';
import type { Workflow } from '../../../src/rft/workflow/types.js';
import { fixtureEngine, maxDiff, referenceLogprobs } from '../../engine/helpers.js';

let model: CausalLM;
let handle: EngineModelHandle;
let close: () => Promise<void>;

before(() => {
  const fixture = fixtureEngine({ maxLength: 64, slots: 4 });
  ({ model, close } = fixture);
  handle = new EngineModelHandle(fixture.engine, { modelVersion: 2 });
});
after(async () => {
  await handle.close();
  await close();
});

/** Runs one task with `workflow` as a non-repeatable workflow; returns its experiences. */
async function runOne(workflow: Workflow, id: string) {
  const workflows = new WorkflowRegistry().register('agent', { run: workflow, repeatable: false });
  const runner = new WorkflowRunner({ models: handle, maxRetryTimes: 0, maxTimeout: 60, workflows });
  const task: Task = { id, taskset: 'test', index: 0, raw: {}, prompt: 'unused', workflow: 'agent' };
  const result = await runner.runStep([task], { step: 1, repeatTimes: 1 });
  assert.deepEqual(
    result.statuses.map((s) => s.error ?? 'ok'),
    ['ok'],
  );
  return result.experiences;
}

/** An agent written against the openai SDK only: asks, then asks again with the answer in the history. */
async function twoTurnAgent(client: import('openai').OpenAI, question: string) {
  const messages: import('openai').OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: question }];
  const first = await client.chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 5, temperature: 1, seed: 3 });
  messages.push(first.choices[0]?.message as import('openai').OpenAI.ChatCompletionMessageParam);
  messages.push({ role: 'user', content: 'again' });
  const second = await client.chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 5, temperature: 1, seed: 4 });
  return second.choices[0]?.message.content ?? '';
}

describe('ModelHandle.openai()', () => {
  test('a two-turn agent through the openai client becomes one exact experience', async () => {
    const workflow: Workflow = async ({ model }) => {
      const client = await model.openai();
      await twoTurnAgent(client, '1+1?');
      return model.recordedExperiences({ reward: 1 });
    };
    const [experience] = await runOne(workflow, 't1');
    assert.ok(experience);
    assert.deepEqual(validateExperience(experience), []);
    const tokenizer = handle.tokenizer as NonNullable<typeof handle.tokenizer>;
    const firstPrompt = tokenizer.encodeChat([{ role: 'user', content: '1+1?' }], { addGenerationPrompt: true });
    assert.equal(experience.promptLength, firstPrompt.length);
    assert.deepEqual(experience.tokens.slice(0, firstPrompt.length), firstPrompt);
    const mask = experience.actionMask as number[];
    // generated (1) … the second user turn (0) … generated (1)
    const ones = mask.map((m, i) => (m === 1 ? i : -1)).filter((i) => i >= 0);
    assert.ok(mask.includes(0) && mask[0] === 1 && mask.at(-1) === 1, `mask ${mask.join('')}`);
    assert.equal(experience.reward, 1);
    assert.equal(experience.info.modelVersion, 2);
    assert.equal(experience.info.taskId, 't1');
    // Log-probs of the generated tokens are the model's own (temperature 1), zeros elsewhere.
    const reference = referenceLogprobs(
      model,
      experience.tokens.slice(0, firstPrompt.length),
      experience.tokens.slice(firstPrompt.length),
    );
    const generated = ones.map((i) => (experience.logprobs as number[])[i] as number);
    assert.ok(
      maxDiff(
        generated,
        ones.map((i) => reference[i] as number),
      ) < 1e-3,
    );
    assert.ok((experience.messages?.length ?? 0) === 4, 'the transcript has user, assistant, user, assistant');
  });

  test("per-turn experiences ('turn' scope) carry their step index; the scope closes with the attempt", async () => {
    let baseURL = '';
    const workflow: Workflow = async ({ model }) => {
      baseURL = await model.openaiBaseUrl();
      await twoTurnAgent(await model.openai(), 'hi');
      return model.recordedExperiences({ scope: 'turn', reward: 0.5 });
    };
    const experiences = await runOne(workflow, 't2');
    assert.deepEqual(
      experiences.map((e) => e.info.stepIndex),
      [0, 1],
    );
    for (const e of experiences) assert.ok((e.actionMask as number[]).every((m) => m === 1));
    assert.ok((experiences[1]?.promptLength ?? 0) > (experiences[0]?.tokens.length ?? 0), 'turn 2 prompt holds turn 1');
    const after = await fetch(`${baseURL}/models`);
    assert.equal(after.status, 404, 'the attempt ended: its endpoint scope is gone');
  });
});
