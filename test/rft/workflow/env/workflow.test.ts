// Environment workflows end to end: a scripted engine (real chat templates and conversation tracking, replies chosen
// by a policy that reads the last observation) checks episode and step experiences exactly; a tiny random model on
// a real RolloutEngine runs frozen_lake_workflow and sokoban_workflow through the WorkflowRunner.
import { NO_AUXILIARY_MODELS } from '../../../../src/rft/auxiliary/index.js';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  type ChatOptions,
  type ChatResult,
  chat,
  type GenerateRequest,
  type GenerateResult,
  RolloutEngine,
} from '../../../../src/engine/index.js';
import { CausalLM, initModel } from '../../../../src/model/index.js';
import { computeStepWiseGrpoAdvantages } from '../../../../src/rft/algorithm/advantage/index.js';
import { concatenatedConversationTokens } from '../../../../src/rft/buffer/dataset.js';
import { loadTaskset } from '../../../../src/rft/buffer/taskset.js';
import { validateExperience } from '../../../../src/rft/experience.js';
import type { Task } from '../../../../src/rft/task.js';
import {
  attemptModelHandle,
  EngineModelHandle,
  FROZEN_LAKE_SYSTEM_PROMPT,
  frozenLakeFromArgs,
  frozenLakeWorkflow,
  generateFrozenLake,
  renderFrozenLake,
  solveFrozenLake,
  sokobanWorkflow,
  WORKFLOWS,
  type WorkflowContext,
  WorkflowRunner,
} from '../../../../src/rft/workflow/index.js';
import type { ChatMessage } from '../../../../src/tokenizer/index.js';
import { Tokenizer } from '../../../../src/tokenizer/index.js';
import * as torch from '../../../../src/torch/index.js';

let modelDirectory: string;
let tokenizer: Tokenizer;

before(() => {
  torch.setNumThreads(1);
  modelDirectory = join(mkdtempSync(join(tmpdir(), 'env-wf-')), 'model');
  initModel(modelDirectory, { hiddenSize: 32, numLayers: 1, numHeads: 2, maxPositionEmbeddings: 512, seed: 3 });
  tokenizer = Tokenizer.load(modelDirectory);
});

/** An engine whose replies come from `policy(last user turn)`: exact ids, log-prob −0.5 each. */
class ScriptedEngine {
  readonly tokenizer: Tokenizer;
  readonly calls: number[][] = [];
  constructor(
    tok: Tokenizer,
    readonly policy: (observation: string) => string,
  ) {
    this.tokenizer = tok;
  }
  async generate(request: GenerateRequest): Promise<GenerateResult> {
    const promptIds = [...(request.promptIds ?? [])];
    this.calls.push(promptIds);
    const prompt = this.tokenizer.decode(promptIds, { skipSpecialTokens: false });
    const observation = prompt.slice(prompt.lastIndexOf('<|im_start|>user\n') + 17).split('<|im_end|>')[0] ?? '';
    const text = this.policy(observation);
    const eos = this.tokenizer.eosTokenIds[0] as number;
    const tokenIds = [...this.tokenizer.encode(text), eos];
    return {
      promptIds,
      completions: [{ index: 0, tokenIds, logprobs: tokenIds.map(() => -0.5), text, finishReason: 'stop', stopReason: eos }],
    };
  }
  chat(messages: readonly ChatMessage[], options?: ChatOptions): Promise<ChatResult> {
    return chat(this, messages, options);
  }
}

const lakeTask = (args: Record<string, unknown> = {}): Task => ({
  id: 'lake:0',
  taskset: 'lake',
  index: 0,
  raw: { seed: 14, size: 4 }, // a 5-move shortest path
  workflow: 'frozen_lake_workflow',
  workflowArgs: args,
  rolloutArgs: { max_tokens: 8 },
});

/** The expert for the task's map: the first move of a shortest path from where P stands. */
function lakeExpert(task: Task): (observation: string) => string {
  const { map } = frozenLakeFromArgs({ ...task.workflowArgs, ...task.raw }, { seed: task.index });
  return (observation) => solveFrozenLake(map, observation.replace(/\n/g, '').indexOf('P'))?.[0] ?? 'Up';
}

