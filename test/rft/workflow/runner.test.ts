// The workflow runner with fake engines: concurrency limits, stamping, retries, timeouts that abort model calls,
// malformed results, stopping a step, eval metrics, and workflows loaded by module path.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { type GenerateRequest, type GenerateResult, GenerationError } from '../../../src/engine/index.js';
import type { Task } from '../../../src/rft/task.js';
import {
  EngineModelHandle,
  type RolloutBackend,
  type Workflow,
  WorkflowRegistry,
  WorkflowRunner,
  type WorkflowRunnerOptions,
} from '../../../src/rft/workflow/index.js';

/**
 * Answers generate() after `delayMs` (prompt id 0: never), counting calls in flight and aborts; `onCall` runs when a
 * call has started (its abort listener is in place).
 */
class FakeBackend implements RolloutBackend {
  readonly tokenizer = null;
  inFlight = 0;
  maxInFlight = 0;
  aborted = 0;
  calls = 0;
  onCall: (() => void) | null = null;
  constructor(readonly delayMs = 5) {}

  generate(request: GenerateRequest): Promise<GenerateResult> {
    this.calls++;
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    const promptIds = [...(request.promptIds ?? [])];
    return new Promise((resolve, reject) => {
      if (request.signal?.aborted) {
        this.inFlight--;
        this.aborted++;
        return reject(new GenerationError('aborted', 'aborted before it started'));
      }
      const onAbort = () => {
        clearTimeout(timer);
        this.inFlight--;
        this.aborted++;
        reject(new GenerationError('aborted', 'generate: aborted'));
      };
      const timer =
        promptIds[0] === 0
          ? undefined
          : setTimeout(() => {
              request.signal?.removeEventListener('abort', onAbort);
              this.inFlight--;
              const n = request.n ?? 1;
              resolve({
                promptIds,
                completions: Array.from({ length: n }, (_, i) => ({
                  index: i,
                  tokenIds: [10 + i, 2],
                  logprobs: [-0.5 - i, -0.25],
                  text: `answer ${i}`,
                  finishReason: 'stop' as const,
                  stopReason: 2,
                })),
              });
            }, this.delayMs);
      request.signal?.addEventListener('abort', onAbort, { once: true });
      this.onCall?.();
    });
  }

  chat(): never {
    throw new Error('FakeBackend has no chat');
  }
}

const task = (id: string, workflow: string, extra: Partial<Task> = {}): Task => ({
  id,
  taskset: 'train',
  index: 0,
  raw: {},
  workflow,
  ...extra,
});

/** Samples n answers of prompt [1, 2, 3] (prompt [0] hangs in the fake engine), reward 1 for run 0. */
const sampleWorkflow =
  (prompt: number[] = [1, 2, 3]): Workflow =>
  async ({ model, repeatTimes, runIdBase }) => {
    const result = await model.generate({ promptIds: prompt, n: repeatTimes });
    return result.completions.map((c) =>
      model.toExperience(c, { reward: runIdBase + c.index === 0 ? 1 : 0, runId: runIdBase + c.index }),
    );
  };

function registry(): { workflows: WorkflowRegistry; attempts: Map<string, number> } {
  const attempts = new Map<string, number>();
  const count = (id: string) => {
    const n = (attempts.get(id) ?? 0) + 1;
    attempts.set(id, n);
    return n;
  };
  const ok = sampleWorkflow();
  const workflows = new WorkflowRegistry()
    .register('ok', ok)
    .register('throws', async ({ task }) => {
      count(task.id);
      throw new Error('boom');
    })
    .register('throws_sync', (({ task }) => {
      count(task.id);
      throw new Error('sync boom');
    }) as Workflow)
    .register('flaky', async (context) => {
      if (count(context.task.id) === 1) throw new Error('first attempt fails');
      return ok(context);
    })
    .register('hangs_in_model', sampleWorkflow([0]))
    .register('hangs', () => new Promise(() => {}))
    .register('malformed', async (context) => {
      const [e] = await ok(context);
      assert.ok(e);
      return [{ ...e, logprobs: [0] }];
    })
    .register('empty', async () => [])
    .register('not_a_list', (async () => ({ nope: true })) as unknown as Workflow)
    .register('one_at_a_time', { repeatable: false, run: ok });
  return { workflows, attempts };
}

