// Judge rewards (src/rft/reward/llm-judge.ts, reward-model.ts) and the group reward contract: strict verdict parsing
// with counted failures, prompt templates, argument checks, and end to end against a real HTTP judge (a scripted
// OpenAI-compatible node:http server reached through the official `openai` client) and a real rollout engine running
// the single-turn workflow. The yes/no reward-model probability is checked against a hand computation.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { OpenAI } from 'openai';
import type { AuxiliaryModel, AuxiliaryModels } from '../../../src/rft/auxiliary/types.js';
import {
  checkTemplate,
  fillTemplate,
  parseScoresVerdict,
  parseScoreVerdict,
  REWARD_FUNCTIONS,
  RUBRIC_JUDGE_SYSTEM_PROMPT,
  RUBRIC_JUDGE_TEMPLATE,
  RULER_RUBRIC,
  RULER_SYSTEM_PROMPT,
  RULER_TEMPLATE,
  rulerCandidates,
  scoreResponse,
  scoreResponses,
  YES_NO_SYSTEM_PROMPT,
  YES_NO_TEMPLATE,
  yesNoProbability,
} from '../../../src/rft/reward/index.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, simpleWorkflow } from '../../../src/rft/workflow/index.js';
import type { WorkflowContext } from '../../../src/rft/workflow/types.js';
import type { Tokenizer } from '../../../src/tokenizer/index.js';
import { fixtureEngine, fixtureTokenizer } from '../../engine/helpers.js';

const task = (extra: Partial<Task> = {}): Task => ({
  id: 'geo:0',
  taskset: 'geo',
  index: 0,
  raw: {},
  prompt: 'What is the capital of France?',
  response: 'Paris',
  ...extra,
});

// ---- a scripted OpenAI-compatible judge over real HTTP ----------------------------------------------------------

interface ChatBody {
  model: string;
  messages: { role: string; content: string }[];
  max_tokens?: number;
  temperature?: number;
}

interface JudgeServer {
  baseURL: string;
  requests: ChatBody[];
  close(): Promise<void>;
}

/** POST /v1/chat/completions answers answer(body); a thrown error becomes an HTTP 400 with its message. */
async function judgeServer(answer: (body: ChatBody) => string): Promise<JudgeServer> {
  const requests: ChatBody[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as ChatBody;
      requests.push(body);
      res.setHeader('content-type', 'application/json');
      if (req.url !== '/v1/chat/completions') {
        res.statusCode = 404;
        res.end(JSON.stringify({ error: { message: `no route ${req.url}` } }));
        return;
      }
      let content: string;
      try {
        content = answer(body);
      } catch (error) {
        res.statusCode = 400;
        res.end(JSON.stringify({ error: { message: (error as Error).message, type: 'invalid_request_error' } }));
        return;
      }
      res.end(
        JSON.stringify({
          id: `chatcmpl-${requests.length}`,
          object: 'chat.completion',
          created: 0,
          model: body.model,
          choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve()))),
  };
}

/** An auxiliary model as the contract describes it, on an HTTP endpoint (and optionally a tokenizer and scorer). */
function auxiliaryModel(
  name: string,
  baseURL: string,
  extra: { tokenizer?: Tokenizer; logprobs?: AuxiliaryModel['logprobs']; contextLength?: number } = {},
): AuxiliaryModel {
  return {
    name,
    modelName: `${name}-model`,
    tokenizer: extra.tokenizer ?? null,
    ...(extra.contextLength !== undefined ? { contextLength: extra.contextLength } : {}),
    openai: async () => new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 }),
    baseUrl: async () => baseURL,
    logprobs:
      extra.logprobs ??
      (() => {
        throw new Error(`${name} has no scorer`);
      }),
  };
}

function auxiliaryModels(...list: AuxiliaryModel[]): AuxiliaryModels {
  return {
    list,
    get: (name) => {
      const found = list.find((m) => m.name === name);
      if (found === undefined) throw new Error(`unknown auxiliary model '${name}'; known: ${list.map((m) => m.name).join(', ')}`);
      return found;
    },
  };
}

