// Module-path workflows on worker threads (src/rft/workflow/isolation/): the model handle a workflow sees there gives
// exactly what the in-process handle gives (chat continuations, generate with streamed tokens, toExperience,
// recordedExperiences, the OpenAI client, the tokenizer); a synchronous infinite loop is ended by max_timeout or by
// stopping the step, its thread terminated and never reused; a throw in a timer or an unhandled rejection fails that
// attempt only; so does running out of the thread's heap (explorer.workflow_max_heap_mb); a result that cannot leave
// the thread is malformed. In-process workflows get the process-level handlers of isolation/faults.ts (checked in a
// child process, where they may own the process's handlers).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { type ChatOptions, type ChatResult, chat, type GenerateRequest, type GenerateResult } from '../../../src/engine/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import type { Task } from '../../../src/rft/task.js';
import {
  EngineModelHandle,
  type RolloutBackend,
  type Workflow,
  WorkflowRegistry,
  WorkflowRunner,
  type WorkflowRunnerOptions,
} from '../../../src/rft/workflow/index.js';
import type { ChatMessage, Tokenizer } from '../../../src/tokenizer/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { ScriptedBackend } from './scripted-backend.js';

const src = (path: string) => fileURLToPath(new URL(`../../../src/${path}`, import.meta.url));

/** The scripted backend as an engine: chat() renders and generates, tokens stream to onToken; `onCall` runs per call. */
class StreamingBackend implements RolloutBackend {
  calls = 0;
  onCall: (() => void) | null = null;
  readonly #scripted: ScriptedBackend;
  constructor(scripted: ScriptedBackend) {
    this.#scripted = scripted;
  }

  get tokenizer(): Tokenizer {
    return this.#scripted.tokenizer;
  }

  async generate(request: GenerateRequest): Promise<GenerateResult> {
    this.calls++;
    const result = await this.#scripted.generate(request);
    for (const c of result.completions) {
      for (const [i, tokenId] of c.tokenIds.entries())
        request.onToken?.({ index: c.index, tokenId, logprob: c.logprobs[i] as number });
    }
    this.onCall?.();
    return result;
  }

  chat(messages: readonly ChatMessage[], options: ChatOptions = {}): Promise<ChatResult> {
    return chat(this, messages, options);
  }
}

// Replies "<n chars of the prompt>": deterministic, different per prompt.
const backend = () => new StreamingBackend(new ScriptedBackend(fixtureTokenizer(), (prompt) => `ok ${prompt.length}`));

/**
 * One workflow's source, used both in-process (registered) and as a module (isolated): every model handle feature a
 * workflow uses. Written as plain JavaScript inside a .ts module so the same text runs both ways.
 */
const AGENT_SOURCE = `async ({ model, seed, task }) => {
  const question = [{ role: 'user', content: 'What is ' + task.id + '?' }];
  const first = await model.chat(question, { temperature: 1, seed, maxTokens: 16 });
  const streamed = [];
  const promptIds = model.tokenizer.encode('count: ' + model.tokenizer.vocabSize);
  const generated = await model.generate({ promptIds, maxTokens: 6, onToken: (t) => streamed.push(t.tokenId) });
  const second = await model.chat([...question, first.choices[0].message, { role: 'user', content: 'again' }], {
    temperature: 1,
    seed: seed + 1,
    maxTokens: 16,
  });
  const client = await model.openai();
  const viaClient = await client.chat.completions.create({
    model: 'any',
    messages: [{ role: 'user', content: 'through the client' }],
    max_tokens: 8,
  });
  const text = viaClient.choices[0].message.content + '|' + model.tokenizer.decode(streamed);
  return [
    model.toExperience(second.choices[0], { reward: 1, metrics: { streamed: streamed.length } }),
    model.toExperience(generated.completions[0], { reward: 0.5, responseText: text }),
    ...model.recordedExperiences({ reward: 0.25, scope: 'turn' }),
  ];
}`;

/** Writes modules into a fresh folder; returns it. */
function moduleDir(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'isolated-workflow-'));
  // "type": "module": .ts files here load as ES modules, as in a user's project
  writeFileSync(join(dir, 'package.json'), '{"type": "module"}\n');
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

