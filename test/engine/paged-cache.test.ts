// The engine over a paged KV cache (kvCache 'paged', enablePrefixCaching): the same tokens as the slot layout,
// token for token, with log-probs within 1e-5, while prompts that share a prefix prefill only the rest; blocks run out
// (eviction, preemption and recompute) without an error or a changed token; a weight sync empties the prefix cache;
// no block is left held after many requests with aborts and timeouts.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  engineMetrics,
  type GenerateRequest,
  GenerationError,
  RolloutEngine,
  type RolloutEngineOptions,
} from '../../src/engine/index.js';
import { CausalLM, initModel } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { charTokenIds, tokenCounter, withEngineOver } from './helpers.js';

let root: string;
let model: CausalLM;

before(() => {
  torch.setNumThreads(1);
  root = mkdtempSync(join(tmpdir(), 'paged-engine-'));
  initModel(join(root, 'a'), { hiddenSize: 32, numHeads: 4, numLayers: 2, maxPositionEmbeddings: 512, seed: 5 });
  initModel(join(root, 'b'), { hiddenSize: 32, numHeads: 4, numLayers: 2, maxPositionEmbeddings: 512, seed: 6 });
  model = CausalLM.load(join(root, 'a'), { layout: 'inference' });
});
after(() => {
  model.dispose();
  rmSync(root, { recursive: true, force: true });
});

const ids = charTokenIds;
const SYSTEM = ids(37, 1); // a shared "system prompt": 9 full blocks of 4 and a partial one

const withEngine = <T>(options: RolloutEngineOptions, fn: (engine: RolloutEngine) => Promise<T>): Promise<T> =>
  withEngineOver(model, { maxLength: 128, ...options }, fn);

/** The requests one after another, then all at once: each request's completions' tokens and log-probs. */
async function run(
  engine: RolloutEngine,
  requests: GenerateRequest[],
): Promise<{ tokens: number[][][]; logprobs: number[][][] }> {
  const results = [];
  for (const request of requests) results.push(await engine.generate(request));
  results.push(...(await Promise.all(requests.map((r) => engine.generate(r)))));
  return {
    tokens: results.map((r) => r.completions.map((c) => c.tokenIds)),
    logprobs: results.map((r) => r.completions.map((c) => c.logprobs)),
  };
}

function assertSameRuns(actual: Awaited<ReturnType<typeof run>>, expected: Awaited<ReturnType<typeof run>>): void {
  assert.deepEqual(actual.tokens, expected.tokens);
  const gap = Math.max(...actual.logprobs.flat(2).map((l, i) => Math.abs(l - (expected.logprobs.flat(2)[i] as number))));
  assert.ok(gap < 1e-5, `log-probs differ by ${gap}`);
}

const GREEDY = { temperature: 0 } as const;
const REQUESTS: GenerateRequest[] = [
  { promptIds: [...SYSTEM, ...ids(6, 2)], maxTokens: 12, ...GREEDY },
  { promptIds: [...SYSTEM, ...ids(11, 3)], maxTokens: 9, n: 3, ...GREEDY },
  { promptIds: [...SYSTEM, ...ids(6, 2), ...ids(5, 4)], maxTokens: 10, n: 2, temperature: 0.9, seed: 7 },
  { promptIds: ids(8, 5), maxTokens: 15, temperature: 0.7, topP: 0.9, seed: 3 },
  { promptIds: SYSTEM.slice(0, 36), maxTokens: 6, ...GREEDY }, // exactly 9 blocks: the last token is still computed
];