function context(engine: ScriptedEngine, task: Task, runIdBase = 0): WorkflowContext {
  const signal = new AbortController().signal;
  return {
    task,
    model: attemptModelHandle(new EngineModelHandle(engine), { signal, taskId: task.id }),
    repeatTimes: 1,
    runIdBase,
    seed: 9,
    signal,
    isEval: false,
    auxiliaryModels: NO_AUXILIARY_MODELS,
  };
}

describe('environment workflow (scripted replies)', () => {
  test('episode mode: one experience, mask 1 exactly on the replies, equal to the SFT layout of its transcript', async () => {
    const task = lakeTask();
    const engine = new ScriptedEngine(tokenizer, lakeExpert(task));
    const [experience, ...rest] = await frozenLakeWorkflow.run(context(engine, task, 2));
    assert.equal(rest.length, 0);
    assert.ok(experience);
    assert.deepEqual(validateExperience(experience), []);
    const { map } = frozenLakeFromArgs(task.raw, { seed: 0 });
    const steps = solveFrozenLake(map)?.length ?? 0;
    assert.ok(steps >= 2, 'the test map needs a multi-step path');
    assert.equal(experience.reward, 1);
    const { model_time_s, env_time_s, context_tokens, episode_tokens, ...outcome } = experience.metrics ?? {};
    assert.deepEqual(outcome, { success: 1, fell: 0, steps, invalid_actions: 0, truncated: 0 });
    // the context each call read, on average, and the conversation's final length
    const contexts = engine.calls.map((c) => c.length);
    assert.equal(context_tokens, contexts.reduce((a, b) => a + b, 0) / contexts.length);
    assert.equal(episode_tokens, experience.tokens.length);
    assert.ok((model_time_s ?? -1) >= 0 && (env_time_s ?? -1) >= 0, 'time in the model and in the environment');
    assert.equal(experience.info.runId, 2);
    // the prompt is the first call's prompt; every later call continued the earlier ids exactly
    assert.equal(engine.calls.length, steps);
    assert.deepEqual(experience.tokens.slice(0, experience.promptLength), engine.calls[0]);
    for (let i = 1; i < steps; i++)
      assert.deepEqual(experience.tokens.slice(0, (engine.calls[i] as number[]).length), engine.calls[i]);
    // generated tokens (mask 1) are the replies and their end tokens, nothing else
    const response = experience.tokens.slice(experience.promptLength);
    const generated = response.filter((_, i) => experience.actionMask?.[i] === 1);
    const replies = (experience.messages ?? []).filter((m) => m.role === 'assistant').map((m) => `${m.content}<|im_end|>`);
    assert.equal(replies.length, steps);
    assert.equal(tokenizer.decode(generated, { skipSpecialTokens: false }), replies.join(''));
    assert.deepEqual(
      experience.logprobs,
      experience.actionMask?.map((m) => (m === 1 ? -0.5 : 0)),
    );
    // the transcript, laid out as multi-turn SFT data, gives the same tokens and mask
    const sft = concatenatedConversationTokens(experience.messages ?? [], tokenizer);
    assert.deepEqual(sft, {
      tokens: experience.tokens,
      promptLength: experience.promptLength,
      actionMask: experience.actionMask,
    });
    assert.equal(experience.messages?.[0]?.content, FROZEN_LAKE_SYSTEM_PROMPT);
  });

  test('step mode: one experience per call, stepIndex in order, the episode reward on every step', async () => {
    const task = lakeTask({ experience_mode: 'step' });
    const engine = new ScriptedEngine(tokenizer, lakeExpert(task));
    const experiences = await frozenLakeWorkflow.run(context(engine, task, 1));
    assert.equal(experiences.length, engine.calls.length);
    experiences.forEach((e, i) => {
      assert.deepEqual(validateExperience(e), []);
      assert.deepEqual(e.tokens.slice(0, e.promptLength), engine.calls[i], 'the whole context so far is the prompt');
      assert.deepEqual(
        e.actionMask,
        e.tokens.slice(e.promptLength).map(() => 1),
      );
      assert.deepEqual([e.info.stepIndex, e.info.runId, e.info.taskId, e.reward], [i, 1, 'lake:0', 1]);
    });
  });

  test("step_reward_mode: 'propagate' puts the episode's reward on every step, 'step_wise' each step's own", async () => {
    // one invalid reply first (−0.25), then the expert's 5 moves to the goal (+1 on the last)
    const play = async (stepRewardMode: string) => {
      const task = lakeTask({ experience_mode: 'step', invalid_action_penalty: 0.25, step_reward_mode: stepRewardMode });
      const expert = lakeExpert(task);
      let calls = 0;
      const engine = new ScriptedEngine(tokenizer, (observation) => (calls++ === 0 ? 'jump' : expert(observation)));
      return (await frozenLakeWorkflow.run(context(engine, task))).map((e) => [e.reward, e.info.step_reward]);
    };
    const own = [-0.25, 0, 0, 0, 0, 1];
    assert.deepEqual(
      await play('propagate'),
      own.map((r) => [0.75, r]),
    );
    assert.deepEqual(
      await play('step_wise'),
      own.map((r) => [r, r]),
    );
    const engine = new ScriptedEngine(tokenizer, () => 'Up');
    await assert.rejects(
      frozenLakeWorkflow.run(context(engine, lakeTask({ experience_mode: 'step', step_reward_mode: 'own' }))),
      /step_reward_mode must be 'propagate' or 'step_wise', got "own" \(task 'lake:0', taskset 'lake' row 1\)/,
    );
    await assert.rejects(
      frozenLakeWorkflow.run(context(engine, lakeTask({ step_reward_mode: 'step_wise' }))),
      /step_reward_mode 'step_wise' .* needs experience_mode 'step' .* got 'episode'/,
    );
    await assert.rejects(
      frozenLakeWorkflow.run(
        context(
          engine,
          lakeTask({ experience_mode: 'step', step_reward_mode: 'step_wise', reward_fn_type: 'trajectory_accuracy' }),
        ),
      ),
      /reward_fn_type \("trajectory_accuracy"\) scores the whole episode/,
    );
    assert.equal(engine.calls.length, 0, 'refused before the episode is played');
  });

  test('step experiences feed step_wise_grpo: each run scored by its episode reward, on all of its steps', async () => {
    const task = lakeTask({ experience_mode: 'step', max_steps: 6, invalid_action_penalty: 0 });
    const expert = await frozenLakeWorkflow.run(context(new ScriptedEngine(tokenizer, lakeExpert(task)), task, 0));
    const lost = await frozenLakeWorkflow.run(context(new ScriptedEngine(tokenizer, () => 'x'), task, 1));
    const batch = [...expert, ...lost];
    const { advantages } = torch.scope(() => {
      const result = computeStepWiseGrpoAdvantages({
        actionMask: torch.ones([batch.length, 1]),
        rewards: torch.tensor(batch.map((e) => e.reward ?? Number.NaN)),
        groupIds: batch.map((e) => e.info.taskId as string),
        runIds: batch.map((e) => e.info.runId as number),
      });
      return { advantages: result.advantages.toArray() as number[][] };
    });
    // two runs with last-step rewards 1 and 0: mean 0.5, unbiased std 1/√2 → scores ±1/√2
    const score = 0.5 / Math.SQRT1_2;
    advantages.forEach(([a], i) => {
      assert.ok(Math.abs((a as number) - (i < expert.length ? score : -score)) < 1e-4, `step ${i}: ${a}`);
    });
    assert.equal(lost.length, 6);
  });

  test('invalid replies are penalised no-ops, counted; the episode stops at max_steps', async () => {
    const task = lakeTask({ max_steps: 3, invalid_action_penalty: 0.25 });
    const engine = new ScriptedEngine(tokenizer, () => 'jump');
    const [experience] = await frozenLakeWorkflow.run(context(engine, task));
    assert.equal(engine.calls.length, 3);
    assert.equal(experience?.reward, -0.75);
    const { model_time_s, env_time_s, context_tokens, episode_tokens, ...outcome } = experience?.metrics ?? {};
    assert.deepEqual(outcome, { success: 0, fell: 0, steps: 3, invalid_actions: 3, truncated: 1 });
    assert.deepEqual(
      [model_time_s, env_time_s, context_tokens, episode_tokens].map((v) => typeof v),
      ['number', 'number', 'number', 'number'],
    );
    await assert.rejects(
      frozenLakeWorkflow.run(context(engine, lakeTask({ experience_mode: 'turns' }))),
      /experience_mode must be 'episode' or 'step'/,
    );
    await assert.rejects(
      frozenLakeWorkflow.run(context(engine, lakeTask({ max_steps: 0 }))),
      /max_steps must be a positive integer/,
    );
  });
});

