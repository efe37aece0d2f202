// Trinity-RFT's judge workflows (src/rft/workflow/judge-workflows.ts, trainable-ruler.ts): medicine_ruler_workflow and
// rubric_judge_workflow ask an auxiliary judge with the row's RaR rubric and read its verdict in upstream's forms (the
// last [...] list; a ```json {"rating": N}``` block), parsed by src/rft/reward/judge-answer.ts; and
// math_trainable_ruler_workflow, where the policy judges its own responses, by hand-computed rewards for both branches
// (reference known: the judge samples are experiences of their own group, rewarded 1 − MAE against the scaled gold
// rewards; unknown: the judge's scores are the rewards), evaluation without a judge, and its workflow_args check.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { NO_AUXILIARY_MODELS } from '../../../src/rft/auxiliary/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { parseLastListVerdict, parseRatingVerdict } from '../../../src/rft/reward/judge-answer.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, WORKFLOWS } from '../../../src/rft/workflow/index.js';
import { MATH_SYSTEM_PROMPT } from '../../../src/rft/workflow/single-turn.js';
import { scaledGold } from '../../../src/rft/workflow/trainable-ruler.js';
import type { WorkflowContext } from '../../../src/rft/workflow/types.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { fakeJudge } from './fake-judge.js';
import { ScriptedBackend } from './scripted-backend.js';

const RUBRIC = [
  { title: 'Modality', description: 'Names a non-contrast CT scan.', weight: 5 },
  { title: 'Reason', description: 'Says why it is the most sensitive.', weight: 2 },
];
const task = (over: Partial<Task> = {}): Task =>
  ({
    id: 't0',
    taskset: 'med',
    index: 0,
    prompt: 'Best imaging for a ureteric stone?',
    response: 'CT',
    raw: { rubric: RUBRIC },
    ...over,
  }) as Task;

function context(over: Partial<WorkflowContext> & Pick<WorkflowContext, 'model'>): WorkflowContext {
  return {
    task: task(),
    repeatTimes: 3,
    runIdBase: 0,
    seed: 7,
    signal: new AbortController().signal,
    isEval: false,
    auxiliaryModels: NO_AUXILIARY_MODELS,
    ...over,
  };
}

const POLICY_REPLIES = ['CT, because it sees every stone.', 'An X-ray.', 'Ultrasound, I think.'];
const policy = () => new ScriptedBackend(fixtureTokenizer(), (_prompt, i) => POLICY_REPLIES[i] as string);
const rewards = (experiences: Experience[]) => experiences.map((e) => e.reward);

describe("upstream's verdict forms", () => {
  test('json_rating: the first ```json block (else ```) holds {"rating": N} within the scale', () => {
    const scale = { min: 0, max: 10 };
    assert.deepEqual(parseRatingVerdict('```json\n{"rating": 7}\n``` because...', scale), { ok: true, value: 7 });
    assert.deepEqual(parseRatingVerdict('ok ```\n{"rating": 8.5}```', scale), { ok: true, value: 8.5 });
    const kind = (answer: string) => {
      const verdict = parseRatingVerdict(answer, scale);
      return verdict.ok ? 'ok' : verdict.kind;
    };
    assert.equal(kind(''), 'empty');
    assert.equal(kind('{"rating": 7}'), 'no_verdict');
    assert.equal(kind('```json\n{"rating": 7}'), 'no_verdict');
    assert.equal(kind('```json\n{"rating": "7"}\n```'), 'no_verdict');
    assert.equal(kind('```json\n{"score": 7}\n```'), 'no_verdict');
    assert.equal(kind('```json\n{"rating": 11}\n```'), 'out_of_range');
  });

  test('last_list: the text from the last "[" to the last "]" is a list of one number per response', () => {
    const unit = { min: 0, max: 1 };
    assert.deepEqual(parseLastListVerdict('[9, 9] first... so [0.2, 0.9, 0.5]\n', 3, unit), { ok: true, value: [0.2, 0.9, 0.5] });
    const kind = (answer: string) => {
      const verdict = parseLastListVerdict(answer, 3, unit);
      return verdict.ok ? 'ok' : verdict.kind;
    };
    assert.equal(kind('no list'), 'no_verdict');
    assert.equal(kind('[0.2, 0.9, 0.5'), 'no_verdict');
    assert.equal(kind('[0.2, "high", 0.5]'), 'no_verdict');
    assert.equal(kind('[0.2, 0.9]'), 'wrong_count');
    assert.equal(kind('[0.2, 1.2, 0.5]'), 'out_of_range');
  });
});

