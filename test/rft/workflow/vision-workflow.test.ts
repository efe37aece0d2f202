// A workflow chatting with an image on a Qwen2.5-VL rollout engine: in-process and on a worker thread (a module-path
// workflow, src/rft/workflow/isolation/) it gets the same experiences, each with the prompt's image as a data URL and
// its placeholder run in the tokens. simple_workflow on a task whose prompt has image parts (format.image_key) sends
// the images with the prompt; use_base's plain-text prompt refuses them by name.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { RolloutEngine } from '../../../src/engine/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, type Workflow, WorkflowRegistry, WorkflowRunner } from '../../../src/rft/workflow/index.js';
import * as torch from '../../../src/torch/index.js';
import { IMAGE_PAD, testImageDataUrl, visionModelDir } from '../../engine/vision-model.js';

const SOURCE = `async ({ model, task, repeatTimes }) => {
  const messages = [{ role: 'user', content: [
    { type: 'text', text: 'how many squares?' },
    { type: 'image_url', image_url: { url: task.raw.image } },
  ] }];
  const result = await model.chat(messages, { n: repeatTimes, temperature: 0, maxTokens: 4, ignoreEos: true });
  return result.choices.map((c) => model.toExperience(c, { reward: 1 }));
}`;

const comparable = (experiences: Experience[]) => experiences.map(({ eid: _, ...rest }) => rest);

describe('a workflow chatting with an image', () => {
  test('in-process and on a worker thread: experiences with the image and its placeholder tokens', {
    timeout: 120_000,
  }, async () => {
    torch.setNumThreads(1);
    const engine = RolloutEngine.load(visionModelDir(), { slots: 4, maxLength: 64 });
    const image = await testImageDataUrl(56, 56, 4); // 4 image tokens
    const dir = mkdtempSync(join(tmpdir(), 'vision-workflow-'));
    writeFileSync(join(dir, 'package.json'), '{"type": "module"}\n');
    writeFileSync(join(dir, 'vision.ts'), `export const vision = { repeatable: true, run: ${SOURCE} };\n`);
    const workflow = new Function(`return ${SOURCE}`)() as Workflow;
    const options = { models: new EngineModelHandle(engine), retryBackoffMs: 1, maxRetryTimes: 0, maxTimeout: 60 };
    const inProcess = new WorkflowRunner({
      ...options,
      workflows: new WorkflowRegistry().register('vision', { repeatable: true, run: workflow }),
    });
    const isolated = new WorkflowRunner({ ...options, baseDir: dir });
    const task = (workflowName: string): Task => ({
      id: 't',
      taskset: 'train',
      index: 0,
      raw: { image },
      workflow: workflowName,
    });
    try {
      const here = await inProcess.runStep([task('vision')], { step: 1, repeatTimes: 2 });
      const there = await isolated.runStep([task('vision.ts#vision')], { step: 1, repeatTimes: 2 });
      for (const result of [here, there])
        assert.deepEqual(
          result.statuses.map((s) => s.error ?? 'ok'),
          ['ok'],
        );
      assert.ok(isolated.workerThreadsStarted >= 1);
      assert.equal(here.experiences.length, 2);
      for (const experience of here.experiences) {
        assert.deepEqual(experience.images, [image]);
        assert.equal(experience.tokens.filter((id) => id === IMAGE_PAD).length, 4);
        // the prompt is every token before the 4 generated ones (its placeholders expanded)
        assert.equal(experience.promptLength, experience.tokens.length - 4);
        assert.deepEqual(experience.actionMask, [1, 1, 1, 1]);
      }
      assert.deepEqual(comparable(there.experiences), comparable(here.experiences));
    } finally {
      isolated.close();
      await engine.close();
    }
  });

  test('simple_workflow on a task with image parts (format.image_key): the engine gets the images, experiences keep them', async () => {
    torch.setNumThreads(1);
    const engine = RolloutEngine.load(visionModelDir(), { slots: 4, maxLength: 64 });
    const image = await testImageDataUrl(56, 56, 4); // 4 image tokens
    const runner = new WorkflowRunner({
      models: new EngineModelHandle(engine),
      retryBackoffMs: 1,
      maxRetryTimes: 0,
      maxTimeout: 60,
    });
    const task = (workflow: string, workflowArgs: Record<string, unknown> = {}): Task => ({
      id: 't',
      taskset: 'train',
      index: 0,
      raw: {},
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image_url', image_url: { url: image } },
            { type: 'text', text: 'count' },
          ],
        },
      ],
      response: '3',
      rewardFn: 'accuracy_reward',
      rolloutArgs: { max_tokens: 3 },
      workflow,
      workflowArgs,
    });
    try {
      const result = await runner.runStep([task('simple_workflow')], { step: 1, repeatTimes: 2 });
      assert.deepEqual(
        result.statuses.map((s) => s.error ?? 'ok'),
        ['ok'],
      );
      assert.equal(result.experiences.length, 2);
      for (const experience of result.experiences) {
        assert.deepEqual(experience.images, [image]);
        // the template's one placeholder became the image's 4, all in the prompt
        assert.equal(experience.tokens.slice(0, experience.promptLength).filter((id) => id === IMAGE_PAD).length, 4);
      }
      // a plain-text prompt (use_base) cannot hold the images: a named error, not a prompt without them
      const base = await runner.runStep([task('math_boxed_workflow', { use_base: true })], { step: 2, repeatTimes: 1 });
      assert.match(base.statuses[0]?.error ?? '', /task t has images \(format.image_key\), which a plain-text prompt/);
    } finally {
      runner.close();
      await engine.close();
    }
  });

  test('model.max_prompt_tokens leaves a chat with images to the engine (its length is known once decoded)', async () => {
    torch.setNumThreads(1);
    const engine = RolloutEngine.load(visionModelDir(), { slots: 2, maxLength: 64 });
    const image = await testImageDataUrl(56, 56, 4);
    const promptLimit = { maxPromptTokens: 8, maxModelLen: 64, truncate: true };
    const workflow = new Function(`return ${SOURCE}`)() as Workflow;
    const runner = new WorkflowRunner({
      models: new EngineModelHandle(engine, { promptLimit }),
      workflows: new WorkflowRegistry().register('vision', { repeatable: true, run: workflow }),
      retryBackoffMs: 1,
      maxRetryTimes: 0,
      maxTimeout: 60,
    });
    try {
      const task: Task = { id: 't', taskset: 'train', index: 0, raw: { image }, workflow: 'vision' };
      const { experiences } = await runner.runStep([task], { step: 1, repeatTimes: 1 });
      const [experience] = experiences as [Experience];
      assert.ok(experience.promptLength > promptLimit.maxPromptTokens, `${experience.promptLength} prompt tokens`);
      assert.notEqual(experience.truncateStatus, 'prompt_truncated', 'generated, not a placeholder');
      assert.deepEqual(experience.actionMask, [1, 1, 1, 1]);
    } finally {
      runner.close();
      await engine.close();
    }
  });
});
