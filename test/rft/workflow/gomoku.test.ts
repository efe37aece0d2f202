// Trinity-RFT's agentscope_gomoku workflow ported (src/rft/workflow/agents/gomoku.ts), played through the OpenAI client
// on a scripted backend under its Python class path: a won game with invalid moves on the way (their -1s summed with
// the win's +1 on every experience, the note after a move that changed nothing), one experience per model call whose
// prompt continues the agent's memory, the metrics on the last one; a game cut off at agent_max_steps; the move
// format; and the workflow_args refused before a run.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Task } from '../../../src/rft/task.js';
import {
  EngineModelHandle,
  GOMOKU_CLASS_PATH,
  parseGomokuMove,
  WORKFLOWS,
  WorkflowRunner,
} from '../../../src/rft/workflow/index.js';
import type { Tokenizer } from '../../../src/tokenizer/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { ScriptedBackend } from './scripted-backend.js';

const assistantTurns = (prompt: string) => prompt.split('<|im_start|>assistant\n').length - 2;
const INVALID_NOTE = /Your last move was invalid and the board did not change/;

describe('agentscope_gomoku workflow', () => {
  let tokenizer: Tokenizer;
  let handle: EngineModelHandle | undefined;
  let backend: ScriptedBackend;

  before(() => {
    tokenizer = fixtureTokenizer();
  });
  after(async () => {
    await handle?.close();
  });

  /** One game played with these replies, in order; the experiences and the run's error or 'ok'. */
  async function play(replies: string[], workflowArgs: Record<string, unknown> = {}) {
    await handle?.close();
    backend = new ScriptedBackend(tokenizer, (prompt) => replies[assistantTurns(prompt)] ?? 'no more replies');
    handle = new EngineModelHandle(backend, { modelVersion: 1 });
    const runner = new WorkflowRunner({ models: handle, maxRetryTimes: 0, maxTimeout: 60, workflows: WORKFLOWS });
    const task: Task = {
      id: 'game1',
      taskset: 'test',
      index: 0,
      raw: {},
      workflow: GOMOKU_CLASS_PATH,
      workflowArgs: { board_size: 5, win_length: 4, agent_max_steps: 20, ...workflowArgs },
      rolloutArgs: { temperature: 1, max_tokens: 100 },
    };
    const result = await runner.runStep([task], { step: 1, repeatTimes: 1 });
    return { experiences: result.experiences, errors: result.statuses.map((s) => s.error ?? 'ok') };
  }

  test('a won game: invalid moves cost -1 each, the win +1; one experience per call; metrics on the last', async () => {
    const replies = [
      'Row 1: ```1,0```', // O answers (0,0)
      '```9,9```', // off the board: -1, board unchanged
      'At 1 1.', // no ``` block: -1
      '```1,1```', // O (0,1)
      'Not ```0,0```: ```1,2```', // the last block is the move; X has (1,0)-(1,2): won
    ];
    const { experiences, errors } = await play(replies, { board_size: 4, win_length: 3 });
    assert.deepEqual(errors, ['ok']);
    assert.equal(experiences.length, 5, 'one experience per model call');
    for (const [index, experience] of experiences.entries()) {
      assert.equal(experience.reward, -1, '1 - 1 - 1');
      assert.equal(experience.info.terminate_reason, 'agent_won');
      assert.equal(experience.info.taskId, 'game1');
      if (index < 4) assert.equal(experience.metrics, undefined, 'metrics only on the last experience');
    }
    assert.deepEqual(experiences.at(-1)?.metrics, { env_steps: 5, env_done: 1, final_reward: -1 });
    const prompts = backend.prompts;
    assert.equal(prompts.length, 5);
    // the same agent throughout: each call's prompt holds every earlier reply
    assert.deepEqual(prompts.map(assistantTurns), [0, 1, 2, 3, 4]);
    assert.match(prompts[0] as string, /You play X/);
    assert.match(prompts[0] as string, /3 stones in a row/);
    assert.doesNotMatch(prompts[0] as string, /generate_response/, 'no tools, no finish function');
    assert.match(prompts[0] as string, /Current board \(step 0\):\n {2}0 1 2 3\n0 \. \. \. \.\n/);
    assert.match(prompts[0] as string, /Steps left: 20\./);
    assert.match(prompts[1] as string, /Current board \(step 1\):\n {2}0 1 2 3\n0 O \. \. \.\n1 X \. \. \.\n/);
    assert.doesNotMatch(prompts[1] as string, INVALID_NOTE);
    assert.match(prompts[2] as string, INVALID_NOTE);
    assert.match(prompts[3] as string, INVALID_NOTE);
    assert.equal((prompts[4] as string).match(INVALID_NOTE)?.length, 1, 'the note of the earlier prompts only');
    assert.doesNotMatch((prompts[4] as string).slice((prompts[3] as string).length), INVALID_NOTE);
  });

  test('a game cut off at agent_max_steps: max_steps_reached, not done', async () => {
    const { experiences, errors } = await play(['```2,2```', '```2,2```'], { agent_max_steps: 2 });
    assert.deepEqual(errors, ['ok']);
    assert.equal(experiences.length, 2);
    assert.ok(experiences.every((e) => e.reward === -1 && e.info.terminate_reason === 'max_steps_reached'));
    assert.deepEqual(experiences.at(-1)?.metrics, { env_steps: 2, env_done: 0, final_reward: -1 });
    assert.match(backend.prompts[1] as string, /Steps left: 1\./);
  });

  test('a conversation that outgrows the context ends the game as agent_error, its calls kept', async () => {
    // always off the board: the board never changes while the agent's memory grows past the 2048-token context
    const { experiences, errors } = await play(Array(40).fill('```7,7```'), { agent_max_steps: 40 });
    assert.deepEqual(errors, ['ok']);
    const calls = experiences.length;
    assert.ok(calls > 2 && calls < 40, `${calls} calls`);
    assert.equal(backend.prompts.length, calls, 'the call that did not fit generated nothing');
    assert.ok(experiences.every((e) => e.reward === -calls && e.info.terminate_reason === 'agent_error'));
    assert.deepEqual(experiences.at(-1)?.metrics, { env_steps: calls + 1, env_done: 0, final_reward: -calls });
  });

  test('the move is the last ``` block read as row,col', () => {
    assert.deepEqual(parseGomokuMove('```2,3```'), [2, 3]);
    assert.deepEqual(parseGomokuMove('x ```0,0``` then ``` 4 , 1 \n```'), [4, 1]);
    assert.equal(parseGomokuMove('2,3'), null);
    assert.equal(parseGomokuMove('```2,3,4```'), null);
    assert.equal(parseGomokuMove('```-1,2```'), null);
    assert.equal(parseGomokuMove('```row 2, col 3```'), null);
  });

  test('workflow_args are checked before a run', async () => {
    const spec = await WORKFLOWS.resolve(GOMOKU_CLASS_PATH);
    assert.deepEqual(spec.workflowArgs, ['board_size', 'win_length', 'agent_max_steps']);
    assert.equal(spec.readsPrompt, false);
    assert.doesNotThrow(() => spec.checkArgs?.({ board_size: 5, win_length: 4, agent_max_steps: 20 }));
    assert.throws(
      () => spec.checkArgs?.({ board_size: 3 }),
      /workflow_args.board_size \(3\) must be at least workflow_args.win_length \(4\)/,
    );
    assert.throws(
      () => spec.checkArgs?.({ agent_max_steps: 0 }),
      /workflow_args.agent_max_steps must be a positive integer, got 0/,
    );
  });
});
