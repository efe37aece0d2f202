// R3L's RAFT baseline workflows (RAFT_baseline_countdown_workflow, RAFT_baseline_dapo_workflow) with a scripted model:
// the prompts each attempt sees (R3L's countdown prompt with its attempt history, the dapo system prompt and problem),
// the feedback between attempts, the reward and the success/reward/attempts metrics, one experience at eval and
// repeat_times at train, an unsolved training rollout as a placeholder that trains no token, and the rows' errors.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { chat } from '../../../src/engine/index.js';
import { rowToTask } from '../../../src/rft/buffer/taskset.js';
import { NO_AUXILIARY_MODELS } from '../../../src/rft/auxiliary/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, type RolloutBackend, WORKFLOWS } from '../../../src/rft/workflow/index.js';
import {
  countdownPrompt,
  INVALID_FORMAT_FEEDBACK,
  parseReply,
  R3L_MATH_SYSTEM_PROMPT,
} from '../../../src/rft/workflow/r3l-raft.js';
import type { Tokenizer } from '../../../src/tokenizer/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { ScriptedBackend } from './scripted-backend.js';

const tokenizer = fixtureTokenizer();

const countdownTask = (raw: Record<string, unknown> = { nums: [4, 6, 1], target: 24 }): Task => ({
  id: 'cd:0',
  taskset: 'countdown',
  index: 0,
  raw,
});

/** A policy whose reply to attempt a (the number of feedback turns in the prompt so far) is replies[a]. */
const byAttempt = (replies: string[]) => (prompt: string) =>
  replies[Math.min(prompt.split('Feedback: ').length - 1, replies.length - 1)] as string;

async function run(
  name: string,
  task: Task,
  replies: string[],
  options: { repeatTimes: number; isEval: boolean; maxLength?: number },
) {
  const scripted = new ScriptedBackend(tokenizer, byAttempt(replies));
  // chat() as the engine serves it: the chat template (continuing the rollout's conversation), then generate(), which
  // refuses a prompt that leaves no room in maxLength as the engine does
  const backend: RolloutBackend = {
    tokenizer,
    generate: (request) => {
      const length = request.promptIds?.length ?? 0;
      if (options.maxLength !== undefined && length >= options.maxLength)
        throw new Error(
          `generate: the prompt has ${length} tokens; the engine's maxLength (${options.maxLength} positions per slot) leaves no room for a completion`,
        );
      return scripted.generate(request);
    },
    chat: (messages, options) => chat(backend, messages, options),
  };
  const workflow = await WORKFLOWS.resolve(name);
  const experiences = await workflow.run({
    task,
    model: new EngineModelHandle(backend),
    repeatTimes: options.repeatTimes,
    runIdBase: 0,
    seed: 7,
    signal: new AbortController().signal,
    isEval: options.isEval,
    auxiliaryModels: NO_AUXILIARY_MODELS,
  });
  return { experiences, prompts: scripted.prompts };
}

/** The trained text of an experience: its tokens where the action mask is 1. */
function trainedText(tok: Tokenizer, e: Experience): string {
  const response = e.tokens.slice(e.promptLength);
  return tok.decode(
    response.filter((_, i) => (e.actionMask?.[i] ?? 1) > 0),
    { skipSpecialTokens: true },
  );
}

const WRONG = '<think>add them</think><answer>4 + 6 + 1</answer>';
const RIGHT = '<think>multiply</think> <ANSWER> 4 * 6 * 1 </ANSWER>';