const FAULTS = moduleDir({
  'faults.ts': [
    'export const fine = async ({ model, repeatTimes }) => {',
    '  const { completions } = await model.generate({ promptIds: [5, 6, 7], n: repeatTimes, maxTokens: 4 });',
    '  return completions.map((c) => model.toExperience(c, { reward: 1 }));',
    '};',
    'export const spin = async () => {',
    '  for (;;) {}',
    '};',
    'export const callThenSpin = async ({ model }) => {',
    '  await model.generate({ promptIds: [5], maxTokens: 2 });',
    '  for (;;) {}',
    '};',
    // each fault, then a wait only the fault can end (max_timeout is far away)
    'export const timerThrow = async () => {',
    "  setTimeout(() => { throw new Error('late boom'); }, 0);",
    '  await new Promise(() => {});',
    '};',
    'export const strayRejection = async () => {',
    "  void Promise.reject(new Error('nobody caught this'));",
    '  await new Promise(() => {});',
    '};',
    // keeps every string it makes: only the heap limit ends it
    'export const hoard = async () => {',
    '  const kept = [];',
    "  for (let i = 0; ; i++) kept.push('x'.repeat(1024) + i);",
    '};',
    'export const unsendable = async (context) => {',
    '  const [e] = await fine(context);',
    '  return [{ ...e, score: () => 1 }];',
    '};',
  ].join('\n'),
});

const task = (id: string, workflow: string): Task => ({ id, taskset: 'train', index: 0, raw: {}, workflow });

function runner(options: Partial<WorkflowRunnerOptions> & { backend?: StreamingBackend } = {}) {
  const model = new EngineModelHandle(options.backend ?? backend(), { modelVersion: 3 });
  return new WorkflowRunner({ models: model, baseDir: FAULTS, retryBackoffMs: 1, maxRetryTimes: 0, maxTimeout: 60, ...options });
}

/** Experiences without their random ids, for comparing two runs. */
const comparable = (experiences: Experience[]) => experiences.map(({ eid: _, ...rest }) => rest);

describe('the model handle on a worker thread', () => {
  test('gives exactly what the in-process handle gives (chat, generate with streaming, toExperience, recorded turns, openai())', {
    timeout: 120_000,
  }, async () => {
    const agent = new Function(`return ${AGENT_SOURCE}`)() as Workflow;
    const dir = moduleDir({ 'agent.ts': `export const agent = { repeatable: false, run: ${AGENT_SOURCE} };\n` });
    const inProcess = runner({ workflows: new WorkflowRegistry().register('agent', { repeatable: false, run: agent }) });
    const isolated = runner({ baseDir: dir });
    const here = await inProcess.runStep([task('a', 'agent')], { step: 2, repeatTimes: 2 });
    const there = await isolated.runStep([task('a', 'agent.ts#agent')], { step: 2, repeatTimes: 2 });
    for (const result of [here, there])
      assert.deepEqual(
        result.statuses.map((s) => s.error ?? 'ok'),
        ['ok', 'ok'],
      );
    assert.equal(inProcess.workerThreadsStarted, 0, 'a registered workflow runs in-process');
    assert.ok(isolated.workerThreadsStarted >= 1, 'the module-path workflow ran on a worker thread');
    // 2 runs × (second chat, generate, 3 recorded turns: first chat, its continuation, the client's call)
    assert.equal(there.experiences.length, 10);
    assert.deepEqual(comparable(there.experiences), comparable(here.experiences));
    const continued = there.experiences.find((e) => e.info.runId === 0 && e.metrics?.streamed !== undefined);
    // the second chat continued the first one's exact ids: one experience, generated tokens masked in between
    assert.ok(continued?.actionMask?.includes(0) && continued.actionMask.includes(1));
    assert.ok((continued?.metrics?.streamed as number) > 0, 'tokens were streamed to the worker');
    isolated.close();
  });
});