const runnerWith = (backend: FakeBackend | FakeBackend[], options: Partial<WorkflowRunnerOptions> = {}) => {
  const { workflows, attempts } = registry();
  const backends = Array.isArray(backend) ? backend : [backend];
  const handles = backends.map((b) => new EngineModelHandle(b, { modelVersion: 7 }));
  const runner = new WorkflowRunner({ models: handles, workflows, retryBackoffMs: 1, maxTimeout: 5, ...options });
  return { runner, attempts, handles };
};

describe('scheduling and stamping', () => {
  test('runs at most runnerPerModel at once per model, all tasks done', async () => {
    const backend = new FakeBackend(15);
    const { runner } = runnerWith(backend, { runnerPerModel: 3 });
    // the runner's count of runs in flight, taken at every model call (each run makes one)
    let peak = 0;
    backend.onCall = () => {
      peak = Math.max(peak, runner.inFlight);
    };
    const tasks = Array.from({ length: 10 }, (_, i) => task(`t${i}`, 'ok'));
    const { experiences, metrics } = await runner.runStep(tasks, { step: 1, repeatTimes: 2 });
    assert.equal(backend.calls, 10);
    assert.equal(backend.maxInFlight, 3);
    assert.equal(peak, 3, `runner in flight peaked at ${peak}`);
    assert.equal(experiences.length, 20);
    assert.equal(metrics['rollout/tasks/ok'], 10);
    assert.equal(runner.inFlight, 0);
  });

  test('several models: each gets at most runnerPerModel, work is spread', async () => {
    const backends = [new FakeBackend(10), new FakeBackend(10)];
    const { runner } = runnerWith(backends, { runnerPerModel: 2 });
    await runner.runStep(
      Array.from({ length: 8 }, (_, i) => task(`t${i}`, 'ok')),
      { step: 0, repeatTimes: 1 },
    );
    assert.deepEqual(
      backends.map((b) => b.maxInFlight),
      [2, 2],
    );
    assert.deepEqual(
      backends.map((b) => b.calls),
      [4, 4],
    );
  });

  test('experiences carry the exact ids and logprobs, model version, task id, run id and step', async () => {
    const { runner } = runnerWith(new FakeBackend(1));
    const { experiences, metrics, statuses } = await runner.runStep([task('a', 'ok'), task('b', 'one_at_a_time')], {
      step: 5,
      repeatTimes: 3,
    });
    const a = experiences.filter((e) => e.info.taskId === 'a');
    assert.deepEqual(
      a.map((e) => [e.tokens, e.promptLength, e.logprobs, e.actionMask, e.info.runId, e.info.step, e.info.modelVersion]),
      [0, 1, 2].map((i) => [[1, 2, 3, 10 + i, 2], 3, [-0.5 - i, -0.25], [1, 1], i, 5, 7]),
    );
    assert.equal(a[0]?.responseText, 'answer 0');
    // Not repeatable: three runs with n = 1, runIds 0, 1, 2.
    const b = experiences.filter((e) => e.info.taskId === 'b');
    assert.deepEqual(b.map((e) => e.info.runId).sort(), [0, 1, 2]);
    assert.deepEqual(
      b.map((e) => e.tokens),
      [0, 1, 2].map(() => [1, 2, 3, 10, 2]),
    );
    assert.equal(statuses.length, 4);
    // Rewards 1 for run 0 of each task: [1,0,0,1,0,0].
    assert.equal(metrics['rollout/reward/mean'], 1 / 3);
    assert.equal(metrics['rollout/reward/max'], 1);
    assert.equal(metrics['rollout/reward/min'], 0);
    assert.ok(Math.abs((metrics['rollout/reward/std'] as number) - Math.sqrt(2 / 9)) < 1e-12);
    assert.equal(metrics['rollout/response_length/mean'], 2);
    assert.equal(metrics['rollout/experiences'], 6);
    assert.ok((metrics['rollout/time_s'] as number) > 0);
    assert.equal(metrics['rollout/runs_per_s'], (metrics['rollout/runs/ok'] as number) / (metrics['rollout/time_s'] as number));
  });
});

