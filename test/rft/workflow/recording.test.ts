// workflowWithRecording (src/rft/workflow/recording.ts), Trinity's WorkflowWithRecording: each run gets the rollout
// server's base URL and a key of its own; its calls (plain HTTP, as a black-box agent makes them) are recorded to that
// run only, other keys get 401, the key is revoked when the run ends; calls that extend the previous prompt + reply
// merge into one experience whose action mask is 1 exactly on the replies' tokens; the workflow sets the reward.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { OpenAIService, startOpenAIServer } from '../../../src/openai/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import type { Task } from '../../../src/rft/task.js';
import {
  EngineModelHandle,
  type RecordingContext,
  WorkflowRegistry,
  WorkflowRunner,
  workflowWithRecording,
} from '../../../src/rft/workflow/index.js';
import type { ChatMessage } from '../../../src/tokenizer/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { SCRIPTED_LOGPROB, ScriptedBackend } from './scripted-backend.js';

const tokenizer = fixtureTokenizer();
/** Replies with the last user message's text reversed ("ab" → "ba"): every reply is known before the call. */
const backend = new ScriptedBackend(tokenizer, (prompt) => {
  const users = [...prompt.matchAll(/<\|im_start\|>user\n([^<]*)<\|im_end\|>/g)];
  return [...(users.at(-1)?.[1] ?? '')].reverse().join('');
});
const handle = new EngineModelHandle(backend, { modelVersion: 5 });
after(() => handle.close());