describe('the prompt limit on a worker thread', () => {
  test('a prompt over max_prompt_tokens gives the same masked placeholders there as in-process', {
    timeout: 120_000,
  }, async () => {
    const source = `async ({ model, repeatTimes }) => {
  const { completions } = await model.generate({ prompt: '1+2='.repeat(30), n: repeatTimes, maxTokens: 4 });
  return completions.map((c) => model.toExperience(c, { reward: 1 }));
}`;
    const dir = moduleDir({ 'long.ts': `export const long = { repeatable: true, run: ${source} };\n` });
    const promptLimit = { maxPromptTokens: 16, maxModelLen: 2048, truncate: true };
    const scripted = backend();
    const make = (options: Partial<WorkflowRunnerOptions>) =>
      new WorkflowRunner({
        models: new EngineModelHandle(scripted, { modelVersion: 3, promptLimit }),
        retryBackoffMs: 1,
        maxRetryTimes: 0,
        maxTimeout: 60,
        ...options,
      });
    const workflow = new Function(`return ${source}`)() as Workflow;
    const inProcess = make({ workflows: new WorkflowRegistry().register('long', { repeatable: true, run: workflow }) });
    const isolated = make({ baseDir: dir });
    const here = await inProcess.runStep([task('l', 'long')], { step: 1, repeatTimes: 2 });
    const there = await isolated.runStep([task('l', 'long.ts#long')], { step: 1, repeatTimes: 2 });
    assert.ok(isolated.workerThreadsStarted >= 1, 'the module-path workflow ran on a worker thread');
    assert.equal(scripted.calls, 0, 'nothing was generated from the overlong prompt');
    assert.deepEqual(
      there.experiences.map((e) => [e.truncateStatus, e.tokens.length, e.actionMask]),
      [
        ['prompt_truncated', 17, [0]],
        ['prompt_truncated', 17, [0]],
      ],
    );
    assert.deepEqual(comparable(there.experiences), comparable(here.experiences));
    isolated.close();
  });
});

describe('faults in module-path workflows', () => {
  test('a synchronous infinite loop is ended by max_timeout; its thread is terminated, never reused', {
    timeout: 120_000,
  }, async () => {
    const r = runner({ maxTimeout: 1, maxRetryTimes: 1 });
    const spun = await r.runStep([task('s', 'faults.ts#spin')], { step: 1, repeatTimes: 1 });
    assert.equal(spun.metrics['rollout/attempts/timed_out'], 2);
    assert.equal(spun.metrics['rollout/runs/failed'], 1);
    assert.match(spun.statuses[0]?.error ?? '', /timed out after 1 s \(explorer.max_timeout\)/);
    // the check of the module and the first attempt shared a thread; the retry needed a new one
    assert.equal(r.workerThreadsStarted, 2);
    const after = await r.runStep([task('f', 'faults.ts#fine')], { step: 2, repeatTimes: 1 });
    assert.equal(after.experiences.length, 1);
    assert.equal(r.workerThreadsStarted, 3, 'neither spinning thread was kept for reuse');
    r.close();
  });

  test('stopping the step ends a synchronous loop (no timeout in reach)', { timeout: 120_000 }, async () => {
    const model = backend();
    const r = runner({ backend: model, maxTimeout: 3600, maxRetryTimes: 2 });
    const stop = new AbortController();
    // the model call is answered; the workflow then spins
    model.onCall = () => stop.abort();
    const { metrics } = await r.runStep([task('s', 'faults.ts#callThenSpin')], { step: 1, repeatTimes: 1, signal: stop.signal });
    assert.equal(metrics['rollout/runs/failed'], 1);
    assert.equal(metrics['rollout/attempts/timed_out'], 0);
    assert.equal(model.calls, 1, 'nothing was retried after the stop');
    assert.equal(r.inFlight, 0);
    r.close();
  });

  test('a throw in a timer and an unhandled rejection fail their attempt only; the runner goes on', {
    timeout: 120_000,
  }, async () => {
    const r = runner({ maxRetryTimes: 1 });
    const { metrics, statuses, experiences } = await r.runStep(
      [task('t', 'faults.ts#timerThrow'), task('p', 'faults.ts#strayRejection'), task('f', 'faults.ts#fine')],
      { step: 1, repeatTimes: 1 },
    );
    assert.equal(metrics['rollout/attempts/errored'], 4);
    assert.equal(metrics['rollout/attempts/timed_out'], 0);
    assert.deepEqual(
      experiences.map((e) => e.info.taskId),
      ['f'],
    );
    const crash = /failed outside its attempt \(an uncaught exception or unhandled promise rejection in its worker thread\)/;
    assert.match(statuses.find((s) => s.taskId === 't')?.error ?? '', crash);
    assert.match(statuses.find((s) => s.taskId === 't')?.error ?? '', /late boom/);
    assert.match(statuses.find((s) => s.taskId === 'p')?.error ?? '', /nobody caught this/);
    r.close();
  });

  test('a workflow that allocates without bound fails its attempt (out of memory); the runner goes on', {
    timeout: 120_000,
  }, async () => {
    const r = runner({ workflowMaxHeapMb: 32, maxRetryTimes: 1 });
    const { metrics, statuses, experiences } = await r.runStep([task('h', 'faults.ts#hoard'), task('f', 'faults.ts#fine')], {
      step: 1,
      repeatTimes: 1,
    });
    const hoarded = statuses.find((s) => s.taskId === 'h');
    assert.equal(hoarded?.ok, false);
    assert.equal(hoarded?.errored, 2, 'both attempts ran out of memory');
    assert.match(
      hoarded?.error ?? '',
      /^out of memory: the workflow's worker thread reached its heap limit of 32 MB \(explorer\.workflow_max_heap_mb\)/,
    );
    assert.equal(metrics['rollout/runs/failed'], 1);
    assert.equal(metrics['rollout/attempts/errored'], 2);
    assert.deepEqual(
      experiences.map((e) => e.info.taskId),
      ['f'],
    );
    // and the next step runs on a fresh thread
    const after = await r.runStep([task('g', 'faults.ts#fine')], { step: 2, repeatTimes: 1 });
    assert.equal(after.experiences.length, 1);
    r.close();
  });

  test('a result that cannot leave the thread is malformed', { timeout: 120_000 }, async () => {
    const r = runner();
    const { metrics, statuses } = await r.runStep([task('u', 'faults.ts#unsendable')], { step: 1, repeatTimes: 1 });
    assert.equal(metrics['rollout/attempts/malformed'], 1);
    assert.match(statuses[0]?.error ?? '', /cannot leave its thread: .*could not be cloned/);
    r.close();
  });
});