describe('isolation', () => {
  test('a throwing workflow is retried, then counted as failed; the others succeed', async () => {
    const { runner, attempts } = runnerWith(new FakeBackend(1), { maxRetryTimes: 2 });
    const tasks = [
      task('ok1', 'ok'),
      task('bad', 'throws'),
      task('sync', 'throws_sync'),
      task('flaky', 'flaky'),
      task('ok2', 'ok'),
    ];
    const { experiences, metrics, statuses } = await runner.runStep(tasks, { step: 0, repeatTimes: 2 });
    assert.equal(attempts.get('bad'), 3);
    assert.equal(attempts.get('sync'), 3);
    assert.equal(attempts.get('flaky'), 2);
    assert.deepEqual([...new Set(experiences.map((e) => e.info.taskId))].sort(), ['flaky', 'ok1', 'ok2']);
    assert.equal(metrics['rollout/tasks/ok'], 3);
    assert.equal(metrics['rollout/tasks/failed'], 2);
    assert.equal(metrics['rollout/attempts/retried'], 2 + 2 + 1);
    assert.equal(metrics['rollout/attempts/errored'], 3 + 3 + 1);
    const bad = statuses.find((s) => s.taskId === 'bad');
    assert.equal(bad?.ok, false);
    assert.equal(bad?.error, 'boom');
  });

  // The hung workflows never settle: the step resolving at all shows it did not wait for them. The test's timeout
  // only turns a regression into a failure instead of a hang.
  test('a hanging workflow times out and its model call is aborted', { timeout: 60_000 }, async () => {
    const backend = new FakeBackend(1);
    const { runner } = runnerWith(backend, { maxTimeout: 0.05, maxRetryTimes: 1 });
    const { experiences, metrics, statuses } = await runner.runStep(
      [task('stuck', 'hangs_in_model'), task('deaf', 'hangs'), task('fine', 'ok')],
      { step: 0, repeatTimes: 1 },
    );
    assert.equal(backend.aborted, 2, 'both attempts of the hung model call were aborted');
    assert.equal(backend.inFlight, 0);
    assert.deepEqual(
      experiences.map((e) => e.info.taskId),
      ['fine'],
    );
    assert.equal(metrics['rollout/attempts/timed_out'], 4);
    assert.equal(metrics['rollout/tasks/failed'], 2);
    assert.match(statuses.find((s) => s.taskId === 'deaf')?.error ?? '', /timed out after 0.05 s/);
  });

  test('malformed, empty or non-list results are rejected and counted', async () => {
    const { runner } = runnerWith(new FakeBackend(1), { maxRetryTimes: 1 });
    const { experiences, metrics, statuses } = await runner.runStep(
      [task('m', 'malformed'), task('e', 'empty'), task('n', 'not_a_list'), task('ok', 'ok')],
      { step: 0, repeatTimes: 1 },
    );
    assert.deepEqual(
      experiences.map((e) => e.info.taskId),
      ['ok'],
    );
    assert.equal(metrics['rollout/attempts/malformed'], 6);
    assert.equal(metrics['rollout/tasks/failed'], 3);
    assert.match(
      statuses.find((s) => s.taskId === 'm')?.error ?? '',
      /logprobs must have one entry per response token \(2\), got 1/,
    );
    assert.match(statuses.find((s) => s.taskId === 'e')?.error ?? '', /returned no experiences/);
    assert.match(statuses.find((s) => s.taskId === 'n')?.error ?? '', /returned object, not a list/);
  });

  test('an unknown workflow in a task fails that task; an unknown default fails the step', async () => {
    const { runner } = runnerWith(new FakeBackend(1));
    const { metrics, statuses } = await runner.runStep([task('x', 'okk'), task('y', 'ok')], { step: 0, repeatTimes: 1 });
    assert.equal(metrics['rollout/tasks/failed'], 1);
    assert.match(statuses.find((s) => s.taskId === 'x')?.error ?? '', /unknown workflow 'okk'; did you mean 'ok'/);
    const { runner: misconfigured } = runnerWith(new FakeBackend(1), { defaultWorkflow: 'nope' });
    await assert.rejects(misconfigured.runStep([], { step: 0, repeatTimes: 1 }), /unknown workflow 'nope'/);
  });

  // maxTimeout far beyond the test's timeout: only the stop can end the hung call (the timeout turns a regression
  // into a failure instead of a hang)
  test('stopping a step aborts running attempts and starts nothing new', { timeout: 60_000 }, async () => {
    const backend = new FakeBackend(1);
    const { runner } = runnerWith(backend, { runnerPerModel: 1, maxRetryTimes: 3, maxTimeout: 3600 });
    const stop = new AbortController();
    // stop once the first task's model call is running (after generate() has returned to its caller)
    backend.onCall = () => queueMicrotask(() => stop.abort());
    const { metrics } = await runner.runStep([task('h1', 'hangs_in_model'), task('h2', 'hangs_in_model')], {
      step: 0,
      repeatTimes: 1,
      signal: stop.signal,
    });
    assert.equal(metrics['rollout/tasks/failed'], 2);
    assert.equal(metrics['rollout/attempts/timed_out'], 0);
    assert.equal(backend.calls, 1, 'the second task never started');
    assert.equal(backend.aborted, 1);
  });
});