/** The text between `[Response]\n` and the end of the judge's user prompt (the default template puts it last but one). */
const judgedResponse = (body: ChatBody): string => {
  const user = body.messages.at(-1)?.content ?? '';
  return (/\[Response\]\n([\s\S]*?)\n\nThink briefly/.exec(user)?.[1] ?? '').trim();
};

// ---- parsing -----------------------------------------------------------------------------------------------------

describe('verdict parsing is strict', () => {
  const scale = { min: 0, max: 10 };
  test('pointwise: the last non-empty line must be "Score: N" within the scale', () => {
    assert.deepEqual(parseScoreVerdict('Score: 7', scale), { ok: true, value: 7 });
    assert.deepEqual(parseScoreVerdict('It names Paris.\nGood.\n  Score:  7.5  \n\n', scale), { ok: true, value: 7.5 });
    assert.deepEqual(parseScoreVerdict('Score: 0', scale), { ok: true, value: 0 });
    assert.deepEqual(parseScoreVerdict('Score: 10', scale), { ok: true, value: 10 });
    const kind = (answer: string | null) => {
      const verdict = parseScoreVerdict(answer, scale);
      return verdict.ok ? 'ok' : verdict.kind;
    };
    assert.equal(kind(''), 'empty');
    assert.equal(kind(null), 'empty');
    assert.equal(kind(' \n \n'), 'empty');
    assert.equal(kind('I really like this response!'), 'no_verdict');
    assert.equal(kind('**Score: 7**'), 'no_verdict');
    assert.equal(kind('Score: seven'), 'no_verdict');
    assert.equal(kind('Score: 7/10'), 'no_verdict');
    assert.equal(kind('Score: 7\nHope this helps.'), 'no_verdict', 'the verdict must be the last line');
    assert.equal(kind('score: 7'), 'no_verdict');
    assert.equal(kind('Score: 11'), 'out_of_range');
    assert.equal(kind('Score: -0.5'), 'out_of_range');
    const garbage = parseScoreVerdict('Final: 7', scale);
    assert.ok(!garbage.ok);
    assert.match(garbage.detail, /last line "Final: 7" is not "Score: <number>"/);
  });
  test('group: the last non-empty line must be "Scores: [...]" with exactly one in-range number per response', () => {
    const unit = { min: 0, max: 1 };
    assert.deepEqual(parseScoresVerdict('1 is best.\nScores: [0.9, 0.1, 0.5]', 3, unit), { ok: true, value: [0.9, 0.1, 0.5] });
    const kind = (answer: string, count = 3) => {
      const verdict = parseScoresVerdict(answer, count, unit);
      return verdict.ok ? 'ok' : verdict.kind;
    };
    assert.equal(kind(''), 'empty');
    assert.equal(kind('Scores: [0.9, 0.1]'), 'wrong_count');
    assert.equal(kind('Scores: [0.9, 0.1, 0.5, 0.2]'), 'wrong_count');
    assert.equal(kind('Scores: [0.9, 1.1, 0.5]'), 'out_of_range');
    assert.equal(kind('Scores: [0.9, 0.1, 0.5'), 'no_verdict');
    assert.equal(kind('Scores: [0.9, "high", 0.5]'), 'no_verdict');
    assert.equal(kind('Scores: {"a": 1}'), 'no_verdict');
    assert.equal(kind('[0.9, 0.1, 0.5]'), 'no_verdict');
    assert.equal(kind('Scores: [0.9, 0.1, 0.5]\nDone.'), 'no_verdict');
    const wrong = parseScoresVerdict('Scores: [1]', 2, unit);
    assert.ok(!wrong.ok);
    assert.equal(wrong.detail, '1 scores for 2 responses');
  });
});