describe('medicine_ruler_workflow', () => {
  test("one judge call ranks the group against the row's weighted rubric; its last list is the rewards", async () => {
    const judge = fakeJudge(() => 'Response 1 names CT.\n[0.9, 0.1, 0.3]');
    const backend = policy();
    const experiences = await WORKFLOWS.get('medicine_ruler_workflow').run(
      context({ model: new EngineModelHandle(backend), auxiliaryModels: judge.models }),
    );
    assert.deepEqual(rewards(experiences), [0.9, 0.1, 0.3]);
    assert.equal(experiences[0]?.metrics?.judge_failure, 0);
    assert.match(backend.prompts[0] as string, new RegExp(`system\n${MATH_SYSTEM_PROMPT.slice(0, 40)}`));
    assert.equal(judge.calls.length, 1);
    const [system, user] = judge.calls[0]?.messages ?? [];
    assert.match(system?.content ?? '', /^You are a fair judge/);
    assert.match(user?.content ?? '', /Question: Best imaging for a ureteric stone\?/);
    assert.match(user?.content ?? '', /\[Response 2\]\nAn X-ray\./);
    assert.match(user?.content ?? '', /- \(weight 5\) Names a non-contrast CT scan\.\n- \(weight 2\) Says why/);
    assert.equal(judge.calls[0]?.temperature, 0);
  });

  test('a verdict without a valid list gives every response fallback 0, counted as a judge failure', async () => {
    for (const answer of ['I cannot decide.', '[0.9, 1.5, 0.3]', '[0.9, 0.3]']) {
      const judge = fakeJudge(() => answer);
      const experiences = await WORKFLOWS.get('medicine_ruler_workflow').run(
        context({ model: new EngineModelHandle(policy()), auxiliaryModels: judge.models }),
      );
      assert.deepEqual(rewards(experiences), [0, 0, 0], answer);
      assert.equal(experiences[1]?.metrics?.judge_failure, 1, answer);
    }
  });

  test('a row without a rubric and a run without a judge are errors naming what is missing', async () => {
    const judge = fakeJudge(() => '[1, 1, 1]');
    await assert.rejects(
      WORKFLOWS.get('medicine_ruler_workflow').run(
        context({ model: new EngineModelHandle(policy()), auxiliaryModels: judge.models, task: task({ raw: {} }) }),
      ),
      /task t0 has no rubric in column 'rubric' \(rubric_key\)/,
    );
    await assert.rejects(
      WORKFLOWS.get('medicine_ruler_workflow').run(context({ model: new EngineModelHandle(policy()) })),
      /needs a judge model in explorer.auxiliary_models, and this run has none/,
    );
  });
});

describe('rubric_judge_workflow', () => {
  test('one judge call per response; the ```json rating N gives reward N / 10', async () => {
    const ratings = ['```json\n{"rating": 9}\n```', 'Rating:\n```json\n{"rating": 2}\n```', 'I would say 5.'];
    const judge = fakeJudge((call) => {
      const response = /<response>\n([\s\S]*?)\n<\/response>/.exec(call.messages[1]?.content ?? '')?.[1];
      return ratings[POLICY_REPLIES.indexOf(response as string)] as string;
    });
    const backend = policy();
    const experiences = await WORKFLOWS.get('rubric_judge_workflow').run(
      context({ model: new EngineModelHandle(backend), auxiliaryModels: judge.models }),
    );
    assert.deepEqual(rewards(experiences), [0.9, 0.2, 0]);
    assert.deepEqual(
      experiences.map((e) => e.metrics?.judge_failure),
      [0, 0, 1],
    );
    assert.equal(judge.calls.length, 3);
    assert.match(judge.calls[0]?.messages[0]?.content ?? '', /"rating"/);
    assert.match(judge.calls[0]?.messages[1]?.content ?? '', /<rubrics>\n- \(weight 5\) Names a non-contrast CT scan\./);
    assert.match(backend.prompts[0] as string, /system\nA conversation between a user and an assistant/);
  });

  test("the task's reward_fn_args override the workflow's judge arguments (and are checked)", async () => {
    const judge = fakeJudge(() => '```json\n{"rating": 9}\n```');
    const run = (rewardFnArgs: Record<string, unknown>) =>
      WORKFLOWS.get('rubric_judge_workflow').run(
        context({ model: new EngineModelHandle(policy()), auxiliaryModels: judge.models, task: task({ rewardFnArgs }) }),
      );
    assert.deepEqual(rewards(await run({ max_score: 9 })), [1, 1, 1]);
    await assert.rejects(run({ verdict_format: 'xml' }), /'verdict_format' must be one of score_line, json_rating, got "xml"/);
    assert.deepEqual(WORKFLOWS.get('rubric_judge_workflow').workflowArgs, [], 'no workflow_args: config check refuses any');
  });
});