describe('a stopped step', () => {
  // the stage stopped the step with another part's error (a checkpoint that could not be written): the runs it cut
  // short are cancelled by that error, not failures of their own, and the log says so once for the step
  test("runs cut short are cancelled with the stop's reason, not logged as their own failures", { timeout: 60_000 }, async () => {
    const backend = new FakeBackend(1);
    const logged: string[] = [];
    const { runner } = runnerWith(backend, {
      runnerPerModel: 2,
      maxRetryTimes: 2,
      maxTimeout: 3600,
      log: (line) => logged.push(line),
    });
    const stop = new AbortController();
    const reason = new Error("cannot write checkpoint 3's optimizer state to /job/x: ENOSPC");
    let started = 0;
    backend.onCall = () => {
      if (++started === 2) queueMicrotask(() => stop.abort(reason));
    };
    const tasks = [task('h1', 'hangs_in_model'), task('h2', 'hangs_in_model'), task('h3', 'hangs_in_model')];
    const { statuses, metrics } = await runner.runStep(tasks, { step: 3, repeatTimes: 1, signal: stop.signal });
    assert.equal(statuses.length, 3);
    for (const status of statuses) {
      assert.equal(status.ok, false);
      assert.equal(status.cancelled, true, status.taskId);
      assert.equal(
        status.error,
        "cancelled: the step was stopped by: cannot write checkpoint 3's optimizer state to /job/x: ENOSPC",
      );
    }
    assert.equal(metrics['rollout/attempts/errored'], 0);
    assert.deepEqual(logged, [
      "step 3: 3 workflow runs cancelled: the step was stopped by: cannot write checkpoint 3's optimizer state to /job/x: ENOSPC",
    ]);
  });
});