describe('RAFT_baseline_countdown_workflow', () => {
  test("R3L's countdown prompt: the task, then the failed attempts with their feedback", () => {
    const first = countdownPrompt([4, 6, 1], 24, 0, []);
    assert.equal(
      first,
      'You are an expert at solving countdown number problems.\n' +
        'Your current task is: Using the numbers [4, 6, 1], create an equation that equals 24. You can use basic ' +
        'arithmetic operations (+, -, *, /) and each number can only be used once.\n\n' +
        "Now it's your turn to solve this problem.\n" +
        'You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed ' +
        'within <think> </think> tags.\n' +
        "Once you've finished your reasoning, you should provide your equation answer and present it within <answer> " +
        '</answer> tags, for example <answer>(1 + 2) / 3</answer>.',
    );
    const third = countdownPrompt([4, 6, 1], 24, 2, [
      { equation: 'Invalid format', feedback: 'F1' },
      { equation: '4 + 6 + 1', feedback: 'F2' },
    ]);
    assert.ok(
      third.includes(
        'Your task is: Using the numbers [4, 6, 1], create an equation that equals 24.' +
          ' You can use basic arithmetic operations (+, -, *, /) and each number can only be used once.\n' +
          'Prior to this attempt, you have already made 2 attempt(s). Below are the most recent 2 attempts and their feedback:\n' +
          '  Attempt 1: Invalid format -> F1\n  Attempt 2: 4 + 6 + 1 -> F2\nYou are now at attempt 3.\n\n' +
          "Now it's your turn",
      ),
      third,
    );
  });

  test('a reply needs <think> and <answer> (case-insensitive); dapo also reads an "Answer:" line', () => {
    assert.deepEqual(parseReply(RIGHT, false), { think: 'multiply', answer: '4 * 6 * 1' });
    assert.deepEqual(parseReply('<answer>3</answer>', false), { think: null, answer: '3' });
    assert.deepEqual(parseReply('<think>x</think> Answer: 3/4\nmore', false), { think: 'x', answer: null });
    assert.deepEqual(parseReply('<think>x</think> Answer: 3/4\nmore', true), { think: 'x', answer: '3/4' });
  });

  test('train: three attempts with feedback, solved at the third; the conversation up to the last reply is the experience', async () => {
    const { experiences, prompts } = await run('RAFT_baseline_countdown_workflow', countdownTask(), ['no tags', WRONG, RIGHT], {
      repeatTimes: 1,
      isEval: false,
    });
    assert.equal(prompts.length, 3);
    assert.ok(prompts[1]?.includes(`Feedback: ${INVALID_FORMAT_FEEDBACK}`));
    assert.ok(prompts[1]?.includes(`  Attempt 1: Invalid format -> ${INVALID_FORMAT_FEEDBACK}\nYou are now at attempt 2.`));
    assert.ok(prompts[2]?.includes('Feedback: Incorrect. Your equation 4 + 6 + 1 does not work. Please try again.'));
    assert.ok(prompts[2]?.includes('  Attempt 2: 4 + 6 + 1 -> Incorrect. Your equation 4 + 6 + 1 does not work.'));
    assert.equal(experiences.length, 1);
    const [e] = experiences as [Experience];
    assert.equal(e.reward, 1);
    assert.deepEqual(e.metrics, { success: 1, reward: 1, attempts: 3 });
    // the three replies are trained, the feedback and prompts between them are not
    assert.equal(trainedText(tokenizer, e), `no tags${WRONG}${RIGHT}`);
    const last = tokenizer.decode(e.tokens, { skipSpecialTokens: false });
    assert.ok(last.trimEnd().endsWith(RIGHT) || last.includes(`${RIGHT}<|im_end|>`), last);
    assert.ok(!last.includes('Correct!'), 'the last feedback is not part of the experience');
    assert.deepEqual(
      e.messages?.map((m) => m.role),
      ['user', 'assistant', 'user', 'user', 'assistant', 'user', 'user', 'assistant'],
    );
  });

  test('train: repeat_times rollouts; an unsolved one is a placeholder that trains no token', async () => {
    const { experiences, prompts } = await run('RAFT_baseline_countdown_workflow', countdownTask(), [WRONG], {
      repeatTimes: 2,
      isEval: false,
    });
    assert.equal(prompts.length, 6, 'three attempts per rollout');
    assert.ok(
      prompts.every((p) => !p.includes('Maximum attempts reached')),
      'the last feedback is asked of nobody',
    );
    assert.equal(experiences.length, 2);
    for (const e of experiences) {
      assert.equal(e.reward, 0);
      assert.deepEqual(e.metrics, { success: 0, reward: 0 });
      assert.deepEqual(e.actionMask, [0]);
      assert.equal(e.tokens.length, 2);
      assert.equal(e.promptLength, 1);
    }
    assert.deepEqual(experiences.map((e) => e.info.runId).sort(), [0, 1]);
  });

  test('eval: one rollout whatever repeat_times, kept with its metrics when unsolved', async () => {
    const { experiences, prompts } = await run('RAFT_baseline_countdown_workflow', countdownTask(), [WRONG], {
      repeatTimes: 4,
      isEval: true,
    });
    assert.equal(prompts.length, 3);
    assert.equal(experiences.length, 1);
    const [e] = experiences as [Experience];
    assert.equal(e.reward, 0);
    assert.deepEqual(e.metrics, { success: 0, reward: 0, attempts: 3 });
    assert.equal(trainedText(tokenizer, e), WRONG.repeat(3));
  });

  test('a conversation that outgrows the context ends the rollout unsolved where the engine refuses the next call', async () => {
    const first = await run('RAFT_baseline_countdown_workflow', countdownTask(), [WRONG], { repeatTimes: 1, isEval: true });
    const firstLength = (first.experiences[0] as Experience).tokens.length;
    // room for the first call's prompt but not for the second's (the first reply, its feedback and the next prompt)
    const { experiences, prompts } = await run('RAFT_baseline_countdown_workflow', countdownTask(), [WRONG], {
      repeatTimes: 1,
      isEval: true,
      maxLength: firstLength / 3 + 60,
    });
    assert.equal(prompts.length, 1);
    const [e] = experiences as [Experience];
    assert.deepEqual(e.metrics, { success: 0, reward: 0, attempts: 1 });
    assert.equal(trainedText(tokenizer, e), WRONG);
  });

  test("registered as the configs spell the names and as R3L's repository spelled them (lower case)", () => {
    assert.equal(WORKFLOWS.get('raft_baseline_countdown_workflow').run, WORKFLOWS.get('RAFT_baseline_countdown_workflow').run);
    assert.equal(WORKFLOWS.get('raft_baseline_dapo_workflow').run, WORKFLOWS.get('RAFT_baseline_dapo_workflow').run);
    assert.throws(() => WORKFLOWS.get('RAFT_baseline_alfworld_workflow'), /needs ALFWorld/);
  });

  test("a row without 'nums' or 'target' is an error naming the task and the row", async () => {
    await assert.rejects(
      run('RAFT_baseline_countdown_workflow', countdownTask({ numbers: [1, 2], target: 3 }), [RIGHT], {
        repeatTimes: 1,
        isEval: false,
      }),
      /task cd:0 \(row 0 of taskset 'countdown'\): 'nums' must be a list of non-negative integers, got undefined/,
    );
    await assert.rejects(
      run('RAFT_baseline_countdown_workflow', countdownTask({ nums: [1, 2], target: '3' }), [RIGHT], {
        repeatTimes: 1,
        isEval: false,
      }),
      /'target' must be a number, got "3"/,
    );
  });

  test("the countdown config's format (prompt_key nums, a list) loads for it; other workflows still refuse a list", () => {
    const row = { nums: [4, 6, 1], target: 24 };
    const format = { promptKey: 'nums', responseKey: 'target' };
    const task = rowToTask({ name: 'countdown', path: 'x', format, promptOptional: true }, 0, row, 'x:1');
    assert.equal(task.prompt, undefined);
    assert.equal(task.response, '24');
    assert.throws(
      () => rowToTask({ name: 'countdown', path: 'x', format }, 0, row, 'x:1'),
      /key 'nums' must be a string, got an array/,
    );
  });
});