describe("Trinity's environment rows: {seed, size, p} and no prompt column", () => {
  /** Upstream's get_frozen_lake_data.py rows: seed, size, p, index, uid. */
  const trinityRows = [
    { seed: 27589, size: 3, p: 0.71, index: 0, uid: '27589_3_0.71' },
    { seed: 412, size: 5, p: 0.62, index: 1, uid: '412_5_0.62' },
    { seed: 9031, size: 4, p: 0.83, index: 2, uid: '9031_4_0.83' },
  ];
  const rowsFile = join(mkdtempSync(join(tmpdir(), 'lake-rows-')), 'train.jsonl');
  writeFileSync(rowsFile, `${trinityRows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  const lakeTaskset = { name: 'frozenlake', path: rowsFile, defaultWorkflowType: 'frozen_lake_workflow' };

  test('load without a prompt when the loader is told so (an environment default workflow); play the seed/size/p map', async () => {
    await assert.rejects(loadTaskset(lakeTaskset), /train\.jsonl:1: missing key 'prompt'/);
    const { tasks } = await loadTaskset({
      ...lakeTaskset,
      promptOptional: true,
      workflowArgs: { max_steps: 10, is_slippery: false },
    });
    assert.equal(tasks.length, 3);
    for (const [i, task] of tasks.entries()) {
      const row = trinityRows[i] as (typeof trinityRows)[number];
      assert.equal(task.prompt, undefined);
      const map = generateFrozenLake({ seed: row.seed, size: row.size, p: row.p });
      const [experience] = await frozenLakeWorkflow.run(context(new ScriptedEngine(tokenizer, lakeExpert(task)), task));
      assert.equal(experience?.messages?.[1]?.content, renderFrozenLake(map, map.start), `row ${i}: the map seed/size/p make`);
      assert.equal(experience?.reward, 1, `row ${i}: the expert reaches the goal`);
      // the same row plays the same map again
      const [again] = await frozenLakeWorkflow.run(context(new ScriptedEngine(tokenizer, () => 'x'), task));
      assert.equal(again?.messages?.[1]?.content, renderFrozenLake(map, map.start));
    }
  });

  test('workflow_args as Trinity names them: agent_max_steps, env_max_steps, desc', async () => {
    const engine = new ScriptedEngine(tokenizer, () => 'jump');
    await frozenLakeWorkflow.run(context(engine, lakeTask({ agent_max_steps: 2 })));
    assert.equal(engine.calls.length, 2, 'agent_max_steps bounds the turns as max_steps does');
    await assert.rejects(
      frozenLakeWorkflow.run(context(engine, lakeTask({ max_steps: 3, agent_max_steps: 4 }))),
      /max_steps \(3\) and agent_max_steps \(4\) are one setting/,
    );
    // env_max_steps: Trinity's check finds G beside a cell at most that deep, so a path of at most env_max_steps + 1
    // moves; the default (8) keeps maps that a bound of 3 redraws
    let differs = 0;
    for (let seed = 0; seed < 30; seed++) {
      const bounded = frozenLakeFromArgs({ seed, size: 6, env_max_steps: 3 }, { seed: 0 }).map;
      assert.ok((solveFrozenLake(bounded)?.length ?? 99) <= 4, `seed ${seed}`);
      if (bounded.rows.join() !== frozenLakeFromArgs({ seed, size: 6 }, { seed: 0 }).map.rows.join()) differs++;
    }
    assert.ok(differs > 0, 'the bound redraws some maps');
    // desc: a fixed map (gymnasium's letters)
    const fixed = lakeTask({ desc: ['SFF', 'FHF', 'FFG'] });
    const [won] = await frozenLakeWorkflow.run(context(new ScriptedEngine(tokenizer, lakeExpert(fixed)), fixed));
    assert.equal(won?.messages?.[1]?.content, 'P__\n_O_\n__G');
    assert.equal(won?.reward, 1);
    await assert.rejects(
      frozenLakeWorkflow.run(context(engine, lakeTask({ desc: ['SF', 'FFG'] }))),
      /desc row 1 \("FFG"\) must be 2 of S\/F\/H\/G/,
    );
    await assert.rejects(
      frozenLakeWorkflow.run(context(engine, lakeTask({ desc: ['SF', 'FF'] }))),
      /desc must have one S and one G, got 1 and 0/,
    );
  });

  test('rows that are not environment rows, or carry unusable values, are errors naming the task and its row', async () => {
    const engine = new ScriptedEngine(tokenizer, () => 'x');
    const row = (raw: Record<string, unknown>, workflowArgs: Record<string, unknown> = { max_steps: 10 }): Task => ({
      id: 'frozenlake:4',
      taskset: 'frozenlake',
      index: 4,
      raw,
      workflowArgs,
    });
    await assert.rejects(
      frozenLakeWorkflow.run(context(engine, row({ question: '1+1=', answer: '2' }))),
      /frozen_lake_workflow: task 'frozenlake:4', taskset 'frozenlake' row 5 has none of seed, size, p, desc \(in its row or workflow_args\) and no prompt: it is not a frozen_lake_workflow row \(row keys: question, answer\)/,
    );
    await assert.rejects(
      frozenLakeWorkflow.run(context(engine, row({ seed: 1, size: '4' }))),
      /frozen_lake_workflow: size must be an integer in \[2, 32\], got "4" \(task 'frozenlake:4', taskset 'frozenlake' row 5\)/,
    );
    await assert.rejects(
      frozenLakeWorkflow.run(context(engine, row({ seed: 1, size: 4, p: 1.5 }))),
      /p must be a number in .* got 1\.5 \(task 'frozenlake:4'/,
    );
    await assert.rejects(
      frozenLakeWorkflow.run(context(engine, row({ seed: 2.5 }))),
      /seed must be an integer .* got 2\.5 \(task 'frozenlake:4'/,
    );
    // Sokoban rows take the same form: {seed} plays, a row with none of its layout keys is refused
    const [played] = await sokobanWorkflow.run(context(engine, row({ seed: 3 }, { max_steps: 2 })));
    assert.equal(played?.metrics?.steps, 2);
    await assert.rejects(
      sokobanWorkflow.run(context(engine, row({ level: 3 }))),
      /sokoban_workflow: task 'frozenlake:4', taskset 'frozenlake' row 5 has none of seed, width, height, num_boxes/,
    );
  });
});

describe('environment workflows on a real engine', () => {
  let model: CausalLM;
  let engine: RolloutEngine;
  before(() => {
    model = CausalLM.load(modelDirectory);
    engine = new RolloutEngine(model, { tokenizer, maxLength: 512, slots: 4 });
  });
  after(async () => {
    await engine.close();
    model.dispose();
  });

  for (const name of ['frozen_lake_workflow', 'sokoban_workflow']) {
    test(`${name}: repeat_times episodes, each its own run, valid multi-turn experiences`, async () => {
      const runner = new WorkflowRunner({ models: new EngineModelHandle(engine), runnerPerModel: 3, seed: 1 });
      const task: Task = {
        id: `${name}:0`,
        taskset: 't',
        index: 0,
        raw: { seed: 5 },
        workflow: name,
        workflowArgs: { max_steps: 4 },
        rolloutArgs: { temperature: 1, max_tokens: 6 },
      };
      assert.equal((await WORKFLOWS.resolve(name)).repeatable, false);
      const { statuses, experiences } = await runner.runStep([task], { step: 1, repeatTimes: 3 });
      assert.deepEqual(
        statuses.map((s) => s.error),
        [undefined, undefined, undefined],
        'one status per episode',
      );
      assert.deepEqual(experiences.map((e) => e.info.runId).sort(), [0, 1, 2]);
      for (const e of experiences) {
        assert.deepEqual(validateExperience(e), []);
        const steps = e.metrics?.steps ?? 0;
        assert.ok(steps >= 1 && steps <= 4);
        // steps − 1 observation stretches (mask 0) between the steps' replies (mask 1)
        const mask = e.actionMask ?? [];
        const stretches = mask.filter((m, i) => m === 0 && mask[i - 1] === 1).length;
        assert.equal(stretches, steps - 1);
        assert.equal(mask[0], 1);
        assert.ok(Number.isFinite(e.reward));
      }
    });
  }
});
