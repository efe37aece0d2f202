// Environment workflows end to end: a scripted engine (real chat templates and conversation tracking, replies chosen
// by a policy that reads the last observation) checks episode and step experiences exactly; a tiny random model on
// a real RolloutEngine runs frozen_lake_workflow and sokoban_workflow through the WorkflowRunner.
import { NO_AUXILIARY_MODELS } from '../../../../src/rft/auxiliary/index.js';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
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
import { validateExperience } from '../../../../src/rft/experience.js';
import type { Task } from '../../../../src/rft/task.js';
import {
  attemptModelHandle,
  EngineModelHandle,
  FROZEN_LAKE_SYSTEM_PROMPT,
  frozenLakeFromArgs,
  frozenLakeWorkflow,
  solveFrozenLake,
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
  raw: { seed: 11, size: 4 },
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
    assert.deepEqual(experience.metrics, { success: 1, fell: 0, steps, invalid_actions: 0, truncated: 0 });
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

  test('step experiences feed step_wise_grpo: each run scored by its episode reward, on all of its steps', async () => {
    const task = lakeTask({ experience_mode: 'step', max_steps: 3, invalid_action_penalty: 0 });
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
    assert.equal(lost.length, 3);
  });

  test('invalid replies are penalised no-ops, counted; the episode stops at max_steps', async () => {
    const task = lakeTask({ max_steps: 3, invalid_action_penalty: 0.25 });
    const engine = new ScriptedEngine(tokenizer, () => 'jump');
    const [experience] = await frozenLakeWorkflow.run(context(engine, task));
    assert.equal(engine.calls.length, 3);
    assert.equal(experience?.reward, -0.75);
    assert.deepEqual(experience?.metrics, { success: 0, fell: 0, steps: 3, invalid_actions: 3, truncated: 1 });
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
