// examples/openai_agent: the openai-SDK agent, loaded by module path as the config names it, runs through the
// WorkflowRunner on the rollout model and comes back as one exact experience per conversation: tokens start with the
// question's chat-template ids, the action mask marks the replies and not the re-ask turn between them, log-probs of
// generated tokens are the model's. With scripted replies: a number first time is one reply; a non-number is re-asked
// and the corrected answer scores 1; a wrong answer scores 0.
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { REASK } from '../../examples/openai_agent/agent.js';
import type { CausalLM } from '../../src/model/index.js';
import { validateExperience } from '../../src/rft/experience.js';
import type { Task } from '../../src/rft/task.js';
import {
  EngineModelHandle,
  type ModelHandle,
  type RolloutBackend,
  WorkflowRegistry,
  WorkflowRunner,
} from '../../src/rft/workflow/index.js';
import type { Tokenizer } from '../../src/tokenizer/index.js';
import { fixtureEngine, fixtureTokenizer, maxDiff, referenceLogprobs } from '../engine/helpers.js';
import { SCRIPTED_LOGPROB, ScriptedBackend } from '../rft/workflow/scripted-backend.js';

const exampleDir = fileURLToPath(new URL('../../examples/openai_agent/', import.meta.url));

/** Runs the example's workflow (by the module path config.yaml uses) on one task; returns its experiences. */
async function runAgent(models: ModelHandle, task: Partial<Task>, repeatTimes: number) {
  const workflows = new WorkflowRegistry();
  const spec = await workflows.resolve('./workflow.ts#agentWorkflow', exampleDir);
  assert.equal(spec.repeatable, false);
  const runner = new WorkflowRunner({ models, maxRetryTimes: 0, maxTimeout: 60, workflows, baseDir: exampleDir });
  const full: Task = {
    id: 'add1',
    taskset: 'test',
    index: 0,
    raw: {},
    prompt: '67+42=',
    response: '109',
    workflow: './workflow.ts#agentWorkflow',
    rolloutArgs: { temperature: 1 },
    ...task,
  };
  const result = await runner.runStep([full], { step: 1, repeatTimes });
  assert.deepEqual(
    result.statuses.map((s) => s.error ?? 'ok'),
    Array(repeatTimes).fill('ok'),
  );
  return result.experiences;
}

describe('examples/openai_agent on the fixture model', () => {
  let model: CausalLM;
  let handle: EngineModelHandle;
  let close: () => Promise<void>;

  before(() => {
    const fixture = fixtureEngine({ maxLength: 96, slots: 4 });
    ({ model, close } = fixture);
    handle = new EngineModelHandle(fixture.engine, { modelVersion: 3 });
  });
  after(async () => {
    await handle.close();
    await close();
  });

  test('each run is one experience with exact ids, the re-ask turn masked out, and the model’s log-probs', async () => {
    const experiences = await runAgent(handle, {}, 2);
    assert.equal(experiences.length, 2);
    const tokenizer = handle.tokenizer as Tokenizer;
    const prompt = tokenizer.encodeChat([{ role: 'user', content: '67+42=' }], { addGenerationPrompt: true });
    for (const experience of experiences) {
      assert.deepEqual(validateExperience(experience), []);
      assert.equal(experience.info.taskId, 'add1');
      assert.equal(experience.info.modelVersion, 3);
      assert.equal(experience.promptLength, prompt.length);
      assert.deepEqual(experience.tokens.slice(0, prompt.length), prompt);
      assert.equal(experience.reward, 0, 'a random model does not add');
      const mask = experience.actionMask as number[];
      const replies = experience.metrics?.replies;
      assert.ok(replies === 1 || replies === 2);
      const response = experience.tokens.slice(experience.promptLength);
      const masked = tokenizer.decode(
        response.filter((_, i) => mask[i] === 0),
        { skipSpecialTokens: false },
      );
      if (replies === 2) assert.match(masked, new RegExp(`user\\n${REASK}`), 'the re-ask is in the context, masked out');
      else assert.equal(masked, '');
      // Generated tokens: the model's own log-probs (temperature 1); others 0.
      const reference = referenceLogprobs(model, prompt, response);
      const generated = mask.flatMap((m, i) => (m === 1 ? [i] : []));
      const logprobs = experience.logprobs as number[];
      assert.ok(
        maxDiff(
          generated.map((i) => logprobs[i] as number),
          generated.map((i) => reference[i] as number),
        ) < 1e-3,
      );
      for (const [i, m] of mask.entries()) if (m === 0) assert.equal(logprobs[i], 0);
    }
    // The random fixture model does not answer with digits (seeded): at least one conversation was re-asked.
    assert.ok(experiences.some((e) => e.metrics?.replies === 2));
  });
});

describe('examples/openai_agent with scripted replies', () => {
  const tokenizer = fixtureTokenizer();
  const handles: EngineModelHandle[] = [];
  after(async () => {
    for (const h of handles) await h.close();
  });
  const scripted = (replies: string[]) => {
    const backend: RolloutBackend = new ScriptedBackend(
      tokenizer,
      (prompt) => replies[prompt.split('<|im_start|>assistant\n').length - 2] ?? '',
    );
    const handle = new EngineModelHandle(backend);
    handles.push(handle);
    return handle;
  };

  test('a number first time: one reply, reward 1 when right, 0 when wrong', async () => {
    const [right] = await runAgent(scripted(['109']), {}, 1);
    assert.equal(right?.reward, 1);
    assert.deepEqual(right?.metrics, { correct: 1, replies: 1 });
    assert.ok(((right?.actionMask ?? []) as number[]).every((m) => m === 1));
    const [wrong] = await runAgent(scripted(['108']), {}, 1);
    assert.equal(wrong?.reward, 0);
  });

  test('a reply that is not a number is re-asked; the corrected answer scores 1 as one experience', async () => {
    const [experience] = await runAgent(scripted(['so 109', '109']), {}, 1);
    assert.ok(experience);
    assert.equal(experience.reward, 1);
    assert.deepEqual(experience.metrics, { correct: 1, replies: 2 });
    const response = tokenizer.decode(experience.tokens.slice(experience.promptLength), { skipSpecialTokens: false });
    assert.equal(response, `so 109<|im_end|>\n<|im_start|>user\n${REASK}<|im_end|>\n<|im_start|>assistant\n109<|im_end|>`);
    const mask = (experience.actionMask as number[]).join('');
    const first = tokenizer.encode('so 109').length + 1; // the reply and its eos
    const between = tokenizer.encode(`\n<|im_start|>user\n${REASK}<|im_end|>\n<|im_start|>assistant\n`).length;
    assert.equal(mask, `${'1'.repeat(first)}${'0'.repeat(between)}${'1'.repeat(4)}`);
    assert.ok((experience.logprobs as number[]).every((l, i) => l === (mask[i] === '1' ? SCRIPTED_LOGPROB : 0)));
  });
});
