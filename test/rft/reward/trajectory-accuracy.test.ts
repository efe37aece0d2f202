// trajectory_accuracy_grader_reward (src/rft/reward/trajectory-accuracy.ts, OpenJudge's trajectory accuracy grader)
// against a scripted OpenAI-compatible judge over real HTTP, reached as the upstream configs name it: a base URL and
// a key in environment variables. Checks the judge's prompt (the rendered trajectory, the scale, the JSON format), the
// request (model, temperature, bounded max_tokens, key), the score parsing and normalisation, bad judge answers as
// counted failures, the argument errors, and an environment episode scored by it (workflow_args reward_fn_type).
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chat } from '../../../src/engine/index.js';
import { initModel } from '../../../src/model/index.js';
import { OpenAI } from 'openai';
import { NO_AUXILIARY_MODELS } from '../../../src/rft/auxiliary/index.js';
import type { AuxiliaryModel, AuxiliaryModels } from '../../../src/rft/auxiliary/types.js';
import { REWARD_FUNCTIONS, scoreResponse } from '../../../src/rft/reward/index.js';
import {
  parseTrajectoryVerdict,
  renderTrajectory,
  TRAJECTORY_ACCURACY_TEMPLATE,
} from '../../../src/rft/reward/trajectory-accuracy.js';
import type { Task } from '../../../src/rft/task.js';
import {
  attemptModelHandle,
  EngineModelHandle,
  FROZEN_LAKE_SYSTEM_PROMPT,
  frozenLakeWorkflow,
  type RolloutBackend,
} from '../../../src/rft/workflow/index.js';
import { type ChatMessage, Tokenizer } from '../../../src/tokenizer/index.js';
import { ScriptedBackend } from '../workflow/scripted-backend.js';

interface JudgeRequest {
  authorization: string | undefined;
  body: { model: string; messages: { role: string; content: string }[]; max_tokens?: number; temperature?: number };
}

/** A judge on node:http answering each chat call with reply(prompt); every request is kept. */
let judgeReply: (prompt: string) => string = () => '';
const requests: JudgeRequest[] = [];
const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as JudgeRequest['body'];
    requests.push({ authorization: req.headers.authorization, body });
    const content = judgeReply(body.messages.at(-1)?.content ?? '');
    res.setHeader('content-type', 'application/json');
    res.end(
      JSON.stringify({
        id: 'c',
        object: 'chat.completion',
        created: 0,
        model: body.model,
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
      }),
    );
  });
});

const URL_ENV = 'TRAJECTORY_JUDGE_TEST_URL';
const KEY_ENV = 'TRAJECTORY_JUDGE_TEST_KEY';
const endpointArgs = { model_name: 'judge-1', judge_api_base_url_env: URL_ENV, judge_api_key_env: KEY_ENV };

before(async () => {
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  process.env[URL_ENV] = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  process.env[KEY_ENV] = 'sk-judge';
});
after(() => {
  delete process.env[URL_ENV];
  delete process.env[KEY_ENV];
  server.close();
});

const task: Task = { id: 'gsm:0', taskset: 'gsm', index: 0, raw: {}, prompt: 'What is 2 + 3?', response: '5' };
const reward = REWARD_FUNCTIONS.get('trajectory_accuracy_grader_reward');

async function grade(args: Record<string, unknown>, extra: { conversation?: ChatMessage[] } = {}) {
  if (typeof reward !== 'function') throw new Error('a per-response reward');
  return scoreResponse(reward, { task, args: { ...endpointArgs, ...args }, response: 'It is 5.', ...extra });
}

