// The experience pipeline as a whole: per-operator metrics, module-path operators, argument errors, save_input
// (JSONL and SQLite, resumed runs), and the explorer loop feeding the task selectors from pass_rate_calculator.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { ExperiencePipeline } from '../../../src/rft/data/experience-pipeline/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { runExplorerLoop } from '../../../src/rft/explorer/loop.js';

const dir = mkdtempSync(join(tmpdir(), 'exp-pipeline-'));

const exp = (eid: string, task: string, reward: number | undefined, step = 1): Experience => ({
  eid,
  tokens: [1, 2, 3, 4],
  promptLength: 2,
  ...(reward === undefined ? {} : { reward }),
  info: { taskId: task, step },
});

describe('experience pipeline', () => {
  test('operators run in order; each reports kept, dropped and seconds; a second one of a name is name#2', async () => {
    const pipeline = await ExperiencePipeline.create({
      operators: [
        { name: 'invalid_reward_filter', args: {} },
        { name: 'reward_filter', args: { threshold: 0.5 } },
        { name: 'reward_filter', args: { threshold: 0.8 } },
      ],
      inputSavePath: null,
    });
    const { experiences, metrics, taskFeedback } = await pipeline.process(
      [exp('a', 't', undefined), exp('b', 't', 0.2), exp('c', 't', 0.6), exp('d', 't', 0.9)],
      { step: 1, repeatTimes: 4 },
    );
    assert.deepEqual(
      experiences.map((e) => e.eid),
      ['d'],
    );
    const { ...counts } = Object.fromEntries(Object.entries(metrics).filter(([k]) => !k.endsWith('/seconds')));
    assert.deepEqual(counts, {
      'experience_pipeline/input': 4,
      'experience_pipeline/invalid_reward_filter/kept': 3,
      'experience_pipeline/invalid_reward_filter/dropped': 1,
      'experience_pipeline/invalid_reward_filter/filtered_count': 1,
      'experience_pipeline/reward_filter/kept': 2,
      'experience_pipeline/reward_filter/dropped': 1,
      'experience_pipeline/reward_filter/filtered_count': 1,
      'experience_pipeline/reward_filter#2/kept': 1,
      'experience_pipeline/reward_filter#2/dropped': 1,
      'experience_pipeline/reward_filter#2/filtered_count': 1,
      'experience_pipeline/output': 1,
    });
    assert.ok((metrics['experience_pipeline/reward_filter#2/seconds'] as number) >= 0);
    assert.equal(taskFeedback, null);
    assert.equal(pipeline.feedsSelectors, false);
  });

  test('a module-path operator is loaded relative to the base folder and behaves like a built-in', async () => {
    writeFileSync(
      join(dir, 'double.ts'),
      `export const double = {
  defaults: { factor: 2 },
  create: ({ factor }: { factor: number }) => ({
    process: (experiences: { reward?: number }[]) => ({
      experiences: experiences.map((e) => ({ ...e, reward: (e.reward ?? 0) * factor })),
      metrics: { doubled: experiences.length },
    }),
  }),
};
export const broken = { create: 1 };
`,
    );
    const pipeline = await ExperiencePipeline.create(
      { operators: [{ name: './double.ts#double', args: { factor: 3 } }], inputSavePath: null },
      { baseDir: dir },
    );
    const { experiences, metrics } = await pipeline.process([exp('a', 't', 0.5)], { step: 1, repeatTimes: 1 });
    assert.equal(experiences[0]?.reward, 1.5);
    assert.equal(metrics['experience_pipeline/./double.ts#double/doubled'], 1);
    await assert.rejects(
      ExperiencePipeline.create(
        { operators: [{ name: './double.ts#double', args: { factr: 3 } }], inputSavePath: null },
        { baseDir: dir },
      ),
      /operators\[0\] '.\/double.ts#double': .*unknown argument 'factr'; did you mean 'factor'/,
    );
    await assert.rejects(
      ExperiencePipeline.create({ operators: [{ name: './double.ts#broken', args: {} }], inputSavePath: null }, { baseDir: dir }),
      /the export must be an object \{ defaults: \{...\}, create\(options\) \}/,
    );
  });

  test('unknown operators and bad arguments are named with their place in the list', async () => {
    await assert.rejects(
      ExperiencePipeline.create({ operators: [{ name: 'reward_std_filtr', args: {} }], inputSavePath: null }),
      /operators\[0\] 'reward_std_filtr': unknown experience operator 'reward_std_filtr'; did you mean 'reward_std_filter'/,
    );
    await assert.rejects(
      ExperiencePipeline.create({ operators: [{ name: 'reward_filter', args: { threshold: 'high' } }], inputSavePath: null }),
      /argument 'threshold' must be a number/,
    );
  });

  test('save_input to JSONL: the raw input of every step; reopening at step k forgets later steps', async () => {
    const path = join(dir, 'raw.jsonl');
    const filter = { name: 'reward_std_filter', args: {} };
    let pipeline = await ExperiencePipeline.create({ operators: [filter], inputSavePath: path });
    for (const step of [1, 2, 3]) {
      const { experiences } = await pipeline.process([exp(`s${step}a`, 't', 1, step), exp(`s${step}b`, 't', 1, step)], {
        step,
        repeatTimes: 2,
      });
      assert.equal(experiences.length, 0); // equal rewards: the group is dropped, the raw input is still saved
    }
    await pipeline.close();
    const eids = () =>
      readFileSync(path, 'utf8')
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as Experience).eid);
    assert.deepEqual(eids(), ['s1a', 's1b', 's2a', 's2b', 's3a', 's3b']);
    // a run resumed from its checkpoint at step 1 explores steps 2 and 3 again
    pipeline = await ExperiencePipeline.create({ operators: [filter], inputSavePath: path }, { startStep: 1 });
    await pipeline.process([exp('again2', 't', 0, 2)], { step: 2, repeatTimes: 2 });
    await pipeline.close();
    assert.deepEqual(eids(), ['s1a', 's1b', 'again2']);
  });

  test('save_input to SQLite (sqlite:/// URL): rows with step, eid, task, reward and the experience; resume drops later steps', async () => {
    const file = join(dir, 'raw.db');
    let pipeline = await ExperiencePipeline.create({ operators: [], inputSavePath: `sqlite:///${file}` });
    await pipeline.process([exp('a', 't', 0.5, 1)], { step: 1, repeatTimes: 1 });
    await pipeline.process([exp('b', 'u', 1, 2)], { step: 2, repeatTimes: 1 });
    await pipeline.close();
    pipeline = await ExperiencePipeline.create({ operators: [], inputSavePath: file }, { startStep: 1 });
    await pipeline.close();
    const db = new Database(file, { readonly: true });
    const rows = db.prepare('SELECT step, eid, task_id, reward, data FROM experience_pipeline_input ORDER BY id').all() as {
      step: number;
      eid: string;
      task_id: string;
      reward: number;
      data: string;
    }[];
    db.close();
    assert.deepEqual(
      rows.map((r) => [r.step, r.eid, r.task_id, r.reward, (JSON.parse(r.data) as Experience).eid]),
      [[1, 'a', 't', 0.5, 'a']],
    );
    await assert.rejects(
      ExperiencePipeline.create({ operators: [], inputSavePath: join(dir, 'raw.csv') }),
      /input_save_path '.*raw\.csv': expected a \.jsonl file, a \.db\/\.sqlite file or a sqlite:\/\/\/ URL/,
    );
  });
});