/** A chat completion over plain HTTP, as an agent in another process makes it; returns the status and the body. */
async function chatCall(context: { baseUrl: string }, key: string | null, messages: ChatMessage[]) {
  const response = await fetch(`${context.baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key !== null ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model: 'any', messages, max_tokens: 16 }),
  });
  const body = (await response.json()) as { choices?: { message: { content: string } }[]; error?: { code?: string } };
  return { status: response.status, body, reply: body.choices?.[0]?.message.content ?? '' };
}

async function runRecording(
  runAsync: (context: RecordingContext) => Promise<Record<string, number> | undefined>,
  repeatTimes = 1,
) {
  const workflows = new WorkflowRegistry().register('recorded', workflowWithRecording({ runAsync }));
  const runner = new WorkflowRunner({ models: handle, maxRetryTimes: 0, maxTimeout: 60, workflows });
  const task: Task = { id: 't1', taskset: 'test', index: 0, raw: {}, prompt: 'q', workflow: 'recorded' };
  return runner.runStep([task], { step: 1, repeatTimes });
}

const user = (content: string): ChatMessage => ({ role: 'user', content });

describe('workflowWithRecording: per-run keys', () => {
  test('two concurrent runs: each agent’s calls land in its own run; wrong, missing and revoked keys get 401', async () => {
    const keys: string[] = [];
    let baseUrl = '';
    // both runs hold their keys at once: each waits until the other has made its call (events, not timing)
    let arrived = 0;
    let releaseBoth: () => void = () => {};
    const bothCalled = new Promise<void>((resolve) => {
      releaseBoth = resolve;
    });
    const result = await runRecording(async (context) => {
      keys.push(context.apiKey);
      baseUrl = context.baseUrl;
      assert.match(context.baseUrl, /^http:\/\/127\.0\.0\.1:\d+\/v1$/);
      const own = `run${context.runIdBase}`;
      const first = await chatCall(context, context.apiKey, [user(own)]);
      assert.equal(first.status, 200);
      if (++arrived === 2) releaseBoth();
      await bothCalled;
      const wrong = await chatCall(context, 'sk-run-not-a-key', [user('intruder')]);
      assert.equal(wrong.status, 401);
      assert.equal(wrong.body.error?.code, 'invalid_api_key');
      assert.equal((await chatCall(context, null, [user('intruder')])).status, 401);
      context.updateReward(context.runIdBase + 0.5);
      return { calls: 1 };
    }, 2);
    assert.deepEqual(
      result.statuses.map((s) => s.error ?? 'ok'),
      ['ok', 'ok'],
    );
    assert.equal(new Set(keys).size, 2, 'each run has its own key');
    assert.equal(result.experiences.length, 2);
    for (const experience of result.experiences) {
      const runId = experience.info.runId as number;
      assert.equal(experience.reward, runId + 0.5);
      assert.deepEqual(
        experience.messages?.map((m) => m.content),
        [`run${runId}`, [...`run${runId}`].reverse().join('')],
      );
      assert.equal(experience.info.modelVersion, 5);
      assert.deepEqual(experience.metrics, { calls: 1 });
    }
    // the runs ended: their keys are revoked
    for (const key of keys) assert.equal((await chatCall({ baseUrl }, key, [user('late')])).status, 401);
  });

  test('text completions are refused under a run key (only chat calls are recorded)', async () => {
    const result = await runRecording(async (context) => {
      const response = await fetch(`${context.baseUrl}/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${context.apiKey}` },
        body: JSON.stringify({ model: 'any', prompt: 'hi', max_tokens: 4 }),
      });
      assert.equal(response.status, 400);
      assert.match(((await response.json()) as { error: { message: string } }).error.message, /chat completions only/);
      await chatCall(context, context.apiKey, [user('ok')]);
      context.updateReward(1);
      return undefined;
    });
    assert.equal(result.statuses[0]?.error, undefined);
  });
});

describe('workflowWithRecording: the merge rule', () => {
  test('extending calls merge into one experience, mask 1 exactly on the replies; a fresh call is a new one', async () => {
    let recorded: Experience[] = [];
    const result = await runRecording(async (context) => {
      const first = await chatCall(context, context.apiKey, [user('ab')]);
      assert.equal(first.reply, 'ba');
      const history = [user('ab'), { role: 'assistant', content: first.reply } as ChatMessage, user('cd')];
      const second = await chatCall(context, context.apiKey, history);
      assert.equal(second.reply, 'dc');
      const fresh = await chatCall(context, context.apiKey, [user('xy')]);
      assert.equal(fresh.reply, 'yx');
      recorded = context.recordedExperiences();
      const [merged, separate] = recorded;
      context.updateReward(1); // the run
      context.updateReward(0.25, { stepIndex: 9 }, [separate?.eid as string]); // one experience, later: wins
      assert.ok(merged);
      return undefined;
    });
    assert.equal(result.statuses[0]?.error, undefined);
    const [merged, separate] = result.experiences as [Experience, Experience];
    assert.equal(result.experiences.length, 2);
    assert.deepEqual(
      result.experiences.map((e) => e.eid),
      recorded.map((e) => e.eid),
      'eids are stable',
    );
    // Hand check. prompt₁ = the template of [user ab]; reply₁ = encode('ba') + eos; between = the glue the template
    // puts after the assistant's turn, the new user turn and the generation prompt; reply₂ = encode('dc') + eos.
    const eos = tokenizer.eosTokenIds[0] as number;
    const prompt1 = tokenizer.encodeChat([user('ab')], { addGenerationPrompt: true });
    const reply1 = [...tokenizer.encode('ba'), eos];
    const reply2 = [...tokenizer.encode('dc'), eos];
    assert.equal(merged.promptLength, prompt1.length);
    assert.deepEqual(merged.tokens.slice(0, prompt1.length), prompt1);
    const response = merged.tokens.slice(prompt1.length);
    assert.deepEqual(response.slice(0, reply1.length), reply1);
    assert.deepEqual(response.slice(-reply2.length), reply2);
    const between = response.slice(reply1.length, response.length - reply2.length);
    assert.equal(
      tokenizer.decode(between, { skipSpecialTokens: false }),
      '\n<|im_start|>user\ncd<|im_end|>\n<|im_start|>assistant\n',
    );
    assert.deepEqual(merged.actionMask, [...reply1.map(() => 1), ...between.map(() => 0), ...reply2.map(() => 1)]);
    assert.deepEqual(merged.logprobs, [
      ...reply1.map(() => SCRIPTED_LOGPROB),
      ...between.map(() => 0),
      ...reply2.map(() => SCRIPTED_LOGPROB),
    ]);
    assert.equal(merged.reward, 1);
    // The fresh call: its own prompt, its own reply, its own reward.
    const prompt3 = tokenizer.encodeChat([user('xy')], { addGenerationPrompt: true });
    assert.deepEqual(separate.tokens, [...prompt3, ...tokenizer.encode('yx'), eos]);
    assert.deepEqual(
      separate.actionMask,
      [...tokenizer.encode('yx'), eos].map(() => 1),
    );
    assert.equal(separate.reward, 0.25);
    assert.equal(separate.info.stepIndex, 9);
  });

  test('a run without calls, without a reward, or naming an unknown sample id fails with the reason', async () => {
    const none = await runRecording(async () => undefined);
    assert.match(none.statuses[0]?.error ?? '', /made no chat completion with the run's API key/);
    const unrewarded = await runRecording(async (context) => {
      await chatCall(context, context.apiKey, [user('ab')]);
      return undefined;
    });
    assert.match(unrewarded.statuses[0]?.error ?? '', /set no reward for 1 of 1 recorded experiences/);
    const unknown = await runRecording(async (context) => {
      await chatCall(context, context.apiKey, [user('ab')]);
      context.updateReward(1);
      context.updateReward(0, undefined, ['no-such-eid']);
      return undefined;
    });
    assert.match(unknown.statuses[0]?.error ?? '', /sample ids that are no experience of the run: no-such-eid/);
  });
});

test('startOpenAIServer refuses keyScopes with a server-wide apiKey or defaultScope (the key picks the scope)', async () => {
  const service = new OpenAIService({ modelName: 'm', backend });
  for (const extra of [{ apiKey: 'secret' }, { defaultScope: {} }]) {
    await assert.rejects(startOpenAIServer({ service, keyScopes: new Map(), ...extra }), /keyScopes picks the scope/);
  }
});