describe('trajectory accuracy grader', () => {
  test('renders a trajectory as OpenJudge formats one: [role] content, tool calls as JSON, blank lines between', () => {
    const call = { id: 'c1', type: 'function' as const, function: { name: 'add', arguments: '{"a":2,"b":3}' } };
    const text = renderTrajectory([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'What is 2 + 3?' },
      { role: 'assistant', content: '', tool_calls: [call] },
      { role: 'tool', content: '5' },
      { role: 'assistant', content: 'It is 5.' },
    ]);
    const calls = JSON.stringify([call], null, 2);
    assert.equal(
      text,
      `[system] Be brief.\n\n[user] What is 2 + 3?\n\n[assistant]\nTool Calls: ${calls}\n\n[tool] 5\n\n[assistant] It is 5.`,
    );
  });

  test('parses the JSON verdict strictly: a score in [1, 3], anything else a named failure', () => {
    assert.deepEqual(parseTrajectoryVerdict('ok\n```json\n{"reason": "fine", "score": 2}\n```'), { ok: true, value: 2 });
    assert.deepEqual(parseTrajectoryVerdict('{\n  "reason": "done",\n  "score": 3,\n}'), { ok: true, value: 3 });
    assert.equal((parseTrajectoryVerdict('') as { kind: string }).kind, 'empty');
    assert.equal((parseTrajectoryVerdict('Score: 3') as { kind: string }).kind, 'no_verdict');
    assert.equal((parseTrajectoryVerdict('{"reason": "x", "score": "3"}') as { kind: string }).kind, 'no_verdict');
    assert.equal((parseTrajectoryVerdict('{"reason": "x", "score": 4}') as { kind: string }).kind, 'out_of_range');
    assert.equal((parseTrajectoryVerdict('{"reason": "x", "score": 0}') as { kind: string }).kind, 'out_of_range');
  });

  test('asks the endpoint the environment names, with the conversation and the response, and normalises the score', async () => {
    requests.length = 0;
    judgeReply = () => 'The answer is right.\n```json\n{"reason": "correct", "score": 2}\n```';
    const conversation: ChatMessage[] = [
      { role: 'system', content: 'Solve it.' },
      { role: 'user', content: 'What is 2 + 3?' },
    ];
    const scored = await grade({}, { conversation });
    assert.deepEqual(scored, {
      reward: 0.5, // (2 − 1) / (3 − 1)
      metrics: {
        trajectory_score: 2,
        judge_failure: 0,
        judge_failure_empty: 0,
        judge_failure_no_verdict: 0,
        judge_failure_out_of_range: 0,
      },
    });
    const [request] = requests;
    assert.equal(request?.authorization, 'Bearer sk-judge');
    assert.equal(request?.body.model, 'judge-1');
    assert.equal(request?.body.temperature, 0);
    assert.equal(request?.body.max_tokens, 1024);
    assert.equal(request?.body.messages.length, 1, 'one user turn, no system prompt (as OpenJudge asks)');
    const prompt = request?.body.messages[0]?.content ?? '';
    assert.ok(
      prompt.includes('<trajectory>\n[system] Solve it.\n\n[user] What is 2 + 3?\n\n[assistant] It is 5.\n</trajectory>'),
    );
    assert.ok(prompt.includes('- Score 1: does not reach the goal.'));
    assert.ok(prompt.includes('{"reason": "<why this score>", "score": <1, 2 or 3>}'), 'the JSON format, braces unescaped');
    const trajectory = '[system] Solve it.\n\n[user] What is 2 + 3?\n\n[assistant] It is 5.';
    const template = TRAJECTORY_ACCURACY_TEMPLATE.replaceAll('{{', '{').replaceAll('}}', '}');
    assert.equal(prompt, template.replace('{trajectory}', trajectory), 'the template, filled');
  });

  test('normalize_score false gives the raw score; judge_model_name overrides model_name; the question stands in for a missing conversation', async () => {
    requests.length = 0;
    judgeReply = () => '{"reason": "ok", "score": 3}';
    const scored = await grade({ normalize_score: false, judge_model_name: 'judge-2' });
    assert.equal(scored.reward, 3);
    assert.equal(requests[0]?.body.model, 'judge-2');
    assert.ok(requests[0]?.body.messages[0]?.content.includes('[user] What is 2 + 3?\n\n[assistant] It is 5.'));
  });

  test('a score above score_max clips to 1 (upstream normalisation with score_min / score_max)', async () => {
    judgeReply = () => '{"reason": "ok", "score": 3}';
    assert.equal((await grade({ score_min: 1, score_max: 2 })).reward, 1);
  });

  test('an answer without a verdict gives fallback_reward and counts the failure', async () => {
    judgeReply = () => 'I think it is good.';
    const scored = await grade({ fallback_reward: -1 });
    assert.equal(scored.reward, -1);
    assert.equal(scored.metrics.judge_failure, 1);
    assert.equal(scored.metrics.judge_failure_no_verdict, 1);
    judgeReply = () => '{"reason": "great", "score": 5}';
    assert.equal((await grade({})).metrics.judge_failure_out_of_range, 1);
  });

  test('bad arguments are errors naming them: an unset base URL variable, score bounds, unknown keys', () => {
    assert.throws(
      () => REWARD_FUNCTIONS.checkArgs('trajectory_accuracy_grader_reward', { judge_api_base_url_env: 'NO_SUCH_JUDGE_URL' }),
      /environment variable NO_SUCH_JUDGE_URL \(judge_api_base_url_env\), which is not set/,
    );
    assert.throws(
      () => REWARD_FUNCTIONS.checkArgs('trajectory_accuracy_grader_reward', { ...endpointArgs, score_min: 3, score_max: 3 }),
      /'score_min' \(3\) and 'score_max' \(3\)/,
    );
    assert.throws(
      () => REWARD_FUNCTIONS.checkArgs('trajectory_accuracy_grader_reward', { ...endpointArgs, max_concurrency: 8 }),
      /unknown argument 'max_concurrency'/,
    );
    // an auxiliary model as the judge needs no endpoint
    REWARD_FUNCTIONS.checkArgs('trajectory_accuracy_grader_reward', { judge_api_base_url_env: 'NO_SUCH', judge_model: 'j' });
  });
});