describe('paged KV cache and prefix cache in the engine', () => {
  test('greedy and seeded outputs equal the slot layout token for token, log-probs within 1e-5; shared prefixes hit', async () => {
    const reference = await withEngine({ slots: 4 }, (engine) => run(engine, REQUESTS));
    const paged = await withEngine({ slots: 4, kvCache: 'paged', kvBlockSize: 4 }, async (engine) => {
      const result = await run(engine, REQUESTS);
      assert.equal(engine.stats.kvCache?.hits, 0);
      assert.ok((engine.decodeStepStats?.replays ?? 0) > 0, 'no decode step was replayed from a capture');
      // decode steps read the batch's copy (gathered again as rows joined and left, far fewer times than steps), which
      // is dropped once its rows end
      const metrics = engineMetrics([engine.stats]);
      const rebuilds = metrics['kv_cache/decode_copy_rebuilds_total'] ?? 0;
      assert.ok(rebuilds > 0 && rebuilds < (engine.decodeStepStats?.replays ?? 0), `${rebuilds} rebuilds`);
      assert.equal(metrics['kv_cache/decode_copy_positions'], 0);
      return result;
    });
    assertSameRuns(paged, reference);
    await withEngine({ slots: 4, enablePrefixCaching: true, kvBlockSize: 4 }, async (engine) => {
      assertSameRuns(await run(engine, REQUESTS), reference);
      const stats = engine.stats;
      assert.ok((stats.kvCache?.hits ?? 0) >= 9 * 6, `hits ${stats.kvCache?.hits}`);
      const promptTokens = REQUESTS.reduce((sum, r) => sum + (r.promptIds?.length ?? 0), 0);
      assert.ok(stats.prefillTokens < promptTokens, `prefilled ${stats.prefillTokens} of ${2 * promptTokens} prompt tokens`);
      assert.equal(stats.kvCache?.heldBlocks, 0);
    });
  });

  test('a multi-turn conversation prefills each token about once with the prefix cache, and its tokens do not change', async () => {
    const converse = async (engine: RolloutEngine) => {
      let history: number[] = ids(20, 9);
      const replies: number[][] = [];
      for (let turn = 0; turn < 6; turn++) {
        const result = await engine.generate({ promptIds: history, maxTokens: 8, ...GREEDY });
        const reply = result.completions[0]?.tokenIds as number[];
        replies.push(reply);
        history = [...history, ...reply, ...ids(7, 20 + turn)]; // the reply, then the next observation
      }
      return { replies, finalLength: history.length, prefill: engine.stats.prefillTokens };
    };
    const off = await withEngine({ slots: 2, kvCache: 'paged', kvBlockSize: 4 }, converse);
    const on = await withEngine({ slots: 2, enablePrefixCaching: true, kvBlockSize: 4 }, async (engine) => {
      const result = await converse(engine);
      assert.ok((engine.stats.kvCache?.hits ?? 0) > 0);
      return result;
    });
    assert.deepEqual(on.replies, off.replies);
    // off: every turn prefills its whole history; on: only what the last turn's blocks do not hold
    assert.ok(on.prefill <= 1.1 * on.finalLength, `prefilled ${on.prefill} for a final history of ${on.finalLength}`);
    assert.ok(off.prefill > 3 * on.finalLength);
  });

  test('a tiny block budget evicts cached blocks and preempts running sequences; the tokens stay the same', async () => {
    const requests: GenerateRequest[] = [0, 1, 2, 3, 4, 5].map((i) => ({
      promptIds: [...SYSTEM.slice(0, 12), ...ids(9, 30 + i)],
      maxTokens: 40,
      ...(i % 2 === 1 ? { temperature: 0.8, seed: i } : GREEDY),
    }));
    const reference = await withEngine({ slots: 4 }, (engine) => run(engine, requests));
    // 33 blocks of 4 positions: one sequence of maxLength 128, while 4 running sequences of 61 tokens need 64
    await withEngine({ slots: 4, enablePrefixCaching: true, kvBlockSize: 4, kvBlocks: 33 }, async (engine) => {
      assertSameRuns(await run(engine, requests), reference);
      const { kvCache, preemptions } = engine.stats;
      assert.ok(preemptions > 0, 'no sequence was preempted');
      assert.ok((kvCache?.evictions ?? 0) > 0, 'no cached block was evicted');
      assert.equal(kvCache?.heldBlocks, 0);
    });
  });

  test('a weight sync empties the prefix cache: the next request computes its prompt with the new weights', async () => {
    const prompt = [...SYSTEM, ...ids(5, 11)];
    const other = CausalLM.load(join(root, 'b'), { layout: 'inference' });
    try {
      // the new weights' log-probs, from an engine that never saw the old ones
      const fresh = new RolloutEngine(other, { maxLength: 128, eosTokenIds: [] });
      const expected = await fresh.generate({ promptIds: prompt, maxTokens: 10, ...GREEDY }).finally(() => fresh.close());
      const gap = (a: number[], b: number[]) => Math.max(...a.map((x, i) => Math.abs(x - (b[i] as number))));
      const engine = RolloutEngine.load(join(root, 'a'), {
        maxLength: 128,
        eosTokenIds: [],
        enablePrefixCaching: true,
        kvBlockSize: 4,
      });
      try {
        await engine.generate({ promptIds: prompt, maxTokens: 10, ...GREEDY });
        const hit = await engine.generate({ promptIds: prompt, maxTokens: 10, ...GREEDY });
        assert.equal(engine.stats.kvCache?.hits, 10); // the second run found the prompt's 10 full blocks
        const expectedLogprobs = expected.completions[0]?.logprobs as number[];
        assert.ok(gap(hit.completions[0]?.logprobs as number[], expectedLogprobs) > 1e-3); // the weights differ
        engine.syncWeights(other.parameters());
        const after = await engine.generate({ promptIds: prompt, maxTokens: 10, ...GREEDY });
        assert.deepEqual(after.completions[0]?.tokenIds, expected.completions[0]?.tokenIds);
        assert.ok(gap(after.completions[0]?.logprobs as number[], expectedLogprobs) < 1e-5);
        assert.equal(engine.stats.kvCache?.hits, 10); // nothing found after the sync
        assert.equal(engine.stats.kvCache?.invalidations, 1);
      } finally {
        await engine.close();
      }
    } finally {
      other.dispose();
    }
  });

  test('no block is left held after 1,000 requests with aborts and timeouts mixed in', async () => {
    await withEngine({ slots: 8, enablePrefixCaching: true, kvBlockSize: 4, kvBlocks: 40, maxLength: 64 }, async (engine) => {
      const outcomes = { done: 0, aborted: 0, timeout: 0 };
      const runs: Promise<void>[] = [];
      for (let i = 0; i < 1000; i++) {
        const controller = new AbortController();
        const counter = tokenCounter();
        const request: GenerateRequest = {
          promptIds: [...SYSTEM.slice(0, 4 * (i % 5)), ...ids(3 + (i % 7), i)],
          maxTokens: 2 + (i % 6),
          n: 1 + (i % 3),
          onToken: counter.onToken,
          signal: controller.signal,
          ...(i % 11 === 0 ? { timeoutMs: 1 } : {}),
        };
        const generation = engine.generate(request);
        if (i % 4 === 0)
          counter.reached(2, generation).then(
            () => controller.abort(),
            () => {},
          );
        runs.push(
          generation.then(
            () => {
              outcomes.done++;
            },
            (error: unknown) => {
              assert.ok(
                error instanceof GenerationError && (error.reason === 'aborted' || error.reason === 'timeout'),
                String(error),
              );
              outcomes[error.reason as 'aborted' | 'timeout']++;
            },
          ),
        );
        if (i % 50 === 49) await Promise.all(runs.splice(0)); // waves of 50
      }
      await Promise.all(runs);
      assert.equal(outcomes.done + outcomes.aborted + outcomes.timeout, 1000);
      assert.ok(outcomes.aborted > 0 && outcomes.done > 0);
      const { kvCache, requests, running, waiting, freeSlots } = engine.stats;
      assert.deepEqual({ requests, running, waiting, freeSlots }, { requests: 0, running: 0, waiting: 0, freeSlots: 8 });
      assert.equal(kvCache?.heldBlocks, 0);
      assert.equal((kvCache?.cachedBlocks ?? 0) + (kvCache?.freeBlocks ?? 0), kvCache?.totalBlocks);
    });
  });

  test('option errors name the option', async () => {
    assert.throws(
      () => new RolloutEngine(model, { kvCache: 'slots', enablePrefixCaching: true }),
      /enablePrefixCaching needs kvCache 'paged'/,
    );
    assert.throws(() => new RolloutEngine(model, { kvBlocks: 10 }), /kvBlocks needs kvCache 'paged'/);
    assert.throws(
      () => new RolloutEngine(model, { enablePrefixCaching: true, recordRoutedExperts: true }),
      /recordRoutedExperts cannot be used with enablePrefixCaching/,
    );
    assert.throws(
      () => new RolloutEngine(model, { kvCache: 'paged', kvBlockSize: 16, kvBlocks: 3, maxLength: 64 }),
      /numBlocks must hold one sequence of maxLength 64/,
    );
  });
});