describe('explorer loop with a pipeline', () => {
  /** One explore step of two tasks through runExplorerLoop with stand-ins for the runner, scheduler and weights. */
  async function exploreOnce(operators: { name: string; args: Record<string, unknown> }[]) {
    const produced = [exp('a1', 'a', 1), exp('a2', 'a', 0), exp('b1', 'b', 1), exp('b2', 'b', 1)];
    const feedback: [string, number[]][] = [];
    const written: Experience[] = [];
    const stepMetrics: Record<string, number>[] = [];
    let served = false;
    const pipeline = await ExperiencePipeline.create({ operators, inputSavePath: null });
    await runExplorerLoop({
      settings: { stageName: 't', evalTasksets: [], evalInterval: 0, evalOnStartup: false, sync: { style: 'trainer_driven' } },
      scheduler: {
        nextBatch: () => {
          if (served) return null;
          served = true;
          return { tasks: [{ id: 'a' }, { id: 'b' }] };
        },
        feedback: (step: ReadonlyMap<string, readonly number[]>) => {
          for (const [id, rewards] of step) feedback.push([id, [...rewards]]);
        },
        state: () => ({}),
      },
      runner: { runStep: async () => ({ experiences: produced, metrics: {}, statuses: [] }) },
      buffer: { write: async (es: Experience[]) => written.push(...es), finishWriting: async () => {} },
      weights: { version: 0, waitForVersion: async () => {}, withWeights: <T>(fn: () => T) => fn() },
      pipeline,
      repeatTimes: 2,
      bounds: { vocabSize: 100, maxLength: 100 },
      startStep: 0,
      totalSteps: 1,
      metricsDir: dir,
      onStep: (explored: { metrics: Record<string, number> }) => stepMetrics.push(explored.metrics),
      onEval: () => {},
      log: () => {},
    } as unknown as Parameters<typeof runExplorerLoop>[0]);
    return { feedback, written, metrics: stepMetrics[0] ?? {} };
  }

  test('the buffer gets what the pipeline kept; its metrics join the step; selectors see every raw reward', async () => {
    const { feedback, written, metrics } = await exploreOnce([{ name: 'reward_std_filter', args: {} }]);
    assert.deepEqual(
      written.map((e) => e.eid),
      ['a1', 'a2'],
    );
    assert.equal(metrics['experience_pipeline/reward_std_filter/dropped'], 2);
    assert.deepEqual(feedback, [
      ['a', [1, 0]],
      ['b', [1, 1]],
    ]);
  });

  test('with pass_rate_calculator the selectors learn from what it saw (here: after the filter)', async () => {
    const { feedback } = await exploreOnce([
      { name: 'reward_std_filter', args: {} },
      { name: 'pass_rate_calculator', args: {} },
    ]);
    assert.deepEqual(feedback, [['a', [1, 0]]]); // task b's group was dropped before the calculator
  });
});