describe('RAFT_baseline_dapo_workflow', () => {
  const dapoTask = (raw: Record<string, unknown>): Task => ({ id: 'dapo:3', taskset: 'dapo', index: 3, raw });
  const DAPO_ROW = {
    prompt: [{ role: 'user', content: 'What is 1/2 + 1/4?' }],
    reward_model: { ground_truth: '3/4', style: 'rule' },
  };

  test('the system prompt and the problem, feedback after a wrong answer, an "Answer:" line accepted', async () => {
    const { experiences, prompts } = await run(
      'RAFT_baseline_dapo_workflow',
      dapoTask(DAPO_ROW),
      ['<think>a</think><answer>\\boxed{1/2}</answer>', '<think>b</think>\nAnswer: \\frac{3}{4}'],
      { repeatTimes: 1, isEval: false },
    );
    assert.equal(prompts.length, 2);
    assert.ok(prompts[0]?.includes(R3L_MATH_SYSTEM_PROMPT));
    assert.ok(prompts[0]?.includes('What is 1/2 + 1/4?'));
    assert.ok(prompts[1]?.includes('Feedback: Incorrect. Your answer \\boxed{1/2} does not match. Please try again.'));
    const [e] = experiences as [Experience];
    assert.equal(e.reward, 1);
    assert.deepEqual(e.metrics, { success: 1, reward: 1, attempts: 2 });
    assert.deepEqual(
      e.messages?.map((m) => m.role),
      ['system', 'user', 'assistant', 'user', 'assistant'],
    );
  });

  test('the math eval rows {question, answer}: a boxed answer equal to the reference as a number', async () => {
    const { experiences } = await run(
      'RAFT_baseline_dapo_workflow',
      dapoTask({ question: 'Half of 3?', answer: '1.5' }),
      ['<think>t</think><answer>\\boxed{\\frac{3}{2}}</answer>'],
      { repeatTimes: 3, isEval: true },
    );
    assert.equal(experiences.length, 1);
    assert.deepEqual(experiences[0]?.metrics, { success: 1, reward: 1, attempts: 1 });
  });

  test('a symbolically equal answer is correct (2x+1 for 1+2x, \\sqrt{8} for 2\\sqrt{2}); a different one is not', async () => {
    const grade = async (reply: string, answer: string) =>
      (
        await run('RAFT_baseline_dapo_workflow', dapoTask({ question: 'q', answer }), [reply], {
          repeatTimes: 1,
          isEval: true,
        })
      ).experiences[0]?.metrics?.success;
    assert.equal(await grade('<think>t</think><answer>\\boxed{2x+1}</answer>', '1+2x'), 1);
    assert.equal(await grade('<think>t</think><answer>\\sqrt{8}</answer>', '2\\sqrt{2}'), 1);
    assert.equal(await grade('<think>t</think><answer>\\boxed{2x-1}</answer>', '1+2x'), 0);
  });

  test('a row of none of the forms is an error naming them', async () => {
    await assert.rejects(
      run('RAFT_baseline_dapo_workflow', dapoTask({ problem: 'x' }), ['-'], { repeatTimes: 1, isEval: false }),
      /task dapo:3 \(row 3 of taskset 'dapo'\): the row has none of the forms/,
    );
    await assert.rejects(
      run('RAFT_baseline_dapo_workflow', dapoTask({ ...DAPO_ROW, reward_model: {} }), ['-'], { repeatTimes: 1, isEval: false }),
      /'reward_model'.ground_truth must be non-empty text, got undefined/,
    );
  });
});