describe('judge prompt templates', () => {
  test('{name} is filled, {{ and }} are literal braces', () => {
    assert.equal(fillTemplate('Q: {question} {{json}}', { question: '2+2?' }), 'Q: 2+2? {json}');
  });
  test('unknown placeholders, lone braces and a missing required placeholder are errors that name them', () => {
    const allowed = ['question', 'response'];
    assert.throws(
      () => checkTemplate('{question} {answer}', allowed, ['response'], 'where'),
      /where: unknown placeholder \{answer\} in the template; expected \{question\}, \{response\}/,
    );
    assert.throws(() => checkTemplate('{response} {"a": 1}', allowed, [], 'where'), /lone '\{' at offset 11/);
    assert.throws(() => checkTemplate('{question}', allowed, ['response'], 'where'), /the template must contain \{response\}/);
    checkTemplate('{response} {{"a": 1}}', allowed, ['response'], 'where');
  });
});

// ---- arguments ---------------------------------------------------------------------------------------------------

describe('judge reward arguments are checked by name', () => {
  const models = auxiliaryModels(auxiliaryModel('judge', 'http://127.0.0.1:9/v1'));
  const score = (name: string, args: Record<string, unknown>, auxiliary: AuxiliaryModels | null = models) =>
    scoreResponses(REWARD_FUNCTIONS.get(name), {
      responses: ['x'],
      task: task(),
      args,
      ...(auxiliary !== null ? { auxiliaryModels: auxiliary } : {}),
    });

  test('rubric_judge_reward', async () => {
    await assert.rejects(
      score('rubric_judge_reward', {}),
      /rubric_judge_reward': argument 'rubric' .* or 'rubric_key' .* is required/,
    );
    await assert.rejects(
      score('rubric_judge_reward', { rubric: 'r', min_score: 5, max_score: 5 }),
      /'min_score' \(5\) and 'max_score' \(5\) must be finite with min_score < max_score/,
    );
    await assert.rejects(score('rubric_judge_reward', { rubric: 'r', max_tokens: 0 }), /'max_tokens' must be a positive integer/);
    await assert.rejects(score('rubric_judge_reward', { rubric: 'r', temperature: 3 }), /'temperature' must be in \[0, 2\]/);
    await assert.rejects(score('rubric_judge_reward', { rubric: 'r', scale: 10 }), /unknown argument 'scale'/);
    await assert.rejects(score('rubric_judge_reward', { rubric: 7 }), /argument 'rubric' must be a string/);
    await assert.rejects(
      score('rubric_judge_reward', { rubric: 'r', prompt_template: 'Rate {answer}' }),
      /rubric_judge_reward': prompt_template: unknown placeholder \{answer\}/,
    );
    await assert.rejects(
      score('rubric_judge_reward', { rubric: 'r', prompt_template: 'Rate {question}' }),
      /prompt_template: the template must contain \{response\}/,
    );
    await assert.rejects(
      score('rubric_judge_reward', { rubric: 'r', judge_model: 'judg' }),
      /rubric_judge_reward': judge_model: unknown auxiliary model 'judg'; known: judge/,
    );
    await assert.rejects(
      score('rubric_judge_reward', { rubric: 'r' }, null),
      /rubric_judge_reward' needs a judge model in explorer.auxiliary_models, and this run has none/,
    );
    await assert.rejects(
      score('rubric_judge_reward', { rubric: 'r' }, auxiliaryModels()),
      /rubric_judge_reward' needs a judge model in explorer.auxiliary_models, and this run has none/,
    );
    await assert.rejects(
      score('rubric_judge_reward', { rubric_key: 'rubrics' }),
      /task geo:0 has no rubric in column 'rubrics' \(rubric_key\)/,
    );
  });
  test('checkArgs finds the same errors before any call (for pre-run checks)', () => {
    assert.throws(() => REWARD_FUNCTIONS.checkArgs('rubric_judge_reward', {}), /argument 'rubric' .* is required/);
    assert.throws(
      () => REWARD_FUNCTIONS.checkArgs('ruler_reward', { max_score: -1 }),
      /'min_score' \(0\) and 'max_score' \(-1\)/,
    );
    assert.throws(() => REWARD_FUNCTIONS.checkArgs('math_reward', { format_scor: 1 }), /unknown argument 'format_scor'/);
    REWARD_FUNCTIONS.checkArgs('rubric_judge_reward', { rubric: 'r', judge_model: 'judge' });
    REWARD_FUNCTIONS.checkArgs('./my-reward.ts#f', { anything: 1 }); // a plug-in checks its own when called
  });
  test('ruler_reward and rm_yes_no_reward', async () => {
    await assert.rejects(score('ruler_reward', { rubric: ' ' }), /ruler_reward': argument 'rubric'.*is required/);
    await assert.rejects(score('ruler_reward', { prompt_template: '{response}' }), /unknown placeholder \{response\}/);
    await assert.rejects(score('ruler_reward', { fallback_reward: Number.NaN }), /'fallback_reward' must be a finite number/);
    await assert.rejects(score('rm_yes_no_reward', { yes_token: 'No' }), /'yes_token' and 'no_token' must be two different/);
    await assert.rejects(score('rm_yes_no_reward', { min_mass: 2 }), /'min_mass' must be in \[0, 1\], got 2/);
    await assert.rejects(score('rm_yes_no_reward', {}), /judge 'judge' has no tokenizer/);
  });
});

// ---- end to end over HTTP ----------------------------------------------------------------------------------------

describe('rubric_judge_reward against an HTTP judge', () => {
  let judge: JudgeServer;
  before(async () => {
    judge = await judgeServer((body) => {
      const response = judgedResponse(body);
      if (response === 'Paris') return 'It names the capital.\nScore: 9';
      if (response === 'Lyon') return 'Lyon is not the capital.\nScore: 3';
      if (response === 'out of range') return 'Score: 12';
      if (response === 'crash') throw new Error('judge overloaded');
      return 'What a lovely answer!';
    });
  });
  after(() => judge.close());

  test('each response is judged in its own call; garbage and out-of-range verdicts are counted failures with the fallback', async () => {
    judge.requests.length = 0;
    const rubric = 'Names the capital of France.';
    const scored = await scoreResponses(REWARD_FUNCTIONS.get('rubric_judge_reward'), {
      responses: ['Paris', 'Lyon', 'I like trains', 'out of range'],
      task: task(),
      args: { judge_model: 'judge', rubric, fallback_reward: -1 },
      auxiliaryModels: auxiliaryModels(auxiliaryModel('other', 'http://127.0.0.1:9/v1'), auxiliaryModel('judge', judge.baseURL)),
    });
    const ok = { judge_failure: 0, judge_failure_empty: 0, judge_failure_no_verdict: 0, judge_failure_out_of_range: 0 };
    assert.deepEqual(scored, [
      { reward: 0.9, metrics: { judge_score: 9, ...ok } },
      { reward: 0.3, metrics: { judge_score: 3, ...ok } },
      { reward: -1, metrics: { ...ok, judge_failure: 1, judge_failure_no_verdict: 1 } },
      { reward: -1, metrics: { ...ok, judge_failure: 1, judge_failure_out_of_range: 1 } },
    ]);
    assert.equal(judge.requests.length, 4);
    const paris = judge.requests.find((r) => judgedResponse(r) === 'Paris');
    assert.ok(paris);
    // The exact request: the named judge's model, the defaults, the template filled from the task.
    assert.deepEqual(paris, {
      model: 'judge-model',
      max_tokens: 1024,
      temperature: 0,
      messages: [
        { role: 'system', content: RUBRIC_JUDGE_SYSTEM_PROMPT },
        {
          role: 'user',
          content: fillTemplate(RUBRIC_JUDGE_TEMPLATE, {
            question: 'What is the capital of France?',
            reference: 'Paris',
            rubric,
            response: 'Paris',
            min_score: '0',
            max_score: '10',
          }),
        },
      ],
    });
  });

  test('per-task rubrics (rubric_key), a custom scale and template', async () => {
    judge.requests.length = 0;
    const [scored] = await scoreResponses(REWARD_FUNCTIONS.get('rubric_judge_reward'), {
      responses: ['Paris'],
      task: task({ raw: { rubrics: ['Says Paris', { criterion: 'no extra words', weight: 1 }] }, response: undefined }),
      args: {
        rubric_key: 'rubrics',
        min_score: 1,
        max_score: 11,
        system_prompt: '',
        prompt_template: '{rubric}|{reference}|{min_score}-{max_score}\n[Response]\n{response}\n\nThink briefly',
      },
      auxiliaryModels: auxiliaryModels(auxiliaryModel('judge', judge.baseURL)),
    });
    assert.equal(scored?.reward, (9 - 1) / (11 - 1));
    assert.deepEqual(judge.requests[0]?.messages, [
      {
        role: 'user',
        content:
          '- Says Paris\n- {"criterion":"no extra words","weight":1}|(none given)|1-11\n[Response]\nParis\n\nThink briefly',
      },
    ]);
  });

  test('a judge that cannot be reached is an error naming it (the attempt is retried), not a reward', async () => {
    await assert.rejects(
      scoreResponse(REWARD_FUNCTIONS.get('rubric_judge_reward'), {
        response: 'crash',
        task: task(),
        args: { rubric: 'r' },
        auxiliaryModels: auxiliaryModels(auxiliaryModel('judge', judge.baseURL)),
      }),
      /rubric_judge_reward': the call to judge 'judge' failed: 400 judge overloaded/,
    );
  });
});

describe('ruler_reward: one call per group', () => {
  let judge: JudgeServer;
  let verdict = '';
  before(async () => {
    judge = await judgeServer(() => verdict);
  });
  after(() => judge.close());
  const ruler = (responses: string[], args: Record<string, unknown> = {}) =>
    scoreResponses(REWARD_FUNCTIONS.get('ruler_reward'), {
      responses,
      task: task(),
      args,
      auxiliaryModels: auxiliaryModels(auxiliaryModel('judge', judge.baseURL)),
    });
  const ok = {
    judge_failure: 0,
    judge_failure_empty: 0,
    judge_failure_no_verdict: 0,
    judge_failure_out_of_range: 0,
    judge_failure_wrong_count: 0,
  };

  test('scores in order, one request holding every candidate', async () => {
    judge.requests.length = 0;
    verdict = 'Response 1 is right, 3 is close.\nScores: [0.9, 0.1, 0.5]';
    assert.deepEqual(await ruler(['Paris', 'Rome', 'Paris, France (I think)']), [
      { reward: 0.9, metrics: { judge_score: 0.9, ...ok } },
      { reward: 0.1, metrics: { judge_score: 0.1, ...ok } },
      { reward: 0.5, metrics: { judge_score: 0.5, ...ok } },
    ]);
    assert.equal(judge.requests.length, 1);
    assert.deepEqual(judge.requests[0]?.messages, [
      { role: 'system', content: RULER_SYSTEM_PROMPT },
      {
        role: 'user',
        content: fillTemplate(RULER_TEMPLATE, {
          question: 'What is the capital of France?',
          reference: 'Paris',
          rubric: RULER_RUBRIC,
          responses: '[Response 1]\nParis\n\n[Response 2]\nRome\n\n[Response 3]\nParis, France (I think)',
          count: '3',
          min_score: '0',
          max_score: '1',
        }),
      },
    ]);
    assert.equal(judge.requests[0]?.max_tokens, 2048);
  });

  test("max_tokens is bounded by what the prompt leaves of the judge's context; a prompt that cannot fit names both", async () => {
    // one token per character: the RULER prompt is about 1,100 tokens, so a 2,500-position judge leaves less than
    // the default 2,048 for the answer (the embedded engine refused prompt + 2,048 on every call)
    const tokenizer = fixtureTokenizer();
    const small = (contextLength: number) =>
      scoreResponses(REWARD_FUNCTIONS.get('ruler_reward'), {
        responses: ['Paris', 'Rome'],
        task: task(),
        args: {},
        auxiliaryModels: auxiliaryModels(auxiliaryModel('judge', judge.baseURL, { tokenizer, contextLength })),
      });
    judge.requests.length = 0;
    verdict = 'Scores: [1, 0]';
    await small(2500);
    const request = judge.requests[0];
    const sent = (request?.messages ?? []).map(({ role, content }) => ({ role: role as 'system' | 'user', content }));
    const promptTokens = tokenizer.encodeChat(sent, { addGenerationPrompt: true }).length;
    assert.ok(promptTokens > 500 && promptTokens < 2500, `prompt tokens ${promptTokens}`);
    assert.equal(request?.max_tokens, 2500 - promptTokens); // min(2048, 2500 − prompt)
    await small(100_000);
    assert.equal(judge.requests[1]?.max_tokens, 2048); // the default where the context has room
    await assert.rejects(
      small(100),
      /ruler_reward': the judge prompt is \d+ tokens and judge 'judge' has a context of 100 \(max_model_len\): no room/,
    );
    assert.equal(judge.requests.length, 2); // the prompt that cannot fit is never sent
  });

  test('a list of the wrong length or garbage fails the whole group, counted, with the fallback', async () => {
    verdict = 'Scores: [0.9, 0.1]';
    const failed = (kind: string) => ({ reward: 0.25, metrics: { ...ok, judge_failure: 1, [`judge_failure_${kind}`]: 1 } });
    assert.deepEqual(await ruler(['a', 'b', 'c'], { fallback_reward: 0.25 }), [
      failed('wrong_count'),
      failed('wrong_count'),
      failed('wrong_count'),
    ]);
    verdict = 'They are all great.';
    assert.deepEqual(await ruler(['a', 'b'], { fallback_reward: 0.25 }), [failed('no_verdict'), failed('no_verdict')]);
    verdict = '';
    assert.deepEqual(await ruler(['a'], { fallback_reward: 0.25 }), [failed('empty')]);
    verdict = 'Scores: [7, 3]';
    assert.deepEqual(await ruler(['a', 'b'], { min_score: 0, max_score: 10 }), [
      { reward: 0.7, metrics: { judge_score: 7, ...ok } },
      { reward: 0.3, metrics: { judge_score: 3, ...ok } },
    ]);
  });
});

// ---- the single-turn workflow on a real engine with a group reward -------------------------------------------------

describe('single-turn workflow with judge rewards', () => {
  let judge: JudgeServer;
  let engineClose: () => Promise<void>;
  let handle: EngineModelHandle;
  before(async () => {
    judge = await judgeServer((body) => {
      const user = body.messages.at(-1)?.content ?? '';
      // RULER: score response i as i/10 so the order is checkable; pointwise: 4 for everyone.
      const count = (user.match(/^\[Response \d+\]$/gm) ?? []).length;
      return count > 0 ? `Scores: [${Array.from({ length: count }, (_, i) => (i + 1) / 10).join(', ')}]` : 'Score: 4';
    });
    const fixture = fixtureEngine({ maxLength: 96, slots: 4 });
    engineClose = fixture.close;
    handle = new EngineModelHandle(fixture.engine);
  });
  after(async () => {
    await engineClose();
    await judge.close();
  });

  const run = (rewardFn: string, repeatTimes: number) => {
    const context: WorkflowContext & { auxiliaryModels: AuxiliaryModels } = {
      task: task({
        prompt: '2+3?',
        rewardFn,
        rewardFnArgs: { rubric: 'Correct.' },
        rolloutArgs: { temperature: 1, max_tokens: 6 },
      }),
      model: handle,
      repeatTimes,
      runIdBase: 0,
      seed: 3,
      signal: new AbortController().signal,
      isEval: false,
      auxiliaryModels: auxiliaryModels(auxiliaryModel('judge', judge.baseURL)),
    };
    return simpleWorkflow.run(context);
  };

  test('ruler_reward: the n responses of a task go to the judge in one call, rewards land on their experiences', async () => {
    judge.requests.length = 0;
    const experiences = await run('ruler_reward', 4);
    assert.equal(judge.requests.length, 1, 'one judge call for the whole group');
    const prompt = judge.requests[0]?.messages.at(-1)?.content ?? '';
    assert.ok(prompt.includes(rulerCandidates(experiences.map((e) => e.responseText ?? ''))), 'the candidates, in order');
    assert.deepEqual(
      experiences.map((e) => e.reward),
      [0.1, 0.2, 0.3, 0.4],
    );
    assert.deepEqual(
      experiences.map((e) => e.metrics?.judge_score),
      [0.1, 0.2, 0.3, 0.4],
    );
  });

  test('rubric_judge_reward: one call per response', async () => {
    judge.requests.length = 0;
    const experiences = await run('rubric_judge_reward', 3);
    assert.equal(judge.requests.length, 3);
    assert.deepEqual(
      experiences.map((e) => e.reward),
      [0.4, 0.4, 0.4],
    );
    assert.deepEqual(judge.requests.map(judgedResponse).sort(), experiences.map((e) => (e.responseText ?? '').trim()).sort());
  });
});

// ---- the yes/no reward model ---------------------------------------------------------------------------------------

describe('rm_yes_no_reward: p(yes) / (p(yes) + p(no)) from the judge log-probs', () => {
  const tokenizer = fixtureTokenizer(); // one token per character: "Yes" = [Y, e, s], "No" = [N, o]
  const yesIds = tokenizer.encode('Yes');
  const noIds = tokenizer.encode('No');
  // Known log-probs of each answer token after the prompt.
  const yesLogprobs = [-0.5, -0.1, -0.2]; // Σ = −0.8
  const noLogprobs = [-1.5, -0.3]; // Σ = −1.8
  const calls: { promptIds: readonly number[]; completionIds: readonly number[] }[] = [];
  const scorer: AuxiliaryModel['logprobs'] = async (promptIds, completionIds) => {
    calls.push({ promptIds, completionIds });
    if (completionIds.join() === yesIds.join()) return yesLogprobs;
    if (completionIds.join() === noIds.join()) return noLogprobs;
    if (completionIds.join() === tokenizer.encode('Yes!').join()) return [-0.5, -0.1, -0.2]; // one short: a bad scorer
    throw new Error(`unexpected completion ${completionIds.join()}`);
  };
  const models = auxiliaryModels(auxiliaryModel('rm', 'http://127.0.0.1:9/v1', { tokenizer, logprobs: scorer }));
  const score = (args: Record<string, unknown>) =>
    scoreResponse(REWARD_FUNCTIONS.get('rm_yes_no_reward'), { response: 'Paris', task: task(), args, auxiliaryModels: models });

  test('by hand: p(yes) = e^−0.8 = 0.449329, p(no) = e^−1.8 = 0.165299, reward = 0.449329 / 0.614628 = 0.731059', async () => {
    calls.length = 0;
    const { reward, metrics } = await score({ rubric: 'Names the capital.' });
    assert.ok(Math.abs(reward - 0.731059) < 1e-6, `reward ${reward}`);
    assert.ok(Math.abs(reward - 1 / (1 + Math.exp(-1))) < 1e-12, 'σ(ℓ_yes − ℓ_no) = σ(1)');
    assert.ok(Math.abs((metrics.yes_no_mass ?? 0) - 0.614628) < 1e-6);
    assert.equal(metrics.yes_probability, reward);
    assert.equal(metrics.judge_failure, 0);
    // The prompt: the judge's chat template over [system, filled template], generation prompt added.
    const expectedPrompt = tokenizer.encodeChat(
      [
        { role: 'system', content: YES_NO_SYSTEM_PROMPT },
        {
          role: 'user',
          content: fillTemplate(YES_NO_TEMPLATE, {
            question: 'What is the capital of France?',
            reference: 'Paris',
            rubric: 'Names the capital.',
            response: 'Paris',
            yes_token: 'Yes',
            no_token: 'No',
          }),
        },
      ],
      { addGenerationPrompt: true },
    );
    assert.equal(calls.length, 2);
    for (const call of calls) assert.deepEqual(call.promptIds, expectedPrompt);
    assert.deepEqual(calls.map((c) => c.completionIds).sort(), [noIds, yesIds].sort());
  });

  test('too little mass on yes/no is a counted failure with the fallback; a malformed scorer is an error', async () => {
    const { reward, metrics } = await score({ min_mass: 0.7, fallback_reward: 0.5 });
    assert.deepEqual(
      { reward, failure: metrics.judge_failure, kind: metrics.judge_failure_no_verdict },
      {
        reward: 0.5,
        failure: 1,
        kind: 1,
      },
    );
    await assert.rejects(score({ yes_token: 'Yes!' }), /judge 'rm' returned 3 log-probs for 4 tokens/);
  });

  test('yesNoProbability stays defined when both probabilities underflow', () => {
    assert.ok(Math.abs(yesNoProbability(-1000, -1001).yesProbability - 1 / (1 + Math.exp(-1))) < 1e-12);
    assert.equal(yesNoProbability(-1000, -1001).mass, 0);
    assert.equal(yesNoProbability(Number.NEGATIVE_INFINITY, -1).yesProbability, 0);
  });
});

// ---- the group contract for plug-ins ------------------------------------------------------------------------------

describe('group rewards by module path', () => {
  const dir = mkdtempSync(join(tmpdir(), 'group-reward-'));
  const types = new URL('../../../src/rft/reward/types.ts', import.meta.url).pathname;
  writeFileSync(
    join(dir, 'rank.ts'),
    [
      `import type { GroupRewardFn } from '${types}';`,
      '// Rank by length within the group: the longest gets 1, the shortest 0.',
      'export const byLength: GroupRewardFn = {',
      "  kind: 'group',",
      '  scoreGroup: async ({ responses }) => {',
      '    const sorted = [...responses].sort((a, b) => a.length - b.length);',
      '    return responses.map((r) => ({ reward: sorted.indexOf(r) / (responses.length - 1), metrics: { chars: r.length } }));',
      '  },',
      '};',
      "export const tooFew: GroupRewardFn = { kind: 'group', scoreGroup: () => [1] };",
      "export const noScorer = { kind: 'group' };",
    ].join('\n'),
  );

  test('a plug-in group reward scores a group; scoreResponse refuses it; a wrong count is an error naming the task', async () => {
    const byLength = await REWARD_FUNCTIONS.resolve('rank.ts#byLength', dir);
    const input = { responses: ['ccc', 'a', 'bb'], task: task(), args: {} };
    assert.deepEqual(await scoreResponses(byLength, input, 'byLength'), [
      { reward: 1, metrics: { chars: 3 } },
      { reward: 0, metrics: { chars: 1 } },
      { reward: 0.5, metrics: { chars: 2 } },
    ]);
    await assert.rejects(
      scoreResponse(byLength, { response: 'a', task: task(), args: {} }, 'byLength'),
      /byLength scores a whole group of responses at once; call scoreResponses/,
    );
    const tooFew = await REWARD_FUNCTIONS.resolve('rank.ts#tooFew', dir);
    await assert.rejects(
      scoreResponses(tooFew, input, 'tooFew'),
      /tooFew returned 1 rewards for the 3 responses of task geo:0; expected one per response/,
    );
    await assert.rejects(
      REWARD_FUNCTIONS.resolve('rank.ts#noScorer', dir),
      /a group reward \(kind: 'group'\) needs a scoreGroup function/,
    );
  });
  test('a per-response reward through scoreResponses: one output per response, in order', async () => {
    const scored = await scoreResponses(REWARD_FUNCTIONS.get('format_reward'), {
      responses: ['DONE', 'nope'],
      task: task(),
      args: { pattern: 'D.NE$', score: 1 },
    });
    assert.deepEqual(
      scored.map((s) => s.reward),
      [1, -1],
    );
  });
});
