// WeightSwapGate (sync_style fully_async): a swap waits for the model calls in flight, which keep the version they
// started with; calls made after the swap was asked wait for it and carry the new version — in process and from a
// workflow on a worker thread. The order is driven by promises the test resolves, never by time.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { GenerateRequest, GenerateResult } from '../../../src/engine/index.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, type RolloutBackend, WeightSwapGate, WorkflowRunner } from '../../../src/rft/workflow/index.js';
import { fixtureTokenizer } from '../../engine/helpers.js';
import { ScriptedBackend } from './scripted-backend.js';

/** A backend whose every generate() waits until the test releases it; `events` records what ran in which order. */
class HeldBackend implements RolloutBackend {
  readonly tokenizer = null;
  readonly events: string[] = [];
  readonly #held = new Map<string, () => void>();
  readonly #started = new Map<string, () => void>();

  generate(request: GenerateRequest): Promise<GenerateResult> {
    const name = String(request.seed);
    this.events.push(`start ${name}`);
    this.#started.get(name)?.();
    return new Promise((resolve) => {
      this.#held.set(name, () => {
        this.events.push(`end ${name}`);
        const tokenIds = [Number(request.seed)];
        resolve({
          promptIds: [...(request.promptIds ?? [])],
          completions: [{ index: 0, tokenIds, logprobs: [-1], text: '', finishReason: 'stop', stopReason: null }],
        });
      });
    });
  }

  async chat(): Promise<never> {
    throw new Error('not used');
  }

  /** Resolves once call `seed` reached the backend. */
  started(seed: number): Promise<void> {
    if (this.events.includes(`start ${seed}`)) return Promise.resolve();
    return new Promise((resolve) => this.#started.set(String(seed), resolve));
  }

  release(seed: number): void {
    const release = this.#held.get(String(seed));
    assert.ok(release, `call ${seed} is not running`);
    release();
  }
}

function setUp() {
  const backend = new HeldBackend();
  const gate = new WeightSwapGate();
  const handle = new EngineModelHandle(gate.gated(backend), { modelVersion: 0 });
  const generate = (seed: number) =>
    handle.generate({ promptIds: [1], seed }).then((result) => {
      const completion = result.completions[0];
      assert.ok(completion);
      return handle.toExperience(completion).info.modelVersion;
    });
  /** The channel's side: load weights `version` (recorded), then set the handle's version. */
  const swapTo = (version: number) =>
    gate.swap(async () => {
      backend.events.push(`swap ${version}`);
      handle.modelVersion = version;
    });
  return { backend, gate, handle, generate, swapTo };
}

test('a swap waits for the call in flight (it keeps version 0); a call made after it waits and gets version 1', async () => {
  const { backend, generate, swapTo } = setUp();
  const first = generate(1);
  await backend.started(1);
  const swapped = swapTo(1);
  const second = generate(2); // asked after the swap: waits at the gate
  backend.release(1);
  assert.equal(await first, 0, 'the call in flight finished on the weights it started with');
  await swapped;
  await backend.started(2);
  backend.release(2);
  assert.equal(await second, 1, 'the call after the swap ran on the new weights');
  assert.deepEqual(backend.events, ['start 1', 'end 1', 'swap 1', 'start 2', 'end 2']);
});

test('with nothing in flight a swap runs at once; swaps run one at a time, in order; a failed load reopens the gate', async () => {
  const { backend, gate, generate, swapTo } = setUp();
  await swapTo(3);
  const failed = gate.swap(async () => {
    throw new Error('the folder did not load');
  });
  const after = swapTo(4);
  const call = generate(5); // waits for both swaps
  await assert.rejects(failed, /did not load/);
  await after;
  await backend.started(5);
  backend.release(5);
  assert.equal(await call, 4);
  assert.deepEqual(backend.events, ['swap 3', 'swap 4', 'start 5', 'end 5']);
});