/** A scripted rollout model that also chats (environment workflows chat): replies from `policy`. */
function chattingBackend(tokenizer: Tokenizer, policy: () => string): RolloutBackend {
  const scripted = new ScriptedBackend(tokenizer, policy);
  return {
    tokenizer,
    generate: (request) => scripted.generate(request),
    chat: (messages, options) => chat(scripted, messages as readonly ChatMessage[], options),
  };
}

let tokenizer: Tokenizer;
before(() => {
  const modelDir = join(mkdtempSync(join(tmpdir(), 'trajectory-judge-')), 'model');
  initModel(modelDir, { hiddenSize: 16, numLayers: 1, numHeads: 2, maxPositionEmbeddings: 512, seed: 1 });
  tokenizer = Tokenizer.load(modelDir);
});

/** An auxiliary model on the scripted judge, with its own model name and key; a tokenizer and context when given. */
function auxiliaryJudge(known: { tokenizer: Tokenizer; contextLength: number } | null = null): AuxiliaryModels {
  const judge: AuxiliaryModel = {
    name: 'judge',
    modelName: 'aux-judge',
    tokenizer: known?.tokenizer ?? null,
    ...(known ? { contextLength: known.contextLength } : {}),
    openai: async () => new OpenAI({ baseURL: process.env[URL_ENV], apiKey: 'aux-key' }),
    baseUrl: async () => process.env[URL_ENV] as string,
    logprobs: async () => {
      throw new Error('a trajectory judge reads no log-probs');
    },
  };
  return {
    list: [judge],
    get: (name) => {
      if (name === 'judge') return judge;
      throw new Error(`no auxiliary model '${name}' (known: judge)`);
    },
  };
}