describe('math_trainable_ruler_workflow', () => {
  // gold (math_reward = accuracy ± 0.1 format): 1.1, 0.1, −0.1  →  scaled (g + 0.1) / 1.2: 1, 1/6, 0
  const ANSWERS = ['<think>6*7</think> <answer>42</answer>', '<think>6*6</think> <answer>36</answer>', '41'];
  const run = async (judgeReplies: string[], over: Partial<WorkflowContext> = {}, workflowArgs = {}) => {
    const backend = new ScriptedBackend(fixtureTokenizer(), (prompt, i) =>
      /fair judge/.test(prompt) ? (judgeReplies[i] as string) : (ANSWERS[i] as string),
    );
    const experiences = await WORKFLOWS.get('math_trainable_ruler_workflow').run(
      context({
        model: new EngineModelHandle(backend),
        task: task({ prompt: 'What is 6*7?', response: '42', workflowArgs }),
        ...over,
      }),
    );
    return { experiences, prompts: backend.prompts };
  };

  test('reference known: gold rewards for the responses, 1 − MAE for each judge sample (its own group)', async () => {
    const { experiences, prompts } = await run(
      ['[1, 0.5, 0]', 'no idea', '[1.5, 0, 0]'],
      {},
      { probability_ground_truth_available: 1 },
    );
    assert.equal(experiences.length, 6);
    const [responses, judges] = [experiences.slice(0, 3), experiences.slice(3)];
    assert.deepEqual(
      rewards(responses).map((r) => Number(r?.toFixed(12))),
      [1.1, 0.1, -0.1],
    );
    assert.deepEqual(
      responses.map((e) => e.metrics?.gold_reward?.toFixed(12)),
      ['1.100000000000', '0.100000000000', '-0.100000000000'],
    );
    assert.deepEqual(
      [scaledGold(1.1), scaledGold(-0.1)].map((g) => Number(g.toFixed(12))),
      [1, 0],
    );
    // judge 0: |1 − 1| + |0.5 − 1/6| + |0 − 0| = 1/3, MAE 1/9 → 8/9; judge 1: no list; judge 2: 1.5 is out of range
    assert.ok(Math.abs((judges[0]?.reward as number) - 8 / 9) < 1e-12, String(judges[0]?.reward));
    assert.deepEqual(rewards(judges.slice(1)), [0, 0]);
    assert.deepEqual(
      judges.map((e) => [e.info.taskId, e.info.runId]),
      [
        ['t0-ruler', 0],
        ['t0-ruler', 1],
        ['t0-ruler', 2],
      ],
    );
    assert.equal(judges[0]?.metrics?.reward_for_judger, judges[0]?.reward);
    for (const e of experiences) assert.ok(Math.abs((e.metrics?.judge_success as number) - 1 / 3) < 1e-12);
    assert.equal(prompts.length, 2, 'one policy call and one judge call of n samples');
    assert.match(prompts[1] as string, /Candidate solution 2: <think>6\*6<\/think> <answer>36<\/answer>/);
    assert.match(prompts[1] as string, /\[score of solution 1, \.\.\., score of solution 3\]/);
  });

  test('reference unknown: one judge sample, not trained on, whose scores are the rewards', async () => {
    const { experiences, prompts } = await run(['[0.9, 0.3, 0.1]'], {}, { probability_ground_truth_available: 0 });
    assert.deepEqual(rewards(experiences), [0.9, 0.3, 0.1]);
    assert.deepEqual(
      experiences.map((e) => e.metrics?.judge_success),
      [1, 1, 1],
    );
    assert.equal(experiences[0]?.metrics?.accuracy, 1, 'the gold reward stays a metric');
    assert.equal(prompts.length, 2);
    const failed = await run(['[0.9, 0.3]'], {}, { probability_ground_truth_available: 0 });
    assert.deepEqual(rewards(failed.experiences), [0, 0, 0]);
  });

  test('the default probability 0.2 is drawn from the task seed: reproducible, about one task in five', async () => {
    let known = 0;
    for (let seed = 0; seed < 200; seed++) {
      const { experiences } = await run(['[1, 0, 0]', '[1, 0, 0]', '[1, 0, 0]'], { seed });
      if (experiences.length === 6) known++;
      if (seed < 5)
        assert.equal((await run(['[1, 0, 0]', '[1, 0, 0]', '[1, 0, 0]'], { seed })).experiences.length, experiences.length);
    }
    assert.ok(known >= 25 && known <= 55, `${known} of 200 tasks had the reference known`);
  });

  test('evaluation scores with the gold reward and asks no judge', async () => {
    const { experiences, prompts } = await run([], { isEval: true }, { probability_ground_truth_available: 1 });
    assert.deepEqual(
      rewards(experiences).map((r) => Number(r?.toFixed(12))),
      [1.1, 0.1, -0.1],
    );
    assert.equal(prompts.length, 1);
  });

  test('workflow_args: only probability_ground_truth_available, a number in [0, 1]', async () => {
    await assert.rejects(
      run([], {}, { probability_ground_truth_available: 1.5 }),
      /math_trainable_ruler_workflow: workflow_args.probability_ground_truth_available must be a number in \[0, 1\], got 1.5/,
    );
    assert.deepEqual(WORKFLOWS.get('math_trainable_ruler_workflow').workflowArgs, ['probability_ground_truth_available']);
  });
});