test('several calls in flight: the swap waits for the last of them', async () => {
  const { backend, generate, swapTo } = setUp();
  const calls = [generate(1), generate(2)];
  await Promise.all([backend.started(1), backend.started(2)]);
  const swapped = swapTo(1);
  backend.release(2);
  assert.equal(await calls[1], 0);
  assert.ok(!backend.events.includes('swap 1'), 'call 1 is still running');
  backend.release(1);
  assert.equal(await calls[0], 0);
  await swapped;
  assert.deepEqual(backend.events, ['start 1', 'start 2', 'end 2', 'end 1', 'swap 1']);
});

test('a module-path workflow on a worker thread: its calls carry the version that served them on the main thread', {
  timeout: 120_000,
}, async () => {
  const { backend, handle, swapTo } = setUp();
  const dir = mkdtempSync(join(tmpdir(), 'swap-gate-'));
  writeFileSync(
    join(dir, 'probe.mjs'),
    [
      'export const probe = {',
      '  repeatable: false,',
      '  run: async ({ model }) => {',
      '    const first = await model.generate({ promptIds: [1], seed: 1 });',
      '    const second = await model.generate({ promptIds: [1], seed: 2 });',
      '    return [model.toExperience(first.completions[0]), model.toExperience(second.completions[0])];',
      '  },',
      '};',
    ].join('\n'),
  );
  const runner = new WorkflowRunner({ models: handle, baseDir: dir, maxRetryTimes: 0, maxTimeout: 60 });
  try {
    const task: Task = { id: 'a', taskset: 'train', index: 0, raw: {}, workflow: 'probe.mjs#probe' };
    const running = runner.runStep([task], { step: 1, repeatTimes: 1 });
    await backend.started(1);
    const swapped = swapTo(1); // the thread's second call, made after this, waits for it
    backend.release(1);
    await swapped;
    await backend.started(2);
    backend.release(2);
    const result = await running;
    assert.equal(runner.workerThreadsStarted, 1);
    assert.deepEqual(
      result.experiences.map((e) => e.info.modelVersion),
      [0, 1],
    );
  } finally {
    await runner.close();
  }
});

test("an agent's calls over the handle's OpenAI endpoint: each recorded turn carries the version that served it", {
  timeout: 120_000,
}, async () => {
  const scripted = new ScriptedBackend(fixtureTokenizer(), () => '4');
  const calls: { release: () => void }[] = [];
  const callMade: (() => void)[] = [];
  const held: RolloutBackend = {
    tokenizer: scripted.tokenizer,
    generate: (request) =>
      new Promise((resolve, reject) => {
        calls.push({ release: () => scripted.generate(request).then(resolve, reject) });
        callMade.shift()?.();
      }),
    chat: () => Promise.reject(new Error('not used')),
  };
  /** Resolves once the backend received `count` calls. */
  const received = (count: number) =>
    calls.length >= count ? Promise.resolve() : new Promise<void>((resolve) => callMade.push(resolve));
  const gate = new WeightSwapGate();
  const gated = gate.gated(held);
  // the endpoint's calls as they reach the gate (the request was read and its turn prepared)
  let atGate = 0;
  let secondAtGate = () => {};
  const reachedGate = new Promise<void>((resolve) => {
    secondAtGate = resolve;
  });
  const observed: RolloutBackend = {
    ...gated,
    tokenizer: scripted.tokenizer,
    generate: (request) => {
      if (++atGate === 2) secondAtGate();
      return gated.generate(request);
    },
  };
  const handle = new EngineModelHandle(observed, { modelVersion: 0 });
  try {
    const client = await handle.openai();
    const ask = (content: string) => client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content }] });
    const first = ask('2+2');
    await received(1);
    const swapped = gate.swap(async () => {
      handle.modelVersion = 1;
    });
    const second = ask('1+3'); // reaches the gate while the swap waits: its reply runs on version 1
    await reachedGate;
    calls[0]?.release();
    await first;
    await swapped;
    await received(2);
    calls[1]?.release();
    await second;
    assert.deepEqual(
      handle.recordedExperiences({ reward: 0 }).map((e) => e.info.modelVersion),
      [0, 1],
    );
  } finally {
    await handle.close();
  }
});