describe('the grader with an auxiliary model as the judge (judge_model)', () => {
  test('asks that model, not the endpoint, and needs no base URL variable', async () => {
    requests.length = 0;
    judgeReply = () => '{"reason": "ok", "score": 1}';
    if (typeof reward !== 'function') throw new Error('a per-response reward');
    const args = { judge_model: 'judge', judge_api_base_url_env: 'NO_SUCH_JUDGE_URL' };
    const scored = await scoreResponse(reward, { task, args, response: 'It is 6.', auxiliaryModels: auxiliaryJudge() });
    assert.equal(scored.reward, 0);
    assert.equal(scored.metrics.trajectory_score, 1);
    assert.equal(requests[0]?.body.model, 'aux-judge');
    assert.equal(requests[0]?.authorization, 'Bearer aux-key');
    await assert.rejects(
      Promise.resolve(
        scoreResponse(reward, {
          task,
          args: { ...args, judge_model: 'other' },
          response: 'x',
          auxiliaryModels: auxiliaryJudge(),
        }),
      ),
      /judge_model: no auxiliary model 'other'/,
    );
  });

  test('at the start, a judge whose context cannot hold the prompt and a verdict stops the run, naming its size', () => {
    const args = { judge_model: 'judge' };
    const small = auxiliaryJudge({ tokenizer, contextLength: 64 });
    assert.throws(
      () => REWARD_FUNCTIONS.checkModels('trajectory_accuracy_grader_reward', args, small),
      /judge 'judge' has a context of 64 tokens/,
    );
    REWARD_FUNCTIONS.checkModels('trajectory_accuracy_grader_reward', args, auxiliaryJudge({ tokenizer, contextLength: 8192 }));
  });
});

describe('an environment episode scored by the grader (workflow_args reward_fn_type)', () => {
  /** One FrozenLake episode of `lake` played by `backend`'s replies (the workflow's run, as the runner calls it). */
  const playLake = (lake: Task, backend: ReturnType<typeof chattingBackend>) => {
    const signal = new AbortController().signal;
    return frozenLakeWorkflow.run({
      task: lake,
      model: attemptModelHandle(new EngineModelHandle(backend), { signal, taskId: lake.id }),
      repeatTimes: 1,
      runIdBase: 0,
      seed: 9,
      signal,
      isEval: false,
      auxiliaryModels: NO_AUXILIARY_MODELS,
    });
  };

  test('the judge reads the whole episode up to the last reply, and its score replaces the environment reward', async () => {
    const backend = chattingBackend(tokenizer, () => 'Up');
    const lake: Task = {
      id: 'lake:0',
      taskset: 'lake',
      index: 0,
      raw: { seed: 14, size: 4 },
      workflow: 'frozen_lake_workflow',
      workflowArgs: { max_steps: 2, reward_fn_type: 'trajectory_accuracy_grader_reward', reward_fn_args: endpointArgs },
      rolloutArgs: { max_tokens: 8 },
    };
    requests.length = 0;
    judgeReply = () => '{"reason": "progress", "score": 3}';
    const [experience] = await playLake(lake, backend);
    assert.equal(experience?.reward, 1, 'score 3 normalised, though the lake was not crossed');
    assert.equal(experience?.metrics?.env_reward, 0);
    assert.equal(experience?.metrics?.success, 0);
    assert.equal(experience?.metrics?.trajectory_score, 3);
    const prompt = requests[0]?.body.messages[0]?.content ?? '';
    const trajectory = prompt.split('<trajectory>\n')[1]?.split('\n</trajectory>')[0] ?? '';
    assert.ok(trajectory.startsWith(`[system] ${FROZEN_LAKE_SYSTEM_PROMPT}\n\n[user] `), trajectory);
    assert.ok(trajectory.endsWith('\n\n[assistant] Up'), 'ends with the last reply (the observation after it left out)');
    assert.equal(trajectory.split('[assistant] Up').length - 1, 2, 'both replies');
  });

  test('a reward_fn_type that names no reward function fails the task before the episode, naming it', async () => {
    const lake: Task = {
      id: 'lake:1',
      taskset: 'lake',
      index: 1,
      raw: { seed: 14, size: 4 },
      workflowArgs: { reward_fn_type: 'no_such_reward' },
    };
    await assert.rejects(
      playLake(
        lake,
        chattingBackend(tokenizer, () => 'Up'),
      ),
      /no_such_reward[\s\S]*taskset 'lake' row 2/,
    );
  });
});