describe('eval', () => {
  test('mean@k, best@k and pass@k per taskset', async () => {
    const backend = new FakeBackend(1);
    // Task "a": runs 0 and 2 correct; task "b": none; task "c" (another taskset): all correct.
    const correctRuns: Record<string, number[]> = { a: [0, 2], b: [], c: [0, 1, 2, 3] };
    const workflows = new WorkflowRegistry().register('graded', {
      repeatable: false,
      run: async ({ task, model, runIdBase, isEval }) => {
        assert.ok(isEval);
        const { completions } = await model.generate({ promptIds: [1], n: 1 });
        const accuracy = correctRuns[task.id]?.includes(runIdBase) ? 1 : 0;
        return [model.toExperience(completions[0] as never, { reward: accuracy + 0.1, metrics: { accuracy } })];
      },
    });
    const runner = new WorkflowRunner({ models: new EngineModelHandle(backend), workflows, defaultEvalWorkflow: 'graded' });
    const tasks: Task[] = [
      { id: 'a', taskset: 'gsm', index: 0, raw: {} },
      { id: 'b', taskset: 'gsm', index: 1, raw: {} },
      { id: 'c', taskset: 'math', index: 0, raw: {} },
    ];
    const { tasksets, metrics } = await runner.evaluate(tasks, { step: 2, repeatTimes: 4 });
    // gsm: a has c=2 of 4 → pass@1 1/2, pass@2 5/6, pass@4 1; b has 0 → averages halve.
    const gsm = tasksets.gsm as Record<string, number>;
    assert.ok(Math.abs((gsm['pass@1'] as number) - 0.25) < 1e-12);
    assert.ok(Math.abs((gsm['pass@2'] as number) - 5 / 12) < 1e-12);
    assert.ok(Math.abs((gsm['pass@4'] as number) - 0.5) < 1e-12);
    assert.ok(Math.abs((gsm['mean@4'] as number) - (0.6 + 0.1) / 2) < 1e-12);
    assert.ok(Math.abs((gsm['best@4'] as number) - (1.1 + 0.1) / 2) < 1e-12);
    assert.equal(tasksets.math?.['pass@1'], 1);
    assert.equal(metrics['eval/math/pass@4'], 1);
    assert.equal(metrics['eval/gsm/pass@4'], gsm['pass@4']);
  });
});

describe('workflows by module path', () => {
  test('a .ts module exporting a workflow spec runs; errors name the path and export', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'workflow-module-'));
    const typesUrl = new URL('../../../src/rft/workflow/types.ts', import.meta.url).pathname;
    writeFileSync(
      join(dir, 'wf.ts'),
      [
        `import type { WorkflowSpec } from '${typesUrl}';`,
        'export const echo: WorkflowSpec = {',
        '  repeatable: false,',
        '  run: async ({ model, runIdBase }) => {',
        '    const { completions } = await model.generate({ promptIds: [4, 5], n: 1 });',
        '    return completions.map((c) => model.toExperience(c, { reward: runIdBase }));',
        '  },',
        '};',
        'export const broken = 42;',
        // relative module paths a workflow names (its reward function) resolve against the run's folder
        'export const where: WorkflowSpec = {',
        '  repeatable: false,',
        '  run: async ({ model, baseDir }) => {',
        '    const { completions } = await model.generate({ promptIds: [4, 5], n: 1 });',
        `    return completions.map((c) => model.toExperience(c, { reward: baseDir === ${JSON.stringify(dir)} ? 7 : -1 }));`,
        '  },',
        '};',
      ].join('\n'),
    );
    const { runner } = runnerWith(new FakeBackend(1), { baseDir: dir, maxRetryTimes: 0 });
    const { experiences, statuses } = await runner.runStep(
      [task('m', 'wf.ts#echo'), task('z', 'wf.ts#broken'), task('q', 'wf.ts#nope'), task('w', 'wf.ts#where')],
      {
        step: 0,
        repeatTimes: 2,
      },
    );
    assert.deepEqual(experiences.map((e) => [e.info.taskId, e.reward, e.tokens]).sort(), [
      ['m', 0, [4, 5, 10, 2]],
      ['m', 1, [4, 5, 10, 2]],
      ['w', 7, [4, 5, 10, 2]],
      ['w', 7, [4, 5, 10, 2]],
    ]);
    assert.match(
      statuses.find((s) => s.taskId === 'z')?.error ?? '',
      /workflow 'wf.ts#broken': expected a workflow function or an object with a run\(\) function, got number/,
    );
    assert.match(statuses.find((s) => s.taskId === 'q')?.error ?? '', /wf.ts has no export 'nope'; its exports: broken, echo/);
  });
});
