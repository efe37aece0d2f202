// sync_style fully_async in each weight channel, with stand-ins for the trainer (a folder naming the version) and the
// engine (it records the folders it loads and tells the test):
// 1. in one process (LocalWeightChannel): publishing waits for the model call in flight, not for the explore step
//    around it (the same channel without the gate would wait for the step);
// 2. between processes (job folder, PostgreSQL): followPublishedWeights loads each version the trainer publishes,
//    through the gate, while no step ends, and returns once the trainer finished.
// Every wait is on an event (a load, a call's release); the channels' own timeouts are safety nets.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { GenerateRequest, GenerateResult } from '../../../src/engine/index.js';
import { LocalWeightChannel } from '../../../src/rft/sync/local-channel.js';
import { PostgresWeightChannel } from '../../../src/rft/sync/postgres-channel.js';
import { SyncFolderChannel } from '../../../src/rft/sync/sync-folder.js';
import {
  type ExplorerEngine,
  followPublishedWeights,
  type ProcessWeightChannel,
  type WeightSource,
} from '../../../src/rft/sync/weight-channel.js';
import { EngineModelHandle, type RolloutBackend, WeightSwapGate } from '../../../src/rft/workflow/index.js';
import { type PostgresServer, startPostgres } from '../../helpers/postgres.js';

const WAIT_MS = 60_000;

/** A trainer whose weights folder holds one file. */
const standInTrainer = {
  async saveWeights(dir: string) {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'weights.txt'), 'weights\n');
  },
  saveAdapter: async () => {},
  beginSync: async () => new Map(),
  endSync: async () => {},
} satisfies WeightSource;

/** An engine that records each folder it loads; `loaded(n)` resolves once it loaded n folders. */
function standInEngine() {
  const dirs: string[] = [];
  const waiters: { count: number; resolve: () => void }[] = [];
  return {
    dirs,
    async syncWeightsFromDir(dir: string) {
      dirs.push(dir);
      for (const w of waiters.filter((w) => dirs.length >= w.count)) w.resolve();
    },
    loaded(count: number): Promise<void> {
      if (dirs.length >= count) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ count, resolve }));
    },
  };
}

/** A rollout backend whose one call waits until the test releases it. */
function heldBackend() {
  let release = () => {};
  const backend: RolloutBackend = {
    tokenizer: null,
    generate: (request: GenerateRequest) =>
      new Promise<GenerateResult>((resolve) => {
        release = () =>
          resolve({
            promptIds: [...(request.promptIds ?? [])],
            completions: [{ index: 0, tokenIds: [1], logprobs: [-1], text: '', finishReason: 'stop', stopReason: null }],
          });
      }),
    chat: async () => {
      throw new Error('not used');
    },
  };
  return { backend, release: () => release() };
}

// without the gate, publishing would wait for the step, which waits for the publication: the timeout fails it
test('one process: publishing swaps once the call in flight returned, in the middle of an explore step', {
  timeout: 60_000,
}, async () => {
  const gate = new WeightSwapGate();
  const held = heldBackend();
  const handle = new EngineModelHandle(gate.gated(held.backend), { modelVersion: 0 });
  const engine = standInEngine();
  const channel = new LocalWeightChannel({
    trainer: standInTrainer,
    transport: { method: 'checkpoint', engine: engine as unknown as ExplorerEngine, jobDir: mkdtempSync(join(tmpdir(), 'fa-')) },
    startVersion: 0,
    timeoutMs: WAIT_MS,
    onVersion: (v) => {
      handle.modelVersion = v;
    },
    swapGate: gate,
  });
  let endStep = () => {};
  let stamp: number | undefined;
  // an explore step that stays open until the test ends it, with one model call in flight
  const step = channel.withWeights(async () => {
    const result = await handle.generate({ promptIds: [1], seed: 1 });
    stamp = handle.toExperience(result.completions[0] as NonNullable<(typeof result.completions)[0]>).info.modelVersion;
    await new Promise<void>((resolve) => {
      endStep = resolve;
    });
  });
  const published = channel.publish(1);
  held.release();
  await published; // the step is still open: only the call was waited for
  assert.equal(stamp, 0, 'the call in flight kept version 0');
  assert.equal(channel.version, 1);
  assert.equal(handle.modelVersion, 1);
  assert.equal(engine.dirs.length, 1);
  endStep();
  await step;
});

async function followTwoVersions(channel: ProcessWeightChannel) {
  const gate = new WeightSwapGate();
  const engine = standInEngine();
  const versions: number[] = [];
  const receiver = channel.receiver({
    engine,
    startVersion: 0,
    timeoutMs: WAIT_MS,
    onVersion: (v) => versions.push(v),
    swapGate: gate,
  });
  const publisher = channel.publisher(standInTrainer);
  const following = followPublishedWeights(receiver, new AbortController().signal);
  await publisher.publish(1);
  await engine.loaded(1);
  await publisher.publish(2);
  await engine.loaded(2);
  publisher.finish(2);
  await following; // the trainer finished: the follower returns
  assert.deepEqual(versions, [1, 2]);
  assert.equal(receiver.version, 2);
  assert.ok(
    engine.dirs.every((dir, i) => dir.endsWith(`version_${i + 1}`)),
    engine.dirs.join(', '),
  );
}

test('an explorer process over the job folder follows every published version, then stops with the trainer', async () => {
  await followTwoVersions(new SyncFolderChannel(mkdtempSync(join(tmpdir(), 'fa-job-'))));
});

let server: PostgresServer;
before(async () => {
  server = await startPostgres();
});
after(async () => {
  await server?.stop();
});

test('an explorer process over PostgreSQL follows every published version (woken by NOTIFY), then stops with the trainer', async () => {
  const url = await server.createDatabase('fully_async');
  const channel = await PostgresWeightChannel.open({ url, jobDir: mkdtempSync(join(tmpdir(), 'fa-pg-')) });
  try {
    await followTwoVersions(channel);
  } finally {
    await channel.close();
  }
});