test('in-process workflows: errors escaping an attempt fail that attempt; others reach onUnattributed; the process lives', {
  timeout: 120_000,
}, () => {
  const dir = mkdtempSync(join(tmpdir(), 'fault-handlers-'));
  const script = join(dir, 'script.mts');
  writeFileSync(
    script,
    `
import { installWorkflowFaultHandlers } from ${JSON.stringify(src('rft/workflow/isolation/faults.ts'))};
import { EngineModelHandle, WorkflowRegistry, WorkflowRunner } from ${JSON.stringify(src('rft/workflow/index.ts'))};
const unattributed: string[] = [];
installWorkflowFaultHandlers({ onUnattributed: (error, kind) => unattributed.push(kind + ': ' + error.message) });
const backend = {
  tokenizer: null,
  generate: async (request: { promptIds?: readonly number[] }) => ({
    promptIds: [...(request.promptIds ?? [])],
    completions: [{ index: 0, tokenIds: [9], logprobs: [-1], text: 'x', finishReason: 'stop' as const, stopReason: 9 }],
  }),
  chat: async () => { throw new Error('no chat'); },
};
const model = new EngineModelHandle(backend);
const fine = async ({ model }: any) => [model.toExperience((await model.generate({ promptIds: [1] })).completions[0])];
const workflows = new WorkflowRegistry()
  .register('timer', async () => { setTimeout(() => { throw new Error('timer boom'); }, 0); await new Promise(() => {}); return []; })
  .register('reject', async () => { void Promise.reject(new Error('rejected boom')); await new Promise(() => {}); return []; })
  .register('fine', fine);
const runner = new WorkflowRunner({ models: model, workflows, maxRetryTimes: 0, maxTimeout: 3600 });
const tasks = ['timer', 'reject', 'fine'].map((w) => ({ id: w, taskset: 't', index: 0, raw: {}, workflow: w }));
const { statuses, experiences } = await runner.runStep(tasks, { step: 1, repeatTimes: 1 });
await new Promise<void>((resolve) => setImmediate(() => { setImmediate(resolve); throw new Error('owned by nobody'); }));
console.log(JSON.stringify({ errors: statuses.map((s) => [s.taskId, s.error ?? 'ok']), experiences: experiences.length, unattributed }));
`,
  );
  const child = spawnSync(process.execPath, ['--import', 'tsx', script], { encoding: 'utf8', timeout: 110_000 });
  assert.equal(child.status, 0, child.stderr);
  const out = JSON.parse(child.stdout.trim().split('\n').at(-1) as string) as {
    errors: [string, string][];
    experiences: number;
    unattributed: string[];
  };
  assert.deepEqual(out.errors.map(([id]) => id).sort(), ['fine', 'reject', 'timer']);
  const error = (id: string) => out.errors.find(([t]) => t === id)?.[1] ?? '';
  assert.match(error('timer'), /raised an uncaught exception outside its attempt: timer boom/);
  assert.match(error('reject'), /raised an unhandled rejection outside its attempt: rejected boom/);
  assert.equal(error('fine'), 'ok');
  assert.equal(out.experiences, 1);
  assert.deepEqual(out.unattributed, ['uncaught exception: owned by nobody']);
});
